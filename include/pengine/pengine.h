/* pengine.h: the public C API of pengine, a multi-device inference engine.
 *
 * One worker thread per device; data (DP), tensor (TP) and pipeline (PP) parallelism
 * are role assignments of the same workers on a grid world = dp x pp x tp.
 *
 * Models: decoders (GPT-2, Llama, Mistral, Qwen2) from a Hugging Face directory, run as
 * sequences (pe_seq_*: prompt in, token events out); and MLPs from one safetensors file,
 * run as batches of rows (pe_submit, pe_infer).
 *
 * Every function returns a pe_status. On failure, pe_last_error() (this thread) and
 * pe_engine_last_error() (that engine) hold a message saying what went wrong and what
 * to do. The library never exits or aborts the process.
 */
#ifndef PENGINE_H
#define PENGINE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PE_VERSION_MAJOR 0
#define PE_VERSION_MINOR 1
#define PE_VERSION_PATCH 0

/* ---- status ------------------------------------------------------------------------ */

typedef enum pe_status {
    PE_OK = 0,
    PE_EINVAL,    /* bad argument or configuration */
    PE_ENOMEM,    /* out of host or device memory */
    PE_ENODEV,    /* no such device, or no usable backend */
    PE_EIO,       /* file could not be opened, read or written */
    PE_EFORMAT,   /* file is malformed (truncated, lying header, wrong dtype) */
    PE_EAGAIN,    /* try again: queue full (submit) or nothing ready (poll) */
    PE_ECLOSED,   /* the engine or queue is closed */
    PE_EDEVICE,   /* a device or backend call failed */
    PE_ECOMM,     /* a collective or send/recv failed or was aborted */
    PE_EINTERNAL  /* a bug in pengine: please report it */
} pe_status;

/* A short fixed name for a status, e.g. "PE_EINVAL: invalid argument". */
const char *pe_status_str(pe_status s);

/* The message of the last failed pengine call on this thread ("" if none). */
const char *pe_last_error(void);

/* "0.1.0" */
const char *pe_version(void);

/* ---- configuration ------------------------------------------------------------------- */

typedef enum pe_backend_kind {
    PE_BACKEND_AUTO = 0, /* CUDA when a device is found, else host with a notice */
    PE_BACKEND_HOST,     /* CPU devices: OpenBLAS, in-process collectives */
    PE_BACKEND_CUDA      /* NVIDIA GPUs: cuBLAS, CUDA kernels, NCCL */
} pe_backend_kind;

typedef enum pe_schedule {
    PE_SCHED_NAIVE = 0, /* one micro-batch per request (m = 1) */
    PE_SCHED_GPIPE,     /* clock cycles: micro-batch i at stage j at clock i + j */
    PE_SCHED_STREAM     /* dataflow: a stage starts a micro-batch when its input arrives */
} pe_schedule;

/* Precision of the forward pass. BF16: weights stored in bf16, every GEMM input rounded to
 * bf16, fp32 accumulation and fp32 everywhere else (requests stay fp32); a decoder's KV
 * cache is bf16 too. */
typedef enum pe_dtype { PE_DTYPE_FP32 = 0, PE_DTYPE_BF16 } pe_dtype;

/* How a replica shares its KV blocks among sequences (docs/api.md, "KV memory"). */
typedef enum pe_kv_full {
    PE_KV_WAIT = 0, /* a sequence starts when every block it may need (prompt + max_tokens)
                     * can be promised to it, and waits in the replica's queue until then */
    PE_KV_REFUSE,   /* ... or ends at once with PE_EAGAIN (finish PE_FINISH_ERROR) */
    PE_KV_PREEMPT   /* pe_config_init's: a sequence starts when the blocks of its prompt are
                     * free; when blocks run out the newest sequence is preempted and
                     * computed again later (its tokens unchanged); with prefix_caching */
} pe_kv_full;

/* TP: how the ranks hold a decoder's token embedding. */
typedef enum pe_tp_embedding {
    PE_TP_EMBED_VOCAB = 0,  /* split by vocabulary: each rank looks up its rows, zeros for the
                             * others, and an all-reduce sums them (1/tp of the table each) */
    PE_TP_EMBED_REPLICATED  /* the whole table on every rank, no collective */
} pe_tp_embedding;

