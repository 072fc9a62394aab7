/* runtime/numparse.c — see numparse.h. strtoll/strtoull alone would accept " 5", "+5" and, for
 * unsigned values, "-1" (wrapped), which a flag value must not. */
#include "runtime/numparse.h"

#include <errno.h>
#include <inttypes.h>
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

/* The value of a 0/1 switch: 0 or 1 as set, dflt when unset or empty, and dflt with a one-line
 * warning naming what runs (dflt_desc) for anything else. */
static bool env_switch(const char *name, bool dflt, const char *dflt_desc)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    if (!strcmp(v, "0") || !strcmp(v, "1"))
        return v[0] == '1';
    fprintf(stderr, "moeplan: %s=%.40s is neither 0 nor 1: %s\n", name, v, dflt_desc);
    return dflt;
}

bool mp_env_off(const char *name, const char *on_desc)
{
    return !env_switch(name, true, on_desc);
}

bool mp_env_on(const char *name, const char *off_desc)
{
    return env_switch(name, false, off_desc);
}

int64_t mp_env_i64(const char *name, int64_t lo, int64_t hi, int64_t dflt)
{
    const char *v = getenv(name);
    int64_t x = 0;
    if (!v || !*v)
        return dflt;
    if (mp_parse_i64(v, lo, hi, &x))
        return x;
    fprintf(stderr, "moeplan: %s=%.40s is not a number in %" PRId64 "..%" PRId64 ": %" PRId64 "\n", name, v, lo,
            hi, dflt);
    return dflt;
}
