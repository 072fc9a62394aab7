/* runtime/strp.c — STRP v1 reader/validator/encoder (see strp.h and schemas/strp.md).
 *
 * One set of checks serves the reader (offsets are positions in the file) and the writer (offsets
 * are the positions the value would take in the file), so what we write we can always read back.
 * Memory the reader allocates is bounded by the file size: the duplicate check sorts the pairs
 * instead of allocating an n_layers × n_experts bitmap (up to 2^32 cells for a 24-byte file), and
 * the tail (mp_strp_rank_tail) needs per-cell memory only when a table of that many cells is there.
 */
#include "runtime/strp.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fault.h"
#include "base/input_file.h"

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint16_t get_u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint64_t get_u64(const uint8_t *p) { return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }
static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}
static void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static void put_u64(uint8_t *p, uint64_t v)
{
    put_u32(p, (uint32_t)v);
    put_u32(p + 4, (uint32_t)(v >> 32));
}

const char *mp_strp_table_name(mp_strp_table t)
{
    switch (t) {
    case MP_STRP_TABLE_NONE: return "none";
    case MP_STRP_TABLE_I32_SLOT: return "int32-slot";
    case MP_STRP_TABLE_F32_FREQ: return "f32-frequency";
    case MP_STRP_TABLE_4BYTE_AMBIGUOUS: return "4-byte-ambiguous";
    case MP_STRP_TABLE_U64_COUNT: return "u64-count";
    }
    return "unknown";
}

static uint64_t pairs_offset(uint64_t i) { return MP_STRP_HEADER_BYTES + (uint64_t)MP_STRP_PAIR_BYTES * i; }

/* Header fields after magic and version: offsets 8 (n_layers), 12 (n_experts), 16 (slots),
 * 20 (n_ranked). */
static mp_status check_geometry(const char *name, uint32_t n_layers, uint32_t n_experts,
                                uint32_t slots, uint32_t n_ranked, const mp_strp_geometry *expect,
                                mp_error *err)
{
    if (n_layers < 1 || n_layers > MP_STRP_MAX_DIM)
        return mp_fail(err, MP_ERR_FORMAT, "profile %s: offset 8: n_layers %u: expected 1..%u", name,
                       n_layers, MP_STRP_MAX_DIM);
    if (n_experts < 1 || n_experts > MP_STRP_MAX_DIM)
        return mp_fail(err, MP_ERR_FORMAT, "profile %s: offset 12: n_experts %u: expected 1..%u",
                       name, n_experts, MP_STRP_MAX_DIM);
    if (expect && (expect->n_layers != n_layers || expect->n_experts != n_experts))
        return mp_fail(err, MP_ERR_FORMAT,
                       "profile %s: offset 8: geometry %u layers x %u experts: expected the model's "
                       "%u layers x %u experts",
                       name, n_layers, n_experts, expect->n_layers, expect->n_experts);
    uint64_t cells = (uint64_t)n_layers * n_experts;
    if (n_ranked > cells)
        return mp_fail(err, MP_ERR_FORMAT,
                       "profile %s: offset 20: n_ranked %u: expected at most n_layers x n_experts = %llu",
                       name, n_ranked, (unsigned long long)cells);
    /* slots is not bound by n_ranked: slots < n_ranked (the resident set, then more ranked pairs)
     * and slots > n_ranked (room the pairs do not fill) are both read (schemas/strp.md) */
    if (slots > cells)
        return mp_fail(err, MP_ERR_FORMAT,
                       "profile %s: offset 16: slots %u: expected at most n_layers x n_experts = %llu",
                       name, slots, (unsigned long long)cells);
    return MP_OK;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Range and uniqueness of the ranked pairs. The first offending pair in file order is reported. */
static mp_status check_pairs(const char *name, const mp_strp_pair *ranked, uint32_t n_ranked,
                             uint32_t n_layers, uint32_t n_experts, mp_error *err)
{
    for (uint32_t i = 0; i < n_ranked; i++) {
        if (ranked[i].layer >= n_layers)
            return mp_fail(err, MP_ERR_FORMAT,
                           "profile %s: offset %llu: ranked pair %u: layer %u: expected < n_layers %u",
                           name, (unsigned long long)pairs_offset(i), i, ranked[i].layer, n_layers);
        if (ranked[i].expert >= n_experts)
            return mp_fail(err, MP_ERR_FORMAT,
                           "profile %s: offset %llu: ranked pair %u: expert %u: expected < n_experts %u",
                           name, (unsigned long long)pairs_offset(i) + 2, i, ranked[i].expert,
                           n_experts);
    }
    if (n_ranked < 2)
        return MP_OK;
    /* key (layer, expert) in the high 32 bits, index in the low: after sorting, a repeat follows
     * its first occurrence. */
    uint64_t *keys = malloc(sizeof *keys * n_ranked); // (n_ranked)
    if (!keys)
        return mp_fail(err, MP_ERR_NOMEM, "profile %s: out of memory checking %u pairs", name, n_ranked);
    for (uint32_t i = 0; i < n_ranked; i++)
        keys[i] = ((uint64_t)ranked[i].layer << 48) | ((uint64_t)ranked[i].expert << 32) | i;
    qsort(keys, n_ranked, sizeof *keys, cmp_u64);
    uint32_t worst = UINT32_MAX, first = 0;
    for (uint32_t i = 1; i < n_ranked; i++) {
        if (keys[i] >> 32 == keys[i - 1] >> 32 && (uint32_t)keys[i] < worst) {
            worst = (uint32_t)keys[i];
            /* the run's first element is its first occurrence */
            uint32_t j = i - 1;
            while (j > 0 && keys[j - 1] >> 32 == keys[i] >> 32)
                j--;
            first = (uint32_t)keys[j];
        }
    }
    free(keys);
    if (worst != UINT32_MAX)
        return mp_fail(err, MP_ERR_FORMAT,
                       "profile %s: offset %llu: ranked pair %u (layer %u, expert %u) repeated: "
                       "expected unique pairs (first at offset %llu)",
                       name, (unsigned long long)pairs_offset(worst), worst, ranked[worst].layer,
                       ranked[worst].expert, (unsigned long long)pairs_offset(first));
    return MP_OK;
}

/* An f32 frequency is +0 or a finite normal positive number. Denormals are excluded on purpose:
 * small int32 slot indices (1..2^23-1) are exactly the f32 denormals, and -1 is a NaN, so every
 * int32 slot table except an all-zero one is an invalid frequency table. */
static bool f32_freq_ok(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, sizeof f);
    return bits == 0 || (isfinite(f) && f >= FLT_MIN);
}
static bool i32_slot_ok(int32_t v, uint32_t slots) { return v == -1 || (v >= 0 && (uint32_t)v < slots); }

