/* gguf/gguf_meta.c — typed access to a GGUF file's metadata, and its one-line rendering for
 * `moeplan inspect`. The handle was fully validated at open (gguf.c), so getters only check what
 * the caller asks for (key present, type, index in range, value fits the requested width).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "gguf/gguf_impl.h"

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
    case MP_GGUF_UINT32: n.kind = NUM_UINT; n.u = gguf_rd32(p); break;
    case MP_GGUF_INT32: n.kind = NUM_INT; n.i = (int32_t)gguf_rd32(p); break;
    case MP_GGUF_UINT64: n.kind = NUM_UINT; n.u = gguf_rd64(p); break;
    case MP_GGUF_INT64: n.kind = NUM_INT; n.i = (int64_t)gguf_rd64(p); break;
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
    return (mp_str){(const char *)g->base + len_offset + 8, gguf_rd64(g->base + len_offset)};
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
    size_t sz = gguf_scalar_size(kv->elem_type);
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
        size_t sz = gguf_scalar_size(kv->elem_type);
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

