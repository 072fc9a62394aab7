/* runtime/strp_write.c — writing STRP profiles and their JSON manifests to disk.
 * Both go through mp_write_file_atomic: a reader sees the previous file or the new one.
 * Every profile written loads in the readers that refuse n_ranked > slots (schemas/strp.md). */
#include "base/json.h"
#include "base/fault.h"
#include "runtime/strp.h"

#include "base/atomic_file.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

mp_status mp_strp_write_file(const char *path, const mp_strp *p, mp_error *err)
{
    if (p->n_ranked > p->slots)
        return mp_fail(err, MP_ERR_ARG,
                       "writing %s: n_ranked %u > slots %u: Strata's and the llama.cpp fork's readers "
                       "refuse such a file; expected the resident set as the pairs (n_ranked <= slots) "
                       "and the rest of the ranking in the routing table",
                       path, p->n_ranked, p->slots);
    uint8_t *img;
    size_t size;
    mp_status st = mp_strp_encode(p, &img, &size, err);
    if (st)
        return mp_error_prefix(err, "writing %s", path);
    st = mp_write_file_atomic(path, img, size, "profile", err);
    free(img);
    return st;
}

void mp_strp_manifest_init(mp_strp_manifest *m)
{
    memset(m, 0, sizeof *m);
    m->predicted_tok_s = NAN;
    m->heldout_coverage = NAN;
    m->train_frac = NAN;
}

/* NULL strings and NaN numbers become JSON null: "not known yet", never a made-up value. */
static bool add_str(cJSON *o, const char *key, const char *v)
{
    return v ? cJSON_AddStringToObject(o, key, v) != NULL : cJSON_AddNullToObject(o, key) != NULL;
}
static bool add_num(cJSON *o, const char *key, double v)
{
    return isfinite(v) ? cJSON_AddNumberToObject(o, key, v) != NULL : cJSON_AddNullToObject(o, key) != NULL;
}

mp_status mp_strp_manifest_write(const char *path, const mp_strp_manifest *m, const mp_strp *p,
                                 mp_error *err)
{
    if (m->n_params < 0 || m->n_params > MP_STRP_MAX_PARAMS)
        return mp_fail(err, MP_ERR_ARG, "manifest %s: %d policy parameters: expected 0..%d", path,
                       m->n_params, MP_STRP_MAX_PARAMS);
    /* the ranking's length as a reader of the file derives it, whatever tail p carries */
    mp_strp derived = *p;
    derived.tail = NULL;
    mp_status st = mp_strp_rank_tail(&derived, err);
    if (st)
        return mp_error_prefix(err, "manifest %s", path);
    const uint32_t n_ranking = mp_strp_ranking_len(&derived);
    free(derived.tail);
    const mp_json_mark mark = mp_json_begin();
    cJSON *root = cJSON_CreateObject();
    bool ok = root != NULL;
    ok = ok && cJSON_AddStringToObject(root, "format", "moeplan-strp-manifest");
    ok = ok && cJSON_AddNumberToObject(root, "manifest_version", 1);
    ok = ok && cJSON_AddStringToObject(root, "moeplan_version", MP_VERSION);
    cJSON *strp = ok ? cJSON_AddObjectToObject(root, "strp") : NULL;
    ok = ok && strp;
    ok = ok && cJSON_AddNumberToObject(strp, "version", MP_STRP_VERSION);
    ok = ok && cJSON_AddNumberToObject(strp, "n_layers", p->n_layers);
    ok = ok && cJSON_AddNumberToObject(strp, "n_experts", p->n_experts);
    ok = ok && cJSON_AddNumberToObject(strp, "slots", p->slots);
    ok = ok && cJSON_AddNumberToObject(strp, "n_ranked", p->n_ranked);
    ok = ok && cJSON_AddStringToObject(strp, "table", mp_strp_table_name(p->table));
    /* what the header does not say: the resident set, and the whole ranking (pairs, then the
     * experts the table ranks after them) that a reader derives */
    ok = ok && cJSON_AddNumberToObject(strp, "resident", mp_strp_resident(p));
    ok = ok && cJSON_AddNumberToObject(strp, "n_ranking", n_ranking);
    cJSON *model = ok ? cJSON_AddObjectToObject(root, "model") : NULL;
    ok = ok && model && add_str(model, "sha256", m->model_sha256) && add_str(model, "path", m->model_path);
    /* budget_bytes may exceed 2^53 only for absurd budgets; a double keeps every real one exact */
    ok = ok && (m->budget_bytes ? cJSON_AddNumberToObject(root, "budget_bytes", (double)m->budget_bytes) != NULL
                                : cJSON_AddNullToObject(root, "budget_bytes") != NULL);
    cJSON *policy = ok ? cJSON_AddObjectToObject(root, "policy") : NULL;
    ok = ok && policy && add_str(policy, "name", m->policy);
    cJSON *params = ok ? cJSON_AddObjectToObject(policy, "params") : NULL;
    ok = ok && params;
    for (int i = 0; ok && i < m->n_params; i++)
        ok = m->params[i].name && add_num(params, m->params[i].name, m->params[i].value);
    ok = ok && add_str(root, "costs_sha256", m->costs_sha256);
    ok = ok && add_str(root, "trace_sha256", m->trace_sha256);
    ok = ok && add_num(root, "train_frac", m->train_frac);
    ok = ok && add_num(root, "predicted_tok_s", m->predicted_tok_s);
    ok = ok && add_num(root, "heldout_coverage", m->heldout_coverage);
    char *text = ok && !mp_json_failed_since(mark) ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text)
        return mp_fail(err, MP_ERR_NOMEM, "manifest %s: out of memory building JSON (or a NULL parameter name)", path);
    size_t len = strlen(text);
    char *withnl = mp_fault_realloc(text, len + 2);
    if (!withnl) {
        free(text);
        return mp_fail(err, MP_ERR_NOMEM, "manifest %s: out of memory", path);
    }
    withnl[len] = '\n';
    withnl[len + 1] = '\0';
    st = mp_write_file_atomic(path, withnl, len + 1, "manifest", err);
    free(withnl);
    return st;
}
