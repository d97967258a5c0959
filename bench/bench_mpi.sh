#!/usr/bin/env bash
# bench_mpi: PP2 and TP2 across 2 MPI processes on this machine against the same grids in
# one process, and MPI's own point-to-point bandwidth (bench/bench_mpi.c).
#   bench/bench_mpi.sh [--json FILE] [--quick]      (after a build in build/)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${PE_BENCH_MPI:-$here/build/bench/bench_mpi}
[[ -x $bin ]] || { echo "bench_mpi: $bin not built (needs MPI: libopenmpi-dev)" >&2; exit 2; }
# --bind-to none: the one-process runs get every core; the two processes split them
# (pengine plans each inside its share of the node, procs.h).
exec mpirun --oversubscribe --allow-run-as-root --bind-to none --mca pml ob1 \
  --mca btl self,vader,tcp --mca btl_vader_single_copy_mechanism none -np 2 \
  -x OPENBLAS_NUM_THREADS=1 "$bin" "$@"
