#!/usr/bin/env bash
# gpu_check.sh: the CUDA backend checked end to end on a GPU machine, in a few minutes:
#   1. builds for the GPU it finds (-DCMAKE_CUDA_ARCHITECTURES from nvidia-smi, else native)
#   2. runs the tests labelled `cuda` (test_cuda, test_cuda_modes, test_cuda_decoder),
#      test_device_list and test_cuda_peer_logic
#   3. runs `pengine --mlp --backend cuda --mode dp|tp|pp --gpus 0,0 --dtype fp32|bf16` (and 0,1
#      where two GPUs exist) with verification (exit 1 on a mismatch with the host backend);
#      then the decoders: the 124m GPT-2 preset (pengine gen), a batch of 8 prompts of 128
#      tokens (prefill) and 32 decoded tokens each, fp32 and bf16, its logits verified
#      against the naive reference and the host backend
#   4. runs bench_cuda (GEMM fp32 and bf16, the model's MLP forward and batch-1 bandwidth
#      in fp32 and bf16, peer all-reduce, targets)
#   5. runs compute-sanitizer (memcheck) on test_cuda where the tool exists
# and writes one JSON report (OUT/gpu_check.json; also OUT/gpu_check.log, tests.txt and
# bench_cuda.txt) plus a summary on stdout. Exit status:
# 0 when every step that ran passed, 1 otherwise.
#
#   bench/gpu_check.sh [--out DIR] [--full]      (default DIR: out/gpu_check; --full: bench
#                                                 without --quick)
#
# Dependencies: nvcc, cuBLAS, NCCL and CMake from the machine; hwloc, OpenBLAS, cJSON,
# cmocka and pkg-config from the system if pkg-config finds them, else from .deps (made by
# bench/fetch_deps.sh on a Debian 12 machine; carry .deps/debs, it is unpacked here), or
# from PE_DEPS_ROOT if set. See docs/cuda.md.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$repo/out/gpu_check
quick=--quick
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --full) quick=; shift ;;
    -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
build=${PE_GPU_BUILD:-$repo/build-gpu-check}
tmp=$build/gpu_check_runs # per-run JSON, embedded into the report (OUT keeps 4 files)
log=$out/gpu_check.log
: >"$log"
t_start=$(date +%s)
steps_json=()
failed=0

say() { echo "$@" | tee -a "$log"; }

