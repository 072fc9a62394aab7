/* tests/fuzz/fuzz_strp.c — libFuzzer target for the STRP reader.
 *
 * Properties checked on every input (abort on violation, so the fuzzer reports it):
 *  - the reader either fails with a non-empty one-line message and an empty profile, or succeeds;
 *  - a profile it accepts passes mp_strp_validate (unless its 4-byte table is the ambiguous kind,
 *    which is a reading, not a writable kind) and re-encodes to exactly the input bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/strp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mp_strp p;
    mp_error err;
    mp_strp_geometry g = {48, 128};
    /* exercise the geometry check on a quarter of the inputs */
    const mp_strp_geometry *expect = size > 0 && data[size - 1] % 4 == 0 ? &g : NULL;
    mp_status st = mp_strp_read_buffer(data, size, "fuzz", expect, &p, &err);
    if (st != MP_OK) {
        if (err.msg[0] == '\0' || strchr(err.msg, '\n') || p.ranked || p.counts || p.slot_of || p.freq)
            abort();
        return 0;
    }
    if (p.table == MP_STRP_TABLE_4BYTE_AMBIGUOUS) {
        p.table = MP_STRP_TABLE_I32_SLOT; /* all zeros: the int32 reading re-encodes identically */
    }
    if (mp_strp_validate(&p, "fuzz", &err) != MP_OK)
        abort();
    uint8_t *img;
    size_t img_size;
    if (mp_strp_encode(&p, &img, &img_size, &err) != MP_OK)
        abort();
    if (img_size != size || memcmp(img, data, size) != 0)
        abort();
    free(img);
    mp_strp_free(&p);
    return 0;
}
