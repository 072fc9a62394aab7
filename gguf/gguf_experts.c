/* gguf/gguf_experts.c — a layer's experts in either layout (gguf_experts.h). */
#include "gguf/gguf_experts.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "kernels/quant.h"

static const char *const k_kinds[MP_GGUF_EXPERT_KINDS] = {"gate", "up", "down"};

const char *mp_gguf_expert_kind_name(int kind)
{
    return kind >= 0 && kind < MP_GGUF_EXPERT_KINDS ? k_kinds[kind] : "?";
}

/* a decimal number of 1..9 digits at *p (advanced past it) */
static bool number(const char **p, const char *end, int64_t *out)
{
    const char *d = *p;
    int64_t n = 0;
    while (*p < end && **p >= '0' && **p <= '9' && *p - d < 9)
        n = n * 10 + (*(*p)++ - '0');
    *out = n;
    return *p > d && (*p == end || **p < '0' || **p > '9');
}

static bool literal(const char **p, const char *end, const char *s)
{
    const size_t n = strlen(s);
    if ((size_t)(end - *p) < n || memcmp(*p, s, n) != 0)
        return false;
    *p += n;
    return true;
}

bool mp_gguf_expert_name(mp_str name, int64_t *layer, int *kind, int64_t *expert)
{
    const char *p = name.ptr, *end = name.ptr + name.len;
    int64_t n;
    if (!literal(&p, end, "blk.") || !number(&p, end, &n) || !literal(&p, end, ".ffn_"))
        return false;
    const char *f = p;
    if (literal(&f, end, "gate_up_exps.weight") && f == end) {
        *layer = n, *kind = MP_GGUF_EXPERT_GATE, *expert = -1;
        return true;
    }
    for (int k = 0; k < MP_GGUF_EXPERT_KINDS; k++) {
        const char *q = p;
        if (!literal(&q, end, k_kinds[k]))
            continue;
        int64_t e = -1;
        const char *r = q;
        if (literal(&r, end, "_exps.weight") && r == end) {
            *layer = n, *kind = k, *expert = -1;
            return true;
        }
        r = q;
        if (literal(&r, end, ".") && number(&r, end, &e) && literal(&r, end, ".weight") && r == end) {
            *layer = n, *kind = k, *expert = e;
            return true;
        }
    }
    return false;
}

const mp_gguf_tensor *mp_gguf_split_expert(const mp_gguf *g, int64_t layer, int kind, int64_t e)
{
    char name[96];
    snprintf(name, sizeof name, "blk.%" PRId64 ".ffn_%s.%" PRId64 ".weight", layer, mp_gguf_expert_kind_name(kind), e);
    return mp_gguf_find_tensor(g, name);
}

mp_status mp_gguf_layer_experts(const mp_gguf *g, int64_t layer, int kind, int64_t n_expert, mp_gguf_experts *out,
                                mp_error *err)
{
    memset(out, 0, sizeof *out);
    const char *path = mp_gguf_path(g) ? mp_gguf_path(g) : "(gguf)", *kn = mp_gguf_expert_kind_name(kind);
    char name[96];
    snprintf(name, sizeof name, "blk.%" PRId64 ".ffn_%s_exps.weight", layer, kn);
    const mp_gguf_tensor *m = mp_gguf_find_tensor(g, name);
    if (m) {
        const int64_t e = m->ne[2] > 0 ? m->ne[2] : 1;
        const uint64_t bytes = m->nbytes / (uint64_t)e;
        *out = (mp_gguf_experts){.present = true, .type = m->type, .ne0 = m->ne[0], .ne1 = m->ne[1], .n_expert = e,
                                 .expert_bytes = bytes, .merged = m, .stride = bytes};
        return MP_OK;
    }
    if (kind != MP_GGUF_EXPERT_DOWN) {
        snprintf(name, sizeof name, "blk.%" PRId64 ".ffn_gate_up_exps.weight", layer);
        if ((m = mp_gguf_find_tensor(g, name))) {
            if (m->ne[1] % 2)
                return mp_fail(err, MP_ERR_FORMAT, "%s: offset %llu: tensor %s: %" PRId64 " rows per expert: expected "
                               "an even count (gate rows, then as many up rows)", path,
                               (unsigned long long)m->file_offset, name, m->ne[1]);
            const int64_t e = m->ne[2] > 0 ? m->ne[2] : 1;
            const uint64_t bytes = m->nbytes / (uint64_t)e;
            *out = (mp_gguf_experts){.present = true, .fused = true, .type = m->type, .ne0 = m->ne[0],
                                     .ne1 = m->ne[1] / 2, .n_expert = e, .expert_bytes = bytes / 2, .merged = m,
                                     .stride = bytes, .offset = kind == MP_GGUF_EXPERT_UP ? bytes / 2 : 0};
            return MP_OK;
        }
    }
    const mp_gguf_tensor *first = mp_gguf_split_expert(g, layer, kind, 0);
    if (!first)
        return MP_OK; /* neither layout */
    int64_t n = 0;
    for (const mp_gguf_tensor *t = first; t; t = mp_gguf_split_expert(g, layer, kind, ++n)) {
        if (n_expert > 0 && n == n_expert)
            break;
        snprintf(name, sizeof name, "blk.%" PRId64 ".ffn_%s.%" PRId64 ".weight", layer, kn, n);
        if (t->n_dims != 2)
            return mp_fail(err, MP_ERR_FORMAT, "%s: tensor %s: %u dimensions: expected a 2-D expert matrix", path,
                           name, t->n_dims);
        if (t->type != first->type || t->ne[0] != first->ne[0] || t->ne[1] != first->ne[1]) {
            const char *a = mp_type_name(t->type), *b = mp_type_name(first->type);
            return mp_fail(err, MP_ERR_FORMAT, "%s: tensor %s: %s [%" PRId64 ", %" PRId64 "], expert 0's is %s [%" PRId64
                           ", %" PRId64 "]: expected one type and shape for a layer's experts", path, name,
                           a ? a : "?", t->ne[0], t->ne[1], b ? b : "?", first->ne[0], first->ne[1]);
        }
    }
    if (n_expert > 0 && n < n_expert) {
        snprintf(name, sizeof name, "blk.%" PRId64 ".ffn_%s.%" PRId64 ".weight", layer, kn, n);
        return mp_fail(err, MP_ERR_FORMAT, "%s: tensor %s: missing (layer %" PRId64 " stores its experts one tensor "
                       "each: expected %" PRId64 " of them)", path, name, layer, n_expert);
    }
    *out = (mp_gguf_experts){.present = true, .split = true, .type = first->type, .ne0 = first->ne[0],
                             .ne1 = first->ne[1], .n_expert = n, .expert_bytes = first->nbytes};
    return MP_OK;
}

const uint8_t *mp_gguf_expert_data(const mp_gguf *g, int64_t layer, int kind, const mp_gguf_experts *x, int64_t e)
{
    if (x->merged)
        return (const uint8_t *)x->merged->data + (size_t)e * x->stride + x->offset;
    const mp_gguf_tensor *t = mp_gguf_split_expert(g, layer, kind, e);
    return t ? t->data : NULL;
}
