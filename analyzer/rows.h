/* analyzer/rows.h — row selection (--rows all|decode|final) between the trace stream and the
 * statistics.
 *
 *  all:    every record passes unchanged.
 *  decode: prefill records are dropped.
 *  final:  onnxruntime's semantics: of a request's prefill only the last row of its last prefill
 *          step counts (the row that produced the first generated token), then every decode row.
 *          Which prefill step is the last is known only when the next step (or request) begins,
 *          so the last row of the latest prefill step is held per node — (n_nodes, top_k) ids and
 *          weights, a bounded window — and emitted, in node order, before that next step.
 *
 * Emitted records keep their order within a node, so token time and reuse stay meaningful.
 */
#ifndef MP_ANALYZER_ROWS_H
#define MP_ANALYZER_ROWS_H

#include "analyzer/stats.h"

typedef mp_status (*mp_an_emit_fn)(void *user, const mp_an_record *r, mp_error *err);

typedef struct mp_an_rowsel {
    mp_an_rows mode;
    int32_t n_nodes;
    mp_an_emit_fn emit;
    void *user;
    /* final mode: the held last prefill row of each node */
    mp_an_record *held;   /* (n_nodes) headers; n_rows = 0 when nothing is held */
    uint16_t *held_ids;   /* (n_nodes, MP_AN_MAX_TOPK) */
    float *held_weights;  /* (n_nodes, MP_AN_MAX_TOPK) */
    int64_t held_request, held_step; /* the (request, step) of the held rows; -1 if none */
} mp_an_rowsel;

mp_status mp_an_rowsel_init(mp_an_rowsel *sel, mp_an_rows mode, int32_t n_nodes,
                            mp_an_emit_fn emit, void *user, mp_error *err);
mp_status mp_an_rowsel_add(mp_an_rowsel *sel, const mp_an_record *r, mp_error *err);
/* Emit whatever is held; call after the last record. */
mp_status mp_an_rowsel_flush(mp_an_rowsel *sel, mp_error *err);
void mp_an_rowsel_free(mp_an_rowsel *sel);

#endif