#define PE_MAX_SPEC_TOKENS 16 /* pe_config.spec_tokens */

typedef struct pe_config {
    pe_backend_kind backend;
    int ndevices;            /* entries in devices */
    const int *devices;      /* device ids, e.g. {0, 1}; may repeat (several ranks per device) */
    int dp, pp, tp;          /* grid; dp * pp * tp == ndevices. All 0: dp = ndevices */
    int microbatches;        /* m >= 1; requests are cut into m micro-batches */
    pe_schedule schedule;
    const int *stage_layers; /* optional: pp layer counts per stage (--split), NULL = by FLOPs */
    size_t queue_capacity;   /* per-queue slots, power of two; 0 = 1024 */
    pe_dtype dtype;          /* fp32 (default) or bf16; both backends */
    int bind_threads;        /* 1 = bind each worker to its cores with hwloc (default) */
    size_t trace_capacity;   /* trace events kept per worker; 0 = tracing off */
    int threads;             /* host backend: cores per device; 0 = an even share */

    /* Decoders: the paged KV cache and the scheduler of each replica. */
    size_t kv_tokens;        /* KV pool of a replica in tokens; 0 = from kv_bytes */
    size_t kv_bytes;         /* ... or in bytes per worker; both 0 = max(8192, context) tokens */
    int kv_block_tokens;     /* positions per KV block; 0 = 16 */
    pe_kv_full kv_full;      /* how sequences share the blocks: PE_KV_PREEMPT (pe_config_init),
                              * or promises that wait or refuse */
    int prefix_caching;      /* full blocks shared by content, so that identical prompt
                              * prefixes are computed once (1 in pe_config_init); only under
                              * PE_KV_PREEMPT (promises cannot count shared blocks) */
    int max_seqs;            /* sequences running at once per replica; 0 = 256; at most
                              * max_step_tokens (each decodes in every step) */
    int max_step_tokens;     /* tokens per step, decodes plus prefill chunks; 0 = 512 */
    int decode_groups;       /* steps in flight at once per replica, each on its own group of
                              * the running sequences; 0 = pp (a step per pipeline stage, so
                              * that every stage works on another group); 1 = naive: one step
                              * at a time through the stages; at most 64 */
    pe_tp_embedding tp_embedding; /* TP: the token table vocab-parallel (default) or whole */
    int spec_tokens;         /* speculative decoding by prompt lookup: a decode carries up to
                              * this many drafts, the tokens that followed the latest earlier
                              * place of the sequence's last n tokens (vLLM's "ngram"), and
                              * the device checks them in the same step; every token is still
                              * the one the model samples (docs/architecture.md). 0 (as
                              * pe_config_init): off; at most PE_MAX_SPEC_TOKENS. A draft row's
                              * penalties and min_tokens count the drafts before it */
    int spec_ngram_min, spec_ngram_max; /* n of the n-grams looked up, longest first;
                              * 0 = 1 and 4 */
    int spec_max_seqs;       /* drafts only while at most this many sequences run on the
                              * replica (vLLM's disable_by_batch_size): a larger batch fills
                              * the device without them, and the drafts' rows cost more than
                              * they save (docs/architecture.md's figures); 0 = any number */
    int mpi;                 /* 1: the grid spans the processes of MPI_COMM_WORLD, one per node
                              * (pe_mpi_init; docs/multinode.md): every process creates and
                              * loads the engine with the same config, devices lists its own
                              * (the same count on each), world ranks are process-major; process
                              * 0 takes the requests and the others call pe_engine_follow;
                              * one such engine at a time per process.
                              * 0 (pe_config_init): this process alone */
} pe_config;

/* Fills cfg with the defaults: auto backend, 0 devices, m = 1, naive, binding on. */
void pe_config_init(pe_config *cfg);

/* ---- engine -------------------------------------------------------------------------- */

typedef struct pe_engine pe_engine;