/* A count table's entries must sum without wrapping: every consumer adds them up (routes
 * counted, routes served), and a wrapped total would print served > counted. */
static mp_status check_count_sum(const uint64_t *counts, uint64_t cells, uint64_t table_off,
                                 const char *name, mp_error *err)
{
    uint64_t total = 0;
    for (uint64_t c = 0; c < cells; c++)
        if (__builtin_add_overflow(total, counts[c], &total))
            return mp_fail(err, MP_ERR_FORMAT,
                           "profile %s: offset %llu: u64 count table: the counts up to this entry sum "
                           "past 2^64-1: expected routing counts whose total fits in 64 bits",
                           name, (unsigned long long)(table_off + 8 * c));
    return MP_OK;
}

mp_status mp_strp_validate(const mp_strp *p, const char *name, mp_error *err)
{
    if (!name)
        name = "(memory)";
    mp_status st = check_geometry(name, p->n_layers, p->n_experts, p->slots, p->n_ranked, NULL, err);
    if (st)
        return st;
    if (p->n_ranked && !p->ranked)
        return mp_fail(err, MP_ERR_ARG, "profile %s: %u ranked pairs but no array", name, p->n_ranked);
    st = check_pairs(name, p->ranked, p->n_ranked, p->n_layers, p->n_experts, err);
    if (st)
        return st;
    uint64_t cells = (uint64_t)p->n_layers * p->n_experts;
    uint64_t table_off = pairs_offset(p->n_ranked);
    switch (p->table) {
    case MP_STRP_TABLE_NONE:
        return MP_OK;
    case MP_STRP_TABLE_U64_COUNT:
        if (!p->counts)
            return mp_fail(err, MP_ERR_ARG, "profile %s: u64-count table without counts", name);
        return check_count_sum(p->counts, cells, table_off, name, err);
    case MP_STRP_TABLE_I32_SLOT:
        if (!p->slot_of)
            return mp_fail(err, MP_ERR_ARG, "profile %s: int32-slot table without slot_of", name);
        for (uint64_t c = 0; c < cells; c++)
            if (!i32_slot_ok(p->slot_of[c], p->slots))
                return mp_fail(err, MP_ERR_FORMAT,
                               "profile %s: offset %llu: slot table (layer %llu, expert %llu) = %d: "
                               "expected -1 or 0..%lld",
                               name, (unsigned long long)(table_off + 4 * c),
                               (unsigned long long)(c / p->n_experts),
                               (unsigned long long)(c % p->n_experts), p->slot_of[c],
                               (long long)p->slots - 1);
        return MP_OK;
    case MP_STRP_TABLE_F32_FREQ:
        if (!p->freq)
            return mp_fail(err, MP_ERR_ARG, "profile %s: f32-frequency table without freq", name);
        for (uint64_t c = 0; c < cells; c++) {
            uint32_t bits;
            memcpy(&bits, &p->freq[c], sizeof bits);
            if (!f32_freq_ok(bits))
                return mp_fail(err, MP_ERR_FORMAT,
                               "profile %s: offset %llu: frequency table (layer %llu, expert %llu) = "
                               "%g: expected +0 or a finite normal value > 0",
                               name, (unsigned long long)(table_off + 4 * c),
                               (unsigned long long)(c / p->n_experts),
                               (unsigned long long)(c % p->n_experts), (double)p->freq[c]);
        }
        return MP_OK;
    case MP_STRP_TABLE_4BYTE_AMBIGUOUS:
        return mp_fail(err, MP_ERR_ARG,
                       "profile %s: a 4-byte table must be written as int32-slot or f32-frequency",
                       name);
    }
    return mp_fail(err, MP_ERR_ARG, "profile %s: unknown table kind %d", name, (int)p->table);
}

