/* tests/unit/test_popularity.c — the routing popularity counter (collector/popularity.h) that the
 * analyzer and the simulator share: counts per (node, expert) for nodes of different expert
 * counts, the per-node ranking (ties to the lower id) and the ranking of all cells by count or by
 * count per unit (ties to the lower node, then expert), checked against orders worked out by hand
 * and against a naive ranking on random counts. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "collector/popularity.h"
#include "tests/rng.h"

Test(popularity, counts_routes_per_node_and_expert)
{
    mp_popularity p;
    mp_error err;
    const int64_t experts[3] = {4, 2, 3};
    cr_assert_eq(mp_popularity_init(&p, 3, experts, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(p.offset[1], 4);
    cr_assert_eq(p.offset[2], 6);
    cr_assert_eq(p.offset[3], 9);
    const uint16_t a[] = {3, 0, 3, 1}, b[] = {1, 1, 0}, c[] = {2};
    mp_popularity_add(&p, 0, a, 4);
    mp_popularity_add(&p, 1, b, 3);
    mp_popularity_add(&p, 2, c, 1);
    mp_popularity_add(&p, 0, a, 2); /* only the first two ids */
    const uint64_t want[9] = {2, 1, 0, 3, /* node 1 */ 1, 2, /* node 2 */ 0, 0, 1};
    cr_assert_arr_eq(p.count, want, sizeof want);
    cr_assert_eq(mp_popularity_node(&p, 1)[1], 2);
    cr_assert_eq(mp_popularity_node(&p, 2)[2], 1);
    mp_popularity_free(&p);
    cr_assert_null(p.count);

    cr_assert_eq(mp_popularity_init_uniform(&p, 2, 5, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(p.offset[1], 5); /* cell = node x 5 + expert */
    cr_assert_eq(p.offset[2], 10);
    mp_popularity_free(&p);
}

Test(popularity, refuses_bad_geometry)
{
    mp_popularity p;
    mp_error err;
    const int64_t none[2] = {4, 0}, too_many[1] = {MP_POPULARITY_MAX_EXPERTS + 1};
    cr_assert_eq(mp_popularity_init(&p, 2, none, &err), MP_ERR_ARG);
    cr_assert_not_null(strstr(err.msg, "node 1: 0 experts: expected 1..65536"), "%s", err.msg);
    cr_assert_null(p.offset);
    cr_assert_eq(mp_popularity_init(&p, 1, too_many, &err), MP_ERR_ARG);
    cr_assert_eq(mp_popularity_init_uniform(&p, 0, 4, &err), MP_ERR_ARG);
    cr_assert_not_null(strstr(err.msg, "0 nodes"), "%s", err.msg);
}

Test(popularity, ranks_a_node_by_count_ties_to_the_lower_id)
{
    const uint64_t count[6] = {3, 7, 3, 0, 7, 1};
    uint16_t order[6];
    int32_t rank[6];
    mp_popularity_rank(count, 6, order, rank);
    const uint16_t want[6] = {1, 4, 0, 2, 5, 3};
    cr_assert_arr_eq(order, want, sizeof want);
    for (int r = 0; r < 6; r++)
        cr_assert_eq(rank[order[r]], r);
    mp_popularity_rank(count, 6, order, NULL); /* rank is optional */
    cr_assert_arr_eq(order, want, sizeof want);
}

Test(popularity, ranks_cells_by_count_or_by_count_per_unit)
{
    mp_popularity p;
    mp_error err;
    const int64_t experts[2] = {3, 2};
    cr_assert_eq(mp_popularity_init(&p, 2, experts, &err), MP_OK, "%s", err.msg);
    const uint64_t counts[5] = {4, 8, 4, /* node 1 */ 4, 6};
    memcpy(p.count, counts, sizeof counts);
    uint32_t order[5];
    cr_assert_eq(mp_popularity_rank_cells(&p, NULL, order, &err), MP_OK, "%s", err.msg);
    /* 8 (cell 1), 6 (cell 4), then the three 4s by cell */
    const uint32_t by_count[5] = {1, 4, 0, 2, 3};
    cr_assert_arr_eq(order, by_count, sizeof by_count);
    /* node 1's experts take half the bytes: per byte its 4 and 6 become 8 and 12 */
    const double bytes[2] = {2.0, 1.0};
    cr_assert_eq(mp_popularity_rank_cells(&p, bytes, order, &err), MP_OK, "%s", err.msg);
    /* gains 2, 4, 2 | 4, 6: cell 4, then cells 1 and 3 (4 each, the lower first), then 0 and 2 */
    const uint32_t by_gain[5] = {4, 1, 3, 0, 2};
    cr_assert_arr_eq(order, by_gain, sizeof by_gain);
    mp_popularity_free(&p);
}

/* Random counts with many ties: the rankings against a selection sort by the same rule. */
Test(popularity, rankings_match_a_naive_sort)
{
    seed_rng();
    mp_popularity p;
    mp_error err;
    enum { L = 5, E = 40 };
    cr_assert_eq(mp_popularity_init_uniform(&p, L, E, &err), MP_OK, "%s", err.msg);
    for (int c = 0; c < L * E; c++)
        p.count[c] = rnd_u64() % 6; /* few values: ties everywhere */
    uint32_t order[L * E];
    cr_assert_eq(mp_popularity_rank_cells(&p, NULL, order, &err), MP_OK, "%s", err.msg);
    bool taken[L * E] = {0};
    for (int r = 0; r < L * E; r++) {
        int best = -1;
        for (int c = 0; c < L * E; c++)
            if (!taken[c] && (best < 0 || p.count[c] > p.count[best]))
                best = c;
        taken[best] = true;
        cr_assert_eq(order[r], (uint32_t)best, "seed %llu: rank %d: cell %u, expected %d",
                     (unsigned long long)g_seed, r, order[r], best);
    }
    for (int l = 0; l < L; l++) {
        uint16_t node_order[E];
        mp_popularity_rank(mp_popularity_node(&p, l), E, node_order, NULL);
        /* a node's ranking is the cells ranking restricted to the node */
        int k = 0;
        for (int r = 0; r < L * E; r++)
            if ((int)(order[r] / E) == l)
                cr_assert_eq(node_order[k++], order[r] % E, "seed %llu: layer %d", (unsigned long long)g_seed, l);
    }
    mp_popularity_free(&p);
}
