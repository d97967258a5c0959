#!/usr/bin/env bash
# gpu_check.sh: the CUDA backend checked end to end on a GPU machine, in a few minutes:
#   1. builds what it runs (Release, without MPI) for the GPU it finds
#      (-DCMAKE_CUDA_ARCHITECTURES from nvidia-smi, else native); warnings are counted, not
#      fatal, since the GPU machine's compiler is not CI's
#   2. runs the tests labelled `cuda` (test_cuda, test_cuda_modes, test_cuda_decoder),
#      test_device_list and test_cuda_peer_logic, then compute-sanitizer's memcheck and
#      racecheck on test_cuda and test_cuda_decoder where the tool exists
#   3. runs `pengine --mlp --backend cuda --mode dp|tp|pp --gpus 0,0 --dtype fp32|bf16` (and 0,1
#      where two GPUs exist) with verification (exit 1 on a mismatch with the host backend);
#      then the decoders: the 124m GPT-2 and llama-110m presets (pengine gen), a batch of 8
#      prompts of 128 tokens (prefill) and 32 decoded tokens each, fp32 and bf16, on one GPU
#      and as TP and PP grids on the GPU repeated (--gpus 0,0), logits verified against the
#      naive reference and the host backend, a grid's tokens against one device's
#   4. runs bench_cuda (GEMM fp32 and bf16, the model's MLP forward and batch-1 bandwidth
#      in fp32 and bf16, peer all-reduce, targets)
# and writes one JSON report (OUT/gpu_check.json; also OUT/gpu_check.log, tests.txt and
# bench_cuda.txt) plus a summary on stdout. Exit status:
# 0 when every step that ran passed, 1 otherwise.
#
#   bench/gpu_check.sh [--out DIR] [--full] [--budget SECONDS]
#     DIR: default out/gpu_check; --full: bench_cuda without --quick; --budget: a step that
#     would not fit in what is left of SECONDS is skipped (and says so), and each step's
#     time limit is cut to what is left, so that a leased machine's time is never overrun
#
# Dependencies: nvcc, cuBLAS and CMake from the machine; NCCL next to the toolkit, else at
# NCCL_HOME, else a pip wheel's (python3's nvidia.nccl; a header copied by fetch_deps.sh
# into .deps/nccl is used where the wheel has none); hwloc, OpenBLAS, cJSON, cmocka,
# Oniguruma, utf8proc and pkg-config from the system if pkg-config finds them, else from
# .deps (made by bench/fetch_deps.sh on a Debian 12 machine; carry .deps/debs and
# .deps/nccl, they are unpacked here), or from PE_DEPS_ROOT if set. See docs/cuda.md.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$repo/out/gpu_check
quick=--quick
budget=0 # seconds; 0: no limit
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --full) quick=; shift ;;
    --budget) budget=$2; shift 2 ;;
    -h | --help) sed -n '2,30p' "$0"; exit 0 ;;
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

# left: the seconds left of --budget (a large number without one).
left() {
  if [ "$budget" -gt 0 ]; then echo $((budget - ($(date +%s) - t_start))); else echo 1000000; fi
}
# fits NAME NEED: true when NEED seconds are left; else NAME is reported skipped.
fits() {
  local l
  l=$(left)
  [ "$l" -ge "$2" ] && return 0
  step "$1" skipped 0 "out of budget (${l}s left of ${budget}s; it needs about ${2}s)"
  return 1
}
# cap LIMIT: LIMIT, or what is left of the budget less 5 s when that is smaller.
cap() {
  local l
  l=$(($(left) - 5))
  [ "$l" -lt 1 ] && l=1
  [ "$1" -lt "$l" ] && echo "$1" || echo "$l"
}

say "gpu_check: $(date -u +%Y-%m-%dT%H:%M:%SZ) in $repo"

# ---- the machine ----
export PATH=$PATH:/usr/local/cuda/bin
gpus=0
gpu_names=""
arch=""
if command -v nvidia-smi >/dev/null; then
  q=$(nvidia-smi --query-gpu=name,compute_cap,memory.total,pci.bus_id --format=csv,noheader \
    2>/dev/null)
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
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n1)
say "nvcc ${nvcc_version:-not found}, driver ${driver:-?}, cmake $(cmake --version 2>/dev/null |
  sed -n '1s/.* //p'), $(cc --version 2>/dev/null | head -n1), $(nproc) cores"
if [ -z "$nvcc_version" ]; then
  say "gpu_check: nvcc not found (PATH, /usr/local/cuda/bin): cannot build the CUDA backend"
  exit 1
fi

# ---- dependencies ----
deps=system
if [ -n "${PE_DEPS_ROOT:-}" ] ||
  ! { command -v pkg-config >/dev/null &&
    pkg-config --exists hwloc openblas libcjson cmocka oniguruma libutf8proc 2>/dev/null; }; then
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

