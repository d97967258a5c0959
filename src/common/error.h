/* error.h: internal error reporting. A pe_err carries one message; pe_fail fills it. */
#ifndef PE_COMMON_ERROR_H
#define PE_COMMON_ERROR_H

#include "pengine/pengine.h"

#define PE_ERR_LEN 512

typedef struct pe_err {
    char msg[PE_ERR_LEN];
} pe_err;

/* Formats the message into err (if not NULL) and returns s, so callers write
 *   return pe_fail(err, PE_EINVAL, "width %zu is not divisible by tp=%d; ...", w, tp); */
pe_status pe_fail(pe_err *err, pe_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Records msg as this thread's last error (pe_last_error). */
void pe_set_last_error(const char *msg);

#endif