void mp_strp_free(mp_strp *p)
{
    if (!p)
        return;
    free(p->ranked);
    free(p->counts);
    free(p->slot_of);
    free(p->freq);
    free(p->tail);
    memset(p, 0, sizeof *p);
}

/* A tail candidate: its routing weight and its cell (layer * n_experts + expert). */
typedef struct tail_cell {
    uint64_t weight;
    uint32_t cell;
} tail_cell;

static int by_weight_then_cell(const void *a, const void *b)
{
    const tail_cell *x = a, *y = b;
    if (x->weight != y->weight)
        return x->weight > y->weight ? -1 : 1;
    return x->cell < y->cell ? -1 : x->cell > y->cell;
}

/* A cell's routing weight as an orderable integer: the count, or the f32 frequency's bit pattern
 * (the table holds only +0 and positive normal floats, whose bit patterns order as their values). */
static uint64_t cell_weight(const mp_strp *p, uint64_t c)
{
    if (p->counts)
        return p->counts[c];
    uint32_t bits;
    memcpy(&bits, &p->freq[c], sizeof bits);
    return bits;
}

/* A row of zeros is a layer without routing (a dense block): none of its cells is an expert. */
static bool layer_routed(const mp_strp *p, uint64_t layer)
{
    for (uint64_t e = 0; e < p->n_experts; e++)
        if (cell_weight(p, layer * p->n_experts + e) != 0)
            return true;
    return false;
}

mp_status mp_strp_rank_tail(mp_strp *p, mp_error *err)
{
    free(p->tail);
    p->tail = NULL;
    p->n_tail = 0;
    if (!p->counts && !p->freq)
        return MP_OK;
    const uint64_t cells = (uint64_t)p->n_layers * p->n_experts;
    uint8_t *listed = calloc((size_t)cells, 1); // (n_layers, n_experts)
    if (!listed)
        return mp_fail(err, MP_ERR_NOMEM, "out of memory ranking %llu experts", (unsigned long long)cells);
    for (uint32_t i = 0; i < p->n_ranked; i++)
        listed[(uint64_t)p->ranked[i].layer * p->n_experts + p->ranked[i].expert] = 1;
    uint64_t n = 0;
    for (uint64_t l = 0; l < p->n_layers; l++) {
        if (!layer_routed(p, l))
            continue;
        for (uint64_t c = l * p->n_experts; c < (l + 1) * p->n_experts; c++)
            n += !listed[c];
    }
    /* the ranking's length is a u32: 2^32 cells (65536 x 65536) with nothing listed is one too many */
    if (n > UINT32_MAX - p->n_ranked) {
        free(listed);
        return mp_fail(err, MP_ERR_LIMIT, "%llu experts ranked after %u pairs: expected at most %u in all",
                       (unsigned long long)n, p->n_ranked, UINT32_MAX);
    }
    tail_cell *by = n ? malloc(sizeof *by * n) : NULL; // (n)
    mp_strp_pair *tail = n ? malloc(sizeof *tail * n) : NULL; // (n)
    if (n && (!by || !tail)) {
        free(listed), free(by), free(tail);
        return mp_fail(err, MP_ERR_NOMEM, "out of memory ranking %llu experts", (unsigned long long)n);
    }
    uint64_t k = 0;
    for (uint64_t l = 0; l < p->n_layers; l++) {
        if (!layer_routed(p, l))
            continue;
        for (uint64_t c = l * p->n_experts; c < (l + 1) * p->n_experts; c++)
            if (!listed[c])
                by[k++] = (tail_cell){cell_weight(p, c), (uint32_t)c};
    }
    if (n > 1)
        qsort(by, (size_t)n, sizeof *by, by_weight_then_cell);
    for (uint64_t i = 0; i < n; i++)
        tail[i] = (mp_strp_pair){(uint16_t)(by[i].cell / p->n_experts), (uint16_t)(by[i].cell % p->n_experts)};
    free(listed);
    free(by);
    p->tail = tail;
    p->n_tail = (uint32_t)n;
    return MP_OK;
}

