/* gguf/gguf_write.c — streaming GGUF v3 writer (see gguf.h for the usage protocol).
 *
 * Metadata (keys and tensor infos) is serialized into memory as it is added; tensor data is
 * streamed straight to PATH.tmp.<pid> (base/atomic_file.h) once the header has been written,
 * which happens at the first mp_gguf_write_data (or at finish when there is no data). finish
 * fsyncs the temporary file and renames it to PATH only after every tensor received exactly its
 * byte count. Every allocation and write passes a fault point (base/fault.h).
 *
 * Invariants:
 *  - keys and tensor names are unique; every tensor info is valid for the reader (n_dims 1..4,
 *    dims >= 1, supported type, ne[0] a multiple of the block size, size without overflow);
 *  - tensor i's data starts at data section + offset[i], offset[i] a multiple of the alignment,
 *    and the bytes between tensors (and after the last) are zero padding;
 *  - after any failure the temporary file is gone and every later call fails (w->failed).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/quant.h"
#include "base/atomic_file.h"
#include "base/fault.h"
#include "gguf/gguf.h"
#include "gguf/gguf_impl.h"

#define MAX_KEY_BYTES 65535
#define MAX_NAME_BYTES 64
#define MAX_ALIGNMENT (1u << 20) /* larger pads would waste space for no reader we know */

typedef struct wtensor {
    char *name;
    uint32_t n_dims;
    int64_t ne[MP_GGUF_MAX_DIMS];
    int type;
    uint64_t nbytes;
    uint64_t offset; /* relative to the data section, set when the header is written */
} wtensor;

typedef struct bytes {
    uint8_t *p;
    size_t len, cap;
} bytes;

struct mp_gguf_writer {
    char *path;
    mp_outfile out;    /* the temporary being written */
    FILE *f;           /* out's checked stream, NULL once dropped or committed */
    uint32_t alignment;
    bool alignment_set;
    bytes kv;          /* serialized key/value records, in order */
    int64_t n_kv;
    char **keys;       /* (n_kv) for duplicate checks */
    wtensor *tensors;  /* (n_tensors) */
    int64_t n_tensors, cap_tensors;
    bool header_done;  /* no more keys or infos once data has started */
    int64_t cur;       /* tensor whose data is being written */
    uint64_t cur_done; /* bytes of tensor cur written so far */
    uint64_t pos;      /* bytes written to the file so far */
    bool failed;
};

/* ---- failure handling: any error removes the temporary file and poisons the writer ---- */

static void drop_file(mp_gguf_writer *w)
{
    if (w->f) {
        w->f = NULL;
        mp_outfile_abort(&w->out);
    }
}

static mp_status wfail(mp_gguf_writer *w, mp_error *err, mp_status code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static mp_status wfail(mp_gguf_writer *w, mp_error *err, mp_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    mp_failv(err, code, fmt, ap);
    va_end(ap);
    w->failed = true;
    drop_file(w);
    return code;
}

static mp_status usable(mp_gguf_writer *w, mp_error *err)
{
    if (w->failed)
        return mp_fail(err, MP_ERR_ARG, "file %s: writer already failed; abort it", w->path);
    return MP_OK;
}

/* ---- in-memory metadata ---- */

static bool put(bytes *b, const void *p, size_t n)
{
    if (n == 0)
        return true; /* p may be NULL for an empty array */
    if (n > SIZE_MAX - b->len)
        return false;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap = cap > SIZE_MAX / 2 ? b->len + n : cap * 2;
        uint8_t *q = mp_fault_realloc(b->p, cap);
        if (!q)
            return false;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
    return true;
}

static bool put_u32(bytes *b, uint32_t v) { return put(b, &v, 4); }
static bool put_u64(bytes *b, uint64_t v) { return put(b, &v, 8); }
static bool put_str(bytes *b, const char *s, size_t n) { return put_u64(b, n) && put(b, s, n); }

/* Checks that key can be added now, records it, and starts its record (key + type). */
static mp_status begin_kv(mp_gguf_writer *w, const char *key, mp_gguf_vtype type, mp_error *err)
{
    mp_status st = usable(w, err);
    if (st)
        return st;
    if (w->header_done)
        return wfail(w, err, MP_ERR_ARG, "file %s: key '%s' added after tensor data started",
                     w->path, key);
    size_t n = strlen(key);
    if (n == 0 || n > MAX_KEY_BYTES)
        return wfail(w, err, MP_ERR_ARG, "file %s: key of %zu bytes (expected 1..%d)", w->path, n,
                     MAX_KEY_BYTES);
    for (int64_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->keys[i], key))
            return wfail(w, err, MP_ERR_ARG, "file %s: duplicate key '%s'", w->path, key);
    char **keys = mp_fault_realloc(w->keys, (size_t)(w->n_kv + 1) * sizeof *keys);
    if (!keys)
        return wfail(w, err, MP_ERR_NOMEM, "file %s: out of memory", w->path);
    w->keys = keys;
    if (!(keys[w->n_kv] = mp_fault_strdup(key)))
        return wfail(w, err, MP_ERR_NOMEM, "file %s: out of memory", w->path);
    w->n_kv++;
    if (!put_str(&w->kv, key, n) || !put_u32(&w->kv, (uint32_t)type))
        return wfail(w, err, MP_ERR_NOMEM, "file %s: out of memory", w->path);
    return MP_OK;
}

