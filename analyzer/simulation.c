/* analyzer/simulation.c — the strict reader of simulate's JSON for the report (see simulation.h).
 * Every refusal is one line: "simulation FILE: $.PATH: what was found, what was expected". */
#include "analyzer/simulation.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/input_file.h"
#include "base/json.h"

typedef struct rd {
    const char *name;
    mp_error *err;
} rd;

static mp_status bad(const rd *r, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static mp_status bad(const rd *r, const char *path, const char *fmt, ...)
{
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return mp_fail(r->err, MP_ERR_FORMAT, "simulation %s: %s: %s", r->name, path, what);
}

/* obj.key, which must exist; *path_out gets "path.key". */
static const cJSON *member(const rd *r, const cJSON *obj, const char *path, const char *key,
                           char *path_out, size_t cap, mp_status *st)
{
    snprintf(path_out, cap, "%s.%s", path, key);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v)
        *st = bad(r, path_out, "missing");
    return v;
}

/* An integer in [lo, hi] (JSON numbers are doubles: at most 2^53 is exact). */
static mp_status get_int(const rd *r, const cJSON *obj, const char *path, const char *key,
                         double lo, double hi, double *out)
{
    char p[128];
    mp_status st = MP_OK;
    const cJSON *v = member(r, obj, path, key, p, sizeof p, &st);
    if (!v)
        return st;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != floor(v->valuedouble) ||
        v->valuedouble < lo || v->valuedouble > hi)
        return bad(r, p, "expected an integer in %.0f..%.0f", lo, hi);
    *out = v->valuedouble;
    return MP_OK;
}

/* A number > 0, or null (*out = NAN). */
static mp_status get_positive_or_null(const rd *r, const cJSON *obj, const char *path,
                                      const char *key, double *out)
{
    char p[128];
    mp_status st = MP_OK;
    const cJSON *v = member(r, obj, path, key, p, sizeof p, &st);
    if (!v)
        return st;
    if (cJSON_IsNull(v)) {
        *out = NAN;
        return MP_OK;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || !(v->valuedouble > 0))
        return bad(r, p, "expected a number > 0, or null");
    *out = v->valuedouble;
    return MP_OK;
}

/* One split's metrics: decisions, and tok/s with ms/token (both present, or both null when the
 * split had no tokens). */
static mp_status get_split(const rd *r, const cJSON *pol, const char *path, const char *key,
                           double *decisions, double *tok_s, double *ms)
{
    char p[128];
    mp_status st = MP_OK;
    const cJSON *m = member(r, pol, path, key, p, sizeof p, &st);
    if (!m)
        return st;
    if (!cJSON_IsObject(m))
        return bad(r, p, "expected an object of metrics");
    if ((st = get_int(r, m, p, "decisions", 0, 9007199254740992.0, decisions)) ||
        (st = get_positive_or_null(r, m, p, "tok_s", tok_s)) ||
        (st = get_positive_or_null(r, m, p, "ms_per_token", ms)))
        return st;
    if (isnan(*tok_s) != isnan(*ms))
        return bad(r, p, "tok_s and ms_per_token: expected both numbers or both null");
    return MP_OK;
}

int mp_an_simulation_policy(const mp_an_simulation *s, const char *name)
{
    for (int p = 0; p < s->n_policies; p++)
        if (!strcmp(s->policy[p], name))
            return p;
    return -1;
}

static bool name_ok(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++)
        if (!((s[n] >= 'a' && s[n] <= 'z') || (s[n] >= '0' && s[n] <= '9') || s[n] == '-'))
            return false;
    return n > 0 && n < MP_AN_SIM_NAME_MAX;
}

static mp_status get_policy(const rd *r, const cJSON *po, const char *path, int b,
                            mp_an_simulation *s)
{
    if (!cJSON_IsObject(po))
        return bad(r, path, "expected an object with policy, in_sample, held_out");
    char p[128];
    mp_status st = MP_OK;
    const cJSON *name = member(r, po, path, "policy", p, sizeof p, &st);
    if (!name)
        return st;
    if (!cJSON_IsString(name) || !name_ok(name->valuestring))
        return bad(r, p, "expected a policy name (1..%d characters of a-z, 0-9, -)",
                   MP_AN_SIM_NAME_MAX - 1);
    int k = mp_an_simulation_policy(s, name->valuestring);
    if (k >= 0 && s->pt[b][k].ran)
        return bad(r, p, "\"%s\" again: expected each policy once per budget", name->valuestring);
    if (k < 0) {
        if (s->n_policies == MP_AN_SIM_MAX_POLICIES)
            return bad(r, p, "expected at most %d policies", MP_AN_SIM_MAX_POLICIES);
        k = s->n_policies++;
        snprintf(s->policy[k], MP_AN_SIM_NAME_MAX, "%s", name->valuestring);
    }
    double in_dec, in_tok, in_ms, out_dec, out_tok, out_ms;
    if ((st = get_split(r, po, path, "in_sample", &in_dec, &in_tok, &in_ms)) ||
        (st = get_split(r, po, path, "held_out", &out_dec, &out_tok, &out_ms)))
        return st;
    mp_an_sim_point *pt = &s->pt[b][k];
    pt->ran = true;
    pt->held_out = out_dec > 0; /* simulate ranks by held-out where it exists */
    pt->tok_s = pt->held_out ? out_tok : in_tok;
    pt->ms_per_token = pt->held_out ? out_ms : in_ms;
    if (isnan(pt->tok_s)) {
        snprintf(p, sizeof p, "%s.%s.tok_s", path, pt->held_out ? "held_out" : "in_sample");
        return bad(r, p, "null: expected the predicted tok/s (the split has %.0f decisions)",
                   pt->held_out ? out_dec : in_dec);
    }
    return MP_OK;
}

