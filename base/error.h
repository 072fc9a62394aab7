/* base/error.h — errors as values.
 *
 * Every fallible function of the project returns an mp_status (0 on success, negative on failure)
 * and, on failure, fills an mp_error with one line that names the file, the place in it (offset,
 * line, record) and what was expected. Library code never prints and never exits; only the CLI
 * turns an mp_error into a message and an exit status.
 */
#ifndef MP_BASE_ERROR_H
#define MP_BASE_ERROR_H

#include <stdarg.h>

typedef enum mp_status {
    MP_OK = 0,
    MP_ERR_IO = -1,          /* open/read/write/mmap failed (errno text included) */
    MP_ERR_FORMAT = -2,      /* input is malformed: truncated, inconsistent, out of range */
    MP_ERR_NOMEM = -3,       /* allocation failed */
    MP_ERR_ARG = -4,         /* invalid argument or flag value */
    MP_ERR_UNSUPPORTED = -5, /* valid input we do not handle (architecture, quant type) */
    MP_ERR_LIMIT = -6,       /* a size or budget limit would be exceeded */
    MP_ERR_DEVICE = -7,      /* CUDA / device failure or absence */
    MP_ERR_INTERNAL = -8,    /* a bug: an invariant did not hold */
} mp_status;

#define MP_ERROR_MSG_MAX 1024

typedef struct mp_error {
    mp_status code;
    char msg[MP_ERROR_MSG_MAX]; /* one line, no trailing newline */
} mp_error;

/* Fill err (if non-NULL) with code and a printf-formatted message; returns code. Newlines in the
 * message are replaced by spaces so that the error stays one line. */
mp_status mp_fail(mp_error *err, mp_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
mp_status mp_failv(mp_error *err, mp_status code, const char *fmt, va_list ap);

/* Prefix an existing message: "prefix: old message". Returns err->code. */
mp_status mp_error_prefix(mp_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void mp_error_clear(mp_error *err);
const char *mp_strerror(mp_status code);

#endif