# ---- NCCL: next to the toolkit, else NCCL_HOME, else a pip wheel's ----
cuda_root=$(dirname "$(dirname "$(command -v nvcc)")")
nccl=toolkit
if [ -n "${NCCL_HOME:-}" ]; then
  nccl=$NCCL_HOME
elif [ ! -e "$cuda_root/include/nccl.h" ] ||
  ! ls "$cuda_root"/lib64/libnccl.so* >/dev/null 2>&1; then
  wheel=$(python3 -c 'import importlib.util as u; s = u.find_spec("nvidia.nccl")
print(list(s.submodule_search_locations)[0] if s else "")' 2>/dev/null)
  if [ -n "$wheel" ] && ls "$wheel"/lib/libnccl.so* >/dev/null 2>&1; then
    if [ -e "$wheel/include/nccl.h" ]; then
      export NCCL_HOME=$wheel
    elif [ -e "$repo/.deps/nccl/include/nccl.h" ]; then # the wheel's library, our header
      mkdir -p "$build/nccl" && rm -f "$build/nccl/lib" "$build/nccl/include"
      ln -s "$wheel/lib" "$build/nccl/lib"
      ln -s "$repo/.deps/nccl/include" "$build/nccl/include"
      export NCCL_HOME=$build/nccl
    fi
  fi
  nccl="${NCCL_HOME:-not found (no $cuda_root/include/nccl.h, no python3 module nvidia.nccl)}"
fi
say "nccl: $nccl"

# ---- 1. build ----
say "steps:"
jobs=$(nproc 2>/dev/null || echo 4)
# What the steps below run, and nothing else (the whole tree is CI's to build).
targets=(test_cuda test_cuda_modes test_cuda_decoder test_device_list test_cuda_peer_logic
  pengine_cli bench_cuda)
t_build=$(date +%s)
# -U: NCCL is searched again in a build folder kept from an earlier run (its cache would keep
# the library it found then, whatever NCCL_HOME says now).
if run_step configure "$(cap 240)" - cmake -S "$repo" -B "$build" -DPE_WITH_CUDA=ON \
  -DPE_WITH_MPI=OFF -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CUDA_ARCHITECTURES=$arch" \
  -UPE_NCCL_LIBRARY -UPE_NCCL_INCLUDE_DIR &&
  run_step build "$(cap 400)" - cmake --build "$build" -j "$jobs" --target "${targets[@]}"; then
  warnings=$(grep -c "warning:" "$log")
  step build ok $(($(date +%s) - t_build)) \
    "CMAKE_CUDA_ARCHITECTURES=$arch, $warnings compiler warnings (see the log)"
else
  build_secs=$(($(date +%s) - t_build))
  # Keep what can be checked: the targets one by one.
  partial=""
  for t in "${targets[@]}"; do
    [ "$(left)" -gt 60 ] || break
    run_step "build $t" "$(cap 300)" - cmake --build "$build" -j "$jobs" --target $t &&
      partial="$partial $t"
  done
  step build failed "$build_secs" "see $log; built anyway:${partial:- nothing}"
fi
built() { [ -x "$build/$1" ]; }

# ---- 2. tests ----
if built tests/test_cuda && fits tests 60; then
  t0=$(date +%s)
  (cd "$build" && timeout "$(cap 300)" ctest -L cuda -V --timeout 240) >"$out/tests.txt" 2>&1
  rc_c=$?
  (cd "$build" && timeout "$(cap 120)" ctest -R '^(test_device_list|test_cuda_peer_logic)$' \
    -V --timeout 60) >>"$out/tests.txt" 2>&1
  rc_d=$?
  cat "$out/tests.txt" >>"$log"
  skipped=$(grep -o "SKIPPED \] [0-9]* test" "$out/tests.txt" | awk '{s += $3} END {print s + 0}')
  passed=$(grep -c "\[       OK \]" "$out/tests.txt" || true)
  detail="cuda label (test_cuda, test_cuda_modes, test_cuda_decoder), test_device_list,"
  detail="$detail test_cuda_peer_logic: $passed cmocka tests passed, $skipped skipped"
  if [ $rc_c -eq 0 ] && [ $rc_d -eq 0 ]; then
    step tests ok $(($(date +%s) - t0)) "$detail"
  else
    step tests failed $(($(date +%s) - t0)) "$detail; ctest exit $rc_c/$rc_d (see tests.txt)"
  fi
elif ! built tests/test_cuda; then
  step tests skipped 0 "not built"
fi

# ---- 2b. compute-sanitizer: memcheck and racecheck on the CUDA tests ----
# memcheck: bad device accesses and leaks (--report-api-errors no: test_cuda makes API calls
# fail on purpose, a 2^60-byte cudaMalloc, a device that does not exist). racecheck: shared
# memory hazards (it found one in the attention kernels on the first GPU run), at the tests'
# small sizes (PE_TEST_SMALL=1), since it is slow.
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
sanitize() { # TOOL TEST SMALL(0|1) ARGS...
  local tool=$1 t=$2 name="compute-sanitizer --tool $1 $2" summary envs=()
  [ "$3" = 1 ] && envs=(PE_TEST_SMALL=1)
  shift 3
  built "tests/$t" || return 0
  fits "$name" 40 || return 0
  run_step "$name" "$(cap 240)" - env "${envs[@]}" "$san" --tool "$tool" --error-exitcode 86 \
    "$@" "$build/tests/$t"
  summary=$(grep -Eo "(ERROR|RACECHECK) SUMMARY: [^(]*(\([^)]*\))?" "$log" | tail -n1)
  case $rc in
    0) step "$name" ok "$secs" "${summary:-no summary}" ;;
    124) step "$name" failed "$secs" "timed out" ;;
    *) step "$name" failed "$secs" "exit $rc; ${summary:-see the log}" ;;
  esac
}
if [ -z "$san" ]; then
  step compute-sanitizer skipped 0 "compute-sanitizer not found"