static mp_status parse_root(const rd *r, const cJSON *root, mp_an_simulation *s)
{
    if (!cJSON_IsObject(root))
        return bad(r, "$", "expected a JSON object (simulate --json's output)");
    char p[128];
    mp_status st = MP_OK;
    const cJSON *v = member(r, root, "$", "format", p, sizeof p, &st);
    if (!v)
        return st;
    if (!cJSON_IsString(v) || strcmp(v->valuestring, "moeplan-simulation"))
        return bad(r, p, "expected \"moeplan-simulation\" (the JSON of moeplan simulate --json)");
    double x;
    if ((st = get_int(r, root, "$", "version", 0, 1e9, &x)))
        return st;
    if (x != 1)
        return bad(r, "$.version", "%.0f: expected 1", x);
    if (!(v = member(r, root, "$", "trace", p, sizeof p, &st)))
        return st;
    if (!cJSON_IsString(v))
        return bad(r, p, "expected the trace's path");
    snprintf(s->trace, sizeof s->trace, "%s", v->valuestring);
    const cJSON *geo = member(r, root, "$", "trace_geometry", p, sizeof p, &st);
    if (!geo)
        return st;
    if (!cJSON_IsObject(geo))
        return bad(r, p, "expected an object");
    double layers, experts, top_k;
    if ((st = get_int(r, geo, p, "moe_layers", 1, 4096, &layers)) ||
        (st = get_int(r, geo, p, "experts", 1, 65536, &experts)) ||
        (st = get_int(r, geo, p, "top_k", 1, 65536, &top_k)))
        return st;
    s->moe_layers = (int64_t)layers, s->experts = (int64_t)experts, s->top_k = (int64_t)top_k;
    const cJSON *budgets = member(r, root, "$", "budgets", p, sizeof p, &st);
    if (!budgets)
        return st;
    const int nb = cJSON_IsArray(budgets) ? cJSON_GetArraySize(budgets) : -1;
    if (nb < 1 || nb > MP_AN_SIM_MAX_BUDGETS)
        return bad(r, p, "expected an array of 1..%d budgets", MP_AN_SIM_MAX_BUDGETS);
    s->n_budgets = nb;
    int b = 0;
    for (const cJSON *bo = budgets->child; bo; bo = bo->next, b++) {
        char bp[64];
        snprintf(bp, sizeof bp, "$.budgets[%d]", b);
        if (!cJSON_IsObject(bo))
            return bad(r, bp, "expected an object with budget_bytes and policies");
        if ((st = get_int(r, bo, bp, "budget_bytes", 0, 9007199254740992.0, &s->budget_bytes[b])))
            return st;
        for (int e = 0; e < b; e++)
            if (s->budget_bytes[e] == s->budget_bytes[b])
                return bad(r, bp, "budget_bytes %.0f again: expected each budget once",
                           s->budget_bytes[b]);
        const cJSON *pols = member(r, bo, bp, "policies", p, sizeof p, &st);
        if (!pols)
            return st;
        const int np = cJSON_IsArray(pols) ? cJSON_GetArraySize(pols) : -1;
        if (np < 1 || np > MP_AN_SIM_MAX_POLICIES)
            return bad(r, p, "expected an array of 1..%d policies", MP_AN_SIM_MAX_POLICIES);
        int k = 0;
        for (const cJSON *po = pols->child; po; po = po->next, k++) {
            char pp[96];
            snprintf(pp, sizeof pp, "%s.policies[%d]", bp, k);
            if ((st = get_policy(r, po, pp, b, s)))
                return st;
        }
    }
    /* budgets by size, for the chart's x axis and the table's rows */
    for (int i = 0; i < nb; i++)
        s->order[i] = i;
    for (int i = 1; i < nb; i++)
        for (int j = i; j > 0 && s->budget_bytes[s->order[j]] < s->budget_bytes[s->order[j - 1]]; j--) {
            const int t = s->order[j];
            s->order[j] = s->order[j - 1], s->order[j - 1] = t;
        }
    return MP_OK;
}

mp_status mp_an_simulation_parse(const char *text, size_t n, const char *name,
                                 mp_an_simulation *out, mp_error *err)
{
    memset(out, 0, sizeof *out);
    const rd r = {name, err};
    mp_json_error je;
    cJSON *root = mp_json_parse_strict(text, n, &je);
    if (!root) {
        if (je.key[0])
            return bad(&r, "$", "key \"%s\" repeated: expected each key once", je.key);
        char at[48];
        snprintf(at, sizeof at, "byte %zu", je.offset);
        return bad(&r, at, "%s: expected the JSON of moeplan simulate --json", je.what);
    }
    const mp_status st = parse_root(&r, root, out);
    cJSON_Delete(root);
    if (st)
        memset(out, 0, sizeof *out);
    return st;
}

mp_status mp_an_simulation_load(const char *path, mp_an_simulation *out, mp_error *err)
{
    memset(out, 0, sizeof *out);
    char *text;
    size_t n;
    mp_status st = mp_input_read_all(path, "simulation", (uint64_t)64 << 20, &text, &n, err);
    if (st)
        return st;
    st = mp_an_simulation_parse(text, n, path, out, err);
    free(text);
    return st;
}
