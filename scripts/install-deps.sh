#!/usr/bin/env bash
# Installs pengine's build and test dependencies from Debian 12 packages (run as root).
# The CUDA toolkit (nvcc, cuBLAS, NCCL) is not a Debian package here: it comes with the
# machine; when nvcc is found the CUDA backend is built too.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
packages=(build-essential cmake pkg-config libhwloc-dev libopenblas-pthread-dev
          libcmocka-dev libcjson-dev libudev-dev valgrind libonig-dev libutf8proc-dev
          libblis-pthread-dev tmux libmicrohttpd-dev chromium libopenmpi-dev openmpi-bin
          libpcre2-dev)
# libpcre2-dev: test_pattern's oracle.
# libopenmpi-dev, openmpi-bin: the grid across processes (PE_WITH_MPI; mpirun in the tests).
# tmux: tests/test_chat.sh drives pengine chat in a terminal.
# libmicrohttpd-dev: pengine serve's HTTP (apps/serve_http.c), linked into the command only.
# chromium: tests/test_serve_page.sh opens pengine serve's chat page in it (headless, driven
# by playwright-core from tests/browser, which downloads no browser of its own).
# libonig-dev, libutf8proc-dev: the tokenizer (tokenizer.json's split regexes, NFC/NFKC).
# nodejs and npm: the tokenizer tests' JavaScript references (tests/tokenizer), only where
# no node is installed already.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  packages+=(nodejs npm)
fi
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