static mp_status kv_done(mp_gguf_writer *w, bool ok, mp_error *err)
{
    return ok ? MP_OK : wfail(w, err, MP_ERR_NOMEM, "file %s: out of memory", w->path);
}

static mp_status check_bools(mp_gguf_writer *w, const uint8_t *p, uint64_t n, const char *key,
                             mp_error *err)
{
    for (uint64_t i = 0; i < n; i++)
        if (p[i] > 1)
            return wfail(w, err, MP_ERR_ARG, "file %s: key '%s': bool %llu is %u (expected 0 or 1)",
                         w->path, key, (unsigned long long)i, p[i]);
    return MP_OK;
}

mp_status mp_gguf_add_val(mp_gguf_writer *w, const char *key, mp_gguf_vtype type,
                          const void *value, mp_error *err)
{
    size_t sz = gguf_scalar_size(type);
    if (sz == 0)
        return wfail(w, err, MP_ERR_ARG, "file %s: key '%s': %s is not a scalar type", w->path,
                     key, mp_gguf_vtype_name(type));
    if (type == MP_GGUF_BOOL) {
        mp_status st = check_bools(w, value, 1, key, err);
        if (st)
            return st;
    }
    if (!strcmp(key, "general.alignment")) {
        /* The reader needs it as a u32 power of two; route it through the one checked path. */
        if (type != MP_GGUF_UINT32)
            return wfail(w, err, MP_ERR_ARG, "file %s: general.alignment must be a u32", w->path);
        uint32_t a;
        memcpy(&a, value, 4);
        return mp_gguf_writer_set_alignment(w, a, err);
    }
    mp_status st = begin_kv(w, key, type, err);
    if (st)
        return st;
    return kv_done(w, put(&w->kv, value, sz), err);
}

mp_status mp_gguf_writer_set_alignment(mp_gguf_writer *w, uint32_t alignment, mp_error *err)
{
    mp_status st = usable(w, err);
    if (st)
        return st;
    if (alignment < 8 || (alignment & (alignment - 1)) != 0 || alignment > MAX_ALIGNMENT)
        return wfail(w, err, MP_ERR_ARG,
                     "file %s: alignment %u is not a power of two in 8..%u", w->path, alignment,
                     MAX_ALIGNMENT);
    if (w->alignment_set)
        return wfail(w, err, MP_ERR_ARG, "file %s: alignment set twice", w->path);
    if ((st = begin_kv(w, "general.alignment", MP_GGUF_UINT32, err)))
        return st;
    w->alignment = alignment;
    w->alignment_set = true;
    return kv_done(w, put_u32(&w->kv, alignment), err);
}

mp_status mp_gguf_add_u32(mp_gguf_writer *w, const char *key, uint32_t v, mp_error *err)
{
    return mp_gguf_add_val(w, key, MP_GGUF_UINT32, &v, err);
}

