/* tests/fuzz/fuzz_strp.c — libFuzzer target for the STRP reader.
 *
 * Properties checked on every input (abort on violation, so the fuzzer reports it):
 *  - the reader either fails with a non-empty one-line message and an empty profile, or succeeds;
 *  - a profile it accepts passes mp_strp_validate (unless its 4-byte table is the ambiguous kind,
 *    which is a reading, not a writable kind) and re-encodes to exactly the input bytes;
 *  - the file reader (which decides from the 24-byte header and the file's size before it reads
 *    the rest, trailing table included) agrees with the buffer reader: the same status, and an
 *    accepted profile with the same encoding. The bytes are given to it as a memfd;
 *  - the tail of an accepted profile (the ranking its table gives after the pairs) is exactly the
 *    unlisted experts of the layers with routing, by weight descending and then by cell, and the
 *    placement never takes more than the pairs and the tail.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "runtime/strp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t weight(const mp_strp *p, uint64_t c)
{
    if (p->counts)
        return p->counts[c];
    uint32_t bits;
    memcpy(&bits, &p->freq[c], sizeof bits);
    return bits; /* +0 or a positive normal float: bit patterns order as the values */
}

/* The tail's definition, checked from scratch (a table is there when the tail is not empty, so
 * n_layers x n_experts is bounded by the input's size). */
static void check_tail(const mp_strp *p)
{
    if (!p->counts && !p->freq) {
        if (p->n_tail || p->tail)
            abort();
        return;
    }
    const uint64_t cells = (uint64_t)p->n_layers * p->n_experts;
    uint8_t *listed = calloc((size_t)cells, 1);
    if (!listed)
        abort();
    for (uint32_t i = 0; i < p->n_ranked; i++)
        listed[(uint64_t)p->ranked[i].layer * p->n_experts + p->ranked[i].expert] = 1;
    uint64_t expected = 0;
    for (uint64_t l = 0; l < p->n_layers; l++) {
        bool routed = false;
        for (uint64_t e = 0; e < p->n_experts; e++)
            routed = routed || weight(p, l * p->n_experts + e) != 0;
        for (uint64_t e = 0; routed && e < p->n_experts; e++)
            expected += !listed[l * p->n_experts + e];
    }
    if (expected != p->n_tail || (p->n_tail && !p->tail))
        abort();
    for (uint32_t i = 0; i < p->n_tail; i++) {
        if (p->tail[i].layer >= p->n_layers || p->tail[i].expert >= p->n_experts)
            abort();
        const uint64_t c = (uint64_t)p->tail[i].layer * p->n_experts + p->tail[i].expert;
        if (listed[c])
            abort(); /* listed, or already in the tail */
        listed[c] = 1;
        if (i > 0) {
            const uint64_t b = (uint64_t)p->tail[i - 1].layer * p->n_experts + p->tail[i - 1].expert;
            if (weight(p, b) < weight(p, c) || (weight(p, b) == weight(p, c) && b > c))
                abort();
        }
    }
    uint8_t *res = malloc((size_t)cells);
    if (!res || mp_strp_placement(p, UINT64_MAX - 1, res) != p->n_ranked + p->n_tail)
        abort();
    free(res);
    free(listed);
}

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
        if (err.msg[0] == '\0' || strchr(err.msg, '\n') || p.ranked || p.counts || p.slot_of || p.freq || p.tail)
            abort();
        return 0;
    }
    check_tail(&p);
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
