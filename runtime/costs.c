/* runtime/costs.c — loading and evaluating costs.json (see costs.h, schemas/costs.schema.json).
 *
 * The loader is strict: unknown or repeated keys, missing fields, non-finite or negative numbers,
 * empty or unsorted curves are each a one-line error naming the file and the JSON path
 * ($.gpu_expert[0].points[2].median_ns), so a typo in a hand-edited file never turns into a
 * silently different cost model. The GPU measurements may be absent only when $.missing says
 * why (a cost file calibrated on a machine without a GPU, see costs.h).
 */
#include "runtime/costs.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/input_file.h"

#define PATH_MAX_CHARS 256

typedef struct ctx {
    const char *name;
    mp_error *err;
} ctx;

static mp_status bad(ctx *c, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static mp_status bad(ctx *c, const char *path, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return mp_fail(c->err, MP_ERR_FORMAT, "costs %s: %s: %s", c->name, path, what);
}

/* Paths are cut at PATH_MAX_CHARS (a hostile key can be long); a cut path ends in "...". */
static void mark_cut(char *out, int n)
{
    if (n >= PATH_MAX_CHARS)
        memcpy(out + PATH_MAX_CHARS - 4, "...", 4);
}
static void join(char *out, const char *path, const char *key)
{
    mark_cut(out, snprintf(out, PATH_MAX_CHARS, "%s.%s", path, key));
}
static void join_index(char *out, const char *path, int i)
{
    mark_cut(out, snprintf(out, PATH_MAX_CHARS, "%s[%d]", path, i));
}

/* Every key of obj must be in allowed (NULL-terminated) and appear once. */
static mp_status check_keys(ctx *c, const cJSON *obj, const char *path, const char *const *allowed)
{
    if (!cJSON_IsObject(obj))
        return bad(c, path, "expected an object");
    for (const cJSON *it = obj->child; it; it = it->next) {
        bool known = false;
        for (int i = 0; allowed[i]; i++)
            known = known || !strcmp(it->string, allowed[i]);
        char sub[PATH_MAX_CHARS];
        join(sub, path, it->string);
        if (!known)
            return bad(c, sub, "unknown key");
        for (const cJSON *other = obj->child; other != it; other = other->next)
            if (!strcmp(other->string, it->string))
                return bad(c, sub, "repeated key");
    }
    return MP_OK;
}

static mp_status get_member(ctx *c, const cJSON *obj, const char *path, const char *key, const cJSON **out)
{
    *out = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!*out) {
        char sub[PATH_MAX_CHARS];
        join(sub, path, key);
        return bad(c, sub, "missing");
    }
    return MP_OK;
}

static mp_status get_num(ctx *c, const cJSON *obj, const char *path, const char *key, double min, double *out)
{
    const cJSON *v;
    mp_status st = get_member(c, obj, path, key, &v);
    if (st)
        return st;
    char sub[PATH_MAX_CHARS];
    join(sub, path, key);
    /* cJSON reads overflowing literals (1e999) as inf; NaN cannot be written in JSON at all */
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < min)
        return bad(c, sub, "expected a finite number >= %g", min);
    *out = v->valuedouble;
    return MP_OK;
}

/* obj.quant: a type name of 1..MP_EXPERT_QUANT_MAX - 1 characters, into out (MP_EXPERT_QUANT_MAX). */
static mp_status get_quant(ctx *c, const cJSON *obj, const char *path, char *out)
{
    const cJSON *q;
    mp_status st = get_member(c, obj, path, "quant", &q);
    if (st)
        return st;
    if (!cJSON_IsString(q) || !q->valuestring[0] || strlen(q->valuestring) >= MP_EXPERT_QUANT_MAX) {
        char sub[PATH_MAX_CHARS];
        join(sub, path, "quant");
        return bad(c, sub, "expected a type name of 1..%d characters", MP_EXPERT_QUANT_MAX - 1);
    }
    snprintf(out, MP_EXPERT_QUANT_MAX, "%s", q->valuestring);
    return MP_OK;
}

static mp_status get_int(ctx *c, const cJSON *obj, const char *path, const char *key, double min, double *out)
{
    mp_status st = get_num(c, obj, path, key, min, out);
    if (st)
        return st;
    if (*out != floor(*out) || *out > 9007199254740992.0) {
        char sub[PATH_MAX_CHARS];
        join(sub, path, key);
        return bad(c, sub, "expected an integer >= %g", min);
    }
    return MP_OK;
}

static const char *const stat_keys[] = {"median_ns", "spread_ns", NULL};

static mp_status get_stat(ctx *c, const cJSON *obj, const char *path, mp_cost_stat *out)
{
    mp_status st = check_keys(c, obj, path, stat_keys);
    if (!st)
        st = get_num(c, obj, path, "median_ns", 0, &out->median_ns);
    if (!st)
        st = get_num(c, obj, path, "spread_ns", 0, &out->spread_ns);
    return st;
}

/* A curve: an array of {x_key: N, median_ns, spread_ns} with x strictly increasing, >= 1; whole
 * numbers unless whole is false (mean keys of context). */
