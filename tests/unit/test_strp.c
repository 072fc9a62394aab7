/* tests/unit/test_strp.c — STRP v1: round trips of every table kind, every fail-closed case of the
 * reader (with the byte offset in the message), the conventions for slots and n_ranked and the
 * ranking a table gives past the pairs, the atomic writer, the manifest, and the CLI. Every file
 * written through mp_strp_write_file is also read by tests/strp_compat.py's reader, which refuses
 * n_ranked > slots as Strata's and the llama.cpp fork's readers do. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runtime/strp.h"
#include "tests/unit/cli_util.h"

static char tmpdir[256];

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mp_test_strp_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}
static void teardown(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}
TestSuite(strp, .init = setup, .fini = teardown);

/* A profile of L x E with n_ranked pairs chosen by a seeded shuffle. Caller frees. */
static mp_strp make_profile(uint32_t L, uint32_t E, uint32_t n_ranked, uint32_t slots,
                            mp_strp_table kind, unsigned seed)
{
    mp_strp p = {.n_layers = L, .n_experts = E, .slots = slots, .n_ranked = n_ranked, .table = kind};
    uint32_t cells = L * E;
    uint32_t *perm = malloc(sizeof *perm * cells);
    for (uint32_t c = 0; c < cells; c++)
        perm[c] = c;
    srand(seed);
    for (uint32_t c = cells - 1; c > 0; c--) {
        uint32_t j = (uint32_t)rand() % (c + 1), t = perm[c];
        perm[c] = perm[j];
        perm[j] = t;
    }
    p.ranked = malloc(sizeof *p.ranked * (n_ranked ? n_ranked : 1));
    for (uint32_t i = 0; i < n_ranked; i++)
        p.ranked[i] = (mp_strp_pair){(uint16_t)(perm[i] / E), (uint16_t)(perm[i] % E)};
    if (kind == MP_STRP_TABLE_U64_COUNT) {
        p.counts = malloc(sizeof *p.counts * cells);
        for (uint32_t c = 0; c < cells; c++)
            p.counts[c] = ((uint64_t)rand() << 8) ^ (uint64_t)rand(); /* totals stay below 2^64 */
    } else if (kind == MP_STRP_TABLE_I32_SLOT) {
        p.slot_of = malloc(sizeof *p.slot_of * cells);
        for (uint32_t c = 0; c < cells; c++)
            p.slot_of[c] = -1;
        for (uint32_t i = 0; i < slots; i++)
            p.slot_of[p.ranked[i].layer * E + p.ranked[i].expert] = (int32_t)i;
    } else if (kind == MP_STRP_TABLE_F32_FREQ) {
        p.freq = malloc(sizeof *p.freq * cells);
        for (uint32_t c = 0; c < cells; c++)
            p.freq[c] = c % 3 ? (float)rand() / (float)RAND_MAX + 0.01f : 0.0f;
    }
    free(perm);
    return p;
}

static uint8_t *encode(const mp_strp *p, size_t *size)
{
    uint8_t *img;
    mp_error err;
    cr_assert_eq(mp_strp_encode(p, &img, size, &err), MP_OK, "%s", err.msg);
    return img;
}

/* Read must fail with MP_ERR_FORMAT and a message containing every needle. */
static void expect_reject(const uint8_t *img, size_t size, const mp_strp_geometry *g, const char *needle1,
                          const char *needle2)
{
    mp_strp q;
    mp_error err;
    memset(&q, 0xAB, sizeof q);
    mp_status st = mp_strp_read_buffer(img, size, "t.strp", g, &q, &err);
    cr_assert_eq(st, MP_ERR_FORMAT, "accepted (or wrong code %d): expected '%s'", st, needle1);
    cr_assert_not_null(strstr(err.msg, needle1), "message '%s' lacks '%s'", err.msg, needle1);
    if (needle2)
        cr_assert_not_null(strstr(err.msg, needle2), "message '%s' lacks '%s'", err.msg, needle2);
    cr_assert_not_null(strstr(err.msg, "t.strp"), "message '%s' lacks the file name", err.msg);
    cr_assert_null(strchr(err.msg, '\n'));
    cr_assert(q.ranked == NULL && q.counts == NULL && q.slot_of == NULL && q.freq == NULL,
              "partial profile left behind");
}

static void put32(uint8_t *b, uint32_t v) { memcpy(b, &v, 4); } /* tests run on little-endian hosts */

