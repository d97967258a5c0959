/* gen_mlp.c: pe_gen_mlp_write, the public door to the MLP writer (md_mlp_write). */
#include "model/mlp/mlp.h"
#include "pengine/pengine_tools.h"

pe_status pe_gen_mlp_write(const pe_gen_mlp_spec *spec, const char *path)
{
    pe_err err = {{0}};
    pe_status s;
    if (!spec)
        s = pe_fail(&err, PE_EINVAL, "pe_gen_mlp_write: no spec given");
    else if ((unsigned)spec->act > PE_GEN_ACT_GELU)
        s = pe_fail(&err, PE_EINVAL, "unknown activation %d; use PE_GEN_ACT_RELU or "
                    "PE_GEN_ACT_GELU", (int)spec->act);
    else {
        md_mlp_spec m = {.in = spec->in,
                         .hidden = spec->hidden,
                         .out = spec->out,
                         .layers = spec->layers,
                         .act = spec->act == PE_GEN_ACT_GELU ? MD_ACT_GELU : MD_ACT_RELU,
                         .init = spec->identity ? MD_INIT_IDENTITY : MD_INIT_NORMAL,
                         .std = spec->std,
                         .seed = spec->seed};
        s = md_mlp_write(&m, path, &err);
    }
    if (s != PE_OK)
        pe_set_last_error(err.msg);
    return s;
}
