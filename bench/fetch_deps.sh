#!/usr/bin/env bash
# fetch_deps.sh: brings pengine's Debian dependencies into a folder that travels with the
# tree, for a GPU machine that has nvcc, cuBLAS, NCCL and CMake but no package access.
#
#   bench/fetch_deps.sh [DIR]          (default DIR: .deps in the repository root)
#
# Carry DIR/debs and DIR/nccl (NCCL's header, where this machine has one).
#
# On a Debian 12 (bookworm) machine with apt: `apt-get download` puts the .deb files into
# DIR/debs (about 15 MB; carry this folder), then they are unpacked into DIR/root with
# `dpkg-deb -x` (nothing is installed; no root needed for the unpacking). On the GPU
# machine, bench/deps_env.sh unpacks DIR/debs again if DIR/root is missing and points the
# build at it:  PE_DEPS_ROOT=DIR . bench/deps_env.sh
#
# Libraries that most machines already have (libgfortran5, libquadmath0, libudev1) are
# unpacked under DIR/fallback/<name>/ and used only where the machine lacks them.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${1:-$here/.deps}
mkdir -p "$dir/debs"
dir=$(cd "$dir" && pwd)

# What the build, the tests and pkg-config need, with their runtime libraries.
main_pkgs=(
  libhwloc-dev libhwloc15            # hwloc (topology, GPU locality: hwloc/cudart.h)
  libopenblas-pthread-dev libopenblas0-pthread  # OpenBLAS (the pthread build; see CMakeLists.txt)
  libcjson-dev libcjson1             # cJSON (reports, benchmarks)
  libcmocka-dev libcmocka0           # cmocka (tests)
  libonig-dev libonig5               # Oniguruma (the tokenizer's split regexes)
  libutf8proc-dev libutf8proc2       # utf8proc (the tokenizer's NFC/NFKC)
  pkgconf pkgconf-bin libpkgconf3    # pkg-config itself
)
fallback_pkgs=(libgfortran5 libquadmath0 libudev1)

if ! command -v apt-get >/dev/null; then
  echo "fetch_deps.sh: apt-get not found; run this on a Debian 12 machine with package access" >&2
  exit 1
fi

cd "$dir/debs"
# apt-get download runs as _apt where it can; a root-owned folder only earns a warning.
apt-get download "${main_pkgs[@]}" "${fallback_pkgs[@]}" 2>&1 | grep -v "^W: Download is performed unsandboxed" || true
for p in "${main_pkgs[@]}" "${fallback_pkgs[@]}"; do
  ls "$dir/debs/${p}"_*.deb >/dev/null 2>&1 || { echo "fetch_deps.sh: $p was not downloaded" >&2; exit 1; }
done

# NCCL's header, for a GPU machine whose NCCL is a pip wheel's library alone (gpu_check.sh
# uses it only there): carry DIR/nccl too.
for h in /usr/local/cuda/include/nccl.h "${NCCL_HOME:-/nonexistent}/include/nccl.h"; do
  if [ -e "$h" ]; then
    mkdir -p "$dir/nccl/include" && cp "$h" "$dir/nccl/include/"
    break
  fi
done

rm -rf "$dir/root" "$dir/fallback"
PE_DEPS_ROOT=$dir PE_DEPS_QUIET=1 . "$here/bench/deps_env.sh"
echo "fetch_deps.sh: $(ls "$dir/debs" | wc -l) packages in $dir/debs ($(du -sh "$dir/debs" | cut -f1)), unpacked into $dir/root"
echo "  use:  PE_DEPS_ROOT=$dir . bench/deps_env.sh && cmake -S . -B build"
