/* tests/fuzz/fuzz_strp.c — libFuzzer target for the STRP reader.
 *
 * Properties checked on every input (abort on violation, so the fuzzer reports it):
 *  - the reader either fails with a non-empty one-line message and an empty profile, or succeeds;
 *  - a profile it accepts passes mp_strp_validate (unless its 4-byte table is the ambiguous kind,
 *    which is a reading, not a writable kind) and re-encodes to exactly the input bytes;
 *  - the file reader (which decides from the 24-byte header and the file's size before it reads
 *    the rest, trailing table included) agrees with the buffer reader: the same status, and an
 *    accepted profile with the same encoding. The bytes are given to it as a memfd.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

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
    /* the same bytes through the file reader */
    const int fd = memfd_create("fuzz_strp", 0);
    if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size))
        abort();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    mp_strp q;
    mp_error ferr;
    const mp_status fst = mp_strp_read_file(path, expect, &q, &ferr);
    close(fd);
    if ((fst == MP_OK) != (st == MP_OK) || (fst && (ferr.msg[0] == '\0' || strchr(ferr.msg, '\n'))))
        abort();
    if (fst == MP_OK) {
        uint8_t *a, *b;
        size_t na, nb;
        mp_strp pa = p, qa = q;
        if (pa.table == MP_STRP_TABLE_4BYTE_AMBIGUOUS)
            pa.table = qa.table = MP_STRP_TABLE_I32_SLOT;
        if (mp_strp_encode(&pa, &a, &na, &err) || mp_strp_encode(&qa, &b, &nb, &err) || na != nb ||
            memcmp(a, b, na))
            abort();
        free(a), free(b);
        mp_strp_free(&q);
    }
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
