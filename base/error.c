/* base/error.c — formatting of one-line errors (see error.h). */
#include "base/error.h"

#include <stdio.h>
#include <string.h>

static void one_line(char *s)
{
    for (; *s; s++)
        if (*s == '\n' || *s == '\r')
            *s = ' ';
}

/* A message that did not fit its buffer (n: the length snprintf wanted) ends in "...", so that a
 * cut is never mistaken for the whole message. */
static void mark_cut(char *msg, size_t cap, int n)
{
    if (n >= 0 && (size_t)n >= cap && cap > 4)
        memcpy(msg + cap - 4, "...", 4);
}

mp_status mp_failv(mp_error *err, mp_status code, const char *fmt, va_list ap)
{
    if (err) {
        err->code = code;
        mark_cut(err->msg, sizeof err->msg, vsnprintf(err->msg, sizeof err->msg, fmt, ap));
        one_line(err->msg);
    }
    return code;
}

mp_status mp_fail(mp_error *err, mp_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    mp_failv(err, code, fmt, ap);
    va_end(ap);
    return code;
}

mp_status mp_error_prefix(mp_error *err, const char *fmt, ...)
{
    if (!err)
        return MP_ERR_INTERNAL;
    char prefix[MP_ERROR_MSG_MAX], old[MP_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    mark_cut(err->msg, sizeof err->msg, snprintf(err->msg, sizeof err->msg, "%s: %s", prefix, old));
    one_line(err->msg);
    return err->code;
}

void mp_error_clear(mp_error *err)
{
    if (err) {
        err->code = MP_OK;
        err->msg[0] = '\0';
    }
}

const char *mp_strerror(mp_status code)
{
    switch (code) {
    case MP_OK: return "ok";
    case MP_ERR_IO: return "I/O error";
    case MP_ERR_FORMAT: return "malformed input";
    case MP_ERR_NOMEM: return "out of memory";
    case MP_ERR_ARG: return "invalid argument";
    case MP_ERR_UNSUPPORTED: return "unsupported";
    case MP_ERR_LIMIT: return "limit exceeded";
    case MP_ERR_DEVICE: return "device error";
    case MP_ERR_INTERNAL: return "internal error";
    }
    return "unknown error";
}
