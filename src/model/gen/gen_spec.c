/* gen_spec.c: the decoder writer's presets (pe_gen_init) and the checks of a spec. */
#include <math.h>
#include <string.h>

#include "model/gen/gen.h"

static int md_gen_is_llama(pe_gen_arch a)
{
    return a == PE_GEN_LLAMA || a == PE_GEN_MISTRAL || a == PE_GEN_QWEN2;
}

pe_status pe_gen_init(pe_gen_spec *sp, pe_gen_arch arch, const char *preset)
{
    pe_err err = {{0}};
    pe_status s = PE_OK;
    if (!sp)
        s = pe_fail(&err, PE_EINVAL, "pe_gen_init: no spec given");
    else if (arch != PE_GEN_GPT2 && !md_gen_is_llama(arch))
        s = pe_fail(&err, PE_EINVAL, "pe_gen_init: unknown architecture %d; use PE_GEN_GPT2, "
                    "PE_GEN_LLAMA, PE_GEN_MISTRAL or PE_GEN_QWEN2", (int)arch);
    if (s != PE_OK) {
        pe_set_last_error(err.msg);
        return s;
    }
    int gpt2 = arch == PE_GEN_GPT2;
    if (!preset)
        preset = "tiny";
    memset(sp, 0, sizeof *sp);
    sp->arch = arch;
    sp->norm_eps = 1e-5;
    sp->rope_theta = 10000.0;
    sp->rope_factor = 8.0;
    sp->rope_low_freq_factor = 1.0;
    sp->rope_high_freq_factor = 4.0;
    sp->sliding_window = arch == PE_GEN_MISTRAL ? 4096 : 0; /* MistralConfig's default */
    sp->tie_embeddings = gpt2;
    sp->dtype = PE_DTYPE_FP32;
    sp->std = 0.02;
    sp->seed = 1;
    sp->shards = 1;
    if (strcmp(preset, "tiny") == 0) {
        sp->layers = 2;
        sp->hidden = 64;
        sp->heads = 4;
        sp->kv_heads = gpt2 ? 0 : 2;
        sp->inner = gpt2 ? 0 : 176; /* not a multiple of hidden: a mixed-up width shows */
        sp->vocab = 256;
        sp->context = 128;
    } else if (strcmp(preset, "124m") == 0 && gpt2) {
        sp->layers = 12;
        sp->hidden = 768;
        sp->heads = 12;
        sp->vocab = 50257;
        sp->context = 1024;
    } else if (strcmp(preset, "llama-110m") == 0 && !gpt2) {
        sp->layers = 12;
        sp->hidden = 768;
        sp->heads = 12;
        sp->kv_heads = 4;
        sp->inner = 2048;
        sp->vocab = 32000;
        sp->context = 2048;
    } else {
        pe_fail(&err, PE_EINVAL, "unknown preset '%s' for %s; use %s", preset,
                gpt2 ? "gpt2" : "the Llama family", gpt2 ? "tiny or 124m" : "tiny or llama-110m");
        pe_set_last_error(err.msg);
        return PE_EINVAL;
    }
    sp->bos_token_id = gpt2 ? sp->vocab - 1 : 1;
    sp->eos_token_id = gpt2 ? sp->vocab - 1 : 2;
    return PE_OK;
}

/* x finite and in [lo, hi]. */
static int md_in(double x, double lo, double hi) { return isfinite(x) && x >= lo && x <= hi; }