static mp_status get_curve_of(ctx *c, const cJSON *arr, const char *path, const char *x_key, bool whole,
                              mp_cost_curve *out)
{
    if (!cJSON_IsArray(arr))
        return bad(c, path, "expected an array of {\"%s\", \"median_ns\", \"spread_ns\"} points", x_key);
    int n = cJSON_GetArraySize(arr);
    if (n < 1)
        return bad(c, path, "expected at least one point");
    out->x = calloc((size_t)n, sizeof *out->x);
    out->y = calloc((size_t)n, sizeof *out->y);
    if (!out->x || !out->y)
        return mp_fail(c->err, MP_ERR_NOMEM, "costs %s: %s: out of memory", c->name, path);
    out->n_points = n;
    const char *keys[] = {x_key, "median_ns", "spread_ns", NULL};
    int i = 0;
    for (const cJSON *pt = arr->child; pt; pt = pt->next, i++) {
        char sub[PATH_MAX_CHARS];
        join_index(sub, path, i);
        mp_status st = check_keys(c, pt, sub, keys);
        if (!st)
            st = whole ? get_int(c, pt, sub, x_key, 1, &out->x[i]) : get_num(c, pt, sub, x_key, 1, &out->x[i]);
        if (!st)
            st = get_num(c, pt, sub, "median_ns", 0, &out->y[i].median_ns);
        if (!st)
            st = get_num(c, pt, sub, "spread_ns", 0, &out->y[i].spread_ns);
        if (st)
            return st;
        if (i > 0 && out->x[i] <= out->x[i - 1]) {
            char xs[PATH_MAX_CHARS];
            join(xs, sub, x_key);
            return bad(c, xs, "%g: expected > the previous point's %g (points sorted by %s)",
                       out->x[i], out->x[i - 1], x_key);
        }
    }
    return MP_OK;
}

static mp_status get_curve(ctx *c, const cJSON *arr, const char *path, const char *x_key, mp_cost_curve *out)
{
    return get_curve_of(c, arr, path, x_key, true, out);
}

static mp_status get_experts(ctx *c, const cJSON *root, const char *key, bool cpu, mp_cost_expert **out, int *n_out)
{
    const cJSON *arr;
    char path[PATH_MAX_CHARS];
    join(path, "$", key);
    mp_status st = get_member(c, root, "$", key, &arr);
    if (st)
        return st;
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) < 1)
        return bad(c, path, "expected a non-empty array of expert entries");
    int n = cJSON_GetArraySize(arr);
    *out = calloc((size_t)n, sizeof **out);
    if (!*out)
        return mp_fail(c->err, MP_ERR_NOMEM, "costs %s: %s: out of memory", c->name, path);
    *n_out = n;
    static const char *const gpu_keys[] = {"quant", "n_embd", "n_ff", "expert_bytes", "points", "concurrent", NULL};
    static const char *const cpu_keys[] = {"quant",  "n_embd", "n_ff",      "expert_bytes",
                                           "threads", "points", "concurrent", NULL};
    int i = 0;
    for (const cJSON *e = arr->child; e; e = e->next, i++) {
        mp_cost_expert *x = &(*out)[i];
        char sub[PATH_MAX_CHARS];
        join_index(sub, path, i);
        if ((st = check_keys(c, e, sub, cpu ? cpu_keys : gpu_keys)) || (st = get_quant(c, e, sub, x->quant)))
            return st;
        double v;
        if ((st = get_int(c, e, sub, "n_embd", 1, &v)))
            return st;
        x->n_embd = (int64_t)v;
        if ((st = get_int(c, e, sub, "n_ff", 1, &v)))
            return st;
        x->n_ff = (int64_t)v;
        if ((st = get_int(c, e, sub, "expert_bytes", 1, &v)))
            return st;
        x->expert_bytes = (uint64_t)v;
        if (cpu) {
            if ((st = get_int(c, e, sub, "threads", 1, &v)))
                return st;
            if (v > 4096)
                return bad(c, sub, "threads %.0f: expected at most 4096", v);
            x->threads = (int)v;
        }
        const cJSON *pts;
        char ppath[PATH_MAX_CHARS];
        join(ppath, sub, "points");
        if ((st = get_member(c, e, sub, "points", &pts)) || (st = get_curve(c, pts, ppath, "rows", &x->by_rows)))
            return st;
        const cJSON *cc = cJSON_GetObjectItemCaseSensitive(e, "concurrent"); /* optional */
        if (cc) {
            join(ppath, sub, "concurrent");
            if ((st = get_curve(c, cc, ppath, "experts", &x->concurrent)))
                return st;
            if (x->concurrent.n_points < 2)
                return bad(c, ppath, "expected at least two points (the fixed and the per-expert cost)");
        }
    }
    return MP_OK;
}

static mp_status get_copy(ctx *c, const cJSON *root, const char *key, mp_cost_curve *pinned, mp_cost_curve *pageable)
{
    const cJSON *obj, *arr;
    char path[PATH_MAX_CHARS], sub[PATH_MAX_CHARS];
    join(path, "$", key);
    static const char *const keys[] = {"pinned", "pageable", NULL};
    mp_status st = get_member(c, root, "$", key, &obj);
    if (!st)
        st = check_keys(c, obj, path, keys);
    if (!st && !(st = get_member(c, obj, path, "pinned", &arr))) {
        join(sub, path, "pinned");
        st = get_curve(c, arr, sub, "bytes", pinned);
    }
    if (!st && !(st = get_member(c, obj, path, "pageable", &arr))) {
        join(sub, path, "pageable");
        st = get_curve(c, arr, sub, "bytes", pageable);
    }
    return st;
}