Test(strp, round_trip_every_kind)
{
    unsigned seed = (unsigned)time(NULL);
    mp_strp_table kinds[] = {MP_STRP_TABLE_NONE, MP_STRP_TABLE_U64_COUNT, MP_STRP_TABLE_I32_SLOT,
                             MP_STRP_TABLE_F32_FREQ};
    for (int k = 0; k < 4; k++) {
        mp_strp p = make_profile(7, 13, 40, 17, kinds[k], seed + k);
        size_t size;
        uint8_t *img = encode(&p, &size);
        size_t width = kinds[k] == MP_STRP_TABLE_NONE ? 0 : kinds[k] == MP_STRP_TABLE_U64_COUNT ? 8 : 4;
        cr_assert_eq(size, 24 + 4 * 40 + width * 7 * 13, "seed %u kind %d", seed, k);
        cr_assert(!memcmp(img, "STRP", 4));
        mp_strp q;
        mp_error err;
        mp_strp_geometry g = {7, 13};
        cr_assert_eq(mp_strp_read_buffer(img, size, "rt", &g, &q, &err), MP_OK, "seed %u: %s", seed, err.msg);
        cr_assert_eq(q.table, kinds[k], "seed %u: kind %d read as %d", seed, kinds[k], q.table);
        cr_assert_eq(q.n_layers, 7);
        cr_assert_eq(q.n_experts, 13);
        cr_assert_eq(q.slots, 17);
        cr_assert_eq(q.n_ranked, 40);
        cr_assert(!memcmp(q.ranked, p.ranked, 40 * sizeof *p.ranked), "seed %u", seed);
        if (p.counts)
            cr_assert(!memcmp(q.counts, p.counts, 91 * sizeof *p.counts));
        if (p.slot_of)
            cr_assert(!memcmp(q.slot_of, p.slot_of, 91 * sizeof *p.slot_of));
        if (p.freq)
            cr_assert(!memcmp(q.freq, p.freq, 91 * sizeof *p.freq));
        mp_strp_free(&q);
        mp_strp_free(&p);
        free(img);
    }
}

Test(strp, exact_bytes_of_a_small_profile)
{
    mp_strp_pair pairs[] = {{1, 2}, {0, 0x0102}};
    uint64_t counts[2 * 0x103] = {0};
    counts[1 * 0x103 + 2] = 0x0102030405060708ull;
    mp_strp p = {.n_layers = 2, .n_experts = 0x103, .slots = 1, .n_ranked = 2, .ranked = pairs,
                 .table = MP_STRP_TABLE_U64_COUNT, .counts = counts};
    size_t size;
    uint8_t *img = encode(&p, &size);
    const uint8_t head[] = {'S', 'T', 'R', 'P', 1, 0, 0, 0, 2, 0, 0, 0, 3, 1, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0,
                            1, 0, 2, 0, 0, 0, 2, 1};
    cr_assert_eq(size, sizeof head + 8 * 2 * 0x103);
    cr_assert(!memcmp(img, head, sizeof head));
    const uint8_t *cell = img + sizeof head + 8 * (0x103 + 2);
    const uint8_t le[] = {8, 7, 6, 5, 4, 3, 2, 1};
    cr_assert(!memcmp(cell, le, 8));
    free(img);
}

