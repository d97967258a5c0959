/* error.c: status names, error messages and the per-thread last error. */
#include "common/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[PE_ERR_LEN];

pe_status pe_fail(pe_err *err, pe_status s, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return s;
}

void pe_set_last_error(const char *msg)
{
    snprintf(last_error, sizeof last_error, "%s", msg ? msg : "");
}

const char *pe_last_error(void) { return last_error; }

const char *pe_version(void) { return PE_VERSION_STRING; }

const char *pe_status_str(pe_status s)
{
    switch (s) {
    case PE_OK: return "PE_OK: success";
    case PE_EINVAL: return "PE_EINVAL: invalid argument";
    case PE_ENOMEM: return "PE_ENOMEM: out of memory";
    case PE_ENODEV: return "PE_ENODEV: no such device";
    case PE_EIO: return "PE_EIO: input/output error";
    case PE_EFORMAT: return "PE_EFORMAT: malformed file";
    case PE_EAGAIN: return "PE_EAGAIN: try again";
    case PE_ECLOSED: return "PE_ECLOSED: closed";
    case PE_EDEVICE: return "PE_EDEVICE: device error";
    case PE_ECOMM: return "PE_ECOMM: communication error";
    case PE_EINTERNAL: return "PE_EINTERNAL: internal error";
    }
    return "PE_E?: unknown status";
}