/* The GPU measurements a CPU-only file may leave out, with their MP_COST_ABSENT_* bits. */
static const struct {
    const char *key;
    unsigned bit;
} optional_gpu[] = {
    {"gpu_expert", MP_COST_ABSENT_GPU_EXPERT},
    {"h2d", MP_COST_ABSENT_H2D},
    {"d2h", MP_COST_ABSENT_D2H},
    {"sync", MP_COST_ABSENT_SYNC},
    {"decode_layers", MP_COST_ABSENT_DECODE},
};
#define N_OPTIONAL_GPU ((int)(sizeof optional_gpu / sizeof optional_gpu[0]))

/* $.missing: [{"what": KEY, "why": TEXT}, ...] naming the GPU measurements the file lacks. Sets
 * *listed to their bits; a key listed twice or not one of optional_gpu is an error. */
static mp_status get_missing(ctx *c, const cJSON *root, unsigned *listed)
{
    *listed = 0;
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "missing");
    if (!arr)
        return MP_OK;
    if (!cJSON_IsArray(arr))
        return bad(c, "$.missing", "expected an array of {\"what\", \"why\"} entries");
    static const char *const keys[] = {"what", "why", NULL};
    int i = 0;
    for (const cJSON *e = arr->child; e; e = e->next, i++) {
        char sub[PATH_MAX_CHARS], wpath[PATH_MAX_CHARS];
        join_index(sub, "$.missing", i);
        mp_status st = check_keys(c, e, sub, keys);
        const cJSON *what, *why;
        if (st || (st = get_member(c, e, sub, "what", &what)) || (st = get_member(c, e, sub, "why", &why)))
            return st;
        join(wpath, sub, "why");
        if (!cJSON_IsString(why))
            return bad(c, wpath, "expected a string");
        join(wpath, sub, "what");
        unsigned bit = 0;
        for (int k = 0; cJSON_IsString(what) && k < N_OPTIONAL_GPU; k++)
            if (!strcmp(what->valuestring, optional_gpu[k].key))
                bit = optional_gpu[k].bit;
        if (!bit)
            return bad(c, wpath, "expected one of \"gpu_expert\", \"h2d\", \"d2h\", \"sync\", \"decode_layers\"");
        if (*listed & bit)
            return bad(c, wpath, "\"%s\" listed twice", what->valuestring);
        *listed |= bit;
    }
    return MP_OK;
}

/* $.host_read: {"gbs", "spread_gbs", "threads"[, "level_gbs", "level_probes"][, "probe"]}, gbs > 0;
 * level_gbs (> 0, at most gbs) absent: gbs; probe "window" (absent: the older probe). */
static mp_status get_host_read(ctx *c, const cJSON *root, mp_costs *out)
{
    static const char *const keys[] = {"gbs", "spread_gbs", "threads", "level_gbs", "level_probes", "probe", NULL};
    const char *path = "$.host_read";
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "host_read");
    if (!v)
        return bad(c, path, "missing: the file was written by an older `moeplan calibrate`, without the host's "
                   "read bandwidth; run `moeplan calibrate -m MODEL` again");
    double t = 0;
    mp_status st;
    if ((st = check_keys(c, v, path, keys)) || (st = get_num(c, v, path, "gbs", 0, &out->host_read_gbs)) ||
        (st = get_num(c, v, path, "spread_gbs", 0, &out->host_read_spread_gbs)) ||
        (st = get_int(c, v, path, "threads", 1, &t)))
        return st;
    if (!(out->host_read_gbs > 0))
        return bad(c, "$.host_read.gbs", "expected a bandwidth > 0");
    if (t > 4096)
        return bad(c, "$.host_read.threads", "%.0f: expected at most 4096", t);
    out->host_read_threads = (int)t;
    const cJSON *probe = cJSON_GetObjectItemCaseSensitive(v, "probe");
    if (probe && (!cJSON_IsString(probe) || strcmp(probe->valuestring, "window")))
        return bad(c, "$.host_read.probe", "expected \"window\" (what all threads read in a window)");
    out->host_read_window = probe != NULL;
    out->host_read_level_gbs = out->host_read_gbs;
    out->host_read_level_probes = 0;
    if (cJSON_GetObjectItemCaseSensitive(v, "level_gbs")) {
        double n = 0;
        if ((st = get_num(c, v, path, "level_gbs", 0, &out->host_read_level_gbs)) ||
            (st = get_int(c, v, path, "level_probes", 1, &n)))
            return st;
        if (!(out->host_read_level_gbs > 0) || out->host_read_level_gbs > out->host_read_gbs)
            return bad(c, "$.host_read.level_gbs", "%g: expected a bandwidth > 0 and at most gbs (%g)",
                       out->host_read_level_gbs, out->host_read_gbs);
        out->host_read_level_probes = n > 1e6 ? 1000000 : (int)n;
    } else if (cJSON_GetObjectItemCaseSensitive(v, "level_probes")) {
        return bad(c, "$.host_read.level_probes", "given without level_gbs");
    }
    return MP_OK;
}