/* Decode a 4-byte table: decide int32 slots vs f32 frequencies (strp.h, schemas/strp.md). */
static mp_status read_table4(const uint8_t *tab, uint64_t table_off, uint64_t cells, const char *name,
                             mp_strp *p, mp_error *err)
{
    uint64_t bad_i32 = UINT64_MAX, bad_f32 = UINT64_MAX;
    for (uint64_t c = 0; c < cells && (bad_i32 == UINT64_MAX || bad_f32 == UINT64_MAX); c++) {
        uint32_t bits = get_u32(tab + 4 * c);
        if (bad_i32 == UINT64_MAX && !i32_slot_ok((int32_t)bits, p->slots))
            bad_i32 = c;
        if (bad_f32 == UINT64_MAX && !f32_freq_ok(bits))
            bad_f32 = c;
    }
    if (bad_i32 != UINT64_MAX && bad_f32 != UINT64_MAX)
        return mp_fail(err, MP_ERR_FORMAT,
                       "profile %s: offset %llu: 4-byte table entry 0x%08x: expected int32 slots "
                       "(-1 or 0..%lld) or f32 frequencies (+0 or finite normal > 0), but this entry "
                       "is no slot and the entry at offset %llu (0x%08x) is no frequency",
                       name, (unsigned long long)(table_off + 4 * bad_i32),
                       get_u32(tab + 4 * bad_i32), (long long)p->slots - 1,
                       (unsigned long long)(table_off + 4 * bad_f32), get_u32(tab + 4 * bad_f32));
    bool as_i32 = bad_i32 == UINT64_MAX, as_f32 = bad_f32 == UINT64_MAX;
    p->table = as_i32 && as_f32 ? MP_STRP_TABLE_4BYTE_AMBIGUOUS
               : as_i32         ? MP_STRP_TABLE_I32_SLOT
                                : MP_STRP_TABLE_F32_FREQ;
    if (as_i32 && !(p->slot_of = malloc(sizeof *p->slot_of * cells))) // (n_layers, n_experts)
        return mp_fail(err, MP_ERR_NOMEM, "profile %s: out of memory for the slot table", name);
    if (as_f32 && !(p->freq = malloc(sizeof *p->freq * cells))) // (n_layers, n_experts)
        return mp_fail(err, MP_ERR_NOMEM, "profile %s: out of memory for the frequency table", name);
    for (uint64_t c = 0; c < cells; c++) {
        uint32_t bits = get_u32(tab + 4 * c);
        if (as_i32)
            p->slot_of[c] = (int32_t)bits;
        if (as_f32)
            memcpy(&p->freq[c], &bits, sizeof bits);
    }
    return MP_OK;
}

/* What the 24-byte header alone decides: magic, version, geometry, and the file's size, which
 * the header fixes to one of pairs_end + {0, 4, 8} × cells (so a reader checks it before reading
 * the rest). b holds min(size, 24) bytes; fills p's four counts. */
