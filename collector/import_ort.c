/* collector/import_ort.c — onnxruntime QMoE routing logs.
 *
 * Recognized lines (anything else is ignored, as in a normal run log):
 *   ... moe_routing {"request_id":..,"node_name":..,"node_index":..,"node_type":..,
 *                    "expert_ids":[..],"router_weights":[..],"num_rows":..,"top_k":..,
 *                    "execution_device_id":..}
 *       expert_ids / router_weights: num_rows × top_k, row-major (flat, or one array per row)
 *   ... [qmoe_prompt_runner] i/N prompt_start      ... [qmoe_prompt_runner] i/N prompt_end
 *   ... moe_routing_complete {"prompts":..,"prompt_runs":..,"routing_records":..}
 *   ... moe_routing_truncated {...}   -> the log lost records: refused
 * The footer is required and must agree with what the log holds (records, prompt runs).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collector/import_internal.h"
#include "base/json.h"

typedef struct ort_state {
    int32_t *ids;     /* (cap) reused across records */
    float *weights;   /* (cap) */
    size_t cap;
    int64_t n_records, n_prompt_starts, prompts_total;
    bool prompt_open, footer_seen;
    size_t offset;             /* bytes read up to the end of the current line */
} ort_state;

static bool json_int(const cJSON *j, int64_t lo, int64_t hi, int64_t *out)
{
    if (!cJSON_IsNumber(j))
        return false;
    double v = j->valuedouble;
    if (!isfinite(v) || v != floor(v) || v < (double)lo || v > (double)hi)
        return false;
    *out = (int64_t)v;
    return true;
}

/* Flatten a num_rows × top_k array (flat or nested) of numbers into out via put(). */
static bool flatten(const cJSON *arr, int64_t rows, int64_t k, int64_t *n_out,
                    bool (*put)(const cJSON *v, int64_t i, void *u), void *u)
{
    int64_t i = 0;
    if (!cJSON_IsArray(arr))
        return false;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr)
    {
        if (cJSON_IsArray(e)) {
            if (cJSON_GetArraySize(e) != k)
                return false;
            const cJSON *x;
            cJSON_ArrayForEach(x, e)
            {
                if (i >= rows * k || !put(x, i, u))
                    return false;
                i++;
            }
        } else {
            if (i >= rows * k || !put(e, i, u))
                return false;
            i++;
        }
    }
    *n_out = i;
    return true;
}

static bool put_id(const cJSON *v, int64_t i, void *u)
{
    int64_t x;
    if (!json_int(v, -2147483647, 2147483647, &x))
        return false;
    ((int32_t *)u)[i] = (int32_t)x;
    return true;
}

