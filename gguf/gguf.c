/* gguf/gguf.c — GGUF v3 (and v2) reader over a read-only mapping or an in-memory image.
 *
 * The whole header is validated at open; afterwards every getter is a bounds-free read of data
 * already proven to lie inside the image. Nothing is copied: keys, strings and tensor data point
 * into the mapping. Memory held besides the mapping is proportional to the header: one record per
 * key and per tensor, two hash indexes, and one u64 per element of each string array (so that
 * element i is found in O(1); every element occupies at least 8 bytes of the file).
 *
 * Layout (GGUF spec, little-endian): "GGUF" u32 version, u64 n_tensors, u64 n_kv;
 * n_kv × (string key, u32 vtype, value); n_tensors × (string name, u32 n_dims, u64 ne[n_dims],
 * u32 type, u64 offset); padding to general.alignment; data section. A string is u64 len + bytes.
 * An array value is u32 elem vtype, u64 n, then n values.
 * This file parses and validates; gguf/gguf_meta.c holds the metadata getters.
 */
#include "gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/quant.h"
#include "gguf/gguf_impl.h"
#include "base/input_file.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader assumes a little-endian host (GGUF v3 files are little-endian)"
#endif

/* Smallest on-disk records, used to bound counts before allocating anything for them. */
#define MIN_KV_BYTES 14     /* u64 key len + >=1 key byte + u32 vtype + >=1 value byte */
#define MIN_TENSOR_BYTES 33 /* u64 name len + >=1 name byte + u32 n_dims + u64 ne[0] + u32 type + u64 offset */
#define MAX_KEY_BYTES 65535 /* GGUF spec: keys are at most 2^16 - 1 bytes */
#define MAX_NAME_BYTES 64   /* GGUF spec: tensor names are at most 64 bytes */

/* ---- small helpers ---- */

bool mp_str_eq(mp_str s, const char *cstr)
{
    size_t n = strlen(cstr);
    return s.len == n && (n == 0 || memcmp(s.ptr, cstr, n) == 0);
}

