#!/usr/bin/env bash
# test_mpi_kill.sh MPIRUN_WORDS... -- PENGINE: a process of an MPI job killed with -9 in the
# middle of a run ends the job within 10 s, and nothing hangs.
#   1. mpirun as launched by default: it notices the dead process and ends the job itself
#      (its own message, a non-zero exit).
#   2. A launcher that leaves the survivors running (mpirun --mca orte_enable_recovery 1, as
#      Slurm's srun does by default): pengine's heartbeat notices within 3 s. Killing
#      process 1: process 0's sequence ends with the error naming process 1; killing process
#      0: process 1's follower ends with the error naming process 0.
set -uo pipefail
mpirun=()
while [[ $1 != -- ]]; do mpirun+=("$1"); shift; done
shift
pengine=$1
dir=$(mktemp -d /tmp/test_mpi_kill.XXXXXX)
trap 'pkill -9 -f "$dir/model" 2> /dev/null; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; for f in "$dir"/*.err; do echo "== $f"; cat "$f"; done; exit 1; }

# A model whose decode runs for minutes at --max-tokens 8000 on 2 processes.
"$pengine" gen llama --preset tiny --layers 8 --hidden 256 --heads 8 --kv-heads 4 \
  --context 8192 --out "$dir/model" > /dev/null || fail "pengine gen"

# run NAME VICTIM MPIRUN_EXTRA...: starts the job, kills process VICTIM once tokens stream,
# and waits for the job to end (at most 20 s); sets elapsed (seconds) and rc.
run() {
  local name=$1 victim=$2
  shift 2
  "${mpirun[@]}" "$@" -np 2 "$pengine" generate --model "$dir/model" --tokens 1,2,3 \
    --max-tokens 8000 --ignore-eos --pp 2 --gpus 0 > "$dir/$name.out" 2> "$dir/$name.err" &
  local job=$!
  for _ in $(seq 200); do [[ -s $dir/$name.out ]] && break; sleep 0.05; done
  [[ -s $dir/$name.out ]] || fail "$name: no tokens within 10 s"
  sleep 0.5
  local pids
  pids=$(pgrep -f "^$pengine generate --model $dir/model" | sort -n)
  local pid
  pid=$(echo "$pids" | sed -n "$((victim + 1))p")
  [[ -n $pid ]] || fail "$name: no process $victim among: $pids"
  local t0=$SECONDS
  kill -9 "$pid"
  for _ in $(seq 200); do kill -0 "$job" 2> /dev/null || break; sleep 0.1; done
  elapsed=$((SECONDS - t0))
  if kill -0 "$job" 2> /dev/null; then
    kill -9 "$job"
    fail "$name: the job still runs 20 s after process $victim was killed"
  fi
  wait "$job"
  rc=$?
  pgrep -f "^$pengine generate --model $dir/model" > /dev/null &&
    fail "$name: a pengine process outlived its job"
  ((elapsed <= 10)) || fail "$name: the job took $elapsed s to end (more than 10)"
}

run default 1
((rc != 0)) || fail "default: mpirun exited 0 after process 1 was killed"
echo "ok: mpirun ended the job $elapsed s after process 1 was killed (exit $rc)"

run recovery1 1 --mca orte_enable_recovery 1
grep -q "pengine\[process 0\]: error: .*process 1 of 2 has sent nothing for 3 s" \
  "$dir/recovery1.err" || fail "recovery1: process 0 did not say process 1 was lost"
echo "ok: process 0 ended its sequence with the error naming process 1 ($elapsed s)"

run recovery0 0 --mca orte_enable_recovery 1
grep -q "pengine\[process 1\]: error: process 0 of 2 has sent nothing for 3 s" \
  "$dir/recovery0.err" || fail "recovery0: process 1 did not say process 0 was lost"
echo "ok: process 1 stopped with the error naming process 0 ($elapsed s)"