static bool put_weight(const cJSON *v, int64_t i, void *u)
{
    if (!cJSON_IsNumber(v))
        return false;
    ((float *)u)[i] = (float)v->valuedouble;
    return true;
}

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static mp_status parse_record(const char *json, size_t len, const char *where, ort_state *st,
                              mp_import_ctx *c, mp_error *err)
{
    const char *nm = mp_import_name(c);
    mp_json_error je;
    cJSON *j = mp_json_parse_strict(json, len, &je);
    if (!j && je.key[0])
        return mp_fail(err, MP_ERR_FORMAT, "%s: %s: moe_routing: key \"%s\" repeated, expected "
                       "each key once", nm, where, je.key);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return mp_fail(err, MP_ERR_FORMAT, "%s: %s: moe_routing: expected a JSON object%s", nm,
                       where, j ? "" : " and nothing after it");
    }
    mp_status s = MP_OK;
    const cJSON *rq = cJSON_GetObjectItemCaseSensitive(j, "request_id");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "node_name");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "node_type");
    int64_t node_index, rows, k, dev;
    char ext[64];
    int64_t key;
    if (cJSON_IsNumber(rq) && json_int(rq, INT64_MIN / 2, INT64_MAX / 2, &key)) {
        snprintf(ext, sizeof ext, "%lld", (long long)key);
    } else if (cJSON_IsString(rq) && strlen(rq->valuestring) < sizeof ext) {
        snprintf(ext, sizeof ext, "%s", rq->valuestring);
        key = (int64_t)fnv1a(rq->valuestring);
    } else {
        s = mp_fail(err, MP_ERR_FORMAT, "%s: %s: moe_routing: expected \"request_id\" (an integer "
                    "or a string of < 64 bytes)", nm, where);
        goto out;
    }
    if (!cJSON_IsString(name) || !cJSON_IsString(type)) {
        s = mp_fail(err, MP_ERR_FORMAT, "%s: %s: moe_routing: expected string \"node_name\" and "
                    "\"node_type\"", nm, where);
        goto out;
    }
    if (!json_int(cJSON_GetObjectItemCaseSensitive(j, "node_index"), 0, MP_TRACE_MAX_NODE_INDEX,
                  &node_index) ||
        !json_int(cJSON_GetObjectItemCaseSensitive(j, "num_rows"), 1, INT64_C(1) << 24, &rows) ||
        !json_int(cJSON_GetObjectItemCaseSensitive(j, "top_k"), 1, 65536, &k)) {
        s = mp_fail(err, MP_ERR_FORMAT, "%s: %s: moe_routing: expected integer \"node_index\" in "
                    "[0, %d], \"num_rows\" >= 1 and \"top_k\" in [1, 65536]", nm, where,
                    MP_TRACE_MAX_NODE_INDEX);
        goto out;
    }
    const cJSON *dv = cJSON_GetObjectItemCaseSensitive(j, "execution_device_id");
    if (dv && !json_int(dv, -1, 1 << 20, &dev)) {
        s = mp_fail(err, MP_ERR_FORMAT, "%s: %s: moe_routing: \"execution_device_id\" is not an "
                    "integer", nm, where);
        goto out;
    }
    size_t need = (size_t)(rows * k);
    if (need > (size_t)1 << 26) {
        s = mp_fail(err, MP_ERR_LIMIT, "%s: %s: moe_routing: %lld × %lld routes in one record",
                    nm, where, (long long)rows, (long long)k);
        goto out;
    }
    if (need > st->cap) {
        int32_t *ids = realloc(st->ids, need * sizeof *ids);
        if (ids)
            st->ids = ids;
        float *w = realloc(st->weights, need * sizeof *w);
        if (w)
            st->weights = w;
        if (!ids || !w) {
            s = mp_fail(err, MP_ERR_NOMEM, "%s: out of memory", nm);
            goto out;
        }
        st->cap = need;
    }
    int64_t n_ids = 0, n_w = 0;
    if (!flatten(cJSON_GetObjectItemCaseSensitive(j, "expert_ids"), rows, k, &n_ids, put_id,
                 st->ids) || n_ids != (int64_t)need) {
        s = mp_fail(err, MP_ERR_FORMAT, "%s: %s: moe_routing: \"expert_ids\": expected %lld "
                    "integers (num_rows %lld × top_k %lld)", nm, where, (long long)need,
                    (long long)rows, (long long)k);
        goto out;
    }
    if (!flatten(cJSON_GetObjectItemCaseSensitive(j, "router_weights"), rows, k, &n_w, put_weight,
                 st->weights) || n_w != (int64_t)need) {
        s = mp_fail(err, MP_ERR_FORMAT, "%s: %s: moe_routing: \"router_weights\": expected %lld "
                    "numbers (num_rows %lld × top_k %lld)", nm, where, (long long)need,
                    (long long)rows, (long long)k);
        goto out;
    }
    mp_import_rec r = {.request_key = key, .request_ext = ext, .node_index = node_index,
                       .node_name = name->valuestring, .node_type = type->valuestring,
                       .layer = -1, .n_rows = rows, .top_k = k, .ids = st->ids,
                       .weights = st->weights, .phase = -1, .where = where,
                       .offset = st->offset};
    s = mp_import_emit(c, &r, err);
    st->n_records++;
out:
    cJSON_Delete(j);
    return s;
}

static mp_status parse_footer(const char *json, size_t len, const char *where, ort_state *st,
                              mp_import_ctx *c, mp_error *err)
{
    const char *nm = mp_import_name(c);
    mp_json_error je;
    cJSON *j = mp_json_parse_strict(json, len, &je);
    int64_t prompts, runs, records;
    if (!j || !json_int(cJSON_GetObjectItemCaseSensitive(j, "prompts"), 0, INT64_MAX / 2, &prompts) ||
        !json_int(cJSON_GetObjectItemCaseSensitive(j, "prompt_runs"), 0, INT64_MAX / 2, &runs) ||
        !json_int(cJSON_GetObjectItemCaseSensitive(j, "routing_records"), 0, INT64_MAX / 2,
                  &records)) {
        cJSON_Delete(j);
        return mp_fail(err, MP_ERR_FORMAT, "%s: %s: moe_routing_complete: expected a JSON object "
                       "with integer \"prompts\", \"prompt_runs\" and \"routing_records\"", nm,
                       where);
    }
    cJSON_Delete(j);
    if (records != st->n_records)
        return mp_fail(err, MP_ERR_FORMAT, "%s: %s: footer says %lld routing records, the log "
                       "holds %lld (records were lost)", nm, where, (long long)records,
                       (long long)st->n_records);
    if (runs != st->n_prompt_starts)
        return mp_fail(err, MP_ERR_FORMAT, "%s: %s: footer says %lld prompt runs, the log marks "
                       "%lld", nm, where, (long long)runs, (long long)st->n_prompt_starts);
    if (st->prompts_total >= 0 && prompts != st->prompts_total)
        return mp_fail(err, MP_ERR_FORMAT, "%s: %s: footer says %lld prompts, the markers say %lld",
                       nm, where, (long long)prompts, (long long)st->prompts_total);
    if (st->prompt_open)
        return mp_fail(err, MP_ERR_FORMAT, "%s: %s: footer inside a prompt (prompt_start without "
                       "prompt_end)", nm, where);
    st->footer_seen = true;
    return MP_OK;
}