mp_status mp_gguf_add_i32(mp_gguf_writer *w, const char *key, int32_t v, mp_error *err)
{
    return mp_gguf_add_val(w, key, MP_GGUF_INT32, &v, err);
}

mp_status mp_gguf_add_u64(mp_gguf_writer *w, const char *key, uint64_t v, mp_error *err)
{
    return mp_gguf_add_val(w, key, MP_GGUF_UINT64, &v, err);
}

mp_status mp_gguf_add_f32(mp_gguf_writer *w, const char *key, float v, mp_error *err)
{
    return mp_gguf_add_val(w, key, MP_GGUF_FLOAT32, &v, err);
}

mp_status mp_gguf_add_bool(mp_gguf_writer *w, const char *key, bool v, mp_error *err)
{
    uint8_t b = v ? 1 : 0;
    return mp_gguf_add_val(w, key, MP_GGUF_BOOL, &b, err);
}

mp_status mp_gguf_add_str(mp_gguf_writer *w, const char *key, const char *v, mp_error *err)
{
    mp_status st = begin_kv(w, key, MP_GGUF_STRING, err);
    if (st)
        return st;
    return kv_done(w, put_str(&w->kv, v, strlen(v)), err);
}

mp_status mp_gguf_add_arr_str(mp_gguf_writer *w, const char *key, const char *const *v, uint64_t n,
                              mp_error *err)
{
    mp_status st = begin_kv(w, key, MP_GGUF_ARRAY, err);
    if (st)
        return st;
    bool ok = put_u32(&w->kv, MP_GGUF_STRING) && put_u64(&w->kv, n);
    for (uint64_t i = 0; ok && i < n; i++)
        ok = put_str(&w->kv, v[i], strlen(v[i]));
    return kv_done(w, ok, err);
}

mp_status mp_gguf_add_arr(mp_gguf_writer *w, const char *key, mp_gguf_vtype elem_type,
                          const void *data, uint64_t n, mp_error *err)
{
    size_t sz = gguf_scalar_size(elem_type);
    mp_status st = usable(w, err);
    if (st)
        return st;
    if (sz == 0)
        return wfail(w, err, MP_ERR_ARG, "file %s: key '%s': arrays of %s are not written here",
                     w->path, key, mp_gguf_vtype_name(elem_type));
    if (n > SIZE_MAX / sz)
        return wfail(w, err, MP_ERR_LIMIT, "file %s: key '%s': array of %llu elements too large",
                     w->path, key, (unsigned long long)n);
    if (elem_type == MP_GGUF_BOOL && (st = check_bools(w, data, n, key, err)))
        return st;
    if ((st = begin_kv(w, key, MP_GGUF_ARRAY, err)))
        return st;
    return kv_done(w, put_u32(&w->kv, (uint32_t)elem_type) && put_u64(&w->kv, n) &&
                          put(&w->kv, data, (size_t)(n * sz)),
                   err);
}

