/* tests/unit/test_error.c — one-line errors (base/error.c): formatting, newlines folded, a
 * prefix added in front, and a message cut at the buffer's end marked with "...". */
#include <criterion/criterion.h>
#include <string.h>

#include "base/error.h"

Test(error, formats_one_line)
{
    mp_error err = {0};
    cr_assert_eq(mp_fail(&err, MP_ERR_ARG, "bad %s\nat line %d", "value", 7), MP_ERR_ARG);
    cr_assert_eq(err.code, MP_ERR_ARG);
    cr_assert_str_eq(err.msg, "bad value at line 7");
    cr_assert_eq(mp_error_prefix(&err, "file %s", "a.gguf"), MP_ERR_ARG);
    cr_assert_str_eq(err.msg, "file a.gguf: bad value at line 7");
    mp_error_clear(&err);
    cr_assert_eq(err.code, MP_OK);
    cr_assert_str_eq(err.msg, "");
}

Test(error, a_cut_message_ends_in_dots)
{
    mp_error err = {0};
    char longer[2 * sizeof err.msg];
    memset(longer, 'x', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    mp_fail(&err, MP_ERR_IO, "%s", longer);
    const size_t n = strlen(err.msg);
    cr_assert_eq(n, sizeof err.msg - 1);
    cr_assert_str_eq(err.msg + n - 3, "...");
    cr_assert_eq(err.msg[n - 4], 'x');

    /* a prefix that pushes a message that fitted past the end */
    char fits[sizeof err.msg - 8];
    memset(fits, 'y', sizeof fits - 1);
    fits[sizeof fits - 1] = '\0';
    mp_fail(&err, MP_ERR_IO, "%s", fits);
    cr_assert_eq(strlen(err.msg), sizeof fits - 1);
    cr_assert_neq(strcmp(err.msg + strlen(err.msg) - 3, "..."), 0, "a message that fits is not marked");
    mp_error_prefix(&err, "%s", "a prefix of some length");
    cr_assert_eq(strncmp(err.msg, "a prefix of some length: yyy", 28), 0, "%s", err.msg);
    cr_assert_str_eq(err.msg + strlen(err.msg) - 3, "...");
    cr_assert_eq(strlen(err.msg), sizeof err.msg - 1);
}