/* $.decode_layers: the model it was measured for and its points (see costs.h). */
static mp_status get_decode(ctx *c, const cJSON *root, mp_cost_decode *d)
{
    static const char *const keys[] = {"quant", "n_embd", "n_ff", "n_expert", "top_k", "far_max", "far_split",
                                       "threads", "expert_bytes", "pool", "steps", "hybrid_step", "points", NULL};
    static const char *const pkeys[] = {"cold",   "far",    "far_on", "median_ns", "spread_ns",
                                        "cpu_ns", "gpu_ns", "passes", NULL};
    const char *path = "$.decode_layers";
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "decode_layers"), *pts;
    double x;
    mp_status st = check_keys(c, v, path, keys);
    if (st || (st = get_quant(c, v, path, d->quant)))
        return st;
    if ((st = get_int(c, v, path, "n_embd", 1, &x)))
        return st;
    d->n_embd = (int64_t)x;
    if ((st = get_int(c, v, path, "n_ff", 1, &x)))
        return st;
    d->n_ff = (int64_t)x;
    if ((st = get_int(c, v, path, "n_expert", 1, &x)))
        return st;
    d->n_expert = (int64_t)x;
    if ((st = get_int(c, v, path, "expert_bytes", 1, &x)))
        return st;
    d->expert_bytes = (uint64_t)x;
    if ((st = get_int(c, v, path, "top_k", 1, &x)))
        return st;
    if (x > MP_COST_DECODE_MAX_K || x > (double)d->n_expert)
        return bad(c, "$.decode_layers.top_k", "%.0f: expected at most %d and at most n_expert", x,
                   MP_COST_DECODE_MAX_K);
    d->top_k = (int)x;
    /* optional: far units per expert (older files count whole routes: 1) */
    d->far_split = 1;
    if (cJSON_GetObjectItemCaseSensitive(v, "far_split")) {
        if ((st = get_int(c, v, path, "far_split", 1, &x)))
            return st;
        if (x * d->top_k > MP_COST_DECODE_MAX_K)
            return bad(c, "$.decode_layers.far_split", "%.0f: expected at most %d / top_k (%d)", x,
                       MP_COST_DECODE_MAX_K, d->top_k);
        d->far_split = (int)x;
    }
    if ((st = get_int(c, v, path, "far_max", 0, &x)))
        return st;
    if (x > d->top_k * d->far_split)
        return bad(c, "$.decode_layers.far_max", "%.0f: expected at most top_k x far_split (%d)", x,
                   d->top_k * d->far_split);
    d->far_max = (int)x;
    if ((st = get_int(c, v, path, "threads", 1, &x)))
        return st;
    if (x > 4096)
        return bad(c, "$.decode_layers.threads", "%.0f: expected at most 4096", x);
    d->threads = (int)x;
    /* optional: the pool and steps the points were measured with (older files lack them) */
    if (cJSON_GetObjectItemCaseSensitive(v, "pool")) {
        if ((st = get_int(c, v, path, "pool", 0, &x)))
            return st;
        if (x > (double)d->n_expert - 1)
            return bad(c, "$.decode_layers.pool", "%.0f: expected at most n_expert - 1 (%lld): a route must "
                       "find an expert outside the pool", x, (long long)d->n_expert - 1);
        d->pool = (int64_t)x;
    }
    if (cJSON_GetObjectItemCaseSensitive(v, "steps")) {
        if ((st = get_int(c, v, path, "steps", 1, &x)))
            return st;
        if (x > 1e6)
            return bad(c, "$.decode_layers.steps", "%.0f: expected at most 1000000", x);
        d->steps = (int)x;
    }
    const cJSON *hs = cJSON_GetObjectItemCaseSensitive(v, "hybrid_step");
    if (hs) {
        static const char *const hkeys[] = {"median_ns", "spread_ns", "layers", NULL};
        const char *hpath = "$.decode_layers.hybrid_step";
        if ((st = check_keys(c, hs, hpath, hkeys)) ||
            (st = get_num(c, hs, hpath, "median_ns", 0, &d->hybrid_step.median_ns)) ||
            (st = get_num(c, hs, hpath, "spread_ns", 0, &d->hybrid_step.spread_ns)) ||
            (st = get_int(c, hs, hpath, "layers", 2, &x)))
            return st;
        if (x > 65536)
            return bad(c, "$.decode_layers.hybrid_step.layers", "%.0f: expected at most 65536", x);
        d->hybrid_step_layers = (int64_t)x;
    }
    if ((st = get_member(c, v, path, "points", &pts)))
        return st;
    const int n = cJSON_GetArraySize(pts);
    /* at most one point per (cold, far, far_on) */
    const int most = (d->top_k + 1) * (d->top_k * d->far_split + 2);
    if (!cJSON_IsArray(pts) || n < 1 || n > most)
        return bad(c, "$.decode_layers.points", "expected an array of 1..%d points", most);
    if (!(d->points = calloc((size_t)n, sizeof *d->points)))
        return mp_fail(c->err, MP_ERR_NOMEM, "costs %s: %s: out of memory", c->name, path);
    int i = 0;
    for (const cJSON *p = pts->child; p; p = p->next, i++) {
        char sub[PATH_MAX_CHARS], key[PATH_MAX_CHARS];
        join_index(sub, "$.decode_layers.points", i);
        mp_cost_decode_point *pt = &d->points[i];
        const cJSON *on;
        if ((st = check_keys(c, p, sub, pkeys)) || (st = get_int(c, p, sub, "cold", 0, &x)))
            return st;
        if (x > d->top_k) {
            join(key, sub, "cold");
            return bad(c, key, "%.0f: expected at most top_k (%d)", x, d->top_k);
        }
        pt->cold = (int)x;
        if ((st = get_int(c, p, sub, "far", 0, &x)))
            return st;
        if (x > pt->cold * d->far_split || x > d->far_max) {
            join(key, sub, "far");
            return bad(c, key, "%.0f: expected at most cold x far_split (%d) and far_max (%d)", x,
                       pt->cold * d->far_split, d->far_max);
        }
        pt->far = (int)x;
        if ((st = get_member(c, p, sub, "far_on", &on)))
            return st;
        join(key, sub, "far_on");
        if (!cJSON_IsBool(on))
            return bad(c, key, "expected true or false");
        pt->far_on = cJSON_IsTrue(on);
        if (!pt->far_on && pt->far) {
            join(key, sub, "far");
            return bad(c, key, "%d with far_on false: expected 0 (far routes off run none)", pt->far);
        }
        if ((st = get_num(c, p, sub, "median_ns", 0, &pt->layer.median_ns)) ||
            (st = get_num(c, p, sub, "spread_ns", 0, &pt->layer.spread_ns)) ||
            (st = get_num(c, p, sub, "cpu_ns", 0, &pt->cpu_ns)) || (st = get_num(c, p, sub, "gpu_ns", 0, &pt->gpu_ns)))
            return st;
        /* optional: the passes the point took (older files lack it; not costed: mp_cost_decode_spread) */
        if (cJSON_GetObjectItemCaseSensitive(p, "passes")) {
            if ((st = get_int(c, p, sub, "passes", 1, &x)))
                return st;
            if (x > 1e6) {
                join(key, sub, "passes");
                return bad(c, key, "%.0f: expected at most 1000000", x);
            }
            pt->passes = (int)x;
        }
        for (int j = 0; j < i; j++)
            if (d->points[j].cold == pt->cold && d->points[j].far == pt->far && d->points[j].far_on == pt->far_on)
                return bad(c, sub, "cold %d, far %d, far_on %s: repeats point %d", pt->cold, pt->far,
                           pt->far_on ? "true" : "false", j);
    }
    d->n_points = n;
    return MP_OK;
}