else
  sanitize memcheck test_cuda 0 --report-api-errors no --leak-check full
  sanitize racecheck test_cuda 1
  sanitize memcheck test_cuda_decoder 1 --report-api-errors no --leak-check full
  sanitize racecheck test_cuda_decoder 1
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
        fits "pengine --mlp $mode $dtype $list" 15 || continue
        run_step "pengine $mode $dtype $list" "$(cap 120)" "$f" "$build/pengine" --mlp \
          --backend cuda \
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

# ---- 3b. the decoders: GPT-2 124m and llama-110m, one GPU and grids on it, fp32 and bf16 ----
# pengine --model DIR runs a batch of prompts (prefill), then decodes, and verifies the logits
# against the naive double-precision reference and, on CUDA, against the host backend; a grid
# is also compared with one device (the same greedy tokens). Each run: MODEL MODE GPUS DTYPE.
llm_runs=("gpt2 single 0 fp32" "gpt2 single 0 bf16" "llama single 0 fp32"
  "llama single 0 bf16" "gpt2 tp 0,0 fp32" "llama pp 0,0 fp32" "llama tp 0,0 bf16"
  "gpt2 pp 0,0 bf16")
[ "$gpus" -ge 2 ] && llm_runs+=("llama tp 0,1 fp32" "gpt2 pp 0,1 bf16" "llama dp 0,1 fp32")
llm_model() { # gpt2|llama: the model's folder, written on first use (sets rc)
  local dir=$tmp/$1-model preset
  rc=0
  [ -e "$dir/config.json" ] && return 0
  [ "$1" = gpt2 ] && preset=124m || preset=llama-110m
  run_step "gen $1 $preset" "$(cap 180)" - "$build/pengine" gen "$1" --preset "$preset" \
    --out "$dir"
  [ $rc -eq 0 ] || step "pengine gen $1 --preset $preset" failed "$secs" "exit $rc"
}
if built pengine; then
  for run in "${llm_runs[@]}"; do
    read -r model mode list dtype <<<"$run"
    name="pengine --backend cuda --model $model"
    [ "$model" = gpt2 ] && name="$name-124m" || name="$name-110m"
    grid=(--gpus "$list")
    [ "$mode" = single ] || grid=(--mode "$mode" --gpus "$list")
    name="$name ${grid[*]} --dtype $dtype"
    fits "$name" 30 || continue
    llm_model "$model"
    [ $rc -eq 0 ] || continue
    f=$tmp/pengine_llm_${model}_${mode}_${dtype}_${list/,/_}.json
    run_step "$name" "$(cap 240)" "$f" "$build/pengine" --backend cuda --model "$tmp/$model-model" \
      "${grid[@]}" --dtype "$dtype" --batch 8 --prompt-len 128 --max-tokens 32 --verify --json
    rc_p=$rc
    raw=""
    is_json "$f" && raw=$(cat "$f")
    if [ $rc_p -eq 0 ]; then
      step "$name" ok "$secs" "verified against the naive reference and the host backend" "$raw"
    else
      step "$name" failed "$secs" "exit $rc_p (see the log)" "$raw"
    fi
  done
fi

# ---- 4. bench_cuda ----
if built bench/bench_cuda && fits bench_cuda 45; then
  run_step bench_cuda "$(cap 300)" "$out/bench_cuda.txt" "$build/bench/bench_cuda" $quick \
    --json "$tmp/bench_cuda.json"
  rc_b=$rc
  cat "$out/bench_cuda.txt" >>"$log"
  raw=""
  is_json "$tmp/bench_cuda.json" && raw=$(cat "$tmp/bench_cuda.json")
  if [ $rc_b -eq 0 ]; then
    step bench_cuda ok "$secs" "" "$raw"
  else
    step bench_cuda failed "$secs" "exit $rc_b" "$raw"
  fi
elif ! built bench/bench_cuda; then
  step bench_cuda skipped 0 "not built"
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
