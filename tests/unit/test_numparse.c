/* tests/unit/test_numparse.c — the strict flag-value parser every command (and the knob table,
 * base/knobs.c) uses. */
#include <criterion/criterion.h>
#include <stdint.h>

#include "base/numparse.h"

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

/* The _said forms parse as the plain ones and say what they take, for "expected ..." */
Test(numparse, said_forms_name_what_they_take)
{
    char expect[64];
    int64_t v = 5;
    uint64_t u = 5;
    double f = 5;
    cr_assert(mp_parse_i64_said("7", 1, 1024, &v, expect, sizeof expect) && v == 7);
    cr_assert(!mp_parse_i64_said("0", 1, 1024, &v, expect, sizeof expect));
    cr_assert_str_eq(expect, "an integer 1..1024");
    cr_assert_eq(v, 7);
    cr_assert(!mp_parse_u64_said("-1", &u, expect, sizeof expect));
    cr_assert_str_eq(expect, "an unsigned 64-bit integer");
    cr_assert(mp_parse_f64_said("0.25", 0, 1, &f, expect, sizeof expect) && f == 0.25);
    const char *bad_f[] = {"", " 0.5", "+0.5", "0.5x", "1.5", "-0.1", "nan", "inf"};
    for (size_t i = 0; i < sizeof bad_f / sizeof bad_f[0]; i++)
        cr_assert(!mp_parse_f64_said(bad_f[i], 0, 1, &f, expect, sizeof expect), "accepted '%s'", bad_f[i]);
    cr_assert_str_eq(expect, "a number 0..1");
    cr_assert_eq(f, 0.25, "a rejected value must not be written");
    cr_assert(mp_parse_f64_said("100", 0, 100, &f, expect, sizeof expect) && f == 100);
}