/* Validates cfg, opens the devices and starts one worker thread per device.
 * On failure *out is NULL and pe_last_error() says why. */
pe_status pe_engine_create(const pe_config *cfg, pe_engine **out);

/* Loads a model, shards it over the grid and uploads every worker's part. model_path is a
 * Hugging Face directory (config.json + model.safetensors, or an index and its shards) for
 * a decoder, or a safetensors file for an MLP. Call once, before any submit. */
pe_status pe_engine_load(pe_engine *e, const char *model_path);

/* Runs the MLP requests already submitted to the end (results not taken are discarded);
 * ends the decoder sequences still running with PE_ECLOSED (their final events are not
 * taken any more); stops and joins the threads, and frees everything. NULL is ok. */
void pe_engine_destroy(pe_engine *e);

/* The message of this engine's last failed call; when none failed, of the failure that
 * stopped the engine (which ended its sequences with an error); "" if neither. Valid until
 * the next call. */
const char *pe_engine_last_error(const pe_engine *e);

typedef enum pe_model_family { PE_FAMILY_MLP = 0, PE_FAMILY_GPT2, PE_FAMILY_LLAMA } pe_model_family;

typedef struct pe_model_info {
    pe_model_family family;
    char architecture[64]; /* "GPT2LMHeadModel", "LlamaForCausalLM", ..., or "mlp" */
    size_t in_features;  /* MLP: columns of a request's input (decoders: 0) */
    size_t out_features; /* MLP: columns of a request's output (decoders: 0) */
    int nlayers;
    size_t nparams;
    /* decoders (0 for an MLP) */
    int vocab;           /* logits per position */
    int context;         /* most positions a sequence may hold */
    int hidden, heads, kv_heads, head_dim;
    int inner;           /* the MLP's hidden width */
    int32_t bos_token_id, eos_token_id; /* -1 when the config names none (the first eos) */
} pe_model_info;
pe_status pe_engine_model_info(const pe_engine *e, pe_model_info *out);

/* The grid and backend the engine actually runs (after auto selection). */
typedef struct pe_engine_info {
    pe_backend_kind backend; /* HOST or CUDA, never AUTO */
    int world, dp, pp, tp, microbatches;
    pe_schedule schedule;
    pe_dtype dtype;
    int stage_first_layer[64]; /* stage p owns layers [first[p], first[p+1]); pp + 1 entries */
    char notice[256];          /* e.g. the auto-fallback notice; "" if none */
    char collectives[256];     /* how the ranks talk, one line ("nccl", the peer path, ...) */
    char kernels[64];          /* host: the kernels that compute ("avx512", "avx2" or
                                * "portable", and ", bf16 on AMX tiles" where those run);
                                * "" on CUDA (pe_device_desc.kernels of device 0) */
    int threads[64];           /* cores each worker computes with (host), by world rank */
    /* memory of each worker, by world rank (after load) */
    size_t weight_bytes[64];   /* its weights on its device */
    size_t kv_bytes[64];       /* its KV pool (decoders) */
    size_t kv_blocks;          /* blocks in every worker's pool (a replica shares block ids) */
    int kv_block_tokens;       /* positions per block */
    size_t kv_blocks_used;     /* blocks held by sequences now (running or kept), summed over
                                * the replicas as each last published them: 0 when idle */
    /* PE_KV_PREEMPT, since the engine started, summed over the replicas as they published: */
    long kv_preemptions;       /* sequences preempted for blocks (and computed again) */
    long prefix_hit_tokens;    /* prompt positions found in the prefix cache at admission */
    long prefix_asked_tokens;  /* ... of the positions looked up there (all but the last of
                                * each admitted sequence) */
    long spec_drafted_tokens;  /* pe_config.spec_tokens: drafts the device checked */
    long spec_accepted_tokens; /* ... of them the model sampled itself (each saved a step) */
    int processes, process;    /* pe_config.mpi: the job's processes and this one (1 and 0
                                * in one process); world rank r lives on process
                                * r / (world / processes) */
} pe_engine_info;
pe_status pe_engine_info_get(const pe_engine *e, pe_engine_info *out);