/* $.non_moe_context: {"points": [{"keys", "median_ns", "spread_ns"}, ...]} (>= 2 points, keys
 * strictly increasing), or the older {"keys", "per_key_ns"}; never a mix. */
static mp_status get_context(ctx *c, const cJSON *v, mp_costs *out)
{
    const char *path = "$.non_moe_context";
    if (cJSON_IsObject(v) && cJSON_GetObjectItemCaseSensitive(v, "points")) {
        static const char *const keys[] = {"points", NULL};
        mp_status st = check_keys(c, v, path, keys);
        if (!st)
            st = get_curve_of(c, cJSON_GetObjectItemCaseSensitive(v, "points"), "$.non_moe_context.points", "keys",
                              false, &out->non_moe_by_keys);
        if (!st && out->non_moe_by_keys.n_points < 2)
            st = bad(c, "$.non_moe_context.points", "expected at least 2 points (a curve by keys of context)");
        return st;
    }
    static const char *const keys[] = {"keys", "per_key_ns", NULL};
    mp_status st;
    if ((st = check_keys(c, v, path, keys)) || (st = get_num(c, v, path, "keys", 0, &out->non_moe_keys)) ||
        (st = get_num(c, v, path, "per_key_ns", 0, &out->non_moe_per_key_ns)))
        return st;
    out->non_moe_linear = true;
    return MP_OK;
}

/* optional $.host_bus: {"gbs", "cpu_gbs", "bus_gbs", "threads", "probes"}, each rate > 0 and gbs
 * their sum (to 0.01 GB/s, as calibrate rounds them). */
static mp_status get_host_bus(ctx *c, const cJSON *root, mp_costs *out)
{
    static const char *const keys[] = {"gbs", "cpu_gbs", "bus_gbs", "threads", "probes", NULL};
    const char *path = "$.host_bus";
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "host_bus");
    if (!v)
        return MP_OK;
    double t = 0, n = 0;
    mp_status st;
    if ((st = check_keys(c, v, path, keys)) || (st = get_num(c, v, path, "gbs", 0, &out->host_bus_gbs)) ||
        (st = get_num(c, v, path, "cpu_gbs", 0, &out->host_bus_cpu_gbs)) ||
        (st = get_num(c, v, path, "bus_gbs", 0, &out->host_bus_bus_gbs)) ||
        (st = get_int(c, v, path, "threads", 1, &t)) || (st = get_int(c, v, path, "probes", 1, &n)))
        return st;
    if (!(out->host_bus_cpu_gbs > 0) || !(out->host_bus_bus_gbs > 0))
        return bad(c, "$.host_bus", "cpu_gbs %g, bus_gbs %g: expected both readers' bandwidths > 0",
                   out->host_bus_cpu_gbs, out->host_bus_bus_gbs);
    if (!(fabs(out->host_bus_gbs - out->host_bus_cpu_gbs - out->host_bus_bus_gbs) <= 0.011))
        return bad(c, "$.host_bus.gbs", "%g: expected cpu_gbs + bus_gbs (%g)", out->host_bus_gbs,
                   out->host_bus_cpu_gbs + out->host_bus_bus_gbs);
    if (t > 4096)
        return bad(c, "$.host_bus.threads", "%.0f: expected at most 4096", t);
    out->host_bus_probes = n > 1e6 ? 1000000 : (int)n;
    return MP_OK;
}

