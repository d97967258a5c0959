/* header.c: the report lines that every demo starts with (what ran, on what, with which model). */
#include <stdio.h>
#include <string.h>

#include "demo.h"

static void list_devices(const cli_options *o, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < o->ndevices && used + 1 < len; i++) {
        int w = snprintf(buf + used, len - used, "%s%d", i ? "," : "", o->devices[i]);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

void cli_report_header(cli_report *r, const cli_options *o, const char *title,
                       const pe_engine_info *info, const cli_model *m, const cli_work *w,
                       int microbatches, pe_schedule schedule)
{
    char buf[512];
    report_line(r, "pengine %s: %s", pe_version(), title);
    report_str(r, "pengine", NULL, pe_version());
    report_str(r, "mode", "mode", cli_mode_name(o->mode));
    report_str(r, "backend", "backend", cli_backend_name(info->backend));
    report_str(r, "dtype", "dtype", cli_dtype_name(info->dtype));
    if (info->notice[0]) {
        const char *n = info->notice;
        if (!strncmp(n, "notice: ", 8))
            n += 8;
        report_str(r, "notice", "notice", n);
    }
    if (info->collectives[0]) { /* said once per run: which collective path the ranks use */
        const char *c = info->collectives;
        if (!strncmp(c, "collectives: ", 13))
            c += 13;
        report_str(r, "collectives", "collectives", c);
    }
    list_devices(o, buf, sizeof buf);
    report_str(r, NULL, "devices", buf);
    report_int_array(r, "devices", o->devices, o->ndevices);

    snprintf(buf, sizeof buf, "dp=%d x pp=%d x tp=%d (%d worker%s)", info->dp, info->pp, info->tp,
             info->world, info->world == 1 ? "" : "s");
    report_str(r, NULL, "grid", buf);
    report_push(r, "grid", NULL);
    report_int(r, "dp", NULL, info->dp, NULL);
    report_int(r, "pp", NULL, info->pp, NULL);
    report_int(r, "tp", NULL, info->tp, NULL);
    report_int(r, "world", NULL, info->world, NULL);
    report_pop(r);
    if (info->kernels[0]) /* host: the vector loops, and AMX where bf16 runs on its tiles */
        report_str(r, "kernels", "kernels", info->kernels);
    if (info->pp > 1) {
        size_t used = 0;
        buf[0] = '\0';
        for (int p = 0; p < info->pp && p < 63 && used + 1 < sizeof buf; p++) {
            int n = snprintf(buf + used, sizeof buf - used, "%s%d:[%d,%d)", p ? " " : "", p,
                             info->stage_first_layer[p], info->stage_first_layer[p + 1]);
            if (n < 0)
                break;
            used += (size_t)n;
        }
        report_str(r, NULL, "stage:[layers)", buf);
        report_int_array(r, "stage_first_layer", info->stage_first_layer,
                         info->pp + 1 <= 64 ? info->pp + 1 : 64);
    }

    snprintf(buf, sizeof buf, "%s %s (%d layers, %s)", m->generated ? "demo MLP" : "MLP",
             m->shape, m->nlayers, m->act);
    report_str(r, NULL, "model", buf);
    report_push(r, "model", NULL);
    report_str(r, "path", NULL, m->generated ? "(generated)" : m->path);
    report_bool(r, "generated", NULL, m->generated, "yes", "no");
    report_str(r, "shape", NULL, m->shape);
    report_int(r, "layers", NULL, m->nlayers, NULL);
    report_int(r, "in", NULL, (long long)m->in, NULL);
    report_int(r, "out", NULL, (long long)m->out, NULL);
    report_str(r, "activation", NULL, m->act);
    report_pop(r);
    report_int(r, "parameters", "parameters", (long long)m->nparams, NULL);

    snprintf(buf, sizeof buf, "%d x %zu rows per iteration (one per replica)", w->nreq, w->rows);
    report_str(r, NULL, "requests", buf);
    snprintf(buf, sizeof buf, "%d timed after %d warm-up", o->iters, o->warmup);
    report_str(r, NULL, "iterations", buf);
    snprintf(buf, sizeof buf, "m=%d, %s", microbatches, cli_schedule_name(schedule));
    report_str(r, NULL, "micro-batches", buf);
    report_push(r, "workload", NULL);
    report_int(r, "requests_per_iter", NULL, w->nreq, NULL);
    report_int(r, "batch", NULL, (long long)w->rows, NULL);
    report_int(r, "iters", NULL, o->iters, NULL);
    report_int(r, "warmup", NULL, o->warmup, NULL);
    report_int(r, "microbatches", NULL, microbatches, NULL);
    report_str(r, "schedule", NULL, cli_schedule_name(schedule));
    report_int(r, "seed", NULL, (long long)o->seed, NULL);
    report_pop(r);
}

int cli_verification_failed(const char *what, double max_abs)
{
    cli_errorf("verification failed: %s differs from the single device (max abs error %g); "
               "this is a bug in pengine, please report it with this command line",
               what, max_abs);
    return CLI_RUNTIME;
}
