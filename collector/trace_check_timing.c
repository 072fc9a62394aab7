/* collector/trace_check_timing.c — the fail-closed checker's timing rows (see trace_check.h): read
 * in the same scan as the steps and routing, merge-joined by (request, step), each row once. A row
 * that carries served codes must be of a step and node of the tables and hold rows × top-k codes,
 * each a path (mp_served), whose counts agree with the row's hits, misses and tier_hits; every
 * row's adaptive-tier counts are summed.
 *
 * Invariants: a row's codes are counted into the node's totals only after every check of the row
 * passed; the totals handed out (mp_trace_check_served, mp_trace_check_tier) are those of the last
 * iteration that reached its end without any problem in the trace, never a partial scan's; the
 * rows read are counted for the footer's n_timing whatever they hold.
 */
#include "collector/trace_check_impl.h"

#include <stdio.h>

#include "collector/trace.h"

/* "0 gpu, 1 tier, ...": the codes and their names, for messages. */
static const char *served_codes(char *buf, size_t cap)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int code = 0; code < MP_SERVED_N && at < cap; code++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%d %s", code ? ", " : "", code, mp_served_name(code));
    return buf;
}

/* One timing row's served codes at the current step: rows × top-k of them, each a path, counted
 * as the row's hits, tier_hits and misses say; then added to the node's totals. */
static mp_status check_served(mp_trace_check_iter *it, const mp_trace_timing_rec *rec)
{
    const mp_trace_check *c = it->c;
    const int32_t p = rec->node_index >= 0 && rec->node_index <= MP_TRACE_MAX_NODE_INDEX
                          ? c->pos[rec->node_index] : -1;
    if (p < 0 || p >= c->n_nodes)
        PROBLEM(AT ": timing with served codes for a node absent from the node table, expected one of "
                "the nodes table's", AT_ARGS);
    if (!c->node_ok[p])
        return MP_OK; /* reported at open */
    const int64_t k = it->nodes[p].top_k, rows = it->step.n_rows;
    int64_t want; /* rows × k, by a multiplication: a division per row cost more than the check */
    if (__builtin_mul_overflow(rows, k, &want) || rec->served_bytes != (uint64_t)want)
        PROBLEM(AT ": served BLOB of %zu codes, expected rows × top-k = %lld × %lld", AT_ARGS,
                rec->served_bytes, (long long)rows, (long long)k);
    int64_t n[MP_SERVED_N] = {0};
    const uint8_t *code = rec->t.served;
    for (size_t i = 0; i < rec->served_bytes; i++) {
        if (code[i] >= MP_SERVED_N) {
            char names[128];
            PROBLEM(AT ", row %lld, slot %lld: served code %u, expected one of %s", AT_ARGS,
                    (long long)(i / (size_t)k), (long long)(i % (size_t)k), code[i], served_codes(names, sizeof names));
        }
        n[code[i]]++;
    }
    const int64_t gpu = n[MP_SERVED_GPU] + n[MP_SERVED_TIER], tier = n[MP_SERVED_TIER];
    const int64_t host = n[MP_SERVED_CPU] + n[MP_SERVED_FAR] + n[MP_SERVED_COPY];
    if (gpu != rec->t.hits || tier != rec->t.tier_hits || host != rec->t.misses) {
        char got[160];
        size_t at = 0;
        for (int i = 0; i < MP_SERVED_N; i++)
            at += (size_t)snprintf(got + at, sizeof got - at, "%s%s %lld", i ? ", " : "", mp_served_name(i),
                                   (long long)n[i]);
        PROBLEM(AT ": served codes %s, but hits %lld, tier_hits %lld, misses %lld: expected %s + %s = hits, "
                "%s = tier_hits, %s + %s + %s = misses", AT_ARGS, got, (long long)rec->t.hits,
                (long long)rec->t.tier_hits, (long long)rec->t.misses, mp_served_name(MP_SERVED_GPU),
                mp_served_name(MP_SERVED_TIER), mp_served_name(MP_SERVED_TIER), mp_served_name(MP_SERVED_CPU),
                mp_served_name(MP_SERVED_FAR), mp_served_name(MP_SERVED_COPY));
    }
    for (int i = 0; i < MP_SERVED_N; i++)
        it->served[p].by_path[i] += n[i];
    return MP_OK;
}