static mp_status parse_root(ctx *c, const cJSON *root, mp_costs *out)
{
    /* hybrid_layer, cpu_decode_layer and far_decode_layer are the members older calibrations
     * wrote instead of decode_layers: known, so that such a file gets the message below (run
     * calibrate again) rather than "unknown key", and otherwise ignored */
    static const char *const keys[] = {"format", "version", "device", "notes", "missing", "gpu_expert", "cpu_expert",
                                       "h2d", "d2h", "sync", "decode_layers", "host_read", "combine", "non_moe",
                                       "non_moe_context", "hybrid_layer", "cpu_decode_layer", "far_decode_layer",
                                       "tier_admit", "host_bus", NULL};
    mp_status st = check_keys(c, root, "$", keys);
    if (st)
        return st;
    const cJSON *v;
    if ((st = get_member(c, root, "$", "format", &v)))
        return st;
    if (!cJSON_IsString(v) || strcmp(v->valuestring, "moeplan-costs") != 0)
        return bad(c, "$.format", "expected \"moeplan-costs\"");
    double version;
    if ((st = get_int(c, root, "$", "version", 0, &version)))
        return st;
    if (version != 1)
        return bad(c, "$.version", "%.0f: expected 1", version);
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "device")) && !cJSON_IsObject(v))
        return bad(c, "$.device", "expected an object (free-form description of the machine)");
    const cJSON *kl = v ? cJSON_GetObjectItemCaseSensitive(v, "cpu_kernels") : NULL;
    if (kl) { /* a level's name: lower-case letters and digits */
        bool ok = cJSON_IsString(kl) && kl->valuestring[0] && strlen(kl->valuestring) < sizeof out->cpu_kernels;
        for (const char *p = ok ? kl->valuestring : ""; *p; p++)
            ok = ok && ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9'));
        if (!ok)
            return bad(c, "$.device.cpu_kernels", "expected the name of a CPU kernel level (\"avx512\", ...)");
        snprintf(out->cpu_kernels, sizeof out->cpu_kernels, "%s", kl->valuestring);
    }
    if (v) { /* the machine it measured, where the free-form member says it as calibrate writes it */
        const cJSON *cpu = cJSON_GetObjectItemCaseSensitive(v, "cpu"), *gpu = cJSON_GetObjectItemCaseSensitive(v, "gpu"),
                    *cores = cJSON_GetObjectItemCaseSensitive(v, "cpu_logical_cores");
        if (cJSON_IsString(cpu) && strlen(cpu->valuestring) < sizeof out->machine.cpu)
            snprintf(out->machine.cpu, sizeof out->machine.cpu, "%s", cpu->valuestring);
        if (cJSON_IsString(gpu) && strlen(gpu->valuestring) < sizeof out->machine.gpu)
            snprintf(out->machine.gpu, sizeof out->machine.gpu, "%s", gpu->valuestring);
        if (cJSON_IsNumber(cores) && cores->valuedouble >= 1 && cores->valuedouble <= 1 << 20 &&
            cores->valuedouble == (double)(int)cores->valuedouble)
            out->machine.cores = (int)cores->valuedouble;
        const cJSON *knobs = cJSON_GetObjectItemCaseSensitive(v, "knobs"), *k;
        if (!cJSON_IsObject(knobs))
            knobs = NULL;
        cJSON_ArrayForEach(k, knobs)
        {
            const int i = k->string ? mp_knob_index(k->string) : -1;
            char text[sizeof out->knobs.value[0]] = "";
            if (i < 0)
                continue;
            if (cJSON_IsString(k) && strlen(k->valuestring) < sizeof text)
                snprintf(text, sizeof text, "%s", k->valuestring);
            else if (cJSON_IsNumber(k) && fabs(k->valuedouble) < 1e15 && k->valuedouble == floor(k->valuedouble))
                snprintf(text, sizeof text, "%.0f", k->valuedouble);
            if (!text[0])
                continue;
            out->knobs.set[i] = true;
            memcpy(out->knobs.value[i], text, sizeof text);
        }
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "notes")) && !cJSON_IsString(v))
        return bad(c, "$.notes", "expected a string");
    unsigned listed;
    if ((st = get_missing(c, root, &listed)))
        return st;
    /* each GPU measurement is present or listed in $.missing, so a deleted field is still an error */
    for (int k = 0; k < N_OPTIONAL_GPU; k++) {
        char path[PATH_MAX_CHARS];
        join(path, "$", optional_gpu[k].key);
        bool present = cJSON_GetObjectItemCaseSensitive(root, optional_gpu[k].key) != NULL;
        if (present && (listed & optional_gpu[k].bit))
            return bad(c, path, "present and also listed in $.missing: expected one or the other");
        if (!present && !(listed & optional_gpu[k].bit) && optional_gpu[k].bit == MP_COST_ABSENT_DECODE)
            return bad(c, path, "missing: the file was written by an older `moeplan calibrate`, without the "
                       "decode layer grid; run `moeplan calibrate -m MODEL` again");
        if (!present && !(listed & optional_gpu[k].bit))
            return bad(c, path, "missing (expected the measurement, or an entry in $.missing saying why not)");
    }
    out->absent = listed;
    if (!(listed & MP_COST_ABSENT_GPU_EXPERT) &&
        (st = get_experts(c, root, "gpu_expert", false, &out->gpu_expert, &out->n_gpu_expert)))
        return st;
    if ((st = get_experts(c, root, "cpu_expert", true, &out->cpu_expert, &out->n_cpu_expert)))
        return st;
    if (!(listed & MP_COST_ABSENT_H2D) && (st = get_copy(c, root, "h2d", &out->h2d_pinned, &out->h2d_pageable)))
        return st;
    if (!(listed & MP_COST_ABSENT_D2H) && (st = get_copy(c, root, "d2h", &out->d2h_pinned, &out->d2h_pageable)))
        return st;
    if (!(listed & MP_COST_ABSENT_SYNC) &&
        ((st = get_member(c, root, "$", "sync", &v)) || (st = get_stat(c, v, "$.sync", &out->sync))))
        return st;
    if (!(listed & MP_COST_ABSENT_DECODE) && (st = get_decode(c, root, &out->decode)))
        return st;
    if ((st = get_host_read(c, root, out)) || (st = get_host_bus(c, root, out)))
        return st;
    if ((st = get_member(c, root, "$", "combine", &v)) || (st = get_curve(c, v, "$.combine", "rows", &out->combine)))
        return st;
    if ((st = get_member(c, root, "$", "non_moe", &v)) || (st = get_curve(c, v, "$.non_moe", "rows", &out->non_moe)))
        return st;
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "non_moe_context")) && (st = get_context(c, v, out)))
        return st;
    out->tier_admit.median_ns = -1; /* optional: files written before the adaptive tier lack it */
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "tier_admit"))) {
        static const char *const akeys[] = {"median_ns", "spread_ns", "expert_bytes", NULL};
        if ((st = check_keys(c, v, "$.tier_admit", akeys)) ||
            (st = get_num(c, v, "$.tier_admit", "median_ns", 0, &out->tier_admit.median_ns)) ||
            (st = get_num(c, v, "$.tier_admit", "spread_ns", 0, &out->tier_admit.spread_ns)) ||
            (st = get_num(c, v, "$.tier_admit", "expert_bytes", 1, &out->tier_admit_bytes)))
            return st;
    }
    return MP_OK;
}