Test(strp, all_zero_4byte_table_reports_both_readings)
{
    mp_strp p = make_profile(3, 4, 5, 2, MP_STRP_TABLE_NONE, 1);
    size_t size;
    uint8_t *img = encode(&p, &size);
    uint8_t *big = calloc(1, size + 4 * 12);
    memcpy(big, img, size);
    mp_strp q;
    mp_error err;
    cr_assert_eq(mp_strp_read_buffer(big, size + 48, "z", NULL, &q, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(q.table, MP_STRP_TABLE_4BYTE_AMBIGUOUS);
    cr_assert_not_null(q.slot_of);
    cr_assert_not_null(q.freq);
    cr_assert_eq(q.slot_of[5], 0);
    cr_assert_eq(q.freq[5], 0.0f);
    /* the ambiguous kind is a reading, not something to write */
    cr_assert_eq(mp_strp_validate(&q, "z", &err), MP_ERR_ARG);
    mp_strp_free(&q);
    /* with slots = 0 the zeros cannot be slots: f32 frequencies only */
    put32(big + 16, 0);
    cr_assert_eq(mp_strp_read_buffer(big, size + 48, "z", NULL, &q, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(q.table, MP_STRP_TABLE_F32_FREQ);
    cr_assert_null(q.slot_of);
    mp_strp_free(&q);
    mp_strp_free(&p);
    free(img);
    free(big);
}

Test(strp, i32_slots_with_minus_one_are_not_frequencies)
{
    mp_strp p = make_profile(4, 8, 10, 6, MP_STRP_TABLE_I32_SLOT, 2);
    size_t size;
    uint8_t *img = encode(&p, &size);
    mp_strp q;
    mp_error err;
    cr_assert_eq(mp_strp_read_buffer(img, size, "s", NULL, &q, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(q.table, MP_STRP_TABLE_I32_SLOT);
    cr_assert_null(q.freq);
    mp_strp_free(&q);
    mp_strp_free(&p);
    free(img);
}

Test(strp, rejects_header_faults_with_offsets)
{
    mp_strp p = make_profile(4, 8, 10, 6, MP_STRP_TABLE_U64_COUNT, 3);
    size_t size;
    uint8_t *img = encode(&p, &size);
    uint8_t *b = malloc(size);
    mp_strp_geometry g = {4, 8}, wrong = {4, 9};

    for (size_t n = 0; n < 24; n++)
        expect_reject(img, n, NULL, "truncated header", "expected 24 bytes");

    memcpy(b, img, size);
    b[3] = 'Q';
    expect_reject(b, size, NULL, "offset 0: magic", "\"STRP\"");

    memcpy(b, img, size);
    put32(b + 4, 2);
    expect_reject(b, size, NULL, "offset 4: version 2", "expected 1");

    memcpy(b, img, size);
    put32(b + 8, 0);
    expect_reject(b, size, NULL, "offset 8: n_layers 0", NULL);
    put32(b + 8, 65537);
    expect_reject(b, size, NULL, "offset 8: n_layers 65537", NULL);

    memcpy(b, img, size);
    put32(b + 12, 0);
    expect_reject(b, size, NULL, "offset 12: n_experts 0", NULL);

    expect_reject(img, size, &wrong, "offset 8: geometry 4 layers x 8 experts", "4 layers x 9 experts");

    memcpy(b, img, size);
    put32(b + 20, 33);
    expect_reject(b, size, &g, "offset 20: n_ranked 33", "at most n_layers x n_experts = 32");

    memcpy(b, img, size);
    put32(b + 16, 33);
    expect_reject(b, size, &g, "offset 16: slots 33", "at most n_layers x n_experts = 32");

    free(b);
    free(img);
    mp_strp_free(&p);
}

Test(strp, rejects_pair_faults_with_offsets)
{
    mp_strp p = make_profile(4, 8, 10, 6, MP_STRP_TABLE_NONE, 4);
    size_t size;
    uint8_t *img = encode(&p, &size);
    uint8_t *b = malloc(size);

    /* truncated inside the pairs: every cut between the header and the last pair */
    for (size_t n = 24; n < size; n++)
        expect_reject(img, n, NULL, "truncated: expected 10 ranked pairs ending at offset 64", NULL);

    memcpy(b, img, size);
    b[24 + 4 * 3] = 4; /* pair 3's layer */
    b[24 + 4 * 3 + 1] = 0;
    expect_reject(b, size, NULL, "offset 36: ranked pair 3: layer 4", "expected < n_layers 4");

    memcpy(b, img, size);
    b[24 + 4 * 5 + 2] = 0xff; /* pair 5's expert */
    expect_reject(b, size, NULL, "offset 46: ranked pair 5: expert", "expected < n_experts 8");

    memcpy(b, img, size);
    memcpy(b + 24 + 4 * 7, b + 24 + 4 * 2, 4); /* pair 7 repeats pair 2 */
    memcpy(b + 24 + 4 * 9, b + 24 + 4 * 2, 4); /* and pair 9 too: the first repeat is reported */
    expect_reject(b, size, NULL, "offset 52: ranked pair 7", "repeated: expected unique pairs (first at offset 32)");

    free(b);
    free(img);
    mp_strp_free(&p);
}

Test(strp, rejects_table_faults_with_offsets)
{
    mp_strp p = make_profile(2, 3, 4, 2, MP_STRP_TABLE_NONE, 5);
    size_t size;
    uint8_t *img = encode(&p, &size); /* 24 + 16 = 40 bytes, table of 6 cells */
    cr_assert_eq(size, 40);
    uint8_t *b = calloc(1, size + 64);
    memcpy(b, img, size);
    size_t good[] = {0, 24, 48};
    for (size_t extra = 0; extra <= 64; extra++) {
        bool valid = extra == good[0] || extra == good[1] || extra == good[2];
        mp_strp q;
        mp_error err;
        mp_status st = mp_strp_read_buffer(b, size + extra, "t.strp", NULL, &q, &err);
        if (valid) {
            cr_assert_eq(st, MP_OK, "extra %zu: %s", extra, err.msg);
            mp_strp_free(&q);
        } else {
            cr_assert_eq(st, MP_ERR_FORMAT, "extra %zu accepted", extra);
            cr_assert_not_null(strstr(err.msg, "offset 40: trailing table of"), "%s", err.msg);
            cr_assert_not_null(strstr(err.msg, "expected 0, 24 (4-byte) or 48 (8-byte)"), "%s", err.msg);
        }
    }
    /* a 4-byte table that is neither slots nor frequencies: entry 1 is slot 5 (>= slots 2, and a
     * denormal as f32), entry 3 is -1 (NaN as f32) */
    put32(b + 40 + 4, 5);
    put32(b + 40 + 12, 0xffffffffu);
    expect_reject(b, size + 24, NULL, "offset 44: 4-byte table entry 0x00000005", "offset 44 (0x00000005) is no frequency");
    put32(b + 40 + 4, 0x3f800000u); /* 1.0f: a frequency, no slot */
    expect_reject(b, size + 24, NULL, "offset 44: 4-byte table entry 0x3f800000", "offset 52 (0xffffffff) is no frequency");
    put32(b + 40 + 12, 0x7f800000u); /* +inf */
    expect_reject(b, size + 24, NULL, "offset 44", "offset 52 (0x7f800000) is no frequency");
    put32(b + 40 + 12, 0xbf800000u); /* -1.0f */
    expect_reject(b, size + 24, NULL, "offset 44", "offset 52 (0xbf800000) is no frequency");
    put32(b + 40 + 12, 0x40000000u); /* 2.0f: now all valid frequencies */
    mp_strp q;
    mp_error err;
    cr_assert_eq(mp_strp_read_buffer(b, size + 24, "t", NULL, &q, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(q.table, MP_STRP_TABLE_F32_FREQ);
    cr_assert_eq(q.freq[1], 1.0f);
    cr_assert_eq(q.freq[3], 2.0f);
    mp_strp_free(&q);
    free(b);
    free(img);
    mp_strp_free(&p);
}

Test(strp, every_truncation_of_a_counted_profile_fails_or_drops_only_whole_tables)
{
    mp_strp p = make_profile(3, 5, 9, 4, MP_STRP_TABLE_U64_COUNT, 12);
    size_t size;
    uint8_t *img = encode(&p, &size);
    size_t pairs_end = 24 + 4 * 9;
    for (size_t n = 0; n < size; n++) {
        mp_strp q;
        mp_error err;
        mp_status st = mp_strp_read_buffer(img, n, "cut", NULL, &q, &err);
        /* the format cannot tell a cut exactly at a table boundary from a smaller table: a cut
         * after the pairs is a valid profile without a table; a cut at the 4-byte size is judged
         * by content (random counts are neither slots nor frequencies) */
        if (n == pairs_end) {
            cr_assert_eq(st, MP_OK, "cut at %zu: %s", n, err.msg);
            cr_assert_eq(q.table, MP_STRP_TABLE_NONE);
            mp_strp_free(&q);
        } else if (n == pairs_end + 4 * 15) {
            cr_assert_eq(st, MP_ERR_FORMAT, "cut at %zu accepted", n);
            cr_assert_not_null(strstr(err.msg, "4-byte table entry"), "%s", err.msg);
        } else {
            cr_assert_eq(st, MP_ERR_FORMAT, "cut at %zu accepted", n);
            cr_assert_not_null(strstr(err.msg, "offset"), "%s", err.msg);
        }
    }
    free(img);
    mp_strp_free(&p);
}

Test(strp, validate_refuses_bad_in_memory_profiles)
{
    mp_strp p = make_profile(4, 8, 10, 6, MP_STRP_TABLE_I32_SLOT, 6);
    mp_error err;
    cr_assert_eq(mp_strp_validate(&p, "m", &err), MP_OK, "%s", err.msg);
    p.slot_of[9] = 6; /* == slots */
    cr_assert_eq(mp_strp_validate(&p, "m", &err), MP_ERR_FORMAT);
    cr_assert_not_null(strstr(err.msg, "offset 100: slot table (layer 1, expert 1) = 6"), "%s", err.msg);
    p.slot_of[9] = -1;
    p.ranked[4] = p.ranked[0];
    cr_assert_eq(mp_strp_validate(&p, "m", &err), MP_ERR_FORMAT);
    cr_assert_not_null(strstr(err.msg, "ranked pair 4"), "%s", err.msg);
    uint8_t *img;
    size_t size;
    cr_assert_eq(mp_strp_encode(&p, &img, &size, &err), MP_ERR_FORMAT);
    cr_assert_null(img);
    mp_strp_free(&p);

    mp_strp f = make_profile(2, 2, 2, 1, MP_STRP_TABLE_F32_FREQ, 7);
    f.freq[2] = NAN;
    cr_assert_eq(mp_strp_validate(&f, "m", &err), MP_ERR_FORMAT);
    cr_assert_not_null(strstr(err.msg, "frequency table (layer 1, expert 0)"), "%s", err.msg);
    f.freq[2] = 1e-40f; /* denormal: would read back as an int32 slot */
    cr_assert_eq(mp_strp_validate(&f, "m", &err), MP_ERR_FORMAT);
    mp_strp_free(&f);
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static int count_dir_entries(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", dir);
    FILE *f = popen(cmd, "r");
    int n = -1;
    cr_assert_eq(fscanf(f, "%d", &n), 1);
    pclose(f);
    return n;
}

Test(strp, write_file_is_atomic_and_reads_back)
{
    char path[512];
    snprintf(path, sizeof path, "%s/p.strp", tmpdir);
    mp_strp p = make_profile(5, 6, 12, 12, MP_STRP_TABLE_U64_COUNT, 8);
    mp_error err;
    cr_assert_eq(mp_strp_write_file(path, &p, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(count_dir_entries(tmpdir), 1, "a temporary file was left behind");
    mp_test_strp_loads(path);
    mp_strp q;
    mp_strp_geometry g = {5, 6};
    cr_assert_eq(mp_strp_read_file(path, &g, &q, &err), MP_OK, "%s", err.msg);
    cr_assert(!memcmp(q.ranked, p.ranked, 12 * sizeof *p.ranked));
    cr_assert(!memcmp(q.counts, p.counts, 30 * sizeof *p.counts));
    mp_strp_free(&q);

    /* an invalid profile, or one that lists more pairs than its slots (the other STRP readers
     * refuse it), leaves the existing file untouched and no temporary behind */
    struct stat before, after;
    cr_assert_eq(stat(path, &before), 0);
    p.slots = 31;
    cr_assert_eq(mp_strp_write_file(path, &p, &err), MP_ERR_FORMAT);
    cr_assert_not_null(strstr(err.msg, path), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "offset 16: slots 31"), "%s", err.msg);
    p.slots = 11;
    cr_assert_eq(mp_strp_write_file(path, &p, &err), MP_ERR_ARG);
    cr_assert_not_null(strstr(err.msg, path), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "n_ranked 12 > slots 11"), "%s", err.msg);
    cr_assert_null(strchr(err.msg, '\n'));
    cr_assert_eq(stat(path, &after), 0);
    cr_assert_eq(before.st_size, after.st_size);
    cr_assert_eq(before.st_ino, after.st_ino);
    cr_assert_eq(count_dir_entries(tmpdir), 1);
    p.slots = 12;

    /* an unwritable place is an I/O error naming the path */
    char bad[600];
    snprintf(bad, sizeof bad, "%s/no/such/dir/p.strp", tmpdir);
    cr_assert_eq(mp_strp_write_file(bad, &p, &err), MP_ERR_IO);
    cr_assert_not_null(strstr(err.msg, "no/such/dir"), "%s", err.msg);
    cr_assert(!exists(bad));
    mp_strp_free(&p);

    cr_assert_eq(mp_strp_read_file(bad, NULL, &q, &err), MP_ERR_IO);
    cr_assert_not_null(strstr(err.msg, "cannot open"), "%s", err.msg);
}

Test(strp, read_file_larger_than_one_read_chunk)
{
    /* 300 x 300 x 8 bytes: the reader's growing buffer must deliver every byte */
    char path[512];
    snprintf(path, sizeof path, "%s/big.strp", tmpdir);
    mp_strp p = make_profile(300, 300, 5000, 5000, MP_STRP_TABLE_U64_COUNT, 9);
    mp_error err;
    cr_assert_eq(mp_strp_write_file(path, &p, &err), MP_OK, "%s", err.msg);
    mp_test_strp_loads(path);
    mp_strp q;
    cr_assert_eq(mp_strp_read_file(path, NULL, &q, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(q.table, MP_STRP_TABLE_U64_COUNT);
    cr_assert(!memcmp(q.counts, p.counts, 90000 * sizeof *p.counts));
    mp_strp_free(&q);
    mp_strp_free(&p);
}

Test(strp, count_table_whose_total_wraps_is_refused)
{
    mp_strp p = make_profile(2, 3, 4, 2, MP_STRP_TABLE_U64_COUNT, 5);
    for (int c = 0; c < 6; c++)
        p.counts[c] = 0;
    p.counts[0] = UINT64_MAX - 1;
    p.counts[3] = 2; /* the running total passes 2^64 - 1 at entry 3 */
    mp_error err;
    uint8_t *img;
    size_t size;
    cr_assert_eq(mp_strp_encode(&p, &img, &size, &err), MP_ERR_FORMAT, "the writer accepted it");
    cr_assert_not_null(strstr(err.msg, "offset 64: u64 count table"), "%s", err.msg);
    p.counts[3] = 1; /* exactly 2^64 - 1 in all */
    cr_assert_eq(mp_strp_encode(&p, &img, &size, &err), MP_OK, "%s", err.msg);
    img[40 + 8 * 5] = 1; /* the last entry becomes 1: the total wraps there */
    expect_reject(img, size, NULL, "offset 80: u64 count table", "sum past 2^64-1");
    free(img);
    mp_strp_free(&p);
}

/* What is not a profile file is refused from its header or its kind, without reading it all. */
Test(strp, read_file_refuses_fifos_devices_and_huge_files_from_the_header)
{
    char path[512];
    mp_strp q;
    mp_error err;
    snprintf(path, sizeof path, "%s/fifo.strp", tmpdir);
    cr_assert_eq(mkfifo(path, 0600), 0);
    cr_assert_eq(mp_strp_read_file(path, NULL, &q, &err), MP_ERR_IO);
    cr_assert_not_null(strstr(err.msg, "a FIFO, expected a regular file"), "%s", err.msg);
    cr_assert_eq(mp_strp_read_file("/dev/zero", NULL, &q, &err), MP_ERR_IO);
    cr_assert_not_null(strstr(err.msg, "a character device"), "%s", err.msg);
    /* 6 GB (sparse) of zeros: refused at offset 0 from 24 bytes */
    snprintf(path, sizeof path, "%s/huge.strp", tmpdir);
    FILE *f = fopen(path, "w");
    cr_assert_eq(ftruncate(fileno(f), (off_t)6 << 30), 0);
    fclose(f);
    cr_assert_eq(mp_strp_read_file(path, NULL, &q, &err), MP_ERR_FORMAT);
    cr_assert_not_null(strstr(err.msg, "offset 0: magic 00 00 00 00"), "%s", err.msg);
    /* a valid header for 65536 x 65536 with a 4-byte table: 16 GiB, over the cap */
    uint8_t h[24] = {'S', 'T', 'R', 'P'};
    put32(h + 4, 1);
    put32(h + 8, 65536);
    put32(h + 12, 65536);
    f = fopen(path, "w");
    fwrite(h, 1, sizeof h, f);
    cr_assert_eq(ftruncate(fileno(f), 24 + ((off_t)4 << 32)), 0);
    fclose(f);
    cr_assert_eq(mp_strp_read_file(path, NULL, &q, &err), MP_ERR_LIMIT);
    cr_assert_not_null(strstr(err.msg, "more than the 1073741824 accepted"), "%s", err.msg);
    cr_assert(q.ranked == NULL && q.counts == NULL);
}

Test(strp, manifest_records_fields_and_nulls)
{
    char path[512];
    snprintf(path, sizeof path, "%s/p.strp.json", tmpdir);
    mp_strp p = make_profile(3, 4, 6, 3, MP_STRP_TABLE_U64_COUNT, 10);
    mp_strp_manifest m;
    mp_strp_manifest_init(&m);
    m.model_sha256 = "ab12";
    m.budget_bytes = 8ull << 30;
    m.policy = "decayed-lfu";
    m.params[0] = (mp_strp_param){"alpha", 0.5};
    m.params[1] = (mp_strp_param){"epsilon", 0.1};
    m.n_params = 2;
    m.predicted_tok_s = 42.5;
    mp_error err;
    cr_assert_eq(mp_strp_manifest_write(path, &m, &p, &err), MP_OK, "%s", err.msg);
    FILE *f = fopen(path, "rb");
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *j = cJSON_Parse(buf);
    cr_assert_not_null(j, "manifest is not JSON: %s", buf);
    cr_assert_str_eq(cJSON_GetObjectItem(j, "format")->valuestring, "moeplan-strp-manifest");
    cJSON *strp = cJSON_GetObjectItem(j, "strp");
    cr_assert_eq(cJSON_GetObjectItem(strp, "n_layers")->valuedouble, 3);
    cr_assert_eq(cJSON_GetObjectItem(strp, "slots")->valuedouble, 3);
    cr_assert_str_eq(cJSON_GetObjectItem(strp, "table")->valuestring, "u64-count");
    /* the resident set, and the ranking a reader derives: the 6 pairs, then the 6 other experts
     * (every row of the random counts has routes), though p itself carries no tail */
    cr_assert_eq(cJSON_GetObjectItem(strp, "resident")->valuedouble, 3);
    cr_assert_eq(cJSON_GetObjectItem(strp, "n_ranking")->valuedouble, 12);
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "model"), "sha256")->valuestring, "ab12");
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "model"), "path")));
    cr_assert_eq(cJSON_GetObjectItem(j, "budget_bytes")->valuedouble, 8589934592.0);
    cJSON *pol = cJSON_GetObjectItem(j, "policy");
    cr_assert_str_eq(cJSON_GetObjectItem(pol, "name")->valuestring, "decayed-lfu");
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(pol, "params"), "epsilon")->valuedouble, 0.1);
    cr_assert_eq(cJSON_GetObjectItem(j, "predicted_tok_s")->valuedouble, 42.5);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(j, "heldout_coverage")));
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(j, "trace_sha256")));
    cJSON_Delete(j);
    m.n_params = MP_STRP_MAX_PARAMS + 1;
    cr_assert_eq(mp_strp_manifest_write(path, &m, &p, &err), MP_ERR_ARG);
    mp_strp_free(&p);
}

