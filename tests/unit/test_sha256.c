/* tests/unit/test_sha256.c — SHA-256 (through libcrypto) on the FIPS 180-4 example messages, fed in
 * uneven pieces, and of whole files, with errors naming the file. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/sha256.h"

static void hex_of(const void *data, size_t n, size_t piece, char hex[65])
{
    mp_sha256 s;
    mp_sha256_init(&s);
    for (size_t at = 0; at < n; at += piece)
        mp_sha256_update(&s, (const char *)data + at, n - at < piece ? n - at : piece);
    uint8_t d[32];
    cr_assert(mp_sha256_final(&s, d));
    mp_sha256_hex(d, hex);
}

Test(sha256, fips_180_examples_in_any_pieces)
{
    static const struct { const char *msg, *want; } ex[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    const size_t pieces[] = {1, 3, 64, 1000};
    char hex[65];
    for (size_t i = 0; i < sizeof ex / sizeof ex[0]; i++)
        for (size_t p = 0; p < sizeof pieces / sizeof pieces[0]; p++) {
            hex_of(ex[i].msg, strlen(ex[i].msg), pieces[p], hex);
            cr_assert_str_eq(hex, ex[i].want, "'%s' in pieces of %zu", ex[i].msg, pieces[p]);
        }
    /* one million 'a' (FIPS 180-2, appendix B.3) */
    char *a = malloc(1000000);
    memset(a, 'a', 1000000);
    hex_of(a, 1000000, 4099, hex);
    cr_assert_str_eq(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(a);
}

Test(sha256, whole_files_and_their_errors)
{
    char dir[] = "/tmp/mp_test_sha256_XXXXXX", path[64];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/f", dir);
    /* 3 MiB + 5 bytes: more than one read chunk, and a partial last one */
    const size_t n = (3u << 20) + 5;
    char *data = malloc(n);
    for (size_t i = 0; i < n; i++)
        data[i] = (char)(i * 2654435761u >> 24);
    FILE *f = fopen(path, "wb");
    cr_assert_eq(fwrite(data, 1, n, f), n);
    fclose(f);
    char want[65], got[65];
    hex_of(data, n, 65536, want);
    uint64_t bytes = 0;
    mp_error err;
    cr_assert_eq(mp_sha256_file(path, "model", got, &bytes, &err), MP_OK, "%s", err.msg);
    cr_assert_str_eq(got, want);
    cr_assert_eq(bytes, n);
    cr_assert_eq(mp_sha256_file(dir, "model", got, NULL, &err), MP_ERR_IO, "a directory is not hashed");
    cr_assert_not_null(strstr(err.msg, dir), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "a directory, expected a regular file"), "%s", err.msg);
    unlink(path);
    cr_assert_eq(mp_sha256_file(path, "trace", got, NULL, &err), MP_ERR_IO);
    cr_assert_not_null(strstr(err.msg, "trace "), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "cannot open"), "%s", err.msg);
    rmdir(dir);
    free(data);
}