mp_status mp_costs_require_gpu(const mp_costs *c, const char *name, mp_error *err)
{
    if (!c->absent)
        return MP_OK;
    char lacks[64] = "";
    for (int k = 0; k < N_OPTIONAL_GPU; k++)
        if (c->absent & optional_gpu[k].bit)
            snprintf(lacks + strlen(lacks), sizeof lacks - strlen(lacks), "%s%s", lacks[0] ? ", " : "",
                     optional_gpu[k].key);
    return mp_fail(err, MP_ERR_ARG,
                   "costs %s: no GPU measurements (%s listed in $.missing): expected a cost file from "
                   "`moeplan calibrate` on a machine with a CUDA device to simulate GPU placements",
                   name ? name : "(memory)", lacks);
}

static void curve_free(mp_cost_curve *c)
{
    free(c->x);
    free(c->y);
    memset(c, 0, sizeof *c);
}

void mp_costs_free(mp_costs *c)
{
    if (!c)
        return;
    for (int i = 0; c->gpu_expert && i < c->n_gpu_expert; i++)
        curve_free(&c->gpu_expert[i].by_rows), curve_free(&c->gpu_expert[i].concurrent);
    for (int i = 0; c->cpu_expert && i < c->n_cpu_expert; i++)
        curve_free(&c->cpu_expert[i].by_rows), curve_free(&c->cpu_expert[i].concurrent);
    free(c->gpu_expert);
    free(c->cpu_expert);
    curve_free(&c->h2d_pinned);
    curve_free(&c->h2d_pageable);
    curve_free(&c->d2h_pinned);
    curve_free(&c->d2h_pageable);
    curve_free(&c->combine);
    curve_free(&c->non_moe);
    curve_free(&c->non_moe_by_keys);
    free(c->decode.points);
    memset(c, 0, sizeof *c);
}

mp_status mp_costs_parse(const char *text, size_t len, const char *name, mp_costs *out, mp_error *err)
{
    memset(out, 0, sizeof *out);
    ctx c = {name ? name : "(memory)", err};
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (!root) {
        size_t off = end && end >= text ? (size_t)(end - text) : 0;
        return mp_fail(err, MP_ERR_FORMAT, "costs %s: offset %zu: expected valid JSON", c.name, off);
    }
    for (const char *p = end; p && p < text + len; p++)
        if (*p != ' ' && *p != '\n' && *p != '\r' && *p != '\t' && *p != '\0') {
            cJSON_Delete(root);
            return mp_fail(err, MP_ERR_FORMAT, "costs %s: offset %zu: expected end of input after the JSON value",
                           c.name, (size_t)(p - text));
        }
    mp_status st = parse_root(&c, root, out);
    cJSON_Delete(root);
    if (st)
        mp_costs_free(out);
    return st;
}

mp_status mp_costs_load(const char *path, mp_costs *out, mp_error *err)
{
    memset(out, 0, sizeof *out);
    /* a cost file is a few KiB; refuse to slurp a wrong file */
    char *buf;
    size_t len;
    mp_status rs = mp_input_read_all(path, "costs", (uint64_t)64 << 20, &buf, &len, err);
    if (rs)
        return rs;
    mp_status st = mp_costs_parse(buf, len, path, out, err);
    free(buf);
    return st;
}