static uint64_t hash_bytes(const void *p, uint64_t n)
{
    /* FNV-1a: keys are short ASCII names; quality is ample for an index of a few thousand. */
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ull;
    for (uint64_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}


const char *mp_gguf_vtype_name(mp_gguf_vtype t)
{
    switch (t) {
    case MP_GGUF_UINT8: return "u8";
    case MP_GGUF_INT8: return "i8";
    case MP_GGUF_UINT16: return "u16";
    case MP_GGUF_INT16: return "i16";
    case MP_GGUF_UINT32: return "u32";
    case MP_GGUF_INT32: return "i32";
    case MP_GGUF_FLOAT32: return "f32";
    case MP_GGUF_BOOL: return "bool";
    case MP_GGUF_STRING: return "string";
    case MP_GGUF_ARRAY: return "array";
    case MP_GGUF_UINT64: return "u64";
    case MP_GGUF_INT64: return "i64";
    case MP_GGUF_FLOAT64: return "f64";
    }
    return "?";
}

static bool vtype_known(uint32_t t)
{
    return t <= MP_GGUF_FLOAT64;
}


/* ---- the parse cursor: every read is checked against the image size ---- */

typedef struct cursor {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos; /* invariant: pos <= size */
    const char *name;
    mp_error *err;
} cursor;

static mp_status need(cursor *c, uint64_t n, const char *what)
{
    if (n > c->size - c->pos)
        return mp_fail(c->err, MP_ERR_FORMAT,
                       "file %s: offset %llu: truncated: expected %s (%llu bytes), but the file "
                       "ends at byte %llu",
                       c->name, (unsigned long long)c->pos, what, (unsigned long long)n,
                       (unsigned long long)c->size);
    return MP_OK;
}

static mp_status read_u32(cursor *c, uint32_t *v, const char *what)
{
    mp_status st = need(c, 4, what);
    if (st)
        return st;
    *v = gguf_rd32(c->base + c->pos);
    c->pos += 4;
    return MP_OK;
}

static mp_status read_u64(cursor *c, uint64_t *v, const char *what)
{
    mp_status st = need(c, 8, what);
    if (st)
        return st;
    *v = gguf_rd64(c->base + c->pos);
    c->pos += 8;
    return MP_OK;
}

/* A GGUF string: u64 length, then that many bytes (no terminator). */
static mp_status read_str(cursor *c, mp_str *s, const char *what)
{
    uint64_t at = c->pos, len;
    mp_status st = read_u64(c, &len, what);
    if (st)
        return st;
    if (len > c->size - c->pos)
        return mp_fail(c->err, MP_ERR_FORMAT,
                       "file %s: offset %llu: %s length %llu runs past the end of the file "
                       "(%llu bytes left)",
                       c->name, (unsigned long long)at, what, (unsigned long long)len,
                       (unsigned long long)(c->size - c->pos));
    s->ptr = (const char *)c->base + c->pos;
    s->len = len;
    c->pos += len;
    return MP_OK;
}

/* ---- name indexes ---- */

typedef mp_str (*name_of_fn)(const mp_gguf *g, int64_t i);

static mp_str kv_name(const mp_gguf *g, int64_t i) { return g->kvs[i].key; }
static mp_str tensor_name(const mp_gguf *g, int64_t i) { return g->tensors[i].name; }

static mp_status index_init(name_index *ix, int64_t n, mp_error *err)
{
    uint64_t cap = 8;
    while (cap < (uint64_t)n * 2)
        cap *= 2;
    ix->slots = calloc(cap, sizeof *ix->slots);
    if (!ix->slots)
        return mp_fail(err, MP_ERR_NOMEM, "out of memory for a GGUF index of %lld names",
                       (long long)n);
    ix->mask = cap - 1;
    return MP_OK;
}

static int64_t index_find(const mp_gguf *g, const name_index *ix, name_of_fn name_of,
                          const void *name, uint64_t len)
{
    if (!ix->slots)
        return -1;
    for (uint64_t h = hash_bytes(name, len) & ix->mask;; h = (h + 1) & ix->mask) {
        int64_t slot = ix->slots[h];
        if (slot == 0)
            return -1;
        mp_str s = name_of(g, slot - 1);
        if (s.len == len && memcmp(s.ptr, name, len) == 0)
            return slot - 1;
    }
}

/* Insert record i; returns the index of an existing record with the same name, or -1. */
static int64_t index_insert(const mp_gguf *g, name_index *ix, name_of_fn name_of, int64_t i)
{
    mp_str s = name_of(g, i);
    int64_t dup = index_find(g, ix, name_of, s.ptr, s.len);
    if (dup >= 0)
        return dup;
    uint64_t h = hash_bytes(s.ptr, s.len) & ix->mask;
    while (ix->slots[h] != 0)
        h = (h + 1) & ix->mask;
    ix->slots[h] = i + 1;
    return -1;
}

/* ---- metadata ---- */

static mp_status check_bool_byte(cursor *c, uint64_t at)
{
    uint8_t b = c->base[at];
    if (b > 1)
        return mp_fail(c->err, MP_ERR_FORMAT,
                       "file %s: offset %llu: expected a bool (0 or 1), found %u", c->name,
                       (unsigned long long)at, b);
    return MP_OK;
}

static mp_status parse_value(cursor *c, gguf_kv *kv)
{
    mp_status st;
    kv->value_offset = c->pos;
    if (kv->type == MP_GGUF_STRING) {
        mp_str s;
        return read_str(c, &s, "a string value");
    }
    if (kv->type != MP_GGUF_ARRAY) {
        size_t sz = gguf_scalar_size(kv->type);
        if ((st = need(c, sz, "a scalar value")))
            return st;
        if (kv->type == MP_GGUF_BOOL && (st = check_bool_byte(c, c->pos)))
            return st;
        c->pos += sz;
        return MP_OK;
    }
    uint64_t at = c->pos;
    uint32_t et;
    if ((st = read_u32(c, &et, "an array element type")))
        return st;
    if (et == MP_GGUF_ARRAY)
        return mp_fail(c->err, MP_ERR_FORMAT,
                       "file %s: offset %llu: nested arrays are not supported (key '%.*s')",
                       c->name, (unsigned long long)at, (int)kv->key.len, kv->key.ptr);
    if (!vtype_known(et))
        return mp_fail(c->err, MP_ERR_FORMAT,
                       "file %s: offset %llu: expected an array element type 0..12, found %u",
                       c->name, (unsigned long long)at, et);
    kv->elem_type = (mp_gguf_vtype)et;
    uint64_t n_at = c->pos;
    if ((st = read_u64(c, &kv->n, "an array length")))
        return st;
    kv->value_offset = c->pos;
    uint64_t left = c->size - c->pos;
    if (et != MP_GGUF_STRING) {
        size_t sz = gguf_scalar_size(kv->elem_type);
        if (kv->n > left / sz)
            return mp_fail(c->err, MP_ERR_FORMAT,
                           "file %s: offset %llu: array of %llu %s elements (%llu bytes each) "
                           "runs past the end of the file (%llu bytes left)",
                           c->name, (unsigned long long)n_at, (unsigned long long)kv->n,
                           mp_gguf_vtype_name(kv->elem_type), (unsigned long long)sz,
                           (unsigned long long)left);
        if (et == MP_GGUF_BOOL)
            for (uint64_t i = 0; i < kv->n; i++)
                if ((st = check_bool_byte(c, c->pos + i)))
                    return st;
        c->pos += kv->n * sz;
        return MP_OK;
    }
    /* Strings: every element is at least its 8-byte length, which bounds n before allocating. */
    if (kv->n > left / 8)
        return mp_fail(c->err, MP_ERR_FORMAT,
                       "file %s: offset %llu: array of %llu strings cannot fit in the %llu bytes "
                       "left in the file",
                       c->name, (unsigned long long)n_at, (unsigned long long)kv->n,
                       (unsigned long long)left);
    kv->str_offsets = malloc((kv->n ? kv->n : 1) * sizeof *kv->str_offsets);
    if (!kv->str_offsets)
        return mp_fail(c->err, MP_ERR_NOMEM, "file %s: out of memory indexing %llu strings",
                       c->name, (unsigned long long)kv->n);
    for (uint64_t i = 0; i < kv->n; i++) {
        mp_str s;
        kv->str_offsets[i] = c->pos;
        if ((st = read_str(c, &s, "an array string")))
            return st;
    }
    return MP_OK;
}

static mp_status parse_kvs(mp_gguf *g, cursor *c)
{
    mp_status st;
    for (int64_t i = 0; i < g->n_kv; i++) {
        gguf_kv *kv = &g->kvs[i];
        kv->key_offset = c->pos;
        if ((st = read_str(c, &kv->key, "a metadata key")))
            return st;
        if (kv->key.len == 0 || kv->key.len > MAX_KEY_BYTES)
            return mp_fail(c->err, MP_ERR_FORMAT,
                           "file %s: offset %llu: expected a key of 1..%d bytes, found %llu bytes",
                           c->name, (unsigned long long)kv->key_offset, MAX_KEY_BYTES,
                           (unsigned long long)kv->key.len);
        int64_t dup = index_insert(g, &g->kv_index, kv_name, i);
        if (dup >= 0)
            return mp_fail(c->err, MP_ERR_FORMAT,
                           "file %s: offset %llu: duplicate key '%.*s' (first at offset %llu)",
                           c->name, (unsigned long long)kv->key_offset, (int)kv->key.len,
                           kv->key.ptr, (unsigned long long)g->kvs[dup].key_offset);
        uint64_t type_at = c->pos;
        uint32_t t;
        if ((st = read_u32(c, &t, "a value type")))
            return st;
        if (!vtype_known(t))
            return mp_fail(c->err, MP_ERR_FORMAT,
                           "file %s: offset %llu: expected a value type 0..12 for key '%.*s', "
                           "found %u",
                           c->name, (unsigned long long)type_at, (int)kv->key.len, kv->key.ptr, t);
        kv->type = (mp_gguf_vtype)t;
        if ((st = parse_value(c, kv)))
            return st;
    }
    return MP_OK;
}

static mp_status read_alignment(mp_gguf *g, cursor *c)
{
    g->alignment = 32;
    int64_t i = mp_gguf_find_key(g, "general.alignment");
    if (i < 0)
        return MP_OK;
    const gguf_kv *kv = &g->kvs[i];
    if (kv->type != MP_GGUF_UINT32)
        return mp_fail(c->err, MP_ERR_FORMAT,
                       "file %s: offset %llu: expected general.alignment to be a u32, found %s",
                       c->name, (unsigned long long)kv->key_offset, mp_gguf_vtype_name(kv->type));
    uint32_t a = gguf_rd32(g->base + kv->value_offset);
    /* GGUF requires a multiple of 8; below that f32 and f16 tensor data could start at an
     * address their loads may not use (misaligned access) */
    if (a < 8 || (a & (a - 1)) != 0)
        return mp_fail(c->err, MP_ERR_FORMAT,
                       "file %s: offset %llu: expected general.alignment to be a power of two >= 8, "
                       "found %u",
                       c->name, (unsigned long long)kv->value_offset, a);
    g->alignment = a;
    return MP_OK;
}

/* ---- tensors ---- */

/* Tensor type ids of the GGUF spec (ggml_type), for messages about types we do not load. */
static const char *ggml_type_name(uint32_t t)
{
    static const char *const names[] = {
        [0] = "F32",      [1] = "F16",      [2] = "Q4_0",    [3] = "Q4_1",   [6] = "Q5_0",
        [7] = "Q5_1",     [8] = "Q8_0",     [9] = "Q8_1",    [10] = "Q2_K",  [11] = "Q3_K",
        [12] = "Q4_K",    [13] = "Q5_K",    [14] = "Q6_K",   [15] = "Q8_K",  [16] = "IQ2_XXS",
        [17] = "IQ2_XS",  [18] = "IQ3_XXS", [19] = "IQ1_S",  [20] = "IQ4_NL", [21] = "IQ3_S",
        [22] = "IQ2_S",   [23] = "IQ4_XS",  [24] = "I8",     [25] = "I16",   [26] = "I32",
        [27] = "I64",     [28] = "F64",     [29] = "IQ1_M",  [30] = "BF16",  [34] = "TQ1_0",
        [35] = "TQ2_0",   [39] = "MXFP4",
    };
    return t < sizeof names / sizeof names[0] ? names[t] : NULL;
}

static mp_status parse_tensor(mp_gguf *g, cursor *c, int64_t i, uint64_t *rel_offset)
{
    mp_status st;
    mp_gguf_tensor *t = &g->tensors[i];
    uint64_t at = c->pos;
    if ((st = read_str(c, &t->name, "a tensor name")))
        return st;
    if (t->name.len == 0 || t->name.len > MAX_NAME_BYTES)
        return mp_fail(c->err, MP_ERR_FORMAT,
                       "file %s: offset %llu: expected a tensor name of 1..%d bytes, found %llu",
                       c->name, (unsigned long long)at, MAX_NAME_BYTES,
                       (unsigned long long)t->name.len);
    int64_t dup = index_insert(g, &g->tensor_index, tensor_name, i);
    if (dup >= 0)
        return mp_fail(c->err, MP_ERR_FORMAT, "file %s: offset %llu: duplicate tensor name '%.*s'",
                       c->name, (unsigned long long)at, (int)t->name.len, t->name.ptr);
    uint64_t dims_at = c->pos;
    if ((st = read_u32(c, &t->n_dims, "a tensor's n_dims")))
        return st;
    if (t->n_dims < 1 || t->n_dims > MP_GGUF_MAX_DIMS)
        return mp_fail(c->err, MP_ERR_FORMAT,
                       "file %s: offset %llu: tensor '%.*s': expected n_dims 1..%d, found %u",
                       c->name, (unsigned long long)dims_at, (int)t->name.len, t->name.ptr,
                       MP_GGUF_MAX_DIMS, t->n_dims);
    uint64_t ne_at = c->pos;
    uint64_t n_elems = 1;
    for (int d = 0; d < MP_GGUF_MAX_DIMS; d++) {
        t->ne[d] = 1;
        if ((uint32_t)d >= t->n_dims)
            continue;
        uint64_t dim_at = c->pos, ne;
        if ((st = read_u64(c, &ne, "a tensor dimension")))
            return st;
        if (ne < 1 || ne > (uint64_t)INT64_MAX)
            return mp_fail(c->err, MP_ERR_FORMAT,
                           "file %s: offset %llu: tensor '%.*s': expected dimension %d in "
                           "1..2^63-1, found %llu",
                           c->name, (unsigned long long)dim_at, (int)t->name.len, t->name.ptr, d,
                           (unsigned long long)ne);
        if (__builtin_mul_overflow(n_elems, ne, &n_elems) || n_elems > (uint64_t)INT64_MAX)
            return mp_fail(c->err, MP_ERR_FORMAT,
                           "file %s: offset %llu: tensor '%.*s': element count overflows 2^63",
                           c->name, (unsigned long long)ne_at, (int)t->name.len, t->name.ptr);
        t->ne[d] = (int64_t)ne;
    }
    uint64_t type_at = c->pos;
    uint32_t type;
    if ((st = read_u32(c, &type, "a tensor type")))
        return st;
    if (!mp_type_supported((int)type)) {
        const char *tn = ggml_type_name(type);
        if (tn)
            return mp_fail(c->err, MP_ERR_UNSUPPORTED,
                           "file %s: offset %llu: tensor '%.*s': type %s (%u) is not supported "
                           "(expected one of %s)",
                           c->name, (unsigned long long)type_at, (int)t->name.len, t->name.ptr,
                           tn, type, mp_type_names());
        return mp_fail(c->err, MP_ERR_FORMAT,
                       "file %s: offset %llu: tensor '%.*s': unknown tensor type %u", c->name,
                       (unsigned long long)type_at, (int)t->name.len, t->name.ptr, type);
    }
    t->type = (int)type;
    int64_t block = mp_type_block_elems(t->type);
    if (t->ne[0] % block != 0)
        return mp_fail(c->err, MP_ERR_FORMAT,
                       "file %s: offset %llu: tensor '%.*s': expected ne[0] to be a multiple of "
                       "%s's block of %lld, found %lld",
                       c->name, (unsigned long long)ne_at, (int)t->name.len, t->name.ptr,
                       mp_type_name(t->type), (long long)block, (long long)t->ne[0]);
    uint64_t nbytes = 0;
    bool overflow = __builtin_mul_overflow((uint64_t)(t->ne[0] / block),
                                           (uint64_t)mp_type_block_bytes(t->type), &nbytes);
    for (int d = 1; d < MP_GGUF_MAX_DIMS; d++)
        if (overflow || __builtin_mul_overflow(nbytes, (uint64_t)t->ne[d], &nbytes))
            return mp_fail(c->err, MP_ERR_FORMAT,
                           "file %s: offset %llu: tensor '%.*s': byte size overflows 2^64",
                           c->name, (unsigned long long)ne_at, (int)t->name.len, t->name.ptr);
    t->nbytes = nbytes;
    uint64_t off_at = c->pos;
    if ((st = read_u64(c, rel_offset, "a tensor data offset")))
        return st;
    if (*rel_offset % g->alignment != 0)
        return mp_fail(c->err, MP_ERR_FORMAT,
                       "file %s: offset %llu: tensor '%.*s': data offset %llu is not a multiple "
                       "of the alignment %u",
                       c->name, (unsigned long long)off_at, (int)t->name.len, t->name.ptr,
                       (unsigned long long)*rel_offset, g->alignment);
    /* The absolute offset is checked once the data section's start is known; keep where the
     * field was for that message. */
    t->file_offset = off_at;
    return MP_OK;
}

typedef struct span {
    uint64_t begin, end; /* absolute byte range [begin, end) */
    int64_t tensor;
} span;

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static mp_status parse_tensors(mp_gguf *g, cursor *c)
{
    mp_status st;
    uint64_t *rel = malloc((g->n_tensors ? g->n_tensors : 1) * sizeof *rel);
    span *spans = malloc((g->n_tensors ? g->n_tensors : 1) * sizeof *spans);
    if (!rel || !spans) {
        st = mp_fail(c->err, MP_ERR_NOMEM, "file %s: out of memory for %lld tensor infos", c->name,
                     (long long)g->n_tensors);
        goto done;
    }
    for (int64_t i = 0; i < g->n_tensors; i++)
        if ((st = parse_tensor(g, c, i, &rel[i])))
            goto done;
    /* The data section starts at the header's end rounded up to the alignment. */
    uint64_t header_end = c->pos;
    uint64_t pad = (g->alignment - header_end % g->alignment) % g->alignment;
    if (__builtin_add_overflow(header_end, pad, &g->data_offset)) {
        st = mp_fail(c->err, MP_ERR_FORMAT, "file %s: offset %llu: data section start overflows",
                     c->name, (unsigned long long)header_end);
        goto done;
    }
    for (int64_t i = 0; i < g->n_tensors; i++) {
        mp_gguf_tensor *t = &g->tensors[i];
        uint64_t field_at = t->file_offset, begin, end;
        if (__builtin_add_overflow(g->data_offset, rel[i], &begin) ||
            __builtin_add_overflow(begin, t->nbytes, &end) || end > g->size) {
            st = mp_fail(c->err, MP_ERR_FORMAT,
                         "file %s: offset %llu: tensor '%.*s': data [%llu + %llu, +%llu bytes) "
                         "lies outside the file of %llu bytes",
                         c->name, (unsigned long long)field_at, (int)t->name.len, t->name.ptr,
                         (unsigned long long)g->data_offset, (unsigned long long)rel[i],
                         (unsigned long long)t->nbytes, (unsigned long long)g->size);
            goto done;
        }
        t->file_offset = begin;
        t->data = g->base + begin;
        spans[i] = (span){begin, end, i};
    }
    qsort(spans, (size_t)g->n_tensors, sizeof *spans, span_cmp);
    for (int64_t i = 1; i < g->n_tensors; i++)
        if (spans[i].begin < spans[i - 1].end) {
            const mp_gguf_tensor *a = &g->tensors[spans[i - 1].tensor];
            const mp_gguf_tensor *b = &g->tensors[spans[i].tensor];
            st = mp_fail(c->err, MP_ERR_FORMAT,
                         "file %s: offset %llu: tensor '%.*s' data overlaps tensor '%.*s' "
                         "(which ends at offset %llu)",
                         c->name, (unsigned long long)b->file_offset, (int)b->name.len,
                         b->name.ptr, (int)a->name.len, a->name.ptr,
                         (unsigned long long)spans[i - 1].end);
            goto done;
        }
    st = MP_OK;
done:
    free(rel);
    free(spans);
    return st;
}

/* ---- open / close ---- */

static mp_status parse(mp_gguf *g, mp_error *err)
{
    cursor c = {g->base, g->size, 0, g->path, err};
    mp_status st;
    if ((st = need(&c, 4, "the magic \"GGUF\"")))
        return st;
    if (memcmp(g->base, "GGUF", 4) != 0)
        return mp_fail(err, MP_ERR_FORMAT,
                       "file %s: offset 0: expected the magic \"GGUF\", found bytes %02x %02x %02x "
                       "%02x",
                       g->path, g->base[0], g->base[1], g->base[2], g->base[3]);
    c.pos = 4;
    if ((st = read_u32(&c, &g->version, "the version")))
        return st;
    if (g->version != 3 && g->version != 2) {
        if (g->version == 1)
            return mp_fail(err, MP_ERR_UNSUPPORTED,
                           "file %s: offset 4: GGUF version 1 is not supported (expected 3 or 2)",
                           g->path);
        if ((g->version & 0xffff) == 0 && (g->version >> 16) != 0)
            return mp_fail(err, MP_ERR_UNSUPPORTED,
                           "file %s: offset 4: version %u looks like a big-endian GGUF, which is "
                           "not supported (expected little-endian version 3)",
                           g->path, g->version);
        return mp_fail(err, MP_ERR_FORMAT, "file %s: offset 4: expected version 3 (or 2), found %u",
                       g->path, g->version);
    }
    uint64_t n_tensors, n_kv;
    if ((st = read_u64(&c, &n_tensors, "the tensor count")))
        return st;
    if ((st = read_u64(&c, &n_kv, "the metadata key count")))
        return st;
    uint64_t left = c.size - c.pos;
    if (n_kv > left / MIN_KV_BYTES)
        return mp_fail(err, MP_ERR_FORMAT,
                       "file %s: offset 16: %llu metadata keys cannot fit in the %llu bytes left "
                       "(each takes at least %d)",
                       g->path, (unsigned long long)n_kv, (unsigned long long)left, MIN_KV_BYTES);
    if (n_tensors > left / MIN_TENSOR_BYTES)
        return mp_fail(err, MP_ERR_FORMAT,
                       "file %s: offset 8: %llu tensor infos cannot fit in the %llu bytes left "
                       "(each takes at least %d)",
                       g->path, (unsigned long long)n_tensors, (unsigned long long)left,
                       MIN_TENSOR_BYTES);
    g->n_kv = (int64_t)n_kv;
    g->n_tensors = (int64_t)n_tensors;
    g->kvs = calloc(n_kv ? n_kv : 1, sizeof *g->kvs);
    g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
    if (!g->kvs || !g->tensors)
        return mp_fail(err, MP_ERR_NOMEM, "file %s: out of memory for %llu keys and %llu tensors",
                       g->path, (unsigned long long)n_kv, (unsigned long long)n_tensors);
    if ((st = index_init(&g->kv_index, g->n_kv, err)) ||
        (st = index_init(&g->tensor_index, g->n_tensors, err)))
        return st;
    if ((st = parse_kvs(g, &c)))
        return st;
    if ((st = read_alignment(g, &c)))
        return st;
    return parse_tensors(g, &c);
}

static mp_status open_image(const void *base, uint64_t size, void *map, const char *name,
                            mp_gguf **out, mp_error *err)
{
    *out = NULL;
    mp_gguf *g = calloc(1, sizeof *g);
    char *path = strdup(name ? name : "(buffer)");
    if (!g || !path) {
        free(g);
        free(path);
        if (map)
            munmap(map, size);
        return mp_fail(err, MP_ERR_NOMEM, "file %s: out of memory", name ? name : "(buffer)");
    }
    g->path = path;
    g->base = base;
    g->size = size;
    g->map = map;
    mp_status st = parse(g, err);
    if (st) {
        mp_gguf_close(g);
        return st;
    }
    *out = g;
    return MP_OK;
}

mp_status mp_gguf_open_buffer(const void *buf, size_t size, const char *name, mp_gguf **out,
                              mp_error *err)
{
    static const uint8_t empty[1];
    return open_image(size ? buf : empty, size, NULL, name, out, err);
}

static mp_status open_one(const char *path, mp_gguf **out, mp_error *err);

/* An integer key of g, or dflt when absent; false (with err set) when present but not an integer. */
static bool int_key(const mp_gguf *g, const char *key, int64_t dflt, int64_t *out, mp_error *err)
{
    *out = dflt;
    return mp_gguf_find_key(g, key) < 0 || mp_gguf_get_i64(g, key, out, err) == MP_OK;
}

/* A model split in several files (llama.cpp's gguf-split): g, opened from `path`, is the first
 * (split.no 0 of split.count n), whose name ends in -00001-of-<n, 5 digits>.gguf, and holds every
 * metadata key; the others, -0000k-of-..., hold their split.* keys and tensors. They are opened
 * and checked (each its shard number and the same count; together split.tensors.count tensors, no
 * name twice), and their tensors joined to g's. Nothing to do for a file without split.count > 1. */
static mp_status join_shards(mp_gguf *g, const char *path, mp_error *err)
{
    int64_t count, no, n_total;
    if (!int_key(g, "split.count", 1, &count, err) || !int_key(g, "split.no", 0, &no, err) ||
        !int_key(g, "split.tensors.count", -1, &n_total, err))
        return MP_ERR_FORMAT;
    if (count <= 1)
        return MP_OK;
    if (count > 99999 || no < 0 || no >= count)
        return mp_fail(err, MP_ERR_FORMAT, "file %s: split.no %lld of split.count %lld: expected 0 <= no < count "
                       "<= 99999", path, (long long)no, (long long)count);
    char tail[40];
    snprintf(tail, sizeof tail, "-%05lld-of-%05lld.gguf", (long long)no + 1, (long long)count);
    const size_t len = strlen(path), tl = strlen(tail);
    if (no != 0)
        return mp_fail(err, MP_ERR_FORMAT, "file %s: shard %lld of a model split in %lld files: open the first, "
                       "%.*s-00001-of-%05lld.gguf", path, (long long)no + 1, (long long)count,
                       (int)(len >= tl && !strcmp(path + len - tl, tail) ? len - tl : len), path, (long long)count);
    if (len < tl || strcmp(path + len - tl, tail) != 0)
        return mp_fail(err, MP_ERR_FORMAT, "file %s: the first of a model split in %lld files, but its name does not "
                       "end in %s: the other files cannot be found", path, (long long)count, tail);
    g->shards = calloc((size_t)count - 1, sizeof *g->shards);
    if (!g->shards)
        return mp_fail(err, MP_ERR_NOMEM, "file %s: out of memory", path);
    char *name = malloc(len + 1);
    if (!name)
        return mp_fail(err, MP_ERR_NOMEM, "file %s: out of memory", path);
    int64_t total = g->n_tensors;
    mp_status st = MP_OK;
    for (int64_t k = 1; k < count && !st; k++) {
        snprintf(name, len + 1, "%.*s-%05lld-of-%05lld.gguf", (int)(len - tl), path, (long long)k + 1,
                 (long long)count);
        mp_error e = {0};
        mp_gguf *s = NULL;
        if ((st = open_one(name, &s, &e))) {
            st = mp_fail(err, e.code, "model %s is split in %lld files: %s", path, (long long)count, e.msg);
            break;
        }
        g->shards[g->n_shards++] = s;
        int64_t s_no, s_count;
        if (!int_key(s, "split.no", -1, &s_no, err) || !int_key(s, "split.count", -1, &s_count, err))
            st = MP_ERR_FORMAT;
        else if (s_no != k || s_count != count)
            st = mp_fail(err, MP_ERR_FORMAT, "file %s: split.no %lld of split.count %lld: expected shard %lld of "
                         "%lld (the model of %s)", name, (long long)s_no, (long long)s_count, (long long)k,
                         (long long)count, path);
        total += s->n_tensors;
    }
    free(name);
    if (st)
        return st;
    if (n_total >= 0 && total != n_total)
        return mp_fail(err, MP_ERR_FORMAT, "file %s: split.tensors.count %lld, but its %lld files hold %lld tensors",
                       path, (long long)n_total, (long long)count, (long long)total);
    mp_gguf_tensor *all = malloc((size_t)(total ? total : 1) * sizeof *all);
    if (!all)
        return mp_fail(err, MP_ERR_NOMEM, "file %s: out of memory for %lld tensors", path, (long long)total);
    memcpy(all, g->tensors, (size_t)g->n_tensors * sizeof *all);
    int64_t at = g->n_tensors;
    for (int64_t k = 0; k < g->n_shards; k++) {
        memcpy(all + at, g->shards[k]->tensors, (size_t)g->shards[k]->n_tensors * sizeof *all);
        at += g->shards[k]->n_tensors;
    }
    free(g->tensors);
    free(g->tensor_index.slots);
    g->tensors = all;
    g->n_tensors = total;
    g->tensor_index.slots = NULL;
    if ((st = index_init(&g->tensor_index, total, err)))
        return st;
    for (int64_t i = 0; i < total; i++) {
        const int64_t dup = index_insert(g, &g->tensor_index, tensor_name, i);
        if (dup >= 0)
            return mp_fail(err, MP_ERR_FORMAT, "model %s: tensor '%.*s' is in two of its %lld files", path,
                           (int)all[i].name.len, all[i].name.ptr, (long long)count);
    }
    return MP_OK;
}

mp_status mp_gguf_open(const char *path, mp_gguf **out, mp_error *err)
{
    mp_status st = open_one(path, out, err);
    if (st)
        return st;
    if ((st = join_shards(*out, path, err))) {
        mp_gguf_close(*out);
        *out = NULL;
    }
    return st;
}

/* One file, as it is (mp_gguf_open joins a split model's other files to its first). */
static mp_status open_one(const char *path, mp_gguf **out, mp_error *err)
{
    *out = NULL;
    int fd;
    struct stat sb;
    mp_status st = mp_input_open(path, "file", MP_INPUT_NO_CAP, &fd, &sb, err);
    if (st)
        return st;
    uint64_t size = (uint64_t)sb.st_size;
    if (size == 0) {
        close(fd);
        return mp_gguf_open_buffer(NULL, 0, path, out, err);
    }
    if (size > SIZE_MAX) {
        close(fd);
        return mp_fail(err, MP_ERR_LIMIT, "file %s: %llu bytes cannot be mapped", path,
                       (unsigned long long)size);
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file alive */
    if (map == MAP_FAILED)
        return mp_fail(err, MP_ERR_IO, "file %s: cannot mmap %llu bytes: %s", path,
                       (unsigned long long)size, strerror(e));
    return open_image(map, size, map, path, out, err);
}

void mp_gguf_close(mp_gguf *g)
{
    if (!g)
        return;
    if (g->kvs)
        for (int64_t i = 0; i < g->n_kv; i++)
            free(g->kvs[i].str_offsets);
    free(g->kvs);
    free(g->tensors);
    free(g->kv_index.slots);
    free(g->tensor_index.slots);
    for (int64_t k = 0; k < g->n_shards; k++)
        mp_gguf_close(g->shards[k]);
    free(g->shards);
    if (g->map)
        munmap(g->map, (size_t)g->size);
    free(g->path);
    free(g);
}

/* ---- header facts ---- */

const char *mp_gguf_path(const mp_gguf *g) { return g->path; }
uint32_t mp_gguf_version(const mp_gguf *g) { return g->version; }
uint64_t mp_gguf_file_size(const mp_gguf *g)
{
    uint64_t n = g->size;
    for (int64_t k = 0; k < g->n_shards; k++)
        n += g->shards[k]->size;
    return n;
}

int64_t mp_gguf_n_files(const mp_gguf *g) { return 1 + g->n_shards; }
uint32_t mp_gguf_alignment(const mp_gguf *g) { return g->alignment; }
uint64_t mp_gguf_data_offset(const mp_gguf *g) { return g->data_offset; }

/* ---- lookups ---- */

int64_t mp_gguf_find_key(const mp_gguf *g, const char *key)
{
    return index_find(g, &g->kv_index, kv_name, key, strlen(key));
}

int64_t mp_gguf_n_tensors(const mp_gguf *g) { return g->n_tensors; }

const mp_gguf_tensor *mp_gguf_tensor_at(const mp_gguf *g, int64_t i)
{
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const mp_gguf_tensor *mp_gguf_find_tensor(const mp_gguf *g, const char *name)
{
    int64_t i = index_find(g, &g->tensor_index, tensor_name, name, strlen(name));
    return i >= 0 ? &g->tensors[i] : NULL;
}