static mp_status check_header(const uint8_t *b, uint64_t size, const char *name,
                              const mp_strp_geometry *expect, mp_strp *p, mp_error *err)
{
    if (size < MP_STRP_HEADER_BYTES)
        return mp_fail(err, MP_ERR_FORMAT,
                       "profile %s: offset %llu: truncated header: expected %u bytes, file has %llu",
                       name, (unsigned long long)size, MP_STRP_HEADER_BYTES, (unsigned long long)size);
    if (memcmp(b, "STRP", 4) != 0)
        return mp_fail(err, MP_ERR_FORMAT,
                       "profile %s: offset 0: magic %02x %02x %02x %02x: expected \"STRP\"", name,
                       b[0], b[1], b[2], b[3]);
    uint32_t version = get_u32(b + 4);
    if (version != MP_STRP_VERSION)
        return mp_fail(err, MP_ERR_FORMAT, "profile %s: offset 4: version %u: expected %u", name,
                       version, MP_STRP_VERSION);
    p->n_layers = get_u32(b + 8);
    p->n_experts = get_u32(b + 12);
    p->slots = get_u32(b + 16);
    p->n_ranked = get_u32(b + 20);
    mp_status st = check_geometry(name, p->n_layers, p->n_experts, p->slots, p->n_ranked, expect, err);
    if (st)
        return st;
    const uint64_t pairs_end = pairs_offset(p->n_ranked);
    if (size < pairs_end)
        return mp_fail(err, MP_ERR_FORMAT,
                       "profile %s: offset %llu: truncated: expected %u ranked pairs ending at offset "
                       "%llu",
                       name, (unsigned long long)size, p->n_ranked, (unsigned long long)pairs_end);
    /* n_layers, n_experts <= 2^16: cells <= 2^32, 8 × cells fits */
    const uint64_t cells = (uint64_t)p->n_layers * p->n_experts, rest = size - pairs_end;
    if (rest != 0 && rest != 4 * cells && rest != 8 * cells)
        return mp_fail(err, MP_ERR_FORMAT,
                       "profile %s: offset %llu: trailing table of %llu bytes: expected 0, %llu (4-byte) "
                       "or %llu (8-byte) for %u x %u entries",
                       name, (unsigned long long)pairs_end, (unsigned long long)rest,
                       (unsigned long long)(4 * cells), (unsigned long long)(8 * cells), p->n_layers,
                       p->n_experts);
    return MP_OK;
}

static mp_status read_image(const uint8_t *b, size_t size, const char *name,
                            const mp_strp_geometry *expect, mp_strp *p, mp_error *err)
{
    mp_status st = check_header(b, size, name, expect, p, err);
    if (st)
        return st;
    uint64_t pairs_end = pairs_offset(p->n_ranked);
    if (p->n_ranked) {
        p->ranked = malloc(sizeof *p->ranked * p->n_ranked); // (n_ranked)
        if (!p->ranked)
            return mp_fail(err, MP_ERR_NOMEM, "profile %s: out of memory for %u pairs", name, p->n_ranked);
    }
    for (uint32_t i = 0; i < p->n_ranked; i++) {
        p->ranked[i].layer = get_u16(b + pairs_offset(i));
        p->ranked[i].expert = get_u16(b + pairs_offset(i) + 2);
    }
    st = check_pairs(name, p->ranked, p->n_ranked, p->n_layers, p->n_experts, err);
    if (st)
        return st;

    uint64_t cells = (uint64_t)p->n_layers * p->n_experts;
    uint64_t rest = size - pairs_end;
    const uint8_t *tab = b + pairs_end;
    if (rest == 0) {
        p->table = MP_STRP_TABLE_NONE;
    } else if (rest == 8 * cells) {
        p->table = MP_STRP_TABLE_U64_COUNT;
        p->counts = malloc(sizeof *p->counts * cells); // (n_layers, n_experts)
        if (!p->counts)
            return mp_fail(err, MP_ERR_NOMEM, "profile %s: out of memory for the count table", name);
        for (uint64_t c = 0; c < cells; c++)
            p->counts[c] = get_u64(tab + 8 * c);
        st = check_count_sum(p->counts, cells, pairs_end, name, err);
    } else {
        st = read_table4(tab, pairs_end, cells, name, p, err); /* rest == 4 × cells (header) */
    }
    if (!st && (st = mp_strp_rank_tail(p, err)))
        mp_error_prefix(err, "profile %s", name);
    return st;
}

mp_status mp_strp_read_buffer(const void *buf, size_t size, const char *name,
                              const mp_strp_geometry *expect, mp_strp *out, mp_error *err)
{
    memset(out, 0, sizeof *out);
    if (!name)
        name = "(memory)";
    mp_status st = read_image(buf, size, name, expect, out, err);
    if (st)
        mp_strp_free(out);
    return st;
}

