#!/usr/bin/env bash
# test_install.sh SOURCE_DIR BUILD_DIR: installs pengine into a temporary prefix, then
# builds docs/examples/embed.c against it twice: with `pkg-config --static --libs pengine`,
# and through find_package(pengine). Both programs run a model and must print "ok".
set -euo pipefail
src=$1 build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log"
libdir=$(find "$tmp/prefix" -name pengine.pc -printf '%h\n' | head -1)
test -f "$tmp/prefix/include/pengine/pengine.h"
test -n "$(find "$tmp/prefix" -name libpengine.a)"
"$tmp/prefix/bin/pengine" gen mlp --hidden 32 --layers 3 --seed 7 --out "$tmp/m.safetensors" > /dev/null

export PKG_CONFIG_PATH="$libdir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
cc -std=c11 -Wall -Wextra -Werror "$src/docs/examples/embed.c" $(pkg-config --cflags pengine) \
   -o "$tmp/embed_pc" $(pkg-config --static --libs pengine)
OPENBLAS_NUM_THREADS=1 "$tmp/embed_pc" "$tmp/m.safetensors" | tee "$tmp/pc.out"
grep -q ': ok$' "$tmp/pc.out"

cmake -S "$src/docs/examples" -B "$tmp/cmake" -DCMAKE_PREFIX_PATH="$tmp/prefix" > "$tmp/cmake.log"
cmake --build "$tmp/cmake" > "$tmp/cmake-build.log"
OPENBLAS_NUM_THREADS=1 "$tmp/cmake/embed" "$tmp/m.safetensors" | tee "$tmp/cmake.out"
grep -q ': ok$' "$tmp/cmake.out"
echo "install test: pkg-config and find_package builds both ok"