/* ---- across processes (MPI) ------------------------------------------------------------ */

/* Starts MPI with MPI_THREAD_MULTIPLE when this process was launched by mpirun or Slurm
 * (and pengine was built with MPI); *nprocs gets the job's processes and *me this one's
 * index (1 and 0 when not launched so). An embedder that starts MPI itself needs
 * MPI_THREAD_MULTIPLE. PE_EINVAL with a message when the MPI library cannot give it. */
pe_status pe_mpi_init(int *argc, char ***argv, int *nprocs, int *me);
/* Ends MPI if pe_mpi_init started it (after every engine is destroyed). */
void pe_mpi_finalize(void);
/* An agreement across the job's processes outside any engine, for work that only some of
 * them do before pe_engine_create (process 0 reading prompts that only its node has): every
 * process passes its outcome s and gets the job's, PE_OK when every s was, else the first
 * failure in process order. A process other than that one gets pe_last_error "process K of
 * N failed (STATUS); its own message says why". Every process of
 * MPI_COMM_WORLD must call it, from one thread each. In one process (MPI not running): s. */
pe_status pe_mpi_agree(pe_status s);
/* On a process other than 0 of a pe_config.mpi engine (after pe_engine_load): runs this
 * process's workers' part of every step process 0 sends, until process 0 destroys its
 * engine (PE_OK) or the job fails (the failure, with its message in
 * pe_engine_last_error); then destroy the engine. PE_EINVAL on process 0 or in one process. */
pe_status pe_engine_follow(pe_engine *e);

/* ---- requests -------------------------------------------------------------------------- */

typedef struct pe_request {
    uint64_t id;        /* the caller's id, handed back in the result */
    size_t rows;        /* batch rows, >= 1 */
    const float *input; /* (rows, in_features), host memory, read until the result */
    float *output;      /* (rows, out_features), host memory, written before the result */
    void *user;         /* handed back in the result */
} pe_request;

typedef struct pe_result {
    uint64_t id;
    pe_status status; /* PE_OK, or the error that stopped this request */
    void *user;
} pe_result;

/* Queues a request; thread-safe, from any thread. Blocks while the in-queue is full.
 * Once it returns PE_OK, the request gets exactly one result from pe_poll/pe_wait. */
pe_status pe_submit(pe_engine *e, const pe_request *r);
/* As pe_submit, but returns PE_EAGAIN instead of blocking on a full queue. */
pe_status pe_try_submit(pe_engine *e, const pe_request *r);

/* Takes one finished result. pe_poll returns PE_EAGAIN when none is ready; pe_wait blocks
 * until one is, and returns PE_EAGAIN at once when no submitted request is outstanding. */
pe_status pe_poll(pe_engine *e, pe_result *out);
pe_status pe_wait(pe_engine *e, pe_result *out);

/* Synchronous forward: in (rows, in_features) -> out (rows, out_features). Its result does
 * not appear in pe_poll/pe_wait. */
pe_status pe_infer(pe_engine *e, const float *in, size_t rows, float *out);

/* ---- sequences (decoders) ------------------------------------------------------------- */

#define PE_MAX_LOGPROBS 20
#define PE_MAX_STOP 16
#define PE_MAX_LOGIT_BIAS 300

typedef struct pe_sampling {
    float temperature; /* 0 = greedy (the default) */
    int top_k;         /* keep the k most likely tokens; 0 = off */
    float top_p;       /* keep the smallest set holding this much probability; (0, 1], 1 = off */
    uint64_t seed;     /* the sequence's random draws: the same seed gives the same tokens */
    /* Penalties, applied to the logits before everything above (greedy too), as vLLM's:
     * first the repetition penalty to every token of the prompt or generated (a positive
     * logit divided by it, another multiplied), then minus frequency_penalty x the token's
     * count in the generated tokens, minus presence_penalty once it is there. "Generated":
     * since the sequence's last submit or append. */
    float repetition_penalty; /* > 0; 1 = off, and 0 is read as 1 (off) */
    float frequency_penalty;  /* finite; 0 = off (OpenAI's range is -2..2) */
    float presence_penalty;   /* finite; 0 = off (OpenAI's range is -2..2) */
    /* With temperature > 0: keep only the tokens at least min_p times as likely as the most
     * likely one (vLLM's and llama.cpp's min_p), after top_k and before top_p. */
    float min_p;              /* [0, 1]; 0 = off */
} pe_sampling;

