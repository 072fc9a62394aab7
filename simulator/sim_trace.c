/* simulator/sim_trace.c — the in-memory routing trace the replay walks (see sim.h for its
 * invariants). Built step by step from any source (the SQLite trace reader, an importer, tests),
 * validating each step as it arrives so that the replay itself never has to check. */
#include "simulator/sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

mp_status mp_sim_trace_init(mp_sim_trace *t, uint32_t n_layers, uint32_t n_experts, uint32_t top_k,
                            const uint32_t *model_layer, mp_error *err)
{
    memset(t, 0, sizeof *t);
    if (n_layers < 1 || n_layers > MP_STRP_MAX_DIM)
        return mp_fail(err, MP_ERR_ARG, "trace: %u MoE layers: expected 1..%u", n_layers, MP_STRP_MAX_DIM);
    if (n_experts < 1 || n_experts > MP_STRP_MAX_DIM)
        return mp_fail(err, MP_ERR_ARG, "trace: %u experts: expected 1..%u", n_experts, MP_STRP_MAX_DIM);
    if (top_k < 1 || top_k > n_experts)
        return mp_fail(err, MP_ERR_ARG, "trace: top-k %u: expected 1..%u (the experts)", top_k, n_experts);
    t->model_layer = malloc(sizeof *t->model_layer * n_layers);
    if (!t->model_layer)
        return mp_fail(err, MP_ERR_NOMEM, "trace: out of memory");
    for (uint32_t l = 0; l < n_layers; l++) {
        t->model_layer[l] = model_layer ? model_layer[l] : l;
        if (t->model_layer[l] >= MP_STRP_MAX_DIM || (l > 0 && t->model_layer[l] <= t->model_layer[l - 1])) {
            free(t->model_layer);
            t->model_layer = NULL;
            return mp_fail(err, MP_ERR_ARG, "trace: MoE layer %u is model block %u: expected increasing blocks < %u",
                           l, model_layer[l], MP_STRP_MAX_DIM);
        }
    }
    t->n_layers = n_layers;
    t->n_experts = n_experts;
    t->top_k = top_k;
    t->last_request = UINT32_MAX;
    return MP_OK;
}

void mp_sim_trace_free(mp_sim_trace *t)
{
    free(t->model_layer);
    free(t->steps);
    free(t->ids);
    free(t->non_moe_ns);
    free(t->expert_bytes);
    memset(t, 0, sizeof *t);
}

mp_status mp_sim_trace_set_non_moe(mp_sim_trace *t, const double *non_moe_ns, uint64_t n, const char *where,
                                   mp_error *err)
{
    if (!where)
        where = "trace";
    if (t->non_moe_ns)
        return mp_fail(err, MP_ERR_ARG, "%s: non-MoE times set twice: expected them once, after the last step", where);
    if (n != t->n_steps || n == 0)
        return mp_fail(err, MP_ERR_ARG, "%s: %llu non-MoE times for %llu steps: expected one per step", where,
                       (unsigned long long)n, (unsigned long long)t->n_steps);
    for (uint64_t i = 0; i < n; i++)
        if (!isfinite(non_moe_ns[i]) || non_moe_ns[i] < 0)
            return mp_fail(err, MP_ERR_FORMAT, "%s: step %llu: non-MoE time %g ns: expected a finite number >= 0",
                           where, (unsigned long long)i, non_moe_ns[i]);
    if (!(t->non_moe_ns = malloc(sizeof *t->non_moe_ns * n)))
        return mp_fail(err, MP_ERR_NOMEM, "%s: out of memory for %llu non-MoE times", where, (unsigned long long)n);
    memcpy(t->non_moe_ns, non_moe_ns, sizeof *t->non_moe_ns * n);
    return MP_OK;
}

static bool seen_request(const mp_sim_trace *t, uint32_t request)
{
    /* requests are contiguous, so a repeat can only be one of the earlier runs: scan is O(steps)
     * but happens only when the request id changes */
    for (uint64_t i = 0; i < t->n_steps; i++)
        if (t->steps[i].request == request)
            return true;
    return false;
}