/* "[qmoe_prompt_runner] i/N prompt_start|prompt_end" */
static mp_status parse_marker(const char *line, size_t len, const char *where, ort_state *st,
                              mp_import_ctx *c, mp_error *err)
{
    const char *nm = mp_import_name(c);
    const char *p = memmem(line, len, "[qmoe_prompt_runner]", 20);
    const char *end = line + len;
    bool start = memmem(line, len, "prompt_start", 12) != NULL;
    bool stop = memmem(line, len, "prompt_end", 10) != NULL;
    if (!start && !stop)
        return MP_OK; /* another runner message */
    char buf[128];
    size_t rest = (size_t)(end - (p + 20));
    snprintf(buf, sizeof buf, "%.*s", (int)(rest < sizeof buf - 1 ? rest : sizeof buf - 1), p + 20);
    long long i, n;
    if (sscanf(buf, " %lld/%lld", &i, &n) != 2 || n < 1 || i < 0 || i > n)
        return mp_fail(err, MP_ERR_FORMAT, "%s: %s: prompt marker: expected \"i/N prompt_start\" "
                       "or \"i/N prompt_end\" with 0 <= i <= N, N >= 1", nm, where);
    if (st->prompts_total >= 0 && n != st->prompts_total)
        return mp_fail(err, MP_ERR_FORMAT, "%s: %s: prompt marker says %lld prompts, earlier "
                       "markers %lld", nm, where, n, (long long)st->prompts_total);
    st->prompts_total = n;
    if (start) {
        if (st->prompt_open)
            return mp_fail(err, MP_ERR_FORMAT, "%s: %s: prompt_start while a prompt is open", nm,
                           where);
        st->prompt_open = true;
        st->n_prompt_starts++;
    } else {
        if (!st->prompt_open)
            return mp_fail(err, MP_ERR_FORMAT, "%s: %s: prompt_end without prompt_start", nm,
                           where);
        st->prompt_open = false;
    }
    return MP_OK;
}

mp_status mp_import_parse_ort_log(const char *data, size_t n, mp_import_ctx *c, mp_error *err)
{
    ort_state st = {.prompts_total = -1};
    mp_status s = MP_OK;
    size_t off = 0;
    int64_t line_no = 0;
    char where[48];
    while (off < n && s == MP_OK) {
        const char *line = data + off;
        const char *nl = memchr(line, '\n', n - off);
        size_t len = nl ? (size_t)(nl - line) : n - off;
        off += len + (nl ? 1 : 0);
        st.offset = off;
        line_no++;
        snprintf(where, sizeof where, "line %lld", (long long)line_no);
        const char *tag = memmem(line, len, "moe_routing", 11);
        if (tag) {
            const char *after = tag + 11;
            size_t rest = len - (size_t)(after - line);
            if (rest >= 10 && !memcmp(after, "_truncated", 10)) {
                s = mp_fail(err, MP_ERR_FORMAT, "%s: %s: moe_routing_truncated: the log lost "
                            "routing records; refusing an incomplete trace", mp_import_name(c),
                            where);
                break;
            }
            bool footer = rest >= 9 && !memcmp(after, "_complete", 9);
            if (footer)
                after += 9, rest -= 9;
            else if (rest > 0 && after[0] != ' ' && after[0] != '{' && after[0] != '\t')
                continue; /* another moe_routing_* message */
            const char *brace = memchr(after, '{', rest);
            if (!brace) {
                s = mp_fail(err, MP_ERR_FORMAT, "%s: %s: %s: expected a JSON object", mp_import_name(c),
                            where, footer ? "moe_routing_complete" : "moe_routing");
                break;
            }
            size_t jlen = rest - (size_t)(brace - after);
            if (st.footer_seen) {
                s = mp_fail(err, MP_ERR_FORMAT, "%s: %s: routing after the moe_routing_complete "
                            "footer", mp_import_name(c), where);
                break;
            }
            s = footer ? parse_footer(brace, jlen, where, &st, c, err)
                       : parse_record(brace, jlen, where, &st, c, err);
        } else if (memmem(line, len, "[qmoe_prompt_runner]", 20)) {
            s = parse_marker(line, len, where, &st, c, err);
        }
    }
    if (s == MP_OK && !st.footer_seen)
        s = mp_fail(err, MP_ERR_FORMAT, "%s: line %lld: end of log without a moe_routing_complete "
                    "footer (the log is incomplete)", mp_import_name(c), (long long)line_no);
    free(st.ids);
    free(st.weights);
    return s;
}