bool mp_cost_decode_spread(const mp_cost_decode *d, mp_cost_spread *out)
{
    double sum = 0;
    *out = (mp_cost_spread){0};
    for (int i = 0; i < d->n_points; i++) {
        const mp_cost_decode_point *p = &d->points[i];
        if (p->passes == 1 || !(p->layer.median_ns >= MP_COST_GRID_STEADY_NS))
            continue;
        const double rel = p->layer.spread_ns / p->layer.median_ns;
        sum += rel;
        out->max = rel > out->max ? rel : out->max;
        out->n++;
    }
    out->mean = out->n ? sum / out->n : 0;
    return out->n >= MP_COST_GRID_STEADY_MIN && out->mean > MP_COST_GRID_NOISY;
}

bool mp_cost_cpu_curve_inverted(const mp_costs *c, mp_cost_inversion *out)
{
    *out = (mp_cost_inversion){0};
    double worst = 0;
    for (int e = 0; e < c->n_cpu_expert; e++) {
        const mp_cost_curve *cv = &c->cpu_expert[e].concurrent;
        for (int i = 0; i + 1 < cv->n_points; i++) {
            const double lo = cv->y[i].median_ns, hi = cv->y[i + 1].median_ns;
            const double ratio = hi > 0 ? lo / hi : (lo > 0 ? INFINITY : 0);
            if (!out->entry || ratio > worst) {
                worst = ratio;
                *out = (mp_cost_inversion){&c->cpu_expert[e], cv->x[i], cv->x[i + 1], lo, hi};
            }
        }
    }
    return out->entry && worst > MP_COST_CURVE_INVERTED;
}

double mp_cost_curve_ns(const mp_cost_curve *c, double x)
{
    if (x <= 0 || c->n_points < 1)
        return 0;
    const double *xs = c->x;
    int n = c->n_points;
    if (x <= xs[0])
        return c->y[0].median_ns;
    if (x >= xs[n - 1]) {
        if (n == 1)
            return c->y[0].median_ns * x / xs[0];
        double slope = (c->y[n - 1].median_ns - c->y[n - 2].median_ns) / (xs[n - 1] - xs[n - 2]);
        if (slope < 0)
            slope = 0;
        return c->y[n - 1].median_ns + slope * (x - xs[n - 1]);
    }
    /* binary search for the segment [xs[lo], xs[lo + 1]] holding x */
    int lo = 0, hi = n - 1;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (xs[mid] <= x)
            lo = mid;
        else
            hi = mid;
    }
    double t = (x - xs[lo]) / (xs[hi] - xs[lo]);
    return c->y[lo].median_ns + t * (c->y[hi].median_ns - c->y[lo].median_ns);
}

double mp_costs_decode_non_moe_ns(const mp_costs *c, double keys)
{
    const mp_cost_curve *k = &c->non_moe_by_keys;
    double ns;
    if (k->n_points >= 2) {
        /* attention's time falls with fewer keys: below the first point the first segment goes on
         * down, as beyond the last the last segment goes on up (mp_cost_curve_ns) */
        if (keys >= k->x[0])
            return mp_cost_curve_ns(k, keys);
        const double slope = (k->y[1].median_ns - k->y[0].median_ns) / (k->x[1] - k->x[0]);
        ns = k->y[0].median_ns - (slope > 0 ? slope : 0) * (k->x[0] - keys);
    } else if (k->n_points == 1) {
        ns = k->y[0].median_ns;
    } else {
        ns = mp_cost_curve_ns(&c->non_moe, 1);
        if (c->non_moe_linear)
            ns += c->non_moe_per_key_ns * (keys - c->non_moe_keys);
    }
    return ns > 0 ? ns : 0;
}

void mp_costs_context_describe(const mp_costs *c, char *buf, size_t cap)
{
    const mp_cost_curve *k = &c->non_moe_by_keys;
    if (k->n_points > 0)
        snprintf(buf, cap, "one-row steps by their keys of context: the measured curve of %d points, %g .. %g keys",
                 k->n_points, k->x[0], k->x[k->n_points - 1]);
    else if (c->non_moe_linear)
        snprintf(buf, cap, "one-row steps by their keys of context: linear, %g ns per key from %g keys (a cost file "
                 "from before the measured curve: run `moeplan calibrate` again for it)", c->non_moe_per_key_ns,
                 c->non_moe_keys);
    else
        snprintf(buf, cap, "one-row steps: no context term (the cost file has none: run `moeplan calibrate` "
                 "again for it)");
}

const mp_cost_expert *mp_costs_find_gpu(const mp_costs *c, const char *quant, int64_t n_embd, int64_t n_ff)
{
    for (int i = 0; i < c->n_gpu_expert; i++) {
        const mp_cost_expert *e = &c->gpu_expert[i];
        if (!strcmp(e->quant, quant) && e->n_embd == n_embd && e->n_ff == n_ff)
            return e;
    }
    return NULL;
}

const mp_cost_expert *mp_costs_find_cpu(const mp_costs *c, const char *quant, int64_t n_embd, int64_t n_ff,
                                        int threads)
{
    const mp_cost_expert *below = NULL, *above = NULL;
    for (int i = 0; i < c->n_cpu_expert; i++) {
        const mp_cost_expert *e = &c->cpu_expert[i];
        if (strcmp(e->quant, quant) || e->n_embd != n_embd || e->n_ff != n_ff)
            continue;
        if (e->threads == threads)
            return e;
        if (e->threads < threads && (!below || e->threads > below->threads))
            below = e;
        if (e->threads > threads && (!above || e->threads < above->threads))
            above = e;
    }
    return below ? below : above;
}
