/* tests/unit/test_numparse.c — the strict flag-value parser every command uses, and the
 * environment's on-by-default switches. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/numparse.h"

Test(numparse, accepts_plain_decimals_in_range)
{
    int64_t v = 0;
    uint64_t u = 0;
    cr_assert(mp_parse_i64("42", 0, 100, &v) && v == 42);
    cr_assert(mp_parse_i64("-7", -10, 10, &v) && v == -7);
    cr_assert(mp_parse_u64("18446744073709551615", &u) && u == UINT64_MAX);
}

Test(numparse, rejects_everything_else)
{
    int64_t v = 5;
    uint64_t u = 5;
    const char *bad_i[] = {"", " 5", "+5", "5 ", "5x", "0x10", "1e3", "101", "-11", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad_i / sizeof bad_i[0]; i++)
        cr_assert(!mp_parse_i64(bad_i[i], -10, 100, &v), "accepted '%s'", bad_i[i]);
    cr_assert(!mp_parse_i64(NULL, 0, 1, &v));
    cr_assert_eq(v, 5, "a rejected value must not be written");
    const char *bad_u[] = {"", "-1", "+1", " 1", "1.5", "18446744073709551616"};
    for (size_t i = 0; i < sizeof bad_u / sizeof bad_u[0]; i++)
        cr_assert(!mp_parse_u64(bad_u[i], &u), "accepted '%s'", bad_u[i]);
    cr_assert_eq(u, 5);
}

/* run(ctx) with name set to v (NULL: unset); what it said on stderr into err. */
static void with_env(const char *name, const char *v, void (*run)(void *), void *ctx, char *err, size_t cap)
{
    if (v)
        cr_assert_eq(setenv(name, v, 1), 0);
    else
        unsetenv(name);
    char path[] = "/tmp/mp_switch_XXXXXX";
    const int fd = mkstemp(path), saved = dup(2);
    cr_assert(fd >= 0 && saved >= 0);
    fflush(stderr);
    dup2(fd, 2);
    run(ctx);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    unsetenv(name);
    memset(err, 0, cap);
    cr_assert_geq(pread(fd, err, cap - 1, 0), 0);
    close(fd);
    unlink(path);
}

typedef struct switch_call {
    bool (*fn)(const char *, const char *);
    const char *name, *desc;
    bool result;
} switch_call;

static void call_switch(void *ctx)
{
    switch_call *c = ctx;
    c->result = c->fn(c->name, c->desc);
}

/* fn(name, desc) with name set to v (NULL: unset); what it said on stderr into err. */
static bool switch_with(bool (*fn)(const char *, const char *), const char *name, const char *v, const char *desc,
                        char *err, size_t cap)
{
    switch_call c = {fn, name, desc, false};
    with_env(name, v, call_switch, &c, err, cap);
    return c.result;
}

static void call_env_i64(void *ctx)
{
    int64_t *x = ctx;
    *x = mp_env_i64("MP_MOE_PIPE_UNITS", 1, 64, 8);
}

/* A number from the environment: unset and empty give the default silently, a number in range is
 * taken, anything else (out of range, trailing text, not a number) gives the default and one line
 * naming the value, the range and the default. */
Test(numparse, env_i64)
{
    const struct { const char *v; int64_t want; bool says; } cases[] = {
        {NULL, 8, false}, {"", 8, false}, {"1", 1, false}, {"64", 64, false}, {"16", 16, false},
        {"0", 8, true}, {"65", 8, true}, {"4x", 8, true}, {"many", 8, true}, {"-3", 8, true}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[256];
        int64_t x = -1;
        with_env("MP_MOE_PIPE_UNITS", cases[i].v, call_env_i64, &x, err, sizeof err);
        const char *shown = cases[i].v ? cases[i].v : "(unset)";
        cr_assert_eq(x, cases[i].want, "MP_MOE_PIPE_UNITS=%s: %lld", shown, (long long)x);
        char want[160] = "";
        if (cases[i].says)
            snprintf(want, sizeof want, "moeplan: MP_MOE_PIPE_UNITS=%s is not a number in 1..64: 8\n", cases[i].v);
        cr_assert_str_eq(err, want, "MP_MOE_PIPE_UNITS=%s said '%s'", shown, err);
    }
}

Test(numparse, env_switch_0_or_1)
{
    /* The 0/1 switches of the environment: mp_env_off (on by default: MP_GPU_GRAPHS,
     * MP_GPU_QKV_FORK, ...) and its twin mp_env_on (off by default: MP_POOL_PIN). "0" and "1" set
     * them; unset and empty keep the default; anything else keeps the default and says so on
     * stderr in one line naming the value. Checked: the result for unset, "", "1", "0" and
     * "off", and that only "off" says anything. */
    const struct {
        bool (*fn)(const char *, const char *);
        const char *name, *desc;
        bool want[5];
    } sw[] = {{mp_env_off, "MP_GPU_QKV_FORK", "Q, K and V side by side", {false, false, false, true, false}},
              {mp_env_on, "MP_POOL_PIN", "workers not pinned", {false, false, true, false, false}}};
    const char *values[5] = {NULL, "", "1", "0", "off"};
    for (size_t k = 0; k < sizeof sw / sizeof sw[0]; k++)
        for (int v = 0; v < 5; v++) {
            char err[256];
            const bool r = switch_with(sw[k].fn, sw[k].name, values[v], sw[k].desc, err, sizeof err);
            cr_assert_eq(r, sw[k].want[v], "%s=%s: %d", sw[k].name, values[v] ? values[v] : "(unset)", r);
            char want[160] = "";
            if (v == 4)
                snprintf(want, sizeof want, "%s=off is neither 0 nor 1: %s\n", sw[k].name, sw[k].desc);
            cr_assert(v == 4 ? strstr(err, want) != NULL : err[0] == 0, "%s=%s said '%s'", sw[k].name,
                      values[v] ? values[v] : "(unset)", err);
        }
}