/* A bias added to one token's logit (OpenAI's logit_bias): -100 all but bans the token,
 * 100 all but forces it. */
typedef struct pe_logit_bias {
    int32_t token;
    float bias;
} pe_logit_bias;

/* Structured output: a grammar the generated text follows (below, pe_grammar_json). */
typedef struct pe_grammar pe_grammar;

typedef struct pe_seq_params {
    const int32_t *prompt;  /* token ids (copied by pe_seq_submit) */
    size_t prompt_len;      /* >= 1, and < the context */
    int max_tokens;         /* tokens to generate, >= 1 (the context also ends a sequence) */
    int min_tokens;         /* 0..max_tokens: until this many are generated the model's
                             * eos_token_id and the stop tokens cannot be sampled (their
                             * logits are -inf, as vLLM's min_tokens); 0 = off */
    pe_sampling sampling;
    const int32_t *stop;    /* more tokens that end the sequence (copied); may be NULL */
    size_t nstop;           /* <= PE_MAX_STOP */
    int ignore_eos;         /* 1: the model's eos_token_id does not end the sequence */
    int logprobs;           /* top log-probabilities per token, 0..PE_MAX_LOGPROBS */
    const pe_logit_bias *logit_bias; /* added to those tokens' logits before the penalties
                             * (copied); may be NULL */
    size_t nlogit_bias;     /* <= PE_MAX_LOGIT_BIAS, each token at most once */
    const pe_grammar *grammar; /* the text it generates follows this grammar (structured
                             * output; not copied: it must outlive the sequence); NULL =
                             * none */
    int keep;               /* 1: after its final event the sequence keeps its tokens and KV
                             * cache, for pe_seq_append, until pe_seq_release */
    void *user;             /* handed back in every event */
} pe_seq_params;

/* Fills p with the defaults: no prompt, max_tokens 16, greedy, top_p 1, seed 0, no
 * penalty (repetition_penalty 1). */
void pe_seq_params_init(pe_seq_params *p);

typedef enum pe_finish {
    PE_FINISH_NONE = 0,  /* more events follow */
    PE_FINISH_EOS,       /* token is the model's end-of-sequence token */
    PE_FINISH_STOP,      /* token is one of the stop tokens */
    PE_FINISH_LENGTH,    /* max_tokens were generated, or the context is full */
    PE_FINISH_CANCELLED, /* pe_seq_cancel (no token) */
    PE_FINISH_ERROR,     /* status says why (no token) */
    PE_FINISH_GRAMMAR    /* token completes the text of the sequence's grammar (it is part of
                          * the text, unlike a stop token's) */
} pe_finish;

typedef struct pe_token_event {
    uint64_t seq;       /* the id pe_seq_submit gave */
    int32_t token;      /* the generated token, -1 for CANCELLED and ERROR */
    int index;          /* its index among the sequence's generated tokens, from 0 */
    pe_finish finish;   /* NONE, or this is the sequence's final event */
    pe_status status;   /* PE_OK, or the error (finish ERROR) */
    float logprob;      /* log-probability of token under the model (logprobs > 0) */
    int nlogprobs;      /* entries of top_tokens and top_logprobs, most likely first */
    int32_t top_tokens[PE_MAX_LOGPROBS];
    float top_logprobs[PE_MAX_LOGPROBS];
    void *user;
} pe_token_event;

/* Queues a sequence on the replica with the most free KV blocks (and then the fewest
 * sequences); thread-safe. Once it returns PE_OK with *id, the sequence gets its tokens as
 * events, and exactly one final event (finish != NONE). Bad parameters (an empty prompt,
 * one longer than the context, a token id >= vocab, top_p outside (0, 1], a negative
 * temperature, ...) are PE_EINVAL here. A sequence that can never fit the KV pool is
 * PE_EINVAL too; one that must wait for blocks waits or ends as cfg.kv_full says. */
