/* base/numparse.c — see numparse.h. strtoll/strtoull alone would accept " 5", "+5" and, for
 * unsigned values, "-1" (wrapped), which a flag value must not. */
#include "base/numparse.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool plain_start(const char *s)
{
    return s && *s && *s != ' ' && *s != '\t' && *s != '+';
}

bool mp_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    if (!plain_start(s))
        return false;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

bool mp_parse_u64(const char *s, uint64_t *out)
{
    if (!plain_start(s) || *s == '-')
        return false;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end)
        return false;
    *out = v;
    return true;
}

bool mp_parse_i64_said(const char *s, int64_t lo, int64_t hi, int64_t *out, char *expect, size_t cap)
{
    snprintf(expect, cap, "an integer %" PRId64 "..%" PRId64, lo, hi);
    return mp_parse_i64(s, lo, hi, out);
}

bool mp_parse_u64_said(const char *s, uint64_t *out, char *expect, size_t cap)
{
    snprintf(expect, cap, "an unsigned 64-bit integer");
    return mp_parse_u64(s, out);
}

bool mp_parse_f64_said(const char *s, double lo, double hi, double *out, char *expect, size_t cap)
{
    snprintf(expect, cap, "a number %g..%g", lo, hi);
    if (!plain_start(s))
        return false;
    char *end = NULL;
    errno = 0;
    const double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}
