/* errors.c: the command's one-line error messages on stderr. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "mpi_job.h"

void cli_error(const char *msg)
{
    char line[CLI_MSG_LEN];
    snprintf(line, sizeof line, "%s", msg && *msg ? msg : "unknown failure; please report it");
    for (char *p = line; *p; p++) /* the message must stay one line */
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    if (cli_mpi_procs() > 1) /* every process of the job may say it */
        fprintf(stderr, "pengine[process %d]: error: %s\n", cli_mpi_me(), line);
    else
        fprintf(stderr, "pengine: error: %s\n", line);
}

void cli_errorf(const char *fmt, ...)
{
    char line[CLI_MSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    cli_error(line);
}