/* One timing row's tier counts, added to the iteration's when it has any. */
static void tier_row(mp_trace_check_iter *it, const mp_moe_timing *t)
{
    if (!(t->tier_hits | t->tier_late | t->tier_admissions | t->tier_evictions))
        return; /* no tier at this node and step (copy bytes come with admissions) */
    mp_trace_tier_totals row = {.present = true, .hits = t->tier_hits, .late = t->tier_late,
                                .admissions = t->tier_admissions, .evictions = t->tier_evictions,
                                .copy_bytes = t->tier_copy_bytes};
    row.overflow = __builtin_add_overflow(t->hits, t->misses, &row.routes);
    mp_trace_tier_sum(&it->tier, &row);
}

/* The timing rows up to the current step (all that are left once the steps have ended), each read
 * once: its tier counts summed; its served codes, if any, checked: those of an earlier step lack it
 * in the steps table; those of this step are checked against its rows, unless the step itself
 * failed (reported with the step). Hot on a live trace: a row per (step, node). */
mp_status mp_trace_check_timing_upto(mp_trace_check_iter *it, mp_error *err)
{
    while (it->trec_rc == 1) {
        const mp_trace_timing_rec *rec = &it->trec;
        const int cmp = it->have_step ? cmp_key(rec->request_id, rec->step, it->step.request_id, it->step.step) : -1;
        if (cmp > 0)
            return MP_OK;
        it->n_timing_read++;
        tier_row(it, &rec->t);
        mp_status st = MP_OK;
        if (!rec->t.served)
            ; /* no codes to check */
        else if (cmp < 0)
            st = problem(it->c, &it->stop_err, "trace %s: request %lld, step %lld, node %lld: timing with served "
                         "codes for a step that the steps table lacks", it->c->path, (long long)rec->request_id,
                         (long long)rec->step, (long long)rec->node_index);
        else if (it->step_ok)
            st = check_served(it, rec);
        if (st != MP_OK)
            return st;
        const int rc = mp_trace_timing_next(it->timing, &it->trec, err);
        if (rc < 0)
            return (mp_status)rc;
        it->trec_rc = rc;
    }
    return MP_OK;
}

void mp_trace_check_timing_keep(mp_trace_check_iter *it)
{
    mp_trace_check *c = it->c;
    for (int32_t p = 0; p < c->n_nodes; p++) {
        c->served[p] = it->served[p];
        c->served[p].routes = it->rows_total * it->nodes[p].top_k;
    }
    c->tier = it->tier;
}

const mp_trace_served_node *mp_trace_check_served(const mp_trace_check *c) { return c->served; }
const mp_trace_tier_totals *mp_trace_check_tier(const mp_trace_check *c) { return &c->tier; }

bool mp_trace_tier_sum(mp_trace_tier_totals *sum, const mp_trace_tier_totals *add)
{
    sum->present |= add->present;
    sum->overflow |= add->overflow;
    sum->overflow |= __builtin_add_overflow(sum->routes, add->routes, &sum->routes);
    sum->overflow |= __builtin_add_overflow(sum->hits, add->hits, &sum->hits);
    sum->overflow |= __builtin_add_overflow(sum->late, add->late, &sum->late);
    sum->overflow |= __builtin_add_overflow(sum->admissions, add->admissions, &sum->admissions);
    sum->overflow |= __builtin_add_overflow(sum->evictions, add->evictions, &sum->evictions);
    sum->overflow |= __builtin_add_overflow(sum->copy_bytes, add->copy_bytes, &sum->copy_bytes);
    return !sum->overflow;
}
