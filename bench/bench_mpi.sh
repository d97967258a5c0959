#!/usr/bin/env bash
# bench_mpi: the grid across 2 MPI processes on this machine (docs/multinode.md).
#   1. bench_mpi: PP2 and TP2 across 2 processes against the same grids in one process, and
#      MPI's own point-to-point bandwidth and latency (bench/bench_mpi.c).
#   2. bench_mpi_threads: MPI_THREAD_MULTIPLE (what pengine uses) against one progress thread
#      a process, on 3 and 16 KiB round trips, 1 and 2 worker threads a process, 3 runs each.
#   bench/bench_mpi.sh [--json FILE] [--quick]      (after a build in build/; the flags go to 1)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${PE_BENCH_MPI:-$here/build/bench/bench_mpi}
threads_bin=$(dirname "$bin")/bench_mpi_threads
[[ -x $bin ]] || { echo "bench_mpi: $bin not built (needs MPI: libopenmpi-dev)" >&2; exit 2; }
# --bind-to none: the one-process runs get every core; the two processes split them
# (pengine plans each inside its share of the node, procs.h).
mpirun=(mpirun --oversubscribe --allow-run-as-root --bind-to none --mca pml ob1
        --mca btl self,vader,tcp --mca btl_vader_single_copy_mechanism none -np 2
        -x OPENBLAS_NUM_THREADS=1)
"${mpirun[@]}" "$bin" "$@"
[[ -x $threads_bin ]] || exit 0
echo
echo "MPI_THREAD_MULTIPLE (each worker calls MPI) against a progress thread a process:"
for workers in 1 2; do
  for mode in multiple progress; do
    for run in 1 2 3; do "${mpirun[@]}" "$threads_bin" "$mode" "$workers"; done
  done
done