pe_status md_gen_check(const pe_gen_spec *sp, pe_err *err)
{
    if (!sp)
        return pe_fail(err, PE_EINVAL, "pe_gen_write: no spec given");
    int gpt2 = sp->arch == PE_GEN_GPT2;
    if (!gpt2 && !md_gen_is_llama(sp->arch))
        return pe_fail(err, PE_EINVAL, "unknown architecture %d in the spec; use PE_GEN_GPT2, "
                       "PE_GEN_LLAMA, PE_GEN_MISTRAL or PE_GEN_QWEN2 (pe_gen_init)",
                       (int)sp->arch);
    if (sp->layers < 1 || sp->hidden < 1 || sp->heads < 1 || sp->vocab < 1 || sp->context < 1)
        return pe_fail(err, PE_EINVAL,
                       "layers %d, hidden %d, heads %d, vocab %d, context %d: each must be at "
                       "least 1",
                       sp->layers, sp->hidden, sp->heads, sp->vocab, sp->context);
    const int big = 1 << 24;
    if (sp->layers > big || sp->hidden > big || sp->heads > big || sp->kv_heads > big ||
        sp->head_dim > big || sp->inner > big || sp->vocab > big || sp->context > big)
        return pe_fail(err, PE_EINVAL, "a dimension of the spec is above %d; absurd", big);
    if (sp->inner < 0 || (!gpt2 && sp->inner < 1))
        return pe_fail(err, PE_EINVAL, "MLP width %d: give one of at least 1%s", sp->inner,
                       gpt2 ? " (or 0 for 4 * hidden)" : "");
    if (gpt2) {
        if (sp->hidden % sp->heads)
            return pe_fail(err, PE_EINVAL, "hidden %d is not divisible by heads %d (GPT-2 "
                           "splits the width into the heads); change one of them",
                           sp->hidden, sp->heads);
        if (sp->kv_heads != 0 && sp->kv_heads != sp->heads)
            return pe_fail(err, PE_EINVAL, "GPT-2 has no grouped KV heads: kv heads %d must "
                           "equal heads %d", sp->kv_heads, sp->heads);
        if (sp->head_dim != 0 && sp->head_dim * sp->heads != sp->hidden)
            return pe_fail(err, PE_EINVAL, "GPT-2's head dim is hidden / heads = %d, not %d",
                           sp->hidden / sp->heads, sp->head_dim);
        if (sp->rope_scaling != PE_GEN_ROPE_NONE || sp->sliding_window != 0)
            return pe_fail(err, PE_EINVAL, "GPT-2 has learned positions: rope scaling and a "
                           "sliding window are for the Llama family");
    } else {
        if (sp->head_dim < 0 || (sp->head_dim == 0 && sp->hidden % sp->heads))
            return pe_fail(err, PE_EINVAL, "hidden %d is not divisible by heads %d; change one "
                           "of them, or give the head dim", sp->hidden, sp->heads);
        int hd = sp->head_dim ? sp->head_dim : sp->hidden / sp->heads;
        if (hd % 2)
            return pe_fail(err, PE_EINVAL, "head dim %d is odd; RoPE turns pairs of dimensions: "
                           "use an even head dim", hd);
        if (sp->kv_heads < 1 || sp->heads % sp->kv_heads)
            return pe_fail(err, PE_EINVAL, "kv heads %d must be at least 1 and divide heads %d",
                           sp->kv_heads, sp->heads);
        if (sp->gpt2_no_prefix || sp->gpt2_old_buffers)
            return pe_fail(err, PE_EINVAL, "the no-prefix and old-buffer variants are GPT-2's");
        if (!md_in(sp->rope_theta, 1.0, 1e300) || sp->rope_theta == 1.0)
            return pe_fail(err, PE_EINVAL, "rope theta %g must be a finite number above 1",
                           sp->rope_theta);
        if ((unsigned)sp->rope_scaling > PE_GEN_ROPE_LLAMA3)
            return pe_fail(err, PE_EINVAL, "unknown rope scaling %d", (int)sp->rope_scaling);
        if (sp->rope_scaling != PE_GEN_ROPE_NONE && !md_in(sp->rope_factor, 1.0, 1e6))
            return pe_fail(err, PE_EINVAL, "rope factor %g must be in [1, 1e6]", sp->rope_factor);
        if (sp->rope_scaling == PE_GEN_ROPE_LLAMA3 &&
            (!md_in(sp->rope_low_freq_factor, 1e-6, 1e6) ||
             !md_in(sp->rope_high_freq_factor, 1e-6, 1e6) ||
             sp->rope_high_freq_factor <= sp->rope_low_freq_factor ||
             sp->rope_original_context < 0))
            return pe_fail(err, PE_EINVAL, "llama3 rope scaling needs 0 < low freq factor (%g) < "
                           "high freq factor (%g) and an original context >= 0 (%d)",
                           sp->rope_low_freq_factor, sp->rope_high_freq_factor,
                           sp->rope_original_context);
        if (sp->sliding_window < 0 || (sp->sliding_window && sp->arch != PE_GEN_MISTRAL))
            return pe_fail(err, PE_EINVAL, "sliding window %d: a window (> 0) is Mistral's; "
                           "use the mistral architecture, or 0", sp->sliding_window);
    }
    if (!md_in(sp->norm_eps, 0.0, 1.0))
        return pe_fail(err, PE_EINVAL, "norm epsilon %g must be in [0, 1]", sp->norm_eps);
    if (!md_in(sp->std, 0.0, 1e3) || !md_in(sp->qk_std, 0.0, 1e3) ||
        !md_in(sp->norm_std, 0.0, 1e3) || !md_in(sp->bias_std, 0.0, 1e3))
        return pe_fail(err, PE_EINVAL, "std %g, qk std %g, norm std %g and bias std %g must be "
                       "finite, in [0, 1000]", sp->std, sp->qk_std, sp->norm_std, sp->bias_std);
    if (sp->dtype != PE_DTYPE_FP32 && sp->dtype != PE_DTYPE_BF16)
        return pe_fail(err, PE_EINVAL, "unknown dtype %d; use PE_DTYPE_FP32 or PE_DTYPE_BF16",
                       (int)sp->dtype);
    if (sp->bos_token_id < 0 || sp->bos_token_id >= sp->vocab || sp->eos_token_id < 0 ||
        sp->eos_token_id >= sp->vocab)
        return pe_fail(err, PE_EINVAL, "bos %d and eos %d must be token ids below the vocabulary "
                       "size %d", (int)sp->bos_token_id, (int)sp->eos_token_id, sp->vocab);
    if (sp->shards < 1 || sp->shards > 99999)
        return pe_fail(err, PE_EINVAL, "shards %d must be in [1, 99999]", sp->shards);
    return PE_OK;
}
