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

/* The on-by-default 0/1 switches of the environment (MP_GPU_GRAPHS, MP_GPU_QKV_FORK,
 * MP_MOE_CPU_PIPELINE): "0" turns one off; unset, empty and "1" keep it on; anything else keeps it
 * on and says so on stderr in one line naming the value. */
Test(numparse, env_switch_0_or_1)
{
    const char *name = "MP_GPU_QKV_FORK";
    unsetenv(name);
    cr_assert_not(mp_env_off(name, "Q, K and V side by side"));
    cr_assert_eq(setenv(name, "", 1), 0);
    cr_assert_not(mp_env_off(name, "Q, K and V side by side"));
    cr_assert_eq(setenv(name, "1", 1), 0);
    cr_assert_not(mp_env_off(name, "Q, K and V side by side"));
    cr_assert_eq(setenv(name, "0", 1), 0);
    cr_assert(mp_env_off(name, "Q, K and V side by side"));
    char path[] = "/tmp/mp_switch_XXXXXX";
    const int fd = mkstemp(path), saved = dup(2);
    cr_assert(fd >= 0 && saved >= 0);
    fflush(stderr);
    dup2(fd, 2);
    cr_assert_eq(setenv(name, "off", 1), 0);
    const bool off = mp_env_off(name, "Q, K and V side by side");
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    unsetenv(name);
    char buf[256] = {0};
    cr_assert_geq(pread(fd, buf, sizeof buf - 1, 0), 0);
    close(fd);
    unlink(path);
    cr_assert_not(off, "an unknown value must keep the switch on");
    cr_assert_not_null(strstr(buf, "MP_GPU_QKV_FORK=off is neither 0 nor 1: Q, K and V side by side\n"), "%s", buf);
    /* the off-by-default twin */
    const char *pin = "MP_POOL_PIN";
    unsetenv(pin);
    cr_assert_not(mp_env_on(pin, "workers not pinned"));
    cr_assert_eq(setenv(pin, "", 1), 0);
    cr_assert_not(mp_env_on(pin, "workers not pinned"));
    cr_assert_eq(setenv(pin, "0", 1), 0);
    cr_assert_not(mp_env_on(pin, "workers not pinned"));
    cr_assert_eq(setenv(pin, "1", 1), 0);
    cr_assert(mp_env_on(pin, "workers not pinned"));
    unsetenv(pin);
}