mp_status mp_gguf_add_tensor_info(mp_gguf_writer *w, const char *name, uint32_t n_dims,
                                  const int64_t *ne, int type, mp_error *err)
{
    mp_status st = usable(w, err);
    if (st)
        return st;
    if (w->header_done)
        return wfail(w, err, MP_ERR_ARG, "file %s: tensor '%s' added after data started", w->path,
                     name);
    size_t len = strlen(name);
    if (len == 0 || len > MAX_NAME_BYTES)
        return wfail(w, err, MP_ERR_ARG, "file %s: tensor name of %zu bytes (expected 1..%d)",
                     w->path, len, MAX_NAME_BYTES);
    for (int64_t i = 0; i < w->n_tensors; i++)
        if (!strcmp(w->tensors[i].name, name))
            return wfail(w, err, MP_ERR_ARG, "file %s: duplicate tensor '%s'", w->path, name);
    if (n_dims < 1 || n_dims > MP_GGUF_MAX_DIMS)
        return wfail(w, err, MP_ERR_ARG, "file %s: tensor '%s': n_dims %u (expected 1..%d)",
                     w->path, name, n_dims, MP_GGUF_MAX_DIMS);
    if (!mp_type_supported(type))
        return wfail(w, err, MP_ERR_UNSUPPORTED, "file %s: tensor '%s': type %d not supported",
                     w->path, name, type);
    wtensor t = {.n_dims = n_dims, .type = type};
    for (int d = 0; d < MP_GGUF_MAX_DIMS; d++) {
        t.ne[d] = (uint32_t)d < n_dims ? ne[d] : 1;
        if (t.ne[d] < 1)
            return wfail(w, err, MP_ERR_ARG, "file %s: tensor '%s': dimension %d is %lld",
                         w->path, name, d, (long long)t.ne[d]);
    }
    int64_t block = mp_type_block_elems(type);
    if (t.ne[0] % block != 0)
        return wfail(w, err, MP_ERR_ARG,
                     "file %s: tensor '%s': ne[0] = %lld is not a multiple of %s's block of %lld",
                     w->path, name, (long long)t.ne[0], mp_type_name(type), (long long)block);
    uint64_t nbytes = 0;
    bool overflow = __builtin_mul_overflow((uint64_t)(t.ne[0] / block),
                                           (uint64_t)mp_type_block_bytes(type), &nbytes);
    for (int d = 1; d < MP_GGUF_MAX_DIMS; d++)
        if (overflow || __builtin_mul_overflow(nbytes, (uint64_t)t.ne[d], &nbytes))
            return wfail(w, err, MP_ERR_LIMIT, "file %s: tensor '%s': size overflows", w->path,
                         name);
    t.nbytes = nbytes;
    if (w->n_tensors == w->cap_tensors) {
        int64_t cap = w->cap_tensors ? w->cap_tensors * 2 : 16;
        wtensor *nt = mp_fault_realloc(w->tensors, (size_t)cap * sizeof *nt);
        if (!nt)
            return wfail(w, err, MP_ERR_NOMEM, "file %s: out of memory", w->path);
        w->tensors = nt;
        w->cap_tensors = cap;
    }
    if (!(t.name = mp_fault_strdup(name)))
        return wfail(w, err, MP_ERR_NOMEM, "file %s: out of memory", w->path);
    w->tensors[w->n_tensors++] = t;
    return MP_OK;
}

/* ---- the file ---- */

static mp_status emit(mp_gguf_writer *w, const void *p, size_t n, mp_error *err)
{
    if (n && fwrite(p, 1, n, w->f) != n) {
        const int e = w->out.write_errno ? w->out.write_errno : errno ? errno : EIO;
        return wfail(w, err, MP_ERR_IO, "file %s: offset %llu: write failed: %s%s", w->path,
                     (unsigned long long)w->pos, strerror(e),
                     e == EFBIG ? " (the file-size limit, ulimit -f)" : "");
    }
    w->pos += n;
    return MP_OK;
}

static mp_status pad_to_alignment(mp_gguf_writer *w, mp_error *err)
{
    static const uint8_t zeros[64];
    uint64_t pad = (w->alignment - w->pos % w->alignment) % w->alignment;
    while (pad > 0) {
        size_t n = pad < sizeof zeros ? (size_t)pad : sizeof zeros;
        mp_status st = emit(w, zeros, n, err);
        if (st)
            return st;
        pad -= n;
    }
    return MP_OK;
}

static mp_status write_header(mp_gguf_writer *w, mp_error *err)
{
    bytes h = {0};
    uint64_t offset = 0;
    bool ok = put(&h, "GGUF", 4) && put_u32(&h, 3) && put_u64(&h, (uint64_t)w->n_tensors) &&
              put_u64(&h, (uint64_t)w->n_kv);
    for (int64_t i = 0; ok && i < w->n_tensors; i++) {
        wtensor *t = &w->tensors[i];
        t->offset = offset;
        ok = put_str(&h, t->name, strlen(t->name)) && put_u32(&h, t->n_dims);
        for (uint32_t d = 0; ok && d < t->n_dims; d++)
            ok = put_u64(&h, (uint64_t)t->ne[d]);
        ok = ok && put_u32(&h, (uint32_t)t->type) && put_u64(&h, offset);
        uint64_t padded = t->nbytes + (w->alignment - t->nbytes % w->alignment) % w->alignment;
        if (ok && (padded < t->nbytes || __builtin_add_overflow(offset, padded, &offset))) {
            free(h.p);
            return wfail(w, err, MP_ERR_LIMIT, "file %s: tensor data exceeds 2^64 bytes", w->path);
        }
    }
    if (!ok) {
        free(h.p);
        return wfail(w, err, MP_ERR_NOMEM, "file %s: out of memory", w->path);
    }
    /* Order on disk: fixed header, key/values, tensor infos. The infos were built after the
     * fixed header in h, so write h's first 24 bytes, the kvs, then the rest of h. */
    mp_status st = emit(w, h.p, 24, err);
    if (!st)
        st = emit(w, w->kv.p, w->kv.len, err);
    if (!st)
        st = emit(w, h.p + 24, h.len - 24, err);
    free(h.p);
    if (!st)
        st = pad_to_alignment(w, err);
    w->header_done = true;
    w->cur = 0;
    w->cur_done = 0;
    return st;
}

