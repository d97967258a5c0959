/* main.c: the pengine command: parses the flags, then runs gen, generate, chat, serve,
 * tokenize, perplexity, --topology or a demo (a decoder, on a model it writes itself without --model; an
 * MLP with --mlp or --model FILE), and turns the outcome into the exit code (0 ok, 1 runtime failure,
 * 2 usage error). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "args.h"
#include "chat.h"
#include "demo.h"
#include "gen.h"
#include "generate.h"
#include "llm_model.h"
#include "mpi_job.h"
#include "report.h"
#include "serve.h"
#include "perplexity.h"
#include "tokenize.h"
#include "topology_report.h"

/* --trace is written after the run: refuse an unwritable path before spending the time. */
static int check_trace_path(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        cli_errorf("cannot write --trace %s (%s); give a writable path", path, strerror(errno));
        return CLI_USAGE;
    }
    fclose(f);
    return CLI_OK;
}

/* --model DIR is a decoder (a Hugging Face directory); a file is an MLP. */
static int is_decoder_dir(const char *model_path)
{
    struct stat sb;
    return model_path && stat(model_path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* The demo the options ask for, its report finished. */
static int run_demo_report(const cli_options *o, int decoder)
{
    cli_report *r = report_new(o->json);
    if (!r) {
        cli_error("out of memory before the run started; free some memory and retry");
        return CLI_RUNTIME;
    }
    int rc = CLI_USAGE;
    switch (decoder ? CLI_MODE_NONE : o->mode) {
    case CLI_MODE_NONE:
        if (decoder)
            rc = cli_demo_llm(o, r);
        else
            cli_error("no mode; use --mode dp, tp or pp");
        break;
    case CLI_MODE_DP: rc = cli_demo_dp(o, r); break;
    case CLI_MODE_TP: rc = cli_demo_tp(o, r); break;
    case CLI_MODE_PP: rc = cli_demo_pp(o, r); break;
    }
    /* the figures of a failed verification are printed too: they show what went wrong */
    if ((rc == CLI_OK || rc == CLI_RUNTIME) && report_finish(r) != 0 && rc == CLI_OK) {
        cli_error("writing the report failed (out of memory or a closed stdout); retry");
        rc = CLI_RUNTIME;
    }
    report_free(r);
    return rc;
}

/* The decoder demo on a model it writes itself (no --model), removed after the run. */
static int run_generated_decoder(const cli_options *o)
{
    cli_llm_model m;
    int rc = cli_llm_model_write(o->seed, &m);
    if (rc != CLI_OK)
        return rc;
    cli_options with = *o;
    with.model_path = m.dir;
    with.model_generated = 1;
    rc = run_demo_report(&with, 1);
    cli_llm_model_remove(&m);
    return rc;
}

/* A decoder unless --mlp, or --model names a file (an MLP). */
static int run_demo(const cli_options *o)
{
    int decoder = o->model_path ? is_decoder_dir(o->model_path) : !o->mlp;
    int rc = cli_check_demo_flags(o, decoder);
    if (rc == CLI_OK)
        rc = cli_preflight(o);
    if (rc == CLI_OK && o->trace_path)
        rc = check_trace_path(o->trace_path);
    if (rc != CLI_OK)
        return rc;
    if (decoder && !o->model_path)
        return run_generated_decoder(o);
    return run_demo_report(o, decoder);
}

/* pengine serve, when the build found libmicrohttpd. */
static int run_serve(int argc, char **argv)
{
#ifdef PE_HAVE_MHD
    return cli_serve(argc, argv);
#else
    (void)argc;
    (void)argv;
    cli_error("this pengine was built without libmicrohttpd, so it has no serve; install "
              "libmicrohttpd-dev (scripts/install-deps.sh) and rebuild");
    return CLI_USAGE;
#endif
}

/* Under mpirun: the commands that run one engine (every process creates it, process 0
 * runs the command, the others follow), and how the command ends on each. */
static int run_job(int argc, char **argv)
{
    const char *cmd = argc >= 2 ? argv[1] : "";
    int rc;
    if (strcmp(cmd, "generate") == 0)
        rc = cli_generate(argc - 1, argv + 1);
    else if (strcmp(cmd, "serve") == 0)
        rc = run_serve(argc - 1, argv + 1);
    else if (strcmp(cmd, "chat") == 0)
        rc = cli_chat(argc - 1, argv + 1);
    else {
        cli_errorf("under mpirun (%d processes) pengine runs generate, serve and chat; the "
                   "comparisons against one device run in one process", cli_mpi_procs());
        rc = CLI_USAGE;
    }
    return rc == CLI_FOLLOWED ? CLI_OK : rc;
}

static int run_command(int argc, char **argv);

int main(int argc, char **argv)
{
    if (cli_mpi_start(&argc, &argv) != CLI_OK)
        return CLI_USAGE;
    int rc = cli_mpi_procs() > 1 ? run_job(argc, argv) : run_command(argc, argv);
    cli_mpi_end();
    return rc;
}

static int run_command(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "gen") == 0)
        return cli_gen(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "generate") == 0)
        return cli_generate(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "chat") == 0)
        return cli_chat(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "serve") == 0)
        return run_serve(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "tokenize") == 0)
        return cli_tokenize(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "perplexity") == 0)
        return cli_perplexity(argc - 1, argv + 1);
    cli_options o;
    char msg[CLI_MSG_LEN];
    if (cli_parse(argc, argv, &o, msg, sizeof msg) != CLI_OK) {
        cli_error(msg);
        return CLI_USAGE;
    }
    if (o.help) {
        cli_usage(stdout);
        return CLI_OK;
    }
    if (o.version) {
        printf("pengine %s\n", pe_version());
        return CLI_OK;
    }
    if (o.topology)
        return cli_topology(&o);
    return run_demo(&o);
}
