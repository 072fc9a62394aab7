/* collector/import_strata.c — Strata `--dump-routing` binary traces.
 *
 * The file is a sequence of records, little-endian, with no header:
 *   int32 layer, int32 k, int32 expert_ids[k], float32 weights[k]
 * one per (token, MoE layer). The dump carries no request or phase: the import records one
 * request whose steps are one token each (a new step starts when the layer does not increase),
 * all with phase 'decode'. A record cut short at the end of the file is refused with its offset.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collector/import_internal.h"

#define STRATA_MAX_K 4096

static int32_t rd_i32(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

mp_status mp_import_parse_strata(const char *data, size_t n, mp_import_ctx *c, mp_error *err)
{
    const unsigned char *p = (const unsigned char *)data;
    const char *nm = mp_import_name(c);
    int32_t ids[STRATA_MAX_K];
    float weights[STRATA_MAX_K];
    char where[64], name[32];
    size_t off = 0;
    int64_t rec_no = 0;
    while (off < n) {
        snprintf(where, sizeof where, "record %lld at offset %zu", (long long)rec_no, off);
        if (n - off < 8)
            return mp_fail(err, MP_ERR_FORMAT, "%s: %s: record cut short: %zu bytes left, expected "
                           "an 8-byte (layer, k) header", nm, where, n - off);
        int32_t layer = rd_i32(p + off), k = rd_i32(p + off + 4);
        if (layer < 0 || layer > MP_TRACE_MAX_NODE_INDEX)
            return mp_fail(err, MP_ERR_FORMAT, "%s: %s: layer %d outside [0, %d]", nm, where, layer,
                           MP_TRACE_MAX_NODE_INDEX);
        if (k < 1 || k > STRATA_MAX_K)
            return mp_fail(err, MP_ERR_FORMAT, "%s: %s: k = %d, expected 1..%d", nm, where, k,
                           STRATA_MAX_K);
        size_t body = (size_t)k * 8;
        if (n - off - 8 < body)
            return mp_fail(err, MP_ERR_FORMAT, "%s: %s: record cut short: %zu bytes left, expected "
                           "%zu (k = %d ids and weights)", nm, where, n - off - 8, body, k);
        const unsigned char *q = p + off + 8;
        for (int32_t i = 0; i < k; i++) {
            ids[i] = rd_i32(q + 4 * i);
            int32_t bits = rd_i32(q + 4 * (size_t)k + 4 * i);
            memcpy(&weights[i], &bits, 4);
        }
        snprintf(name, sizeof name, "layer.%d", layer);
        mp_import_rec r = {.request_key = 0, .request_ext = NULL, .node_index = layer,
                           .node_name = name, .node_type = "moe", .layer = layer, .n_rows = 1,
                           .top_k = k, .ids = ids, .weights = weights, .phase = MP_PHASE_DECODE,
                           .where = where, .offset = off + 8 + body};
        mp_status s = mp_import_emit(c, &r, err);
        if (s)
            return s;
        off += 8 + body;
        rec_no++;
    }
    return MP_OK;
}