pe_status pe_seq_submit(pe_engine *e, const pe_seq_params *p, uint64_t *id);

/* Asks sequence id to stop. It ends with one final event: CANCELLED, or whatever ended it
 * first. PE_EINVAL for an id that was never given; PE_OK for one that already ended. */
pe_status pe_seq_cancel(pe_engine *e, uint64_t id);

/* Appends p->prompt (p->prompt_len more tokens, e.g. a chat's next turn, without BOS) to
 * kept sequence id after its final event, and generates again with p's other parameters:
 * only the new tokens (and the last generated one) are prefilled, the rest is in the KV
 * cache. The sequence keeps its id; its new events count their index from 0 and end with
 * one final event again; p->keep says whether it stays kept after that. PE_EINVAL when id
 * is not kept, is still generating, ended with an error (no KV is left: release it), or
 * when its tokens and the new ones reach the context. Thread-safe. */
pe_status pe_seq_append(pe_engine *e, uint64_t id, const pe_seq_params *p);

/* Frees kept sequence id and its KV blocks (every kept sequence is released by its client,
 * after its final event; destroy frees the rest). PE_EINVAL when id is not kept or still
 * generating. */
pe_status pe_seq_release(pe_engine *e, uint64_t id);

/* Takes one token event. pe_seq_poll returns PE_EAGAIN when none is ready; pe_seq_wait
 * blocks until one is, and returns PE_EAGAIN at once when no sequence is outstanding (every
 * submitted one delivered its final event). */
pe_status pe_seq_poll(pe_engine *e, pe_token_event *ev);
pe_status pe_seq_wait(pe_engine *e, pe_token_event *ev);

/* Scores a prompt: logits (vocab) at its last position, or with all_positions, logits
 * (n, vocab) at every position. Synchronous, thread-safe; runs beside the sequences and
 * takes KV blocks as they do: PE_EAGAIN when the pool is full and cfg.kv_full is
 * PE_KV_REFUSE (with PE_KV_WAIT it waits). */
pe_status pe_score(pe_engine *e, const int32_t *tokens, size_t n, int all_positions,
                   float *logits);

/* One place of a scored prompt (pe_score_logprobs): its token, that token's log-probability
 * under the model given the tokens before it, and the most likely tokens there. */
typedef struct pe_logprobs {
    int32_t token;
    float logprob;
    int nlogprobs;      /* entries of top_tokens and top_logprobs, most likely first */
    int32_t top_tokens[PE_MAX_LOGPROBS];
    float top_logprobs[PE_MAX_LOGPROBS];
} pe_logprobs;

/* Scores a prompt's own tokens (vLLM's prompt_logprobs; OpenAI's echo with logprobs; a
 * perplexity): out[i], for i < n - 1, is token i + 1 with its log-probability given tokens
 * 0..i and the top (0..PE_MAX_LOGPROBS) most likely tokens there. Computed where the logits
 * are, so a row sends back top + 2 numbers, not its vocab logits. n 1 writes nothing.
 * Synchronous and thread-safe, and takes KV blocks, as pe_score. */
pe_status pe_score_logprobs(pe_engine *e, const int32_t *tokens, size_t n, int top,
                            pe_logprobs *out);

/* ---- tokenizers ------------------------------------------------------------------------ */

/* A tokenizer from Hugging Face's tokenizer.json (byte-level BPE: GPT-2, Llama 3, Qwen2;
 * SentencePiece-style BPE: Llama 2, Mistral), or GPT-2's vocab.json + merges.txt. */
typedef struct pe_tokenizer pe_tokenizer;

/* path: a tokenizer.json, or a directory holding tokenizer.json (or vocab.json and
 * merges.txt). PE_EIO / PE_EFORMAT with a message naming the file and the part at fault. */
pe_status pe_tokenizer_load(const char *path, pe_tokenizer **out);
void pe_tokenizer_free(pe_tokenizer *t);

