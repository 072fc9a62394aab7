/* runtime/gguf.c — GGUF v3 (and v2) reader over a read-only mapping or an in-memory image.
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
 */
#include "runtime/gguf.h"

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

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader assumes a little-endian host (GGUF v3 files are little-endian)"
#endif

/* Smallest on-disk records, used to bound counts before allocating anything for them. */
#define MIN_KV_BYTES 14     /* u64 key len + >=1 key byte + u32 vtype + >=1 value byte */
#define MIN_TENSOR_BYTES 33 /* u64 name len + >=1 name byte + u32 n_dims + u64 ne[0] + u32 type + u64 offset */
#define MAX_KEY_BYTES 65535 /* GGUF spec: keys are at most 2^16 - 1 bytes */
#define MAX_NAME_BYTES 64   /* GGUF spec: tensor names are at most 64 bytes */

typedef struct gguf_kv {
    mp_str key;
    uint64_t key_offset;    /* file offset of the key's length field (for messages) */
    mp_gguf_vtype type;
    uint64_t value_offset;  /* scalar: the value; string: its u64 length; array: element 0 */
    mp_gguf_vtype elem_type; /* arrays only */
    uint64_t n;             /* arrays only: element count */
    uint64_t *str_offsets;  /* string arrays only: (n) offset of each element's u64 length */
} gguf_kv;

/* Open-addressing hash index from a name to a record index; slots hold index + 1, 0 = empty.
 * Capacity is a power of two >= 2 × entries, so probes stay short. */
typedef struct name_index {
    int64_t *slots; /* (cap) */
    uint64_t mask;  /* cap - 1 */
} name_index;

struct mp_gguf {
    char *path;              /* file name used in messages (owned) */
    const uint8_t *base;     /* (size) the image */
    uint64_t size;
    void *map;               /* non-NULL when base is our mapping */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;    /* start of the data section (header end rounded up to alignment) */
    int64_t n_kv;
    gguf_kv *kvs;            /* (n_kv) */
    name_index kv_index;
    int64_t n_tensors;
    mp_gguf_tensor *tensors; /* (n_tensors) */
    name_index tensor_index;
};

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

static size_t scalar_size(mp_gguf_vtype t)
{
    switch (t) {
    case MP_GGUF_UINT8: case MP_GGUF_INT8: case MP_GGUF_BOOL: return 1;
    case MP_GGUF_UINT16: case MP_GGUF_INT16: return 2;
    case MP_GGUF_UINT32: case MP_GGUF_INT32: case MP_GGUF_FLOAT32: return 4;
    case MP_GGUF_UINT64: case MP_GGUF_INT64: case MP_GGUF_FLOAT64: return 8;
    case MP_GGUF_STRING: case MP_GGUF_ARRAY: return 0;
    }
    return 0;
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

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
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
    *v = rd32(c->base + c->pos);
    c->pos += 4;
    return MP_OK;
}

