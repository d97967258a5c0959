/* usage.c: the --help text and the names of modes, schedules, backends and dtypes. */
#include <stdio.h>

#include "args.h"

void cli_usage(FILE *out)
{
    fputs(
"usage: pengine --mode dp|tp|pp --gpus LIST [--model DIR] [decoder demo options]\n"
"       pengine --dp N --pp N --tp N --gpus LIST [--model DIR] [decoder demo options]\n"
"       pengine --mlp --mode dp|tp|pp --gpus LIST [MLP demo options]\n"
"       pengine --topology [--gpus LIST] [--backend B]\n"
"       pengine gen mlp --hidden N --layers L --out FILE [gen mlp options]\n"
"       pengine gen gpt2|llama [--preset P] --out DIR [gen decoder options]\n"
"       pengine generate --model DIR --prompt TEXT|--prompts FILE|--tokens 1,2,3 [options]\n"
"       pengine chat --model DIR [--chat-template NAME] [--system TEXT] [options]\n"
"       pengine serve --model DIR [--host H] [--port P] [--api-key KEY] [options]\n"
"       pengine tokenize --tokenizer FILE|--model DIR [--json] [--decode] < INPUT\n"
"\n"
"Runs the decoder demo on the listed devices: prefill and decode of a batch of prompts on a\n"
"grid of data (dp), tensor (tp) or pipeline (pp) parallelism, compared with one device and\n"
"verified against a naive reference. Without --model it writes a seeded random Llama to a\n"
"temporary folder first (and removes it after). Example: pengine --mode pp --gpus 0,1\n"
"--mlp (or --model FILE, an MLP) runs the MLP demos instead: pengine --mlp --mode pp --gpus 0,1\n"
"\n"
"grid and devices:\n"
"  --mode dp|tp|pp       the demo; with --gpus alone it sets the 1-D grid\n"
"  --gpus LIST           device ids, e.g. 0,1 (may repeat: several ranks on one device)\n"
"  --dp N --pp N --tp N  any grid; dp * pp * tp must equal the number of devices\n"
"  --backend B           auto (default: CUDA if a GPU answers, else host), host or cuda\n"
"  --dtype D             fp32 (default) or bf16 (bf16 weights and GEMM inputs, fp32 sums)\n"
"  --threads N           host backend: cores each device computes with (default 0: an\n"
"                        even share of the machine's cores)\n"
"  --split A,B,...       layers per pipeline stage (default: balanced by FLOPs)\n"
"\n"
"workload (the MLP demos):\n"
"  --mlp                 an MLP demo on its generated MLP (without --model)\n"
"  --model FILE          a safetensors MLP instead of the demo's generated model\n"
"  --batch N             rows per request (default 16 for dp/tp, 64 for pp)\n"
"  --microbatches M      micro-batches per request (default 4 for pp, 1 otherwise)\n"
"  --schedule S          naive, gpipe (default for pp) or stream\n"
"  --iters N             timed iterations (default 100)\n"
"  --warmup N            untimed iterations first (default 10)\n"
"  --seed S              seed of the demo model and the inputs (default 1)\n"
"  --verify, --no-verify compare with a single device, on CUDA with the host backend\n"
"                        (default on; exit 1 on mismatch)\n"
"\n"
"decoder demo (the default; --model DIR: a Hugging Face decoder directory):\n"
"  --model DIR           config.json and safetensors (e.g. from pengine gen llama; default:\n"
"                        a random Llama written for the run); a replica per --gpus entry,\n"
"                        or the grid of --mode tp|pp / --dp --pp --tp (compared with one\n"
"                        device; pp > 1 also with one step in flight); --split counts\n"
"                        blocks per stage\n"
"  --batch N             sequences (default 4)\n"
"  --prompt-len N        random token ids per prompt (default 32)\n"
"  --max-tokens N        tokens generated per sequence, greedy, EOS ignored (default 32)\n"
"  --kv-tokens N         a replica's KV pool, in positions (default max(8192, context))\n"
"  --microbatches M      pp: chunks each prompt is cut into (default pp)\n"
"  --schedule S          pp: stream (default: the chunks flow through the stages), gpipe\n"
"                        (fill-drain rounds) or naive (a prompt in one chunk)\n"
"  --tp-embedding E      tp: vocab (default: the token table split by vocabulary, one\n"
"                        all-reduce) or replicated (the whole table on every rank)\n"
"  --warmup 0            skip the untimed warm-up sequence\n"
"  --seed, --backend, --dtype, --threads, --verify/--no-verify, --json and --trace as\n"
"  above; --iters is the MLP demos' only\n"
"\n"
"output:\n"
"  --json                one JSON object on stdout with every figure, nothing else\n"
"  --trace FILE          Chrome trace-event JSON of every task of the timed run (decoders:\n"
"                        prefill and decode steps, collectives, sends; open it in Perfetto)\n"
"  --topology            print the machine and the cores each device's worker would use\n"
"  --help, --version\n"
"\n"
"gen mlp options:\n"
"  --hidden N --layers L  width of every hidden layer, number of Linear layers\n"
"  --in N --out-dim N     input and output widths (default: --hidden)\n"
"  --act relu|gelu        activation between layers (default relu)\n"
"  --init normal|identity normal(0, std) weights and zero bias (default), or identity\n"
"  --std X               standard deviation of the normal init (default 0.02)\n"
"  --seed S              seed (default 1): the same seed writes the same bytes\n"
"  --out FILE            the safetensors file to write\n"
"\n"
"gen gpt2|llama options (a Hugging Face directory: config.json and safetensors):\n"
"  --preset P            tiny (default; for tests), 124m (gpt2) or llama-110m (llama)\n"
"  --arch A              llama (default), mistral (sliding window) or qwen2 (q/k/v biases)\n"
"  --layers --hidden --heads --kv-heads --head-dim --inner --vocab --context N\n"
"                        override the preset's shape (--kv-heads, --head-dim: llama)\n"
"  --eps X               the norms' epsilon (default 1e-5)\n"
"  --rope-theta X        llama: RoPE base (default 10000)\n"
"  --rope-scaling S      llama: none (default), linear or llama3, with --rope-factor X\n"
"                        (8), --rope-low-freq-factor X (1), --rope-high-freq-factor X (4),\n"
"                        --rope-original-context N (default: --context)\n"
"  --sliding-window N    mistral: the window (default 4096; 0 = none)\n"
"  --tie, --no-tie       LM head tied to the token embedding (default: gpt2 tied)\n"
"  --bos N --eos N       token ids (gpt2: vocab - 1; llama: 1 and 2; else the tokenizer's)\n"
"  --tokenizer FILE      copy a tokenizer.json (or a directory with vocab.json and\n"
"                        merges.txt) into the model; its vocabulary sets --vocab\n"
"  --dtype f32|bf16      tensor dtype (default f32; bf16 = the f32 values rounded)\n"
"  --std X               weights normal(0, X) (default 0.02)\n"
"  --qk-std X            the q and k projections' std: sharp attention (default --std)\n"
"  --norm-std X          norm weights 1 + normal(0, X) (default 0: exactly 1)\n"
"  --bias-std X          every bias normal(0, X) (default 0: exactly 0)\n"
"  --shards N            N safetensors shards and model.safetensors.index.json\n"
"  --no-prefix           gpt2: names without \"transformer.\" (h.0.ln_1.weight, ...)\n"
"  --old-buffers         gpt2: also the old attn.bias and attn.masked_bias buffers\n"
"  --seed S              seed (default 1): the same flags write the same bytes\n"
"  --out DIR             the model directory (created; its parent must exist)\n"
"\n"
"generate options (a prompt's completion streams on stdout, the rates go to stderr):\n"
"  --model DIR           a decoder directory (required)\n"
"  --prompt TEXT         the prompt as text, tokenized by the model's tokenizer.json\n"
"                        (with the BOS its post-processor adds)\n"
"  --prompts FILE        one prompt per line (empty lines skipped), run as one batch;\n"
"                        each completion is printed after the run, with the throughput\n"
"  --tokens LIST         the prompt as token ids, e.g. 1,2,3; the ids stream instead\n"
"  --tokenizer FILE      a tokenizer.json instead of the model directory's\n"
"  --max-tokens N        tokens to generate (default 16)\n"
"  --min-tokens N        no end-of-sequence token, stop id or stop string before N\n"
"                        tokens (default 0)\n"
"  --temperature T       0 (default) = greedy\n"
"  --top-k K             sample among the K most likely (default 0: off)\n"
"  --top-p P             sample in the nucleus of mass P, in (0, 1] (default 1: off)\n"
"  --min-p M             sample among the tokens at least M times as likely as the\n"
"                        most likely one, M in [0, 1] (default 0: off)\n"
"  --seed S              the sampling seed (default 0)\n"
"  --repetition-penalty R\n"
"                        divide the positive logits of the prompt's and generated\n"
"                        tokens by R, multiply the others (default 1: off)\n"
"  --frequency-penalty F --presence-penalty P\n"
"                        take F x a generated token's count, and P once it is there,\n"
"                        off its logit (each -2 to 2; default 0)\n"
"  --stop STR            text that ends generation, left out of the output (finish\n"
"                        \"stop\"); up to 4 --stop; text prompts only\n"
"  --stop-ids LIST       token ids that end the sequence\n"
"  --ignore-eos          go on past the model's eos_token_id\n"
"  --json                one JSON object at the end (text, tokens, finish_reason, rates)\n"
"  --logprobs K          with --json: each token's log-probability and the K most\n"
"                        likely (K <= 20)\n"
"  --gpus LIST           devices, one replica each (default 0); --backend, --dtype,\n"
"                        --threads and --kv-tokens as for the demos\n"
"  --dp N --pp N --tp N  a grid over --gpus (without --gpus, its devices all on 0)\n"
"  under mpirun -np N (generate, serve and chat): the grid spans the N processes,\n"
"                        --gpus lists each process's own devices, process 0 prints\n"
"                        (docs/multinode.md)\n"
"\n"
"chat options (your turns on stdin, one per line; each reply streams on stdout):\n"
"  --model DIR           a decoder directory with its tokenizer (required)\n"
"  --tokenizer FILE      a tokenizer.json instead of the model directory's\n"
"  --chat-template NAME  chatml, llama3 or llama2 (default: the one the\n"
"                        tokenizer_config.json beside the tokenizer names)\n"
"  --system TEXT         the system message of every conversation\n"
"  --max-tokens N        the longest reply (default 256)\n"
"  --temperature, --top-k, --top-p, --min-p, --seed, the penalties, --gpus, --pp,\n"
"  --tp (one replica), --backend, --dtype, --threads, --kv-tokens  as for generate\n"
"  the conversation stays in the KV cache: each turn prefills only its own tokens;\n"
"  /reset starts a new conversation, /exit or Ctrl-D ends, Ctrl-C stops a reply\n"
"\n"
"serve options (an OpenAI-compatible HTTP server with a chat page at /; see docs/server.md):\n"
"  --model DIR           a decoder directory with its tokenizer (required)\n"
"  --tokenizer FILE      a tokenizer.json instead of the model directory's\n"
"  --chat-template NAME  chatml, llama3 or llama2 for /v1/chat/completions (default: the\n"
"                        one the tokenizer_config.json beside the tokenizer names)\n"
"  --host H              the address to listen on (default 127.0.0.1: this machine only)\n"
"  --port P              the port (default 8080; 0: any free one, printed on stdout)\n"
"  --api-key KEY         /v1/ requests must send \"Authorization: Bearer KEY\" (else 401)\n"
"  --max-body BYTES      the largest request body (default 1048576; larger: 413)\n"
"  --model-name NAME     the model's id in /v1/models (default: the directory's name)\n"
"  --max-seqs N          sequences running at once per replica (default 256, at most\n"
"                        --max-step-tokens); the rest wait in the queue\n"
"  --max-step-tokens N   tokens per engine step, decodes plus prefill chunks (default 512)\n"
"  --gpus, --dp, --pp, --tp, --backend, --dtype, --threads, --kv-tokens  as for generate\n"
"  SIGINT or SIGTERM stops accepting, finishes the requests in flight and exits 0\n"
"\n"
"tokenize options (text on stdin -> ids on stdout, as llama-tokenize):\n"
"  --tokenizer FILE      a Hugging Face tokenizer.json (or a directory with vocab.json\n"
"                        and merges.txt)\n"
"  --model DIR           the tokenizer.json of a model directory\n"
"  --json                a JSON array of ids (with --decode: the text as a JSON string)\n"
"  --decode              ids on stdin (space-separated or a JSON array) -> their text\n"
"  ids include the BOS/EOS the tokenizer's post-processor adds; the text is taken as is\n"
"  (a trailing newline is text too: use printf, not echo)\n"
"\n"
"exit codes: 0 ok, 1 runtime failure (including a failed verification), 2 usage error\n",
        out);
}

const char *cli_mode_name(cli_mode m)
{
    switch (m) {
    case CLI_MODE_DP: return "dp";
    case CLI_MODE_TP: return "tp";
    case CLI_MODE_PP: return "pp";
    case CLI_MODE_NONE: break;
    }
    return "none";
}

const char *cli_schedule_name(pe_schedule s)
{
    switch (s) {
    case PE_SCHED_NAIVE: return "naive";
    case PE_SCHED_GPIPE: return "gpipe";
    case PE_SCHED_STREAM: return "stream";
    }
    return "?";
}

const char *cli_backend_name(pe_backend_kind b)
{
    switch (b) {
    case PE_BACKEND_AUTO: return "auto";
    case PE_BACKEND_HOST: return "host";
    case PE_BACKEND_CUDA: return "cuda";
    }
    return "?";
}

const char *cli_dtype_name(pe_dtype d) { return d == PE_DTYPE_BF16 ? "bf16" : "fp32"; }
