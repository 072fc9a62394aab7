/* collector/popularity.c — the routing popularity counter and its rankings (see popularity.h).
 * Counting is one increment per route (inline in the header); ranking is a sort, done once per
 * table after counting, O(cells log cells). */
#include "collector/popularity.h"

#include <stdlib.h>
#include <string.h>

mp_status mp_popularity_init(mp_popularity *p, int32_t n_nodes, const int64_t *n_experts, mp_error *err)
{
    memset(p, 0, sizeof *p);
    if (n_nodes < 1)
        return mp_fail(err, MP_ERR_ARG, "popularity: %d nodes: expected at least one", n_nodes);
    p->offset = malloc(sizeof *p->offset * ((size_t)n_nodes + 1));
    if (!p->offset)
        return mp_fail(err, MP_ERR_NOMEM, "popularity: out of memory for %d nodes", n_nodes);
    p->offset[0] = 0;
    for (int32_t i = 0; i < n_nodes; i++) {
        if (n_experts[i] < 1 || n_experts[i] > MP_POPULARITY_MAX_EXPERTS) {
            mp_popularity_free(p);
            return mp_fail(err, MP_ERR_ARG, "popularity: node %d: %lld experts: expected 1..%d", i,
                           (long long)n_experts[i], MP_POPULARITY_MAX_EXPERTS);
        }
        p->offset[i + 1] = p->offset[i] + n_experts[i];
    }
    p->count = calloc((size_t)p->offset[n_nodes], sizeof *p->count);
    if (!p->count) {
        const long long cells = (long long)p->offset[n_nodes];
        mp_popularity_free(p);
        return mp_fail(err, MP_ERR_NOMEM, "popularity: out of memory for %lld (node, expert) counts", cells);
    }
    p->n_nodes = n_nodes;
    return MP_OK;
}

mp_status mp_popularity_init_uniform(mp_popularity *p, int32_t n_nodes, int64_t n_experts, mp_error *err)
{
    memset(p, 0, sizeof *p);
    if (n_nodes < 1)
        return mp_fail(err, MP_ERR_ARG, "popularity: %d nodes: expected at least one", n_nodes);
    int64_t *each = malloc(sizeof *each * (size_t)n_nodes);
    if (!each)
        return mp_fail(err, MP_ERR_NOMEM, "popularity: out of memory for %d nodes", n_nodes);
    for (int32_t i = 0; i < n_nodes; i++)
        each[i] = n_experts;
    mp_status st = mp_popularity_init(p, n_nodes, each, err);
    free(each);
    return st;
}

void mp_popularity_free(mp_popularity *p)
{
    free(p->offset);
    free(p->count);
    memset(p, 0, sizeof *p);
}

static int by_count_desc(const void *pa, const void *pb, void *ctx)
{
    const uint64_t *count = ctx;
    const uint16_t a = *(const uint16_t *)pa, b = *(const uint16_t *)pb;
    if (count[a] != count[b])
        return count[a] > count[b] ? -1 : 1;
    return (a > b) - (a < b); /* ties go to the lower expert id */
}

void mp_popularity_rank(const uint64_t *count, int64_t n, uint16_t *order, int32_t *rank)
{
    for (int64_t e = 0; e < n; e++)
        order[e] = (uint16_t)e;
    qsort_r(order, (size_t)n, sizeof *order, by_count_desc, (void *)count);
    if (rank)
        for (int64_t r = 0; r < n; r++)
            rank[order[r]] = (int32_t)r;
}

static int by_gain_desc(const void *pa, const void *pb, void *ctx)
{
    const double *gain = ctx;
    const uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
    if (gain[a] != gain[b])
        return gain[a] > gain[b] ? -1 : 1;
    return (a > b) - (a < b); /* ties: the lower node, then the lower expert */
}

mp_status mp_popularity_rank_cells(const mp_popularity *p, const double *unit, uint32_t *order, mp_error *err)
{
    const int64_t cells = p->offset[p->n_nodes];
    if ((uint64_t)cells > (uint64_t)UINT32_MAX + 1)
        return mp_fail(err, MP_ERR_LIMIT, "popularity: %lld cells to rank: expected at most 2^32",
                       (long long)cells);
    /* the gain of every cell computed once: a comparison reads two doubles, not a node lookup */
    double *gain = malloc(sizeof *gain * (size_t)(cells ? cells : 1));
    if (!gain)
        return mp_fail(err, MP_ERR_NOMEM, "popularity: out of memory ranking %lld cells", (long long)cells);
    for (int32_t i = 0; i < p->n_nodes; i++)
        for (int64_t c = p->offset[i]; c < p->offset[i + 1]; c++) {
            double g = (double)p->count[c];
            if (unit)
                g /= unit[i];
            gain[c] = g;
            order[c] = (uint32_t)c;
        }
    qsort_r(order, (size_t)cells, sizeof *order, by_gain_desc, gain);
    free(gain);
    return MP_OK;
}