static mp_status read_u64(cursor *c, uint64_t *v, const char *what)
{
    mp_status st = need(c, 8, what);
    if (st)
        return st;
    *v = rd64(c->base + c->pos);
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
        size_t sz = scalar_size(kv->type);
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
        size_t sz = scalar_size(kv->elem_type);
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
    uint32_t a = rd32(g->base + kv->value_offset);
    if (a == 0 || (a & (a - 1)) != 0)
        return mp_fail(c->err, MP_ERR_FORMAT,
                       "file %s: offset %llu: expected general.alignment to be a power of two, "
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
                           "(expected F32, F16, BF16, Q4_0, Q8_0, Q4_K or Q6_K)",
                           c->name, (unsigned long long)type_at, (int)t->name.len, t->name.ptr,
                           tn, type);
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

mp_status mp_gguf_open(const char *path, mp_gguf **out, mp_error *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return mp_fail(err, MP_ERR_IO, "file %s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return mp_fail(err, MP_ERR_IO, "file %s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return mp_fail(err, MP_ERR_IO, "file %s: not a regular file", path);
    }
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
    if (g->map)
        munmap(g->map, (size_t)g->size);
    free(g->path);
    free(g);
}

/* ---- header facts ---- */

const char *mp_gguf_path(const mp_gguf *g) { return g->path; }
uint32_t mp_gguf_version(const mp_gguf *g) { return g->version; }
uint64_t mp_gguf_file_size(const mp_gguf *g) { return g->size; }
uint32_t mp_gguf_alignment(const mp_gguf *g) { return g->alignment; }
uint64_t mp_gguf_data_offset(const mp_gguf *g) { return g->data_offset; }

/* ---- metadata access ---- */

int64_t mp_gguf_n_kv(const mp_gguf *g) { return g->n_kv; }

mp_str mp_gguf_kv_key(const mp_gguf *g, int64_t i)
{
    if (i < 0 || i >= g->n_kv)
        return (mp_str){"", 0};
    return g->kvs[i].key;
}

mp_gguf_vtype mp_gguf_kv_type(const mp_gguf *g, int64_t i)
{
    return i >= 0 && i < g->n_kv ? g->kvs[i].type : MP_GGUF_UINT8;
}

bool mp_gguf_kv_arr_info(const mp_gguf *g, int64_t i, mp_gguf_vtype *elem_type, uint64_t *n)
{
    if (i < 0 || i >= g->n_kv || g->kvs[i].type != MP_GGUF_ARRAY)
        return false;
    *elem_type = g->kvs[i].elem_type;
    *n = g->kvs[i].n;
    return true;
}

int64_t mp_gguf_find_key(const mp_gguf *g, const char *key)
{
    return index_find(g, &g->kv_index, kv_name, key, strlen(key));
}

static mp_status find_kv(const mp_gguf *g, const char *key, const gguf_kv **kv, mp_error *err)
{
    int64_t i = mp_gguf_find_key(g, key);
    if (i < 0)
        return mp_fail(err, MP_ERR_FORMAT, "file %s: missing metadata key '%s'", g->path, key);
    *kv = &g->kvs[i];
    return MP_OK;
}

static mp_status wrong_type(const mp_gguf *g, const gguf_kv *kv, const char *expected,
                            mp_error *err)
{
    return mp_fail(err, MP_ERR_FORMAT, "file %s: offset %llu: key '%.*s': expected %s, found %s",
                   g->path, (unsigned long long)kv->key_offset, (int)kv->key.len, kv->key.ptr,
                   expected, mp_gguf_vtype_name(kv->type));
}

/* A number decoded from the image: integers keep their exact value (signed or unsigned). */
typedef struct number {
    enum { NUM_UINT, NUM_INT, NUM_FLOAT, NUM_NONE } kind;
    uint64_t u;
    int64_t i;
    double f;
} number;

static number decode_number(const uint8_t *p, mp_gguf_vtype t)
{
    number n = {.kind = NUM_NONE};
    switch (t) {
    case MP_GGUF_UINT8: n.kind = NUM_UINT; n.u = p[0]; break;
    case MP_GGUF_INT8: n.kind = NUM_INT; n.i = (int8_t)p[0]; break;
    case MP_GGUF_UINT16: { uint16_t v; memcpy(&v, p, 2); n.kind = NUM_UINT; n.u = v; break; }
    case MP_GGUF_INT16: { int16_t v; memcpy(&v, p, 2); n.kind = NUM_INT; n.i = v; break; }
    case MP_GGUF_UINT32: n.kind = NUM_UINT; n.u = rd32(p); break;
    case MP_GGUF_INT32: n.kind = NUM_INT; n.i = (int32_t)rd32(p); break;
    case MP_GGUF_UINT64: n.kind = NUM_UINT; n.u = rd64(p); break;
    case MP_GGUF_INT64: n.kind = NUM_INT; n.i = (int64_t)rd64(p); break;
    case MP_GGUF_FLOAT32: { float v; memcpy(&v, p, 4); n.kind = NUM_FLOAT; n.f = v; break; }
    case MP_GGUF_FLOAT64: { double v; memcpy(&v, p, 8); n.kind = NUM_FLOAT; n.f = v; break; }
    default: break;
    }
    return n;
}

/* Integer value of a number into [lo, hi] (signed view) or [0, hi_u] (unsigned view). */
static bool number_to_u64(number n, uint64_t *out)
{
    if (n.kind == NUM_UINT) { *out = n.u; return true; }
    if (n.kind == NUM_INT && n.i >= 0) { *out = (uint64_t)n.i; return true; }
    return false;
}

static bool number_to_i64(number n, int64_t *out)
{
    if (n.kind == NUM_INT) { *out = n.i; return true; }
    if (n.kind == NUM_UINT && n.u <= (uint64_t)INT64_MAX) { *out = (int64_t)n.u; return true; }
    return false;
}

static mp_status get_integer(const mp_gguf *g, const char *key, number *n, const gguf_kv **kvp,
                             mp_error *err)
{
    const gguf_kv *kv = NULL;
    mp_status st = find_kv(g, key, &kv, err);
    if (st)
        return st;
    *n = decode_number(g->base + kv->value_offset, kv->type);
    *kvp = kv;
    if (n->kind != NUM_UINT && n->kind != NUM_INT)
        return wrong_type(g, kv, "an integer", err);
    return MP_OK;
}

static mp_status out_of_range(const mp_gguf *g, const gguf_kv *kv, const char *target,
                              mp_error *err)
{
    return mp_fail(err, MP_ERR_FORMAT, "file %s: offset %llu: key '%.*s': value does not fit a %s",
                   g->path, (unsigned long long)kv->value_offset, (int)kv->key.len, kv->key.ptr,
                   target);
}

mp_status mp_gguf_get_u32(const mp_gguf *g, const char *key, uint32_t *out, mp_error *err)
{
    number n = {.kind = NUM_NONE};
    const gguf_kv *kv = NULL;
    mp_status st = get_integer(g, key, &n, &kv, err);
    if (st)
        return st;
    uint64_t v;
    if (!number_to_u64(n, &v) || v > UINT32_MAX)
        return out_of_range(g, kv, "u32", err);
    *out = (uint32_t)v;
    return MP_OK;
}

mp_status mp_gguf_get_u64(const mp_gguf *g, const char *key, uint64_t *out, mp_error *err)
{
    number n = {.kind = NUM_NONE};
    const gguf_kv *kv = NULL;
    mp_status st = get_integer(g, key, &n, &kv, err);
    if (st)
        return st;
    if (!number_to_u64(n, out))
        return out_of_range(g, kv, "u64", err);
    return MP_OK;
}

mp_status mp_gguf_get_i64(const mp_gguf *g, const char *key, int64_t *out, mp_error *err)
{
    number n = {.kind = NUM_NONE};
    const gguf_kv *kv = NULL;
    mp_status st = get_integer(g, key, &n, &kv, err);
    if (st)
        return st;
    if (!number_to_i64(n, out))
        return out_of_range(g, kv, "i64", err);
    return MP_OK;
}

mp_status mp_gguf_get_f64(const mp_gguf *g, const char *key, double *out, mp_error *err)
{
    const gguf_kv *kv = NULL;
    mp_status st = find_kv(g, key, &kv, err);
    if (st)
        return st;
    number n = decode_number(g->base + kv->value_offset, kv->type);
    switch (n.kind) {
    case NUM_FLOAT: *out = n.f; return MP_OK;
    case NUM_UINT: *out = (double)n.u; return MP_OK;
    case NUM_INT: *out = (double)n.i; return MP_OK;
    default: return wrong_type(g, kv, "a number", err);
    }
}

mp_status mp_gguf_get_f32(const mp_gguf *g, const char *key, float *out, mp_error *err)
{
    double v;
    mp_status st = mp_gguf_get_f64(g, key, &v, err);
    if (st)
        return st;
    *out = (float)v;
    return MP_OK;
}

mp_status mp_gguf_get_bool(const mp_gguf *g, const char *key, bool *out, mp_error *err)
{
    const gguf_kv *kv = NULL;
    mp_status st = find_kv(g, key, &kv, err);
    if (st)
        return st;
    if (kv->type != MP_GGUF_BOOL)
        return wrong_type(g, kv, "a bool", err);
    *out = g->base[kv->value_offset] != 0;
    return MP_OK;
}

static mp_str str_at(const mp_gguf *g, uint64_t len_offset)
{
    return (mp_str){(const char *)g->base + len_offset + 8, rd64(g->base + len_offset)};
}

mp_status mp_gguf_get_str(const mp_gguf *g, const char *key, mp_str *out, mp_error *err)
{
    const gguf_kv *kv = NULL;
    mp_status st = find_kv(g, key, &kv, err);
    if (st)
        return st;
    if (kv->type != MP_GGUF_STRING)
        return wrong_type(g, kv, "a string", err);
    *out = str_at(g, kv->value_offset);
    return MP_OK;
}

static mp_status find_arr(const mp_gguf *g, const char *key, const gguf_kv **kv, mp_error *err)
{
    mp_status st = find_kv(g, key, kv, err);
    if (st)
        return st;
    if ((*kv)->type != MP_GGUF_ARRAY)
        return wrong_type(g, *kv, "an array", err);
    return MP_OK;
}

mp_status mp_gguf_get_arr(const mp_gguf *g, const char *key, mp_gguf_vtype *elem_type, uint64_t *n,
                          mp_error *err)
{
    const gguf_kv *kv = NULL;
    mp_status st = find_arr(g, key, &kv, err);
    if (st)
        return st;
    *elem_type = kv->elem_type;
    *n = kv->n;
    return MP_OK;
}

static mp_status arr_index(const mp_gguf *g, const gguf_kv *kv, uint64_t i, mp_error *err)
{
    if (i >= kv->n)
        return mp_fail(err, MP_ERR_ARG, "file %s: key '%.*s': index %llu out of range (%llu elements)",
                       g->path, (int)kv->key.len, kv->key.ptr, (unsigned long long)i,
                       (unsigned long long)kv->n);
    return MP_OK;
}

mp_status mp_gguf_get_arr_str(const mp_gguf *g, const char *key, uint64_t i, mp_str *out,
                              mp_error *err)
{
    const gguf_kv *kv = NULL;
    mp_status st = find_arr(g, key, &kv, err);
    if (st)
        return st;
    if (kv->elem_type != MP_GGUF_STRING)
        return mp_fail(err, MP_ERR_FORMAT,
                       "file %s: offset %llu: key '%.*s': expected an array of strings, found "
                       "an array of %s",
                       g->path, (unsigned long long)kv->key_offset, (int)kv->key.len, kv->key.ptr,
                       mp_gguf_vtype_name(kv->elem_type));
    if ((st = arr_index(g, kv, i, err)))
        return st;
    *out = str_at(g, kv->str_offsets[i]);
    return MP_OK;
}

static mp_status arr_number(const mp_gguf *g, const char *key, uint64_t i, number *n,
                            const gguf_kv **kvp, mp_error *err)
{
    const gguf_kv *kv = NULL;
    mp_status st = find_arr(g, key, &kv, err);
    if (st)
        return st;
    *kvp = kv;
    size_t sz = scalar_size(kv->elem_type);
    if (sz == 0 || kv->elem_type == MP_GGUF_BOOL)
        return mp_fail(err, MP_ERR_FORMAT,
                       "file %s: offset %llu: key '%.*s': expected a numeric array, found an "
                       "array of %s",
                       g->path, (unsigned long long)kv->key_offset, (int)kv->key.len, kv->key.ptr,
                       mp_gguf_vtype_name(kv->elem_type));
    if ((st = arr_index(g, kv, i, err)))
        return st;
    *n = decode_number(g->base + kv->value_offset + i * sz, kv->elem_type);
    return MP_OK;
}

mp_status mp_gguf_get_arr_f64(const mp_gguf *g, const char *key, uint64_t i, double *out,
                              mp_error *err)
{
    number n = {.kind = NUM_NONE};
    const gguf_kv *kv = NULL;
    mp_status st = arr_number(g, key, i, &n, &kv, err);
    if (st)
        return st;
    *out = n.kind == NUM_FLOAT ? n.f : n.kind == NUM_UINT ? (double)n.u : (double)n.i;
    return MP_OK;
}

mp_status mp_gguf_get_arr_i64(const mp_gguf *g, const char *key, uint64_t i, int64_t *out,
                              mp_error *err)
{
    number n = {.kind = NUM_NONE};
    const gguf_kv *kv = NULL;
    mp_status st = arr_number(g, key, i, &n, &kv, err);
    if (st)
        return st;
    if (n.kind == NUM_FLOAT)
        return mp_fail(err, MP_ERR_FORMAT,
                       "file %s: offset %llu: key '%.*s': expected an integer array, found an "
                       "array of %s",
                       g->path, (unsigned long long)kv->key_offset, (int)kv->key.len, kv->key.ptr,
                       mp_gguf_vtype_name(kv->elem_type));
    if (!number_to_i64(n, out))
        return out_of_range(g, kv, "i64", err);
    return MP_OK;
}

const void *mp_gguf_arr_data(const mp_gguf *g, const char *key)
{
    int64_t i = mp_gguf_find_key(g, key);
    if (i < 0 || g->kvs[i].type != MP_GGUF_ARRAY || g->kvs[i].elem_type == MP_GGUF_STRING)
        return NULL;
    return g->base + g->kvs[i].value_offset;
}

/* ---- formatting for inspect ---- */

typedef struct strbuf {
    char *buf;
    size_t cap, len; /* invariant: len < cap, buf[len] == 0 */
    bool truncated;
} strbuf;

static void sb_put(strbuf *sb, const char *s, size_t n)
{
    if (sb->truncated)
        return;
    size_t room = sb->cap - 1 - sb->len;
    if (n > room) {
        n = room;
        sb->truncated = true;
    }
    memcpy(sb->buf + sb->len, s, n);
    sb->len += n;
    sb->buf[sb->len] = 0;
}

static void sb_printf(strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(strbuf *sb, const char *fmt, ...)
{
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        sb_put(sb, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* Shortest %g form that reads back to the same value. */
void mp_gguf_format_double(double v, bool is_f32, char *buf, size_t cap)
{
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, v);
        double back = strtod(buf, NULL);
        if (is_f32 ? (float)back == (float)v : back == v)
            return;
        if (isnan(v))
            return;
    }
}

static void sb_number(strbuf *sb, const uint8_t *p, mp_gguf_vtype t)
{
    if (t == MP_GGUF_BOOL) {
        sb_put(sb, p[0] ? "true" : "false", p[0] ? 4 : 5);
        return;
    }
    number n = decode_number(p, t);
    char tmp[48];
    if (n.kind == NUM_UINT)
        sb_printf(sb, "%llu", (unsigned long long)n.u);
    else if (n.kind == NUM_INT)
        sb_printf(sb, "%lld", (long long)n.i);
    else {
        mp_gguf_format_double(n.f, t == MP_GGUF_FLOAT32, tmp, sizeof tmp);
        sb_put(sb, tmp, strlen(tmp));
    }
}

/* A quoted string, control and non-ASCII bytes escaped, at most max_bytes of it shown. */
static void sb_quoted(strbuf *sb, mp_str s, uint64_t max_bytes)
{
    sb_put(sb, "\"", 1);
    uint64_t shown = s.len < max_bytes ? s.len : max_bytes;
    for (uint64_t i = 0; i < shown && !sb->truncated; i++) {
        unsigned char ch = (unsigned char)s.ptr[i];
        if (ch == '"' || ch == '\\') {
            char e[2] = {'\\', (char)ch};
            sb_put(sb, e, 2);
        } else if (ch == '\n')
            sb_put(sb, "\\n", 2);
        else if (ch < 0x20 || ch == 0x7f)
            sb_printf(sb, "\\x%02x", ch);
        else
            sb_put(sb, (const char *)&ch, 1);
    }
    if (shown < s.len)
        sb_printf(sb, "...(%llu bytes)", (unsigned long long)s.len);
    sb_put(sb, "\"", 1);
}

void mp_gguf_kv_format(const mp_gguf *g, int64_t i, char *buf, size_t cap, int max_elems)
{
    if (cap == 0)
        return;
    strbuf sb = {buf, cap, 0, false};
    buf[0] = 0;
    if (i < 0 || i >= g->n_kv)
        return;
    const gguf_kv *kv = &g->kvs[i];
    const uint64_t max_str = 256; /* chat templates run to kilobytes; inspect shows the start */
    if (kv->type == MP_GGUF_STRING)
        sb_quoted(&sb, str_at(g, kv->value_offset), max_str);
    else if (kv->type != MP_GGUF_ARRAY)
        sb_number(&sb, g->base + kv->value_offset, kv->type);
    else {
        sb_put(&sb, "[", 1);
        uint64_t shown = max_elems < 0 ? 0 : (uint64_t)max_elems;
        if (shown > kv->n)
            shown = kv->n;
        size_t sz = scalar_size(kv->elem_type);
        for (uint64_t e = 0; e < shown && !sb.truncated; e++) {
            if (e)
                sb_put(&sb, ", ", 2);
            if (kv->elem_type == MP_GGUF_STRING)
                sb_quoted(&sb, str_at(g, kv->str_offsets[e]), 32);
            else
                sb_number(&sb, g->base + kv->value_offset + e * sz, kv->elem_type);
        }
        if (shown < kv->n)
            sb_put(&sb, shown ? ", ..." : "...", shown ? 5 : 3);
        sb_put(&sb, "]", 1);
    }
    if (sb.truncated && cap >= 4)
        memcpy(buf + cap - 4, "...", 4);
}

/* ---- tensors ---- */

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
