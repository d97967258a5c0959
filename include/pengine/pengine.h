/* pengine.h: the public C API of pengine, a multi-device inference engine.
 *
 * One worker thread per device; data (DP), tensor (TP) and pipeline (PP) parallelism
 * are role assignments of the same workers on a grid world = dp x pp x tp.
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
 * bf16, fp32 accumulation and fp32 everywhere else (requests stay fp32). */
typedef enum pe_dtype { PE_DTYPE_FP32 = 0, PE_DTYPE_BF16 } pe_dtype;

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
} pe_config;

/* Fills cfg with the defaults: auto backend, 0 devices, m = 1, naive, binding on. */
void pe_config_init(pe_config *cfg);

/* ---- engine -------------------------------------------------------------------------- */

typedef struct pe_engine pe_engine;

/* Validates cfg, opens the devices and starts one worker thread per device.
 * On failure *out is NULL and pe_last_error() says why. */
pe_status pe_engine_create(const pe_config *cfg, pe_engine **out);

/* Loads a safetensors model, shards it over the grid and uploads every worker's part.
 * Call once, before any submit. */
pe_status pe_engine_load(pe_engine *e, const char *model_path);

/* Runs the requests already submitted to the end (results not taken are discarded),
 * stops and joins the workers, and frees everything. NULL is ok. */
void pe_engine_destroy(pe_engine *e);

/* The message of this engine's last error ("" if none). Valid until the next call. */
const char *pe_engine_last_error(const pe_engine *e);

typedef struct pe_model_info {
    size_t in_features;  /* columns of a request's input */
    size_t out_features; /* columns of a request's output */
    int nlayers;
    size_t nparams;
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
} pe_engine_info;
pe_status pe_engine_info_get(const pe_engine *e, pe_engine_info *out);

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

/* ---- tracing --------------------------------------------------------------------------- */

typedef enum pe_trace_kind {
    PE_TRACE_COMPUTE = 0, /* a stage's layers for one micro-batch */
    PE_TRACE_SEND,        /* activation to the next stage */
    PE_TRACE_RECV,        /* activation from the previous stage (includes waiting) */
    PE_TRACE_COLLECTIVE,  /* TP all-reduce / all-gather */
    PE_TRACE_CLOCK_WAIT   /* gpipe: waiting for the clock barrier */
} pe_trace_kind;

typedef struct pe_trace_event {
    int worker;          /* world rank */
    int d, p, t;         /* grid coordinates of the worker */
    pe_trace_kind kind;
    uint64_t request;    /* request id */
    int microbatch;
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
