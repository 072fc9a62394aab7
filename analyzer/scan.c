/* analyzer/scan.c — stage 2 of validation (see validate.h): every trace's records through the
 * collector's checker (collector/trace_check.h), which decodes and checks them; this file only
 * places them in the merged request order and emits them.
 *
 * Memory: the checker's (bounded by nodes, requests and the largest record); nothing grows with
 * the number of steps or records.
 */
#include "analyzer/validate.h"

int64_t mp_an_input_records(const mp_an_input *in)
{
    int64_t n = 0;
    for (int ti = 0; ti < in->n_traces; ti++) {
        const mp_trace_run *run = mp_trace_reader_run(in->trace[ti]);
        n += run->has_footer && run->footer_n_routing > 0 ? run->footer_n_routing : 0;
    }
    return n;
}

mp_status mp_an_scan(mp_an_input *in, mp_an_problems *pb, mp_an_emit_fn emit, void *user,
                     mp_error *err)
{
    mp_status st = MP_OK;
    for (int ti = 0; ti < in->n_traces && st == MP_OK; ti++) {
        mp_trace_check_iter *it;
        if ((st = mp_trace_check_begin(in->check[ti], -1, &it, err)) != MP_OK)
            break;
        mp_trace_checked_rec rec;
        int rc;
        while ((rc = mp_trace_check_next(it, &rec, err)) == 1) {
            mp_progress_add(in->progress, 1);
            if (!emit || pb->n > 0)
                continue; /* after a problem (of any trace) nothing more is emitted */
            mp_an_record out = {
                .request_ord = in->meta[ti].request_base + rec.request_ord,
                .step = rec.step,
                .node = rec.node,
                .phase = rec.phase,
                .n_rows = rec.n_rows,
                .top_k = rec.top_k,
                .expert_ids = rec.expert_ids,
                .weights = rec.weights,
            };
            if ((st = emit(user, &out, err)) != MP_OK)
                break;
        }
        if (st == MP_OK && rc < 0)
            st = (mp_status)rc;
        mp_trace_check_end(it);
    }
    return st;
}