/* text (len bytes; invalid UTF-8 is encoded by its bytes) -> *ids (malloc'ed: free() it),
 * *n of them. add_special: add the post-processor's BOS/EOS. Thread-safe. */
pe_status pe_tokenizer_encode(const pe_tokenizer *t, const char *text, size_t len,
                              int add_special, int32_t **ids, size_t *n);
/* ids -> *text (malloc'ed, NUL-terminated: free() it), *len bytes. skip_special: leave
 * special tokens out. An id >= vocab is PE_EINVAL. */
pe_status pe_tokenizer_decode(const pe_tokenizer *t, const int32_t *ids, size_t n,
                              int skip_special, char **text, size_t *len);
/* The bytes token id stands for alone, special or not: pe_tokenizer_decode of the one id,
 * except that the bytes of a byte-level or byte-fallback token holding part of a character
 * are given as they are, not as U+FFFD (so they need not be valid UTF-8). As OpenAI's
 * logprobs "bytes". *bytes is malloc'ed (free() it; NUL-terminated), *len bytes long. An id
 * >= vocab is PE_EINVAL. */
pe_status pe_tokenizer_token_bytes(const pe_tokenizer *t, int32_t id, char **bytes,
                                   size_t *len);
/* Ids in the vocabulary, added tokens included. */
size_t pe_tokenizer_vocab_size(const pe_tokenizer *t);
/* The id of a token's string (as in the vocabulary, e.g. "<|endoftext|>"), or -1. */
int32_t pe_tokenizer_token_id(const pe_tokenizer *t, const char *token);

/* ---- structured output -------------------------------------------------------------- */

/* A grammar the generated text must follow (pe_seq_params.grammar), compiled for one
 * tokenizer's vocabulary: at each step only the tokens that keep the text inside the
 * grammar may be sampled (the others' logits are -inf, after the penalties), and the
 * sequence ends (PE_FINISH_GRAMMAR) with the token that completes the text. Special
 * tokens (eos, chat markers) are never allowed (but for a regex's eos where its text may
 * end: pe_grammar_regex). Where no token of the vocabulary continues the text, the
 * sequence ends with PE_EINVAL. Read-only once made: one grammar serves any number of
 * sequences and engines at once. (pe_grammar is declared above pe_seq_params.) */

/* JSON mode (OpenAI's response_format {"type": "json_object"}): the text is one JSON
 * object, '{' first, complete at the '}' that closes it; strings valid UTF-8; between its
 * parts nothing, one space, or a newline and at most 20 spaces or tabs; at most 64 objects
 * and arrays open at once (docs/api.md, "Structured output"). The grammar copies what it
 * needs of t (each token's bytes): t may be freed after. */
pe_status pe_grammar_json(const pe_tokenizer *t, pe_grammar **out);
/* JSON that follows a JSON schema (OpenAI's response_format {"type": "json_schema"}):
 * schema is the schema's text (NUL-terminated); the root must be an object. The grammar is
 * for base's vocabulary (base: one from pe_grammar_json or from this function), and shares
 * base's table of token bytes, so it costs the schema's compile only: base must outlive
 * it. docs/api.md lists what a schema may say: properties come in the order listed,
 * strings may have a pattern (pe_grammar_regex's syntax, searched for) or a format (date,
 * time, date-time, duration, uuid, ipv4, ipv6, email) and lengths, integers and numbers
 * bounds (minimum, maximum, exclusive ones; a bounded number is written without an
 * exponent), and a keyword that constrains values in a way pengine does not enforce
 * (multipleOf, uniqueItems, ...) is PE_EINVAL, naming it and where it is, rather than
 * ignored. */
pe_status pe_grammar_json_schema(const pe_grammar *base, const char *schema,
                                 pe_grammar **out);