json_str() { # a JSON string literal of $1
  local s=$1
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/\\n}
  s=${s//$'\r'/}
  s=${s//$'\t'/\\t}
  printf '"%s"' "$s"
}

# step NAME STATUS SECONDS [DETAIL] [RAW_JSON]: one entry of the report.
step() {
  local e
  e="{\"name\": $(json_str "$1"), \"status\": $(json_str "$2"), \"seconds\": $3"
  [ -n "${4:-}" ] && e="$e, \"detail\": $(json_str "$4")"
  [ -n "${5:-}" ] && e="$e, \"output\": $5"
  steps_json+=("$e}")
  [ "$2" = failed ] && failed=1
  say "  [$2] $1 (${3}s)${4:+: $4}"
}

# run_step NAME TIMEOUT STDOUT CMD...: runs CMD under a time limit, its stdout into the file
# STDOUT (or the log when STDOUT is -), its stderr into the log; sets rc and secs.
run_step() {
  local name=$1 limit=$2 to=$3 t0
  shift 3
  t0=$(date +%s)
  echo "### $name: $*" >>"$log"
  if [ "$to" = - ]; then
    timeout "$limit" "$@" >>"$log" 2>&1
  else
    timeout "$limit" "$@" >"$to" 2>>"$log"
  fi
  rc=$?
  secs=$(($(date +%s) - t0))
  [ $rc -eq 124 ] && echo "### $name: timed out after ${limit}s" >>"$log"
  return $rc
}

is_json() { [ -s "$1" ] && head -c1 "$1" | grep -q '[{[]'; }

say "gpu_check: $(date -u +%Y-%m-%dT%H:%M:%SZ) in $repo"

# ---- the machine ----
export PATH=$PATH:/usr/local/cuda/bin
gpus=0
gpu_names=""
arch=""
if command -v nvidia-smi >/dev/null; then
  q=$(nvidia-smi --query-gpu=name,compute_cap,memory.total,pci.bus_id --format=csv,noheader 2>/dev/null)
  if [ -n "$q" ]; then
    gpus=$(printf '%s\n' "$q" | wc -l)
    gpu_names=$(printf '%s\n' "$q" | cut -d, -f1 | sort | uniq -c | sed 's/^ *//' | paste -sd';')
    arch=$(printf '%s\n' "$q" | cut -d, -f2 | tr -d ' .' | sort -u | paste -sd';')
    say "gpus: $gpus ($gpu_names), compute capability $arch"
    printf '%s\n' "$q" >>"$log"
  fi
fi
arch=${PE_CUDA_ARCH:-${arch:-native}} # PE_CUDA_ARCH overrides (e.g. 90)
[ "$gpus" -gt 0 ] || say "gpu_check: nvidia-smi found no GPU: the GPU steps will skip or fail"
nvcc_version=$(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')
say "nvcc ${nvcc_version:-not found}, cmake $(cmake --version 2>/dev/null | sed -n '1s/.* //p')"
if [ -z "$nvcc_version" ]; then
  say "gpu_check: nvcc not found (PATH, /usr/local/cuda/bin): cannot build the CUDA backend"
  exit 1
fi

# ---- dependencies ----
deps=system
if [ -n "${PE_DEPS_ROOT:-}" ] ||
  ! { command -v pkg-config >/dev/null && pkg-config --exists hwloc libcjson cmocka 2>/dev/null; }; then
  export PE_DEPS_ROOT=${PE_DEPS_ROOT:-$repo/.deps}
  if [ -d "$PE_DEPS_ROOT/debs" ] || [ -d "$PE_DEPS_ROOT/root" ]; then
    # shellcheck source=deps_env.sh
    if . "$repo/bench/deps_env.sh" >>"$log" 2>&1; then
      deps=$PE_DEPS_ROOT
    else
      say "gpu_check: could not set up the dependencies in $PE_DEPS_ROOT (see $log)"
      exit 1
    fi
  else
    say "gpu_check: hwloc/cJSON/cmocka not found by pkg-config and no $PE_DEPS_ROOT/debs;"
    say "  run bench/fetch_deps.sh on a Debian 12 machine and carry .deps/debs (docs/cuda.md)"
    exit 1
  fi
fi
say "dependencies: $deps"

# ---- 1. build ----
say "steps:"
jobs=$(nproc 2>/dev/null || echo 4)
if run_step configure 240 - cmake -S "$repo" -B "$build" -DPE_WERROR=ON -DPE_WITH_CUDA=ON \
  -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CUDA_ARCHITECTURES=$arch" &&
  run_step build 400 - cmake --build "$build" -j "$jobs"; then
  step build ok $secs "CMAKE_CUDA_ARCHITECTURES=$arch"
else
  build_secs=$secs
  # Keep what can be checked: the targets this script runs, one by one (ctest -L cuda
  # runs test_cuda_modes too when it is built).
  partial=""
  for t in test_cuda test_cuda_modes test_device_list bench_cuda pengine_cli; do
    run_step "build $t" 300 - cmake --build "$build" -j "$jobs" --target $t && partial="$partial $t"
  done
  step build failed "$build_secs" "see $log; built anyway:${partial:- nothing}"
fi
built() { [ -x "$build/$1" ]; }

# ---- 2. tests ----
if built tests/test_cuda; then
  t0=$(date +%s)
  (cd "$build" && timeout 300 ctest -L cuda -V --timeout 240) >"$out/tests.txt" 2>&1
  rc_c=$?
  (cd "$build" && timeout 120 ctest -R '^(test_device_list|test_cuda_peer_logic)$' -V \
    --timeout 60) >>"$out/tests.txt" 2>&1
  rc_d=$?
  cat "$out/tests.txt" >>"$log"
  skipped=$(grep -o "SKIPPED \] [0-9]* test" "$out/tests.txt" | awk '{s += $3} END {print s + 0}')
  passed=$(grep -c "\[       OK \]" "$out/tests.txt" || true)
  detail="cuda label (test_cuda, test_cuda_modes, test_cuda_decoder), test_device_list, test_cuda_peer_logic: $passed cmocka tests passed, $skipped skipped"
  if [ $rc_c -eq 0 ] && [ $rc_d -eq 0 ]; then
    step tests ok $(($(date +%s) - t0)) "$detail"
  else
    step tests failed $(($(date +%s) - t0)) "$detail; ctest exit $rc_c/$rc_d (see tests.txt)"
  fi
else
  step tests skipped 0 "not built"
fi

# ---- 3. the command, every mode and dtype, verified ----
mkdir -p "$tmp"
if built pengine; then
  lists=("0,0")
  [ "$gpus" -ge 2 ] && lists+=("0,1")
  for list in "${lists[@]}"; do
    for dtype in fp32 bf16; do
      for mode in dp tp pp; do
        f=$tmp/pengine_${mode}_${dtype}_${list/,/_}.json
        run_step "pengine $mode $dtype $list" 120 "$f" "$build/pengine" --mlp --backend cuda \
          --mode "$mode" --gpus "$list" --dtype "$dtype" --iters 20 --warmup 3 --verify --json
        rc_p=$rc
        raw=""
        is_json "$f" && raw=$(cat "$f")
        name="pengine --mlp --backend cuda --mode $mode --gpus $list --dtype $dtype"
        if [ $rc_p -eq 0 ]; then
          step "$name" ok "$secs" "verified against the host backend" "$raw"
        else
          case $rc_p in
            1) why="a request or the verification failed (see the log)" ;;
            2) why="configuration refused (see the log)" ;;
            124) why="timed out (120 s)" ;;
            126 | 127) why="could not start (see the log)" ;;
            *) why="run failed" ;;
          esac
          step "$name" failed "$secs" "exit $rc_p: $why" "$raw"
        fi
      done
    done
  done
