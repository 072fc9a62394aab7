/* analyzer/rows.c — row selection (see rows.h). */
#include "analyzer/rows.h"

#include <stdlib.h>
#include <string.h>

mp_status mp_an_rowsel_init(mp_an_rowsel *sel, mp_an_rows mode, int32_t n_nodes,
                            mp_an_emit_fn emit, void *user, mp_error *err)
{
    memset(sel, 0, sizeof *sel);
    sel->mode = mode;
    sel->n_nodes = n_nodes;
    sel->emit = emit;
    sel->user = user;
    sel->held_request = sel->held_step = -1;
    if (mode != MP_AN_ROWS_FINAL)
        return MP_OK;
    sel->held = calloc((size_t)n_nodes, sizeof *sel->held);
    sel->held_ids = calloc((size_t)n_nodes * MP_AN_MAX_TOPK, sizeof *sel->held_ids);
    sel->held_weights = calloc((size_t)n_nodes * MP_AN_MAX_TOPK, sizeof *sel->held_weights);
    if (!sel->held || !sel->held_ids || !sel->held_weights) {
        mp_an_rowsel_free(sel);
        return mp_fail(err, MP_ERR_NOMEM, "analyzer: out of memory for row selection");
    }
    return MP_OK;
}

void mp_an_rowsel_free(mp_an_rowsel *sel)
{
    free(sel->held), free(sel->held_ids), free(sel->held_weights);
    sel->held = NULL, sel->held_ids = NULL, sel->held_weights = NULL;
}

mp_status mp_an_rowsel_flush(mp_an_rowsel *sel, mp_error *err)
{
    if (sel->mode != MP_AN_ROWS_FINAL || sel->held_request < 0)
        return MP_OK;
    for (int32_t i = 0; i < sel->n_nodes; i++) {
        if (sel->held[i].n_rows == 0)
            continue;
        mp_status st = sel->emit(sel->user, &sel->held[i], err);
        if (st != MP_OK)
            return st;
        sel->held[i].n_rows = 0;
    }
    sel->held_request = sel->held_step = -1;
    return MP_OK;
}

mp_status mp_an_rowsel_add(mp_an_rowsel *sel, const mp_an_record *r, mp_error *err)
{
    if (sel->mode == MP_AN_ROWS_ALL)
        return sel->emit(sel->user, r, err);
    if (sel->mode == MP_AN_ROWS_DECODE)
        return r->phase == 1 ? sel->emit(sel->user, r, err) : MP_OK;
    /* final */
    const bool same_step = r->request_ord == sel->held_request && r->step == sel->held_step;
    if (r->phase == 0) {
        /* a later prefill step of the same request replaces the held rows; another request's
         * prefill first releases the previous request's last prefill row */
        if (sel->held_request >= 0 && !same_step && r->request_ord != sel->held_request) {
            mp_status st = mp_an_rowsel_flush(sel, err);
            if (st != MP_OK)
                return st;
        }
        if (!same_step)
            for (int32_t i = 0; i < sel->n_nodes; i++)
                sel->held[i].n_rows = 0;
        if (r->n_rows < 1)
            return MP_OK;
        mp_an_record *h = &sel->held[r->node];
        uint16_t *ids = sel->held_ids + (size_t)r->node * MP_AN_MAX_TOPK;
        float *w = sel->held_weights + (size_t)r->node * MP_AN_MAX_TOPK;
        const int64_t last = r->n_rows - 1;
        memcpy(ids, r->expert_ids + last * r->top_k, (size_t)r->top_k * sizeof *ids);
        memcpy(w, r->weights + last * r->top_k, (size_t)r->top_k * sizeof *w);
        *h = *r;
        h->n_rows = 1;
        h->expert_ids = ids;
        h->weights = w;
        sel->held_request = r->request_ord;
        sel->held_step = r->step;
        return MP_OK;
    }
    if (sel->held_request >= 0) {
        mp_status st = mp_an_rowsel_flush(sel, err);
        if (st != MP_OK)
            return st;
    }
    return sel->emit(sel->user, r, err);
}
