/* hf.h: a Hugging Face model directory: config.json and its safetensors weights, either
 * one model.safetensors or model.safetensors.index.json naming the shard of every tensor.
 *
 * md_hf_open maps every shard read-only and checks the directory as a whole before any
 * weight is used: config.json parses to an object; the index's weight_map names files
 * that exist inside the directory; every tensor the index names is in the shard it names;
 * no tensor is in two shards. Every message names the file (and the tensor or key) at
 * fault: a missing file is PE_EIO, a malformed one PE_EFORMAT.
 *
 * Config values are read with the md_hf_* getters, whose messages name config.json and the
 * key, the type found and the type wanted.
 */
#ifndef PE_MODEL_FORMAT_HF_H
#define PE_MODEL_FORMAT_HF_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "model/format/safetensors.h"

typedef struct md_hf_entry md_hf_entry; /* private: name -> (file, tensor), sorted */

typedef struct md_hf {
    char *dir;           /* the directory, as given */
    char *config_path;   /* "<dir>/config.json" */
    void *config;        /* the parsed config.json (a cJSON object) */
    int nfiles;
    st_file *files;      /* (nfiles) the mapped shards */
    int ntensors;
    md_hf_entry *index;  /* (ntensors) every tensor of every shard, by name */
} md_hf;

/* Opens the directory dir. On failure h is empty (md_hf_close is harmless). */
pe_status md_hf_open(const char *dir, md_hf *h, pe_err *err);
void md_hf_close(md_hf *h);

/* The path of the file name in the model directory dir ("<dir>/<name>"), a new string;
 * NULL when out of memory. */
char *md_hf_path(const char *dir, const char *name);

/* The tensor called name, and (if file is not NULL) the shard holding it; NULL if none. */
const st_tensor *md_hf_find(const md_hf *h, const char *name, const st_file **file);

/* ---- config.json ------------------------------------------------------------------------ */

/* 1 when the key is present and not null. */
int md_hf_has(const md_hf *h, const char *key);
/* An integer; PE_EFORMAT when it is missing or not an integer. */
pe_status md_hf_int(const md_hf *h, const char *key, long *out, pe_err *err);
/* An integer, or dflt when the key is missing or null. */
pe_status md_hf_int_or(const md_hf *h, const char *key, long dflt, long *out, pe_err *err);
/* A number (integer or not), or dflt when missing or null. */
pe_status md_hf_num_or(const md_hf *h, const char *key, double dflt, double *out, pe_err *err);
/* A string (a pointer into the parsed config), or dflt when missing or null. */
pe_status md_hf_str_or(const md_hf *h, const char *key, const char *dflt, const char **out,
                       pe_err *err);
/* A boolean, or dflt when missing or null. */
pe_status md_hf_bool_or(const md_hf *h, const char *key, int dflt, int *out, pe_err *err);
/* An integer or a list of integers (eos_token_id is either): up to max values in out, the
 * count in *n (0 when the key is missing or null; a longer list keeps its first max). */
pe_status md_hf_int_list(const md_hf *h, const char *key, int32_t *out, int max, int *n,
                         pe_err *err);
/* The first entry of the "architectures" list; PE_EFORMAT when there is none. */
pe_status md_hf_architecture(const md_hf *h, const char **out, pe_err *err);
/* The sub-object of key (e.g. "rope_scaling") as a cJSON object, or NULL when missing or
 * null; PE_EFORMAT when present but not an object. */
pe_status md_hf_object(const md_hf *h, const char *key, const void **out, pe_err *err);

/* ---- memory ------------------------------------------------------------------------------ */

/* Tells the kernel that the mapped bytes [p, p + bytes) of f will not be read again, so
 * that their pages leave this process's memory (madvise MADV_DONTNEED on the whole pages
 * inside the range): a loader calls it after converting and uploading a slice, so that a
 * checkpoint never sits in memory twice. Harmless on any range of the mapping. */
void md_hf_release(const st_file *f, const void *p, size_t bytes);

#endif