mp_status mp_strp_read_file(const char *path, const mp_strp_geometry *expect, mp_strp *out,
                            mp_error *err)
{
    memset(out, 0, sizeof *out);
    int fd;
    struct stat sb;
    mp_status st = mp_input_open(path, "profile", MP_INPUT_NO_CAP, &fd, &sb, err);
    if (st)
        return st;
    /* The header first: it fixes the file's size, so a wrong or huge file is refused from 24
     * bytes (a 6 GB file of another kind took 32 s to read before its magic was looked at). */
    const uint64_t size = (uint64_t)sb.st_size;
    uint8_t head[MP_STRP_HEADER_BYTES];
    st = mp_input_pread(fd, path, "profile", head, size < sizeof head ? (size_t)size : sizeof head, 0, err);
    if (!st)
        st = check_header(head, size, path, expect, out, err);
    memset(out, 0, sizeof *out);
    if (!st && size > MP_STRP_MAX_FILE_BYTES)
        st = mp_fail(err, MP_ERR_LIMIT, "profile %s: %llu bytes, more than the %llu accepted", path,
                     (unsigned long long)size, (unsigned long long)MP_STRP_MAX_FILE_BYTES);
    uint8_t *buf = NULL;
    if (!st && !(buf = malloc((size_t)size)))
        st = mp_fail(err, MP_ERR_NOMEM, "profile %s: out of memory for %llu bytes", path,
                     (unsigned long long)size);
    if (!st)
        st = mp_input_pread(fd, path, "profile", buf, (size_t)size, 0, err);
    close(fd);
    if (!st)
        st = mp_strp_read_buffer(buf, (size_t)size, path, expect, out, err);
    free(buf);
    return st;
}

mp_status mp_strp_encode(const mp_strp *p, uint8_t **out, size_t *out_size, mp_error *err)
{
    *out = NULL;
    *out_size = 0;
    mp_status st = mp_strp_validate(p, NULL, err);
    if (st)
        return st;
    uint64_t cells = (uint64_t)p->n_layers * p->n_experts;
    uint64_t width = p->table == MP_STRP_TABLE_U64_COUNT ? 8 : p->table == MP_STRP_TABLE_NONE ? 0 : 4;
    uint64_t size = pairs_offset(p->n_ranked) + width * cells;
    if (size > SIZE_MAX)
        return mp_fail(err, MP_ERR_LIMIT, "profile: %llu bytes do not fit in memory", (unsigned long long)size);
    uint8_t *b = mp_fault_malloc((size_t)size); /* the writer's image: a fault point */
    if (!b)
        return mp_fail(err, MP_ERR_NOMEM, "profile: out of memory for %llu bytes", (unsigned long long)size);
    memcpy(b, "STRP", 4);
    put_u32(b + 4, MP_STRP_VERSION);
    put_u32(b + 8, p->n_layers);
    put_u32(b + 12, p->n_experts);
    put_u32(b + 16, p->slots);
    put_u32(b + 20, p->n_ranked);
    for (uint32_t i = 0; i < p->n_ranked; i++) {
        put_u16(b + pairs_offset(i), p->ranked[i].layer);
        put_u16(b + pairs_offset(i) + 2, p->ranked[i].expert);
    }
    uint8_t *tab = b + pairs_offset(p->n_ranked);
    for (uint64_t c = 0; c < cells && width; c++) {
        if (p->table == MP_STRP_TABLE_U64_COUNT) {
            put_u64(tab + 8 * c, p->counts[c]);
        } else if (p->table == MP_STRP_TABLE_I32_SLOT) {
            put_u32(tab + 4 * c, (uint32_t)p->slot_of[c]);
        } else {
            uint32_t bits;
            memcpy(&bits, &p->freq[c], sizeof bits);
            put_u32(tab + 4 * c, bits);
        }
    }
    *out = b;
    *out_size = (size_t)size;
    return MP_OK;
}

uint32_t mp_strp_placement(const mp_strp *p, uint64_t n_slots, uint8_t *resident)
{
    uint64_t n = n_slots == MP_STRP_PROFILE_SLOTS ? mp_strp_resident(p) : n_slots;
    if (n > mp_strp_ranking_len(p))
        n = mp_strp_ranking_len(p);
    memset(resident, 0, (size_t)p->n_layers * p->n_experts);
    for (uint32_t i = 0; i < n; i++) {
        const mp_strp_pair q = mp_strp_ranked_at(p, i);
        resident[(size_t)q.layer * p->n_experts + q.expert] = 1;
    }
    return (uint32_t)n;
}
