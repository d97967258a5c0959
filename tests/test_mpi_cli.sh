#!/usr/bin/env bash
# test_mpi_cli.sh MPIRUN_WORDS... -- PENGINE: the command under mpirun -np 2 (PP2, one stage a
# process) with inputs that only process 0's node has, and the errors before any work.
#   1. The prompts file and the tokenizer exist only where process 0 runs: each process runs
#      in a directory of its own, and the paths are relative (the model's path is the same on
#      both). generate --prompts, chat and serve give one process's tokens and text: only
#      process 0 reads the prompts and the tokenizer, the others read the model alone.
#   2. A missing --prompts file, or a bad --tokenizer, on process 0: the job exits 2 within
#      10 s, process 0 naming the file and the fix, process 1 pointing at process 0.
#   3. A grid the processes cannot hold (--tp 3 on 2 processes x 1 device): exit 2 within 10 s
#      and before any token, with the message naming the fix (mpirun -np 3, or --dp/--pp/--tp).
# The serve case is left out (with a line saying so) without curl or libmicrohttpd.
set -uo pipefail
mpirun=()
while [[ $1 != -- ]]; do mpirun+=("$1"); shift; done
shift
pengine=$1
dir=$(mktemp -d /tmp/test_mpi_cli.XXXXXX)
server=""
trap '[[ -n $server ]] && kill $server 2> /dev/null; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; for f in "$dir"/*.err; do echo "== $f"; cat "$f"; done; exit 1; }
mkdir "$dir/node0" "$dir/node1"

# A hand-made SentencePiece-style tokenizer of 9 tokens (tests/test_tokenizer_json.h).
cat > "$dir/node0/tok.json" << 'EOF'
{"added_tokens": [{"id": 1, "content": "<s>", "special": true, "lstrip": false, "rstrip": false, "normalized": false, "single_word": false}, {"id": 2, "content": "</s>", "special": true, "lstrip": false, "rstrip": false, "normalized": false, "single_word": false}], "normalizer": null, "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false}, "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}, "decoder": {"type": "Sequence", "decoders": [{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first"}, {"type": "ByteFallback"}, {"type": "Fuse"}]}, "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": true, "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "▁": 3, "h": 4, "i": 5, "▁h": 6, "▁hi": 7, "\"": 8}, "merges": ["▁ h", "▁h i"]}}
EOF
printf 'hi hi\nhi\n\nhi hi hi h\n' > "$dir/node0/prompts.txt"
echo '{"model": 3' > "$dir/node0/bad.json"
"$pengine" gen llama --preset tiny --tokenizer "$dir/node0/tok.json" --out "$dir/model" \
  > /dev/null || fail "pengine gen"
rm -f "$dir/model/tokenizer.json" "$dir/model/tokenizer_config.json" # node 0's alone

# Process k of the job runs pengine in $dir/node<k>.
cat > "$dir/on_node.sh" << EOF
#!/usr/bin/env bash
cd "$dir/node\${OMPI_COMM_WORLD_RANK:-0}" && exec "$pengine" "\$@"
EOF
chmod +x "$dir/on_node.sh"
alone=("$dir/on_node.sh")                      # process 0 of a job of one
across=("${mpirun[@]}" -np 2 "$dir/on_node.sh")
one() { "${alone[@]}" "$@" --backend host; }
job() { timeout 30 "${across[@]}" "$@" --backend host --pp 2 --gpus 0; }

# ---- 1. the inputs only on process 0's node ----
sample=(--temperature 0.9 --seed 11 --max-tokens 8 --ignore-eos --json)
gen=(generate --model "$dir/model" --tokenizer tok.json --prompts prompts.txt "${sample[@]}")
one "${gen[@]}" > "$dir/one.json" 2> "$dir/one.err" || fail "generate in one process"
job "${gen[@]}" > "$dir/job.json" 2> "$dir/job.err" || fail "generate under mpirun"
[[ $(grep -c '"tokens"' "$dir/one.json") == 3 ]] || fail "one process: not 3 completions"
diff <(grep -E '"(tokens|text)"' "$dir/one.json") <(grep -E '"(tokens|text)"' "$dir/job.json") ||
  fail "generate --prompts: process 0's tokens differ from one process's"
echo "ok: generate --prompts, with prompts and tokenizer on process 0's node alone"

turns=$'hi\nhi hi\n'
talk=(chat --model "$dir/model" --tokenizer tok.json --chat-template llama2 --max-tokens 5)
one "${talk[@]}" <<< "$turns" > "$dir/chat_one.out" 2> "$dir/chat_one.err" || fail "chat alone"
job "${talk[@]}" <<< "$turns" > "$dir/chat_job.out" 2> "$dir/chat_job.err" ||
  fail "chat under mpirun"
