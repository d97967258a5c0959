#!/usr/bin/env bash
# Installs pengine's build and test dependencies from Debian 12 packages (run as root).
# The CUDA toolkit (nvcc, cuBLAS, NCCL) is not a Debian package here: it comes with the
# machine; when nvcc is found the CUDA backend is built too.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
packages=(build-essential cmake pkg-config libhwloc-dev libopenblas-pthread-dev
          libcmocka-dev libcjson-dev libudev-dev valgrind libblis-pthread-dev)
# libudev-dev: `pkg-config --static --libs hwloc` names -ludev, which a static link of
# libpengine.a from outside needs (tests/test_install.sh).
# libblis-pthread-dev: bench_host measures BLIS beside OpenBLAS (dlopen'ed, header only at
# build time); the library itself does not use it.
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "dependencies: ok (${packages[*]})"
