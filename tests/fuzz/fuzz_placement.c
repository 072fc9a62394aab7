/* tests/fuzz/fuzz_placement.c — libFuzzer target for the placement text parsers: placement files
 * (5 layers × 70 experts), --gpu-budget sizes and --placement specs.
 *
 * Properties checked on every input (abort on violation, so the fuzzer reports it):
 *  - each parser either fails with a non-empty one-line message or succeeds;
 *  - an accepted file sets no bit at or beyond expert 70 and mentions every layer;
 *  - an accepted size is positive; an accepted spec is one of the modes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/placement.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_error(mp_status st, const mp_error *err)
{
    if (st != MP_OK && (err->msg[0] == '\0' || strchr(err->msg, '\n')))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t bits[5 * 2] = {0};
    mp_error err = {0};
    mp_status st = mp_placement_file_parse((const char *)data, size, "fuzz", 5, 70, bits, &err);
    check_error(st, &err);
    if (st == MP_OK)
        for (int l = 0; l < 5; l++)
            if (bits[l * 2 + 1] >> 6) /* experts 70..127 do not exist */
                abort();
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0; /* the flag parsers see C strings, cut at the first NUL like argv */
    uint64_t bytes = 0;
    st = mp_parse_bytes(text, &bytes, &err);
    check_error(st, &err);
    if (st == MP_OK && bytes == 0)
        abort();
    mp_placement_mode mode = MP_PLACEMENT_CPU;
    int64_t n = -1;
    st = mp_placement_spec_parse(text, &mode, &n, &err);
    check_error(st, &err);
    if (st == MP_OK && (mode > MP_PLACEMENT_FILL || n < 0 || n > 65536))
        abort();
    free(text);
    return 0;
}