[[ -s $dir/chat_one.out ]] && cmp -s "$dir/chat_one.out" "$dir/chat_job.out" ||
  fail "chat: the replies under mpirun differ from one process's"
echo "ok: chat, with the tokenizer on process 0's node alone"

# serve_answer NAME LAUNCH... -- FLAGS...: starts a server, asks one greedy completion, and
# stops it with SIGTERM to its process 0; the answer (without its time) in $dir/NAME.answer.
serve_answer() {
  local name=$1 launch=()
  shift
  while [[ $1 != -- ]]; do launch+=("$1"); shift; done
  shift
  "${launch[@]}" serve --model "$dir/model" --tokenizer tok.json --port 0 "$@" \
    > "$dir/$name.out" 2> "$dir/$name.err" &
  server=$!
  local url="" pid p0=""
  for _ in $(seq 200); do
    url=$(grep -so 'http://[^ ]*/v1' "$dir/$name.out") && break
    kill -0 $server 2> /dev/null || break
    sleep 0.05
  done
  [[ -n $url ]] || fail "$name: no server within 10 s"
  curl -s "$url/completions" -d '{"prompt": "hi hi", "max_tokens": 6, "ignore_eos": true,
    "temperature": 0}' | sed 's/"created":[0-9]*,//' > "$dir/$name.answer"
  p0=$server
  for pid in $(pgrep -P $server); do # under mpirun: its child of rank 0
    grep -qz '^OMPI_COMM_WORLD_RANK=0$' "/proc/$pid/environ" && p0=$pid
  done
  kill -TERM "$p0"
  wait $server || fail "$name: the server exited $?"
  server=""
}
if ! command -v curl > /dev/null; then
  echo "serve left out: no curl"
elif "$pengine" serve 2>&1 | grep -q "built without libmicrohttpd"; then
  echo "serve left out: pengine was built without libmicrohttpd"
else
  serve_answer serve_one "${alone[@]}" -- --backend host
  serve_answer serve_job "${across[@]}" -- --backend host --pp 2 --gpus 0
  grep -q '"finish_reason":"length"' "$dir/serve_one.answer" || fail "serve: no completion"
  cmp -s "$dir/serve_one.answer" "$dir/serve_job.answer" ||
    fail "serve: the answer under mpirun differs from one process's"
  echo "ok: serve, with the tokenizer on process 0's node alone"
fi

# ---- 2. and 3. refused on process 0, or on every process: exit 2, fast, nothing hangs ----
# refused NAME PATTERN ARGS...: the job exits 2 within 10 s with PATTERN on stderr.
refused() {
  local name=$1 pattern=$2
  shift 2
  local t0=$SECONDS
  timeout 30 "${across[@]}" "$@" > "$dir/$name.out" 2> "$dir/$name.err"
  local rc=$? elapsed=$((SECONDS - t0))
  ((rc != 124)) || fail "$name: the job still ran after 30 s"
  ((rc == 2)) || fail "$name: mpirun exited $rc, not 2"
  ((elapsed <= 10)) || fail "$name: the job took $elapsed s to end (more than 10)"
  grep -q -- "$pattern" "$dir/$name.err" || fail "$name: no '$pattern' on stderr"
  [[ ! -s $dir/$name.out ]] || fail "$name: it printed on stdout (it ran)"
  echo "ok: $name: exit 2 in $elapsed s"
}
run=(generate --model "$dir/model" --backend host --pp 2 --gpus 0)
refused missing_prompts "pengine\[process 0\]: error: cannot open --prompts absent.txt (No such file or directory); give a text file" \
  "${run[@]}" --tokenizer tok.json --prompts absent.txt
grep -q "pengine\[process 1\]: error: process 0 of 2 failed (PE_" \
  "$dir/missing_prompts.err" || fail "missing_prompts: process 1 did not point at process 0"
refused bad_tokenizer "pengine\[process 0\]: error: --tokenizer: bad.json is not valid JSON" \
  "${run[@]}" --tokenizer bad.json --prompt hi
refused wrong_grid "grid dp=1 x pp=1 x tp=3 needs 3 devices but 2 processes x 1 device each (--gpus) give 2; start 3 processes (mpirun -np 3), or change --dp/--pp/--tp" \
  generate --model "$dir/model" --backend host --tp 3 --gpus 0 --tokens 1,2,3
echo "ok: every case"