/* Run the CLI; returns the exit status and the first line of stderr+stdout in out. */
static int run_cli(const char *args, char *out, size_t cap)
{
    const char *exe = getenv("MP_MOEPLAN");
    cr_assert_not_null(exe, "MP_MOEPLAN is not set (run through meson test)");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", exe, args);
    FILE *f = popen(cmd, "r");
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(strp, cli_inspect_and_verify)
{
    char path[512], args[1024], out[8192];
    snprintf(path, sizeof path, "%s/c.strp", tmpdir);
    mp_strp p = make_profile(3, 4, 2, 2, MP_STRP_TABLE_U64_COUNT, 11);
    for (int c = 4; c < 8; c++)
        p.counts[c] = 0; /* layer 1 has no routing: it ranks nothing */
    mp_error err;
    cr_assert_eq(mp_strp_write_file(path, &p, &err), MP_OK, "%s", err.msg);
    mp_test_strp_loads(path);
    const unsigned in_layer1 = (p.ranked[0].layer == 1) + (p.ranked[1].layer == 1);
    snprintf(args, sizeof args, "profile verify '%s' --layers 3 --experts 4", path);
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    char want[256];
    snprintf(want, sizeof want, "valid STRP v1 for 3 layers x 4 experts: 2 resident of %u ranked (2 pairs, slots 2), "
             "table u64-count; loads in readers that refuse n_ranked > slots", 2 + 8 - (2 - in_layer1));
    cr_assert_not_null(strstr(out, want), "expected '%s' in %s", want, out);
    snprintf(args, sizeof args, "profile verify '%s' --layers 3 --experts 5", path);
    cr_assert_eq(run_cli(args, out, sizeof out), 1, "%s", out);
    cr_assert_not_null(strstr(out, "moeplan profile: error: profile"), "%s", out);
    cr_assert_not_null(strstr(out, "offset 8: geometry"), "%s", out);
    cr_assert_eq(strchr(out, '\n'), out + strlen(out) - 1, "error is not one line: %s", out);
    snprintf(args, sizeof args, "profile inspect '%s'", path);
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    cr_assert_not_null(strstr(out, "3 layers x 4 experts"), "%s", out);
    cr_assert_not_null(strstr(out, "table:     u64-count"), "%s", out);
    cr_assert_not_null(strstr(out, "header:    slots 2, n_ranked 2: loads in"), "%s", out);
    cr_assert_not_null(strstr(out, "(not resident; from the table)"), "%s", out);
    /* moeplan's older files (slots < n_ranked) still read, and are said not to load elsewhere */
    mp_strp old = make_profile(3, 4, 6, 2, MP_STRP_TABLE_U64_COUNT, 11);
    uint8_t *img;
    size_t size;
    cr_assert_eq(mp_strp_encode(&old, &img, &size, &err), MP_OK, "%s", err.msg);
    FILE *f = fopen(path, "wb");
    cr_assert_eq(fwrite(img, 1, size, f), size);
    fclose(f);
    free(img);
    snprintf(args, sizeof args, "profile verify '%s' --layers 3 --experts 4", path);
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    cr_assert_not_null(strstr(out, "2 resident of 12 ranked (6 pairs, slots 2), table u64-count; refused by readers "
                                   "that refuse n_ranked > slots"), "%s", out);
    mp_strp_free(&old);
    cr_assert_eq(run_cli("profile verify", out, sizeof out), 2, "%s", out);
    cr_assert_eq(run_cli("profile --help", out, sizeof out), 0, "%s", out);
    mp_strp_free(&p);
}

Test(strp, cli_verify_against_a_gguf_model)
{
    /* tests/fixtures/hf/qwen3moe-tiny-f32.gguf: qwen3moe.block_count 3, expert_count 8 */
    const char *root = getenv("MP_SOURCE_ROOT");
    cr_assert_not_null(root);
    char path[512], args[2048], out[8192];
    snprintf(path, sizeof path, "%s/m.strp", tmpdir);
    mp_strp p = make_profile(3, 8, 4, 4, MP_STRP_TABLE_U64_COUNT, 13);
    mp_error err;
    cr_assert_eq(mp_strp_write_file(path, &p, &err), MP_OK, "%s", err.msg);
    mp_test_strp_loads(path);
    snprintf(args, sizeof args, "profile verify '%s' -m '%s/tests/fixtures/hf/qwen3moe-tiny-f32.gguf'", path, root);
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    cr_assert_not_null(strstr(out, "valid STRP v1 for 3 layers x 8 experts"), "%s", out);
    mp_strp_free(&p);
    p = make_profile(4, 8, 4, 4, MP_STRP_TABLE_NONE, 14);
    cr_assert_eq(mp_strp_write_file(path, &p, &err), MP_OK, "%s", err.msg);
    mp_test_strp_loads(path);
    cr_assert_eq(run_cli(args, out, sizeof out), 1, "%s", out);
    cr_assert_not_null(strstr(out, "offset 8: geometry 4 layers x 8 experts: expected the model's 3 layers x 8 experts"),
                       "%s", out);
    snprintf(args, sizeof args, "profile verify '%s' -m '%s/no-such-model.gguf'", path, root);
    cr_assert_eq(run_cli(args, out, sizeof out), 1, "%s", out);
    snprintf(args, sizeof args, "profile verify '%s' -m x.gguf --layers 3 --experts 8", path);
    cr_assert_eq(run_cli(args, out, sizeof out), 2, "%s", out);
    mp_strp_free(&p);
}

Test(strp, placement_takes_the_ranked_prefix)
{
    mp_strp p = make_profile(3, 4, 7, 3, MP_STRP_TABLE_NONE, 15);
    uint8_t res[12];
    cr_assert_eq(mp_strp_placement(&p, MP_STRP_PROFILE_SLOTS, res), 3);
    int n = 0;
    for (int c = 0; c < 12; c++)
        n += res[c];
    cr_assert_eq(n, 3);
    for (int i = 0; i < 7; i++)
        cr_assert_eq(res[p.ranked[i].layer * 4 + p.ranked[i].expert], i < 3, "pair %d", i);
    cr_assert_eq(mp_strp_placement(&p, 5, res), 5); /* a bigger budget takes the next ranked */
    for (int i = 0; i < 7; i++)
        cr_assert_eq(res[p.ranked[i].layer * 4 + p.ranked[i].expert], i < 5, "pair %d", i);
    cr_assert_eq(mp_strp_placement(&p, 100, res), 7); /* never beyond the ranked list */
    cr_assert_eq(mp_strp_placement(&p, 0, res), 0);
    for (int c = 0; c < 12; c++)
        cr_assert_eq(res[c], 0);
    mp_strp_free(&p);
}

/* The ranking past the pairs: every expert not listed, in the layers the table shows routing in,
 * by count (or frequency) descending, ties by layer then expert; a placement with more room than
 * the resident set continues with it. */
Test(strp, the_table_ranks_the_experts_after_the_pairs)
{
    /* 3 layers x 3 experts; layer 1 is dense (no routing); counts with a tie and a zero */
    uint64_t counts[9] = {5, 0, 9, /**/ 0, 0, 0, /**/ 9, 2, 7};
    mp_strp_pair pairs[] = {{2, 0}, {0, 2}};
    mp_strp p = {.n_layers = 3, .n_experts = 3, .slots = 2, .n_ranked = 2, .ranked = pairs,
                 .table = MP_STRP_TABLE_U64_COUNT, .counts = counts};
    size_t size;
    uint8_t *img = encode(&p, &size);
    mp_strp q;
    mp_error err;
    cr_assert_eq(mp_strp_read_buffer(img, size, "t", NULL, &q, &err), MP_OK, "%s", err.msg);
    const mp_strp_pair want[] = {{2, 0}, {0, 2}, {2, 2}, {0, 0}, {2, 1}, {0, 1}};
    cr_assert_eq(q.n_tail, 4);
    cr_assert_eq(mp_strp_ranking_len(&q), 6);
    for (uint32_t i = 0; i < 6; i++)
        cr_assert(mp_strp_ranked_at(&q, i).layer == want[i].layer && mp_strp_ranked_at(&q, i).expert == want[i].expert,
                  "rank %u: (%u, %u)", i, mp_strp_ranked_at(&q, i).layer, mp_strp_ranked_at(&q, i).expert);
    uint8_t res[9];
    cr_assert_eq(mp_strp_placement(&q, MP_STRP_PROFILE_SLOTS, res), 2);
    cr_assert(res[2 * 3 + 0] && res[0 * 3 + 2] && !res[2 * 3 + 2]);
    cr_assert_eq(mp_strp_placement(&q, 4, res), 4); /* more room: the table's next two */
    cr_assert(res[2 * 3 + 2] && res[0 * 3 + 0] && !res[2 * 3 + 1]);
    cr_assert_eq(mp_strp_placement(&q, 100, res), 6); /* never a dense layer's cell */
    for (int e = 0; e < 3; e++)
        cr_assert_eq(res[1 * 3 + e], 0);
    mp_strp_free(&q);

    /* the same order from f32 frequencies; an int32 slot table ranks nothing */
    float freq[9];
    for (int c = 0; c < 9; c++)
        freq[c] = (float)counts[c] / 3.0f;
    p.table = MP_STRP_TABLE_F32_FREQ;
    p.counts = NULL;
    p.freq = freq;
    free(img);
    img = encode(&p, &size);
    cr_assert_eq(mp_strp_read_buffer(img, size, "t", NULL, &q, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(q.table, MP_STRP_TABLE_F32_FREQ);
    cr_assert_eq(q.n_tail, 4);
    for (uint32_t i = 0; i < 6; i++)
        cr_assert(mp_strp_ranked_at(&q, i).layer == want[i].layer && mp_strp_ranked_at(&q, i).expert == want[i].expert,
                  "f32 rank %u", i);
    mp_strp_free(&q);
    int32_t slot_of[9] = {-1, -1, 1, -1, -1, -1, 0, -1, -1};
    p.table = MP_STRP_TABLE_I32_SLOT;
    p.freq = NULL;
    p.slot_of = slot_of;
    free(img);
    img = encode(&p, &size);
    cr_assert_eq(mp_strp_read_buffer(img, size, "t", NULL, &q, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(q.table, MP_STRP_TABLE_I32_SLOT);
    cr_assert_eq(q.n_tail, 0);
    cr_assert_null(q.tail);
    cr_assert_eq(mp_strp_placement(&q, 100, res), 2);
    mp_strp_free(&q);
    free(img);

    /* in memory, the same function derives it (and replaces an older tail) */
    p.table = MP_STRP_TABLE_U64_COUNT;
    p.slot_of = NULL;
    p.counts = counts;
    cr_assert_eq(mp_strp_rank_tail(&p, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(p.n_tail, 4);
    counts[0] = 0;
    counts[2] = 0; /* layer 0 loses its routing: only layer 2's two unlisted experts remain */
    cr_assert_eq(mp_strp_rank_tail(&p, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(p.n_tail, 2);
    cr_assert(p.tail[0].layer == 2 && p.tail[0].expert == 2 && p.tail[1].layer == 2 && p.tail[1].expert == 1);
    free(p.tail);
}

/* slots below, equal to and above n_ranked all read: the resident set is the first
 * min(slots, n_ranked) pairs. */
Test(strp, every_convention_of_slots_and_n_ranked_reads)
{
    const struct { uint32_t slots, n_ranked, resident; } conv[] = {
        {3, 8, 3},  /* moeplan's older files: the resident set, then more ranked pairs */
        {8, 8, 8},  /* Strata's and moeplan's: the pairs are the resident set */
        {12, 8, 8}, /* more slots than pairs (Strata's readers load it) */
        {0, 0, 0},
    };
    for (size_t k = 0; k < sizeof conv / sizeof conv[0]; k++) {
        mp_strp p = make_profile(4, 5, conv[k].n_ranked, conv[k].slots, MP_STRP_TABLE_NONE, 16 + (unsigned)k);
        size_t size;
        uint8_t *img = encode(&p, &size);
        mp_strp q;
        mp_error err;
        cr_assert_eq(mp_strp_read_buffer(img, size, "c", NULL, &q, &err), MP_OK, "%zu: %s", k, err.msg);
        cr_assert_eq(q.slots, conv[k].slots);
        cr_assert_eq(q.n_ranked, conv[k].n_ranked);
        cr_assert_eq(mp_strp_resident(&q), conv[k].resident, "%zu", k);
        uint8_t res[20];
        cr_assert_eq(mp_strp_placement(&q, MP_STRP_PROFILE_SLOTS, res), conv[k].resident, "%zu", k);
        for (uint32_t i = 0; i < q.n_ranked; i++)
            cr_assert_eq(res[q.ranked[i].layer * 5 + q.ranked[i].expert], i < conv[k].resident, "%zu: pair %u", k, i);
        mp_strp_free(&q);
        mp_strp_free(&p);
        free(img);
    }
}