mp_status mp_sim_trace_add_step(mp_sim_trace *t, uint32_t request, uint32_t rows, const uint16_t *ids,
                                const char *where, mp_error *err)
{
    if (!where)
        where = "trace";
    if (rows < 1)
        return mp_fail(err, MP_ERR_FORMAT, "%s: request %u: step with 0 rows: expected >= 1", where, request);
    if (t->non_moe_ns) /* they are one per step: a later step would have none */
        return mp_fail(err, MP_ERR_ARG, "%s: request %u: step added after the non-MoE times: expected steps first",
                       where, request);
    if (request != t->last_request && t->n_steps && seen_request(t, request))
        return mp_fail(err, MP_ERR_FORMAT,
                       "%s: request %u resumes after request %u: expected each request's steps together",
                       where, request, t->last_request);
    uint64_t n = (uint64_t)rows * t->n_layers * t->top_k;
    for (uint32_t l = 0; l < t->n_layers; l++)
        for (uint32_t r = 0; r < rows; r++) {
            const uint16_t *row = ids + ((uint64_t)l * rows + r) * t->top_k;
            for (uint32_t j = 0; j < t->top_k; j++) {
                if (row[j] >= t->n_experts)
                    return mp_fail(err, MP_ERR_FORMAT, "%s: request %u layer %u row %u: expert %u: expected < %u",
                                   where, request, l, r, row[j], t->n_experts);
                for (uint32_t i = 0; i < j; i++)
                    if (row[i] == row[j])
                        return mp_fail(err, MP_ERR_FORMAT,
                                       "%s: request %u layer %u row %u: expert %u chosen twice: expected %u distinct",
                                       where, request, l, r, row[j], t->top_k);
            }
        }
    if (t->n_steps == t->cap_steps) {
        uint64_t cap = t->cap_steps ? 2 * t->cap_steps : 1024;
        mp_sim_step *s = realloc(t->steps, sizeof *s * cap);
        if (!s)
            return mp_fail(err, MP_ERR_NOMEM, "%s: out of memory for %llu steps", where, (unsigned long long)cap);
        t->steps = s;
        t->cap_steps = cap;
    }
    if (t->n_ids + n > t->cap_ids) {
        uint64_t cap = t->cap_ids ? 2 * t->cap_ids : 1 << 16;
        while (cap < t->n_ids + n)
            cap *= 2;
        uint16_t *p = realloc(t->ids, sizeof *p * cap);
        if (!p)
            return mp_fail(err, MP_ERR_NOMEM, "%s: out of memory for %llu expert ids", where, (unsigned long long)cap);
        t->ids = p;
        t->cap_ids = cap;
    }
    memcpy(t->ids + t->n_ids, ids, sizeof *ids * n);
    t->steps[t->n_steps++] = (mp_sim_step){request, rows, t->n_ids};
    t->n_ids += n;
    if (request != t->last_request)
        t->n_requests++;
    t->last_request = request;
    if (rows > t->max_rows)
        t->max_rows = rows;
    return MP_OK;
}

void mp_sim_trace_keep_rows(mp_sim_trace *t, uint64_t max_rows)
{
    uint64_t rows = 0, k = 0;
    while (k < t->n_steps && (k == 0 || rows + t->steps[k].rows <= max_rows))
        rows += t->steps[k++].rows;
    if (k == t->n_steps)
        return;
    t->n_steps = k;
    t->n_ids = t->steps[k - 1].ids_off + (uint64_t)t->steps[k - 1].rows * t->n_layers * t->top_k;
    t->n_requests = 0;
    for (uint64_t i = 0; i < k; i++) /* a request's steps are contiguous */
        t->n_requests += i == 0 || t->steps[i].request != t->steps[i - 1].request;
    t->last_request = t->steps[k - 1].request;
}
