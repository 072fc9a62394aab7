/* collector/popularity.h — routing popularity: how many routes each (node, expert) received, and
 * the rankings derived from the counts. The one counter of the analyzer (popularity ranks,
 * coverage, generalization, drift) and of the simulator (static placements, the planner, the
 * counts a profile carries). Both feed it the expert ids of records that the checked reader
 * (collector/trace_check.h) has validated, or of steps built from them.
 *
 * Invariants: node i's experts are the cells offset[i] .. offset[i + 1] - 1, so when every node
 * has E experts cell = node × E + expert; a ranking orders by count descending (or count per
 * unit, see mp_popularity_rank_cells), ties to the lower index (within a node the lower expert id,
 * across nodes the lower node). That is a total order: every reader derives the same ranking.
 */
#ifndef MP_COLLECTOR_POPULARITY_H
#define MP_COLLECTOR_POPULARITY_H

#include <stdint.h>

#include "base/error.h"

#define MP_POPULARITY_MAX_EXPERTS 65536 /* expert ids are u16 */

typedef struct mp_popularity {
    int32_t n_nodes;
    int64_t *offset; /* (n_nodes + 1) first cell of each node; offset[n_nodes] = the cells */
    uint64_t *count; /* (offset[n_nodes]) routes per (node, expert) */
} mp_popularity;

/* n_experts (n_nodes): each node's experts, 1 .. MP_POPULARITY_MAX_EXPERTS. Counts start at 0. */
mp_status mp_popularity_init(mp_popularity *p, int32_t n_nodes, const int64_t *n_experts, mp_error *err);
/* The same with every node of n_experts experts (cell = node × n_experts + expert). */
mp_status mp_popularity_init_uniform(mp_popularity *p, int32_t n_nodes, int64_t n_experts, mp_error *err);
void mp_popularity_free(mp_popularity *p);

/* Node's counts: (its experts), indexed by expert id. */
static inline uint64_t *mp_popularity_node(const mp_popularity *p, int32_t node)
{
    return p->count + p->offset[node];
}

/* Count n_ids routes of node, to the experts ids (validated: each below the node's experts). The
 * analyzer calls it for every record and the simulator for every train step: one increment per
 * route, nothing else. */
static inline void mp_popularity_add(mp_popularity *p, int32_t node, const uint16_t *ids, uint64_t n_ids)
{
    uint64_t *count = p->count + p->offset[node];
    for (uint64_t i = 0; i < n_ids; i++)
        count[ids[i]]++;
}

/* Experts by descending count, ties to the lower id: order (n) and, if non-NULL, rank (n) with
 * rank[order[r]] == r. n <= MP_POPULARITY_MAX_EXPERTS; count is any (n) table (a node's row, a
 * difference of two, counts summed over nodes by id). */
void mp_popularity_rank(const uint64_t *count, int64_t n, uint16_t *order, int32_t *rank);

/* Every cell by descending count per unit of its node, count / unit[node] (unit NULL: 1 each),
 * ties to the lower cell: order (offset[n_nodes]). With units in bytes it is the greedy order of
 * one byte budget across nodes (within a node that is the count order, so the greedy is exact). */
mp_status mp_popularity_rank_cells(const mp_popularity *p, const double *unit, uint32_t *order, mp_error *err);

#endif