/* Text that is one whole match of a regular expression (vLLM's guided_regex): pattern is
 * NUL-terminated UTF-8, for base's vocabulary as above (base must outlive the grammar). The
 * syntax is what Python's re, JavaScript and PCRE share (docs/api.md): literals, '.'
 * (any character but a newline), classes [a-z0-9_] [^...], \d \w \s and their negations
 * (ASCII), escapes \n \t \r \f \v \0 \xHH \uHHHH and escaped punctuation, groups ( ),
 * (?: ), (?P<name> ), (?<name> ), alternation |, and * + ? {n} {n,} {n,m} (lazy forms match
 * the same texts); ^ and $ only at its ends. Backreferences, lookaround, \b, inline flags
 * and \p{...} are PE_EINVAL, naming them and where they are. The sequence ends
 * (PE_FINISH_GRAMMAR) where its text matches and nothing may follow; where it matches and
 * could go on, the model's eos tokens are allowed as well (PE_FINISH_EOS when sampled,
 * unless ignore_eos). */
pe_status pe_grammar_regex(const pe_grammar *base, const char *pattern, pe_grammar **out);
/* Text that is exactly one of n >= 1 texts (vLLM's guided_choice; each NUL-terminated
 * UTF-8), as pe_grammar_regex of the texts escaped and joined by '|'. */
pe_status pe_grammar_choice(const pe_grammar *base, const char *const *choices, size_t n,
                            pe_grammar **out);
void pe_grammar_free(pe_grammar *g);

/* Streaming decode: text of a growing list of ids, released in whole characters only. */
typedef struct pe_detokenizer pe_detokenizer;
pe_status pe_detokenizer_create(const pe_tokenizer *t, int skip_special, pe_detokenizer **out);
/* Adds one id; *text (*len bytes, not NUL-terminated, valid until the next call) is the new
 * complete text; an incomplete character waits for the ids that complete it. */
pe_status pe_detokenizer_push(pe_detokenizer *d, int32_t id, const char **text, size_t *len);
/* The rest: bytes of a character that never completed, as U+FFFD (as Hugging Face). The
 * text released equals pe_tokenizer_decode of the ids, except where a byte token made a run
 * of released byte tokens invalid: released text is never taken back (docs/text.md). */
pe_status pe_detokenizer_flush(pe_detokenizer *d, const char **text, size_t *len);
void pe_detokenizer_free(pe_detokenizer *d);

/* ---- tracing --------------------------------------------------------------------------- */

typedef enum pe_trace_kind {
    PE_TRACE_COMPUTE = 0, /* a stage's layers for one micro-batch, or a decoder step */
    PE_TRACE_SEND,        /* activation to the next stage */
    PE_TRACE_RECV,        /* activation from the previous stage (includes waiting) */
    PE_TRACE_COLLECTIVE,  /* TP all-reduce / all-gather */
    PE_TRACE_CLOCK_WAIT   /* gpipe: waiting for the clock barrier */
} pe_trace_kind;

/* What a span worked on: an MLP micro-batch, or a decoder step and which kind. */
typedef enum pe_trace_phase {
    PE_TRACE_MLP = 0, /* an MLP request's micro-batch */
    PE_TRACE_PREFILL, /* a decoder step holding prompt tokens (prefill chunks, and maybe decodes) */
    PE_TRACE_DECODE   /* a decoder step of decodes only: one new token per sequence */
} pe_trace_phase;

typedef struct pe_trace_event {
    int worker;          /* world rank */
    int d, p, t;         /* grid coordinates of the worker */
    pe_trace_kind kind;
    pe_trace_phase phase;
    uint64_t request;    /* request id; decoders: the replica's step number (from 0) */
    int microbatch;      /* decoders: the step's group in flight (pe_config.decode_groups) */
    double start_us;     /* microseconds since the engine was created */
    double end_us;
} pe_trace_event;

/* A copy of the recorded events, sorted by start time. *events is malloc'ed: free() it.
 * Call when no request is outstanding. */
pe_status pe_engine_trace(pe_engine *e, pe_trace_event **events, size_t *n);
/* Writes the events as Chrome trace-event JSON (Perfetto, chrome://tracing). */
pe_status pe_engine_trace_write(pe_engine *e, const char *path);
/* Forgets the recorded events. Call when no request is outstanding. */
void pe_engine_trace_clear(pe_engine *e);

#ifdef __cplusplus
}
#endif
#endif /* PENGINE_H */