else
  step "pengine modes" skipped 0 "pengine not built"
fi

# ---- 3b. the decoders: the 124m GPT-2 preset, prefill and decode, fp32 and bf16 ----
# pengine --model DIR runs a batch of prompts (prefill), then decodes, and verifies the logits
# against the naive double-precision reference and, on CUDA, against the host backend.
if built pengine; then
  m124=$tmp/gpt2-124m
  run_step "gen gpt2 124m" 180 - "$build/pengine" gen gpt2 --preset 124m --out "$m124"
  if [ $rc -eq 0 ]; then
    for dtype in fp32 bf16; do
      f=$tmp/pengine_llm_${dtype}.json
      run_step "pengine llm $dtype" 300 "$f" "$build/pengine" --backend cuda --model "$m124" \
        --gpus 0 --dtype "$dtype" --batch 8 --prompt-len 128 --max-tokens 32 --verify --json
      rc_p=$rc
      raw=""
      is_json "$f" && raw=$(cat "$f")
      name="pengine --backend cuda --model gpt2-124m --gpus 0 --dtype $dtype"
      if [ $rc_p -eq 0 ]; then
        step "$name" ok "$secs" "verified against the naive reference and the host backend" "$raw"
      else
        step "$name" failed "$secs" "exit $rc_p (see the log)" "$raw"
      fi
    done
  else
    step "gen gpt2 124m" failed "$secs" "exit $rc"
  fi
fi

# ---- 4. bench_cuda ----
if built bench/bench_cuda; then
  run_step bench_cuda 300 "$out/bench_cuda.txt" "$build/bench/bench_cuda" $quick \
    --json "$tmp/bench_cuda.json"
  rc_b=$rc
  cat "$out/bench_cuda.txt" >>"$log"
  raw=""
  is_json "$tmp/bench_cuda.json" && raw=$(cat "$tmp/bench_cuda.json")
  if [ $rc_b -eq 0 ]; then step bench_cuda ok "$secs" "" "$raw"; else step bench_cuda failed "$secs" "exit $rc_b" "$raw"; fi
else
  step bench_cuda skipped 0 "not built"
fi

# ---- 5. compute-sanitizer ----
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [ -n "$san" ] && built tests/test_cuda; then
  # --report-api-errors no: test_cuda makes API calls fail on purpose (a 2^60-byte
  # cudaMalloc, a device that does not exist); bad device accesses and leaks still count.
  run_step compute-sanitizer 240 - "$san" --tool memcheck --error-exitcode 86 \
    --report-api-errors no --leak-check full "$build/tests/test_cuda"
  rc_s=$rc
  errs=$(grep -Eo "ERROR SUMMARY: [0-9]+ error" "$log" | tail -n1)
  if [ $rc_s -eq 0 ]; then
    step compute-sanitizer ok "$secs" "memcheck on test_cuda: ${errs:-no summary}"
  elif [ $rc_s -eq 124 ]; then
    step compute-sanitizer failed "$secs" "timed out (240 s)"
  else
    step compute-sanitizer failed "$secs" "exit $rc_s; ${errs:-see the log}"
  fi
else
  step compute-sanitizer skipped 0 "${san:-compute-sanitizer not found}"
fi

# ---- report ----
total=$(($(date +%s) - t_start))
{
  printf '{\n  "date": %s,\n  "gpus": %s,\n  "gpu_names": %s,\n  "cuda_arch": %s,\n' \
    "$(json_str "$(date -u +%Y-%m-%dT%H:%M:%SZ)")" "$gpus" "$(json_str "$gpu_names")" \
    "$(json_str "$arch")"
  printf '  "nvcc": %s,\n  "dependencies": %s,\n  "seconds": %s,\n  "passed": %s,\n' \
    "$(json_str "$nvcc_version")" "$(json_str "$deps")" "$total" \
    "$([ $failed -eq 0 ] && echo true || echo false)"
  printf '  "steps": [\n'
  for i in "${!steps_json[@]}"; do
    printf '    %s%s\n' "${steps_json[$i]}" "$([ "$i" -lt $((${#steps_json[@]} - 1)) ] && echo ,)"
  done
  printf '  ]\n}\n'
} >"$out/gpu_check.json"

say ""
say "summary ($total s, $gpus GPU(s): ${gpu_names:-none}):"
grep -E "^  \[" "$log" | sed 's/^/ /'
[ -s "$out/bench_cuda.txt" ] && sed 's/^/  /' "$out/bench_cuda.txt"
say "report: $out/gpu_check.json, log: $log"
exit $failed