mp_status mp_gguf_writer_open(const char *path, mp_gguf_writer **out, mp_error *err)
{
    *out = NULL;
    mp_gguf_writer *w = mp_fault_calloc(1, sizeof *w);
    if (!w)
        return mp_fail(err, MP_ERR_NOMEM, "file %s: out of memory", path);
    w->alignment = 32;
    w->path = mp_fault_strdup(path);
    if (!w->path) {
        free(w);
        return mp_fail(err, MP_ERR_NOMEM, "file %s: out of memory", path);
    }
    mp_status st = mp_outfile_open(&w->out, path, "file", 0, err);
    if (!st && !(w->f = mp_outfile_stream(&w->out, err)))
        st = err ? err->code : MP_ERR_NOMEM;
    if (st) {
        free(w->path);
        free(w);
        return st;
    }
    *out = w;
    return MP_OK;
}

mp_status mp_gguf_write_data(mp_gguf_writer *w, const void *data, size_t nbytes, mp_error *err)
{
    mp_status st = usable(w, err);
    if (st)
        return st;
    if (!w->header_done && (st = write_header(w, err)))
        return st;
    const uint8_t *p = data;
    while (nbytes > 0) {
        if (w->cur >= w->n_tensors)
            return wfail(w, err, MP_ERR_ARG,
                         "file %s: %zu bytes of data beyond the last tensor", w->path, nbytes);
        wtensor *t = &w->tensors[w->cur];
        uint64_t left = t->nbytes - w->cur_done;
        size_t n = nbytes < left ? nbytes : (size_t)left;
        if ((st = emit(w, p, n, err)))
            return st;
        p += n;
        nbytes -= n;
        w->cur_done += n;
        if (w->cur_done == t->nbytes) {
            if ((st = pad_to_alignment(w, err)))
                return st;
            w->cur++;
            w->cur_done = 0;
        }
    }
    return MP_OK;
}

static void writer_free(mp_gguf_writer *w)
{
    drop_file(w);
    for (int64_t i = 0; i < w->n_kv; i++)
        free(w->keys[i]);
    free(w->keys);
    for (int64_t i = 0; i < w->n_tensors; i++)
        free(w->tensors[i].name);
    free(w->tensors);
    free(w->kv.p);
    free(w->path);
    free(w);
}

mp_status mp_gguf_writer_finish(mp_gguf_writer *w, mp_error *err)
{
    mp_status st = usable(w, err);
    if (!st && !w->header_done)
        st = write_header(w, err);
    if (!st && w->cur < w->n_tensors) {
        const wtensor *t = &w->tensors[w->cur];
        st = wfail(w, err, MP_ERR_ARG,
                   "file %s: tensor '%s' (%lld of %lld) got %llu of its %llu bytes of data",
                   w->path, t->name, (long long)w->cur + 1, (long long)w->n_tensors,
                   (unsigned long long)w->cur_done, (unsigned long long)t->nbytes);
    }
    if (!st) { /* flush, fsync, rename: PATH is the whole file or what it was */
        w->f = NULL;
        st = mp_outfile_commit(&w->out, err);
    }
    writer_free(w);
    return st;
}

void mp_gguf_writer_abort(mp_gguf_writer *w)
{
    if (w)
        writer_free(w);
}
