/* tests/unit/test_tier.c — the adaptive expert tier (runtime/tier.h) by hand: each policy's
 * admissions and evictions on short sequences worked out in the comments, the states a move and a
 * landing go through, LOADING slots never victims, the in-flight bound over all layers, pinned
 * experts never admitted, the cost rule admitting exactly when the routes pay for the copy, the
 * split of slots over layers, the parameter and policy-name errors; then random sequences checked
 * against the invariants (seed printed on failure). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/tier.h"
#include "tests/rng.h"

#define MAX_E 64

static mp_tier *make(uint32_t L, uint32_t E, const uint32_t *cap, const uint8_t *pinned, const mp_tier_params *p)
{
    mp_tier *t;
    mp_error err;
    cr_assert_eq(mp_tier_new(&t, L, E, cap, pinned, p, &err), MP_OK, "%s", err.msg);
    return t;
}

static mp_tier_params params(mp_tier_policy policy)
{
    mp_tier_params p;
    mp_tier_params_default(&p);
    p.policy = policy;
    p.top_k = 2;
    p.max_rows = 4;
    return p;
}

/* One invocation of layer l routing rows[i] rows (NULL: 1 each) to ids[i] (distinct); its moves in
 * moves (room for n). */
static uint32_t invoke(mp_tier *t, uint32_t l, const uint16_t *ids, const uint32_t *rows, uint32_t n,
                       mp_tier_move *moves)
{
    uint32_t rows_of[MAX_E] = {0};
    for (uint32_t i = 0; i < n; i++)
        rows_of[ids[i]] = rows ? rows[i] : 1;
    return mp_tier_after(t, l, ids, rows_of, n, moves, n);
}

/* One expert, one row, its moves' copies landed at once (every resident READY before the next). */
static uint32_t invoke1(mp_tier *t, uint32_t l, uint16_t e, uint32_t rows, mp_tier_move *move)
{
    const uint32_t n = invoke(t, l, &e, &rows, 1, move);
    for (uint32_t i = 0; i < n; i++)
        mp_tier_landed(t, move[i].layer, move[i].slot);
    return n;
}

static void assert_move(const mp_tier_move *m, uint32_t layer, uint32_t slot, uint32_t expert, int32_t victim)
{
    cr_assert_eq(m->layer, layer);
    cr_assert_eq(m->slot, slot, "slot %u, expected %u", m->slot, slot);
    cr_assert_eq(m->expert, expert, "expert %u, expected %u", m->expert, expert);
    cr_assert_eq(m->victim, victim, "victim %d, expected %d", m->victim, victim);
}

/* The tier's own bookkeeping through its accessors: every filled slot's expert points back at it
 * and is LOADING or READY, every other expert is NONE, and the LOADING ones are mp_tier_loading. */
static void check_invariants(const mp_tier *t, uint32_t L, uint32_t E, const uint8_t *pinned)
{
    uint32_t loading = 0;
    for (uint32_t l = 0; l < L; l++) {
        uint32_t held = 0;
        for (uint32_t s = 0; s < mp_tier_cap(t, l); s++) {
            const int32_t e = mp_tier_expert_in(t, l, s);
            if (e < 0)
                continue;
            held++;
            cr_assert_eq(mp_tier_slot_of(t, l, (uint32_t)e), (int32_t)s, "layer %u slot %u", l, s);
            cr_assert(!pinned || !pinned[l * E + (uint32_t)e], "a pinned expert in a slot");
        }
        for (uint32_t e = 0; e < E; e++) {
            const mp_tier_state st = mp_tier_state_of(t, l, e);
            cr_assert_eq(st, (mp_tier_state)mp_tier_states(t, l)[e]);
            cr_assert_eq(st != MP_TIER_NONE, mp_tier_slot_of(t, l, e) >= 0, "layer %u expert %u", l, e);
            loading += st == MP_TIER_LOADING;
            held -= st != MP_TIER_NONE;
        }
        cr_assert_eq(held, 0, "layer %u: slots and states disagree", l);
    }
    cr_assert_eq(loading, mp_tier_loading(t));
}

Test(tier, lru_by_hand)
{
    /* 4 experts, 2 slots. 0: slot 0. 1: slot 1. 0: hit. 2: the least recently used READY is 1
     * (used at 2, 0 at 3): slot 1. {1, 3}: 1 takes 0's slot 0 (0 used at 3, 2 at 4), then 3 takes
     * 2's slot 1: 1 is LOADING, never a victim. {1, 3, 2} after landing: 1 and 3 hit, and 2 finds
     * both READY residents serving this invocation: refused. */
    const uint32_t cap[] = {2};
    mp_tier_params p = params(MP_TIER_LRU);
    mp_tier *t = make(1, 4, cap, NULL, &p);
    mp_tier_move m[4];
    cr_assert_eq(invoke1(t, 0, 0, 1, m), 1);
    assert_move(&m[0], 0, 0, 0, -1);
    cr_assert_eq(invoke1(t, 0, 1, 1, m), 1);
    assert_move(&m[0], 0, 1, 1, -1);
    cr_assert_eq(invoke1(t, 0, 0, 1, m), 0);
    cr_assert_eq(invoke1(t, 0, 2, 1, m), 1);
    assert_move(&m[0], 0, 1, 2, 1);
    const uint16_t both[] = {1, 3};
    cr_assert_eq(invoke(t, 0, both, NULL, 2, m), 2);
    assert_move(&m[0], 0, 0, 1, 0);
    assert_move(&m[1], 0, 1, 3, 2);
    cr_assert_eq(mp_tier_loading(t), 2);
    mp_tier_landed(t, 0, 0);
    mp_tier_landed(t, 0, 1);
    const uint16_t three[] = {1, 3, 2};
    cr_assert_eq(invoke(t, 0, three, NULL, 3, m), 0);
    const mp_tier_stats *s = mp_tier_stats_of(t);
    cr_assert_eq(s->hits, 3, "hits %llu", (unsigned long long)s->hits); /* 0 once, then 1 and 3 */
    cr_assert_eq(s->admissions, 5);
    cr_assert_eq(s->evictions, 3);
    cr_assert_eq(s->refused, 1);
    cr_assert_eq(s->invocations, 6);
    check_invariants(t, 1, 4, NULL);
    mp_tier_free(t);
}

Test(tier, lfu_by_hand)
{
    /* 1 slot: 0 0 1 1 1. Counts: 0 admitted into the free slot (1), hit (2); 1 at 1 and 2 does not
     * beat 2 (the rule needs more), at 3 it does: swap. Epsilon 0.5: 3 > 1.5 x 2 fails, 4 > 3 swaps. */
    const uint32_t cap[] = {1};
    for (int k = 0; k < 2; k++) {
        mp_tier_params p = params(MP_TIER_LFU);
        p.epsilon = k ? 0.5 : 0;
        mp_tier *t = make(1, 3, cap, NULL, &p);
        mp_tier_move m[1];
        cr_assert_eq(invoke1(t, 0, 0, 1, m), 1);
        assert_move(&m[0], 0, 0, 0, -1);
        cr_assert_eq(invoke1(t, 0, 0, 1, m), 0);
        cr_assert_eq(invoke1(t, 0, 1, 1, m), 0);
        cr_assert_eq(invoke1(t, 0, 1, 1, m), 0);
        cr_assert_eq(invoke1(t, 0, 1, 1, m), k ? 0 : 1);
        if (k)
            cr_assert_eq(invoke1(t, 0, 1, 1, m), 1);
        assert_move(&m[0], 0, 0, 1, 0);
        cr_assert_eq(mp_tier_stats_of(t)->refused, k ? 3 : 2);
        cr_assert_eq(mp_tier_stats_of(t)->hits, 1);
        mp_tier_free(t);
    }
    /* rows weigh: 0 once with 1 row, then 1 once with 2 rows: 2 > 1 swaps at once */
    mp_tier_params p = params(MP_TIER_LFU);
    mp_tier *t = make(1, 3, cap, NULL, &p);
    mp_tier_move m[1];
    cr_assert_eq(invoke1(t, 0, 0, 1, m), 1);
    cr_assert_eq(invoke1(t, 0, 1, 2, m), 1);
    assert_move(&m[0], 0, 0, 1, 0);
    mp_tier_free(t);
}

Test(tier, lfu_candidates_by_score_then_index)
{
    /* 3 free slots, one invocation routing 3 rows to 4, 1 row to 2 and 0, 3 rows to 1: admitted in
     * score order, ties by index (1 before 4, 0 before 2); the fourth finds no free slot and no
     * READY victim (all three LOADING): refused. */
    const uint32_t cap[] = {3};
    mp_tier_params p = params(MP_TIER_LFU);
    mp_tier *t = make(1, 5, cap, NULL, &p);
    const uint16_t ids[] = {4, 2, 0, 1};
    const uint32_t rows[] = {3, 1, 1, 3};
    mp_tier_move m[4];
    cr_assert_eq(invoke(t, 0, ids, rows, 4, m), 3);
    assert_move(&m[0], 0, 0, 1, -1);
    assert_move(&m[1], 0, 1, 4, -1);
    assert_move(&m[2], 0, 2, 0, -1);
    cr_assert_eq(mp_tier_stats_of(t)->refused, 1);
    check_invariants(t, 1, 5, NULL);
    mp_tier_free(t);
}

Test(tier, decayed_lfu_by_hand)
{
    /* alpha 0.5, 1 slot: 0 0 1. Scores: 0 = 1 (admitted), 1.5 (hit); then 0 = 0.75, 1 = 1 > 0.75:
     * swap. With epsilon 0.5 the swap needs 1 > 1.125: refused, and the next 1 (0 = 0.375, 1 = 1.5)
     * swaps. */
    const uint32_t cap[] = {1};
    for (int k = 0; k < 2; k++) {
        mp_tier_params p = params(MP_TIER_DECAYED_LFU);
        p.alpha = 0.5;
        p.epsilon = k ? 0.5 : 0;
        mp_tier *t = make(1, 2, cap, NULL, &p);
        mp_tier_move m[1];
        cr_assert_eq(invoke1(t, 0, 0, 1, m), 1);
        cr_assert_eq(invoke1(t, 0, 0, 1, m), 0);
        cr_assert_eq(invoke1(t, 0, 1, 1, m), k ? 0 : 1);
        if (k)
            cr_assert_eq(invoke1(t, 0, 1, 1, m), 1);
        assert_move(&m[0], 0, 0, 1, 0);
        mp_tier_free(t);
    }
    /* a short memory over many invocations (the stored scores' scale passes 1e150 and is folded
     * back): after 200 of expert 0 its score is ~1.0101; one invocation of 1 leaves 0 at 0.0101
     * against 1: swap, as without the scale */
    mp_tier_params p = params(MP_TIER_DECAYED_LFU);
    p.alpha = 0.01;
    mp_tier *t = make(1, 2, cap, NULL, &p);
    mp_tier_move m[1];
    for (int i = 0; i < 200; i++)
        invoke1(t, 0, 0, 1, m);
    cr_assert_eq(invoke1(t, 0, 1, 1, m), 1);
    assert_move(&m[0], 0, 0, 1, 0);
    mp_tier_free(t);
}

Test(tier, window_lfu_by_hand)
{
    /* window 2, 1 slot: 0 0 1 1. 0 admitted (window {0}: 1), hit ({0, 0}: 2); 1: the window forgets
     * the first 0 ({0, 1}: 1 against 1) and refuses; 1 again ({1, 1}: 2 against 0) swaps. */
    const uint32_t cap[] = {1};
    mp_tier_params p = params(MP_TIER_WINDOW_LFU);
    p.window = 2;
    mp_tier *t = make(1, 2, cap, NULL, &p);
    mp_tier_move m[1];
    cr_assert_eq(invoke1(t, 0, 0, 1, m), 1);
    cr_assert_eq(invoke1(t, 0, 0, 1, m), 0);
    cr_assert_eq(invoke1(t, 0, 1, 1, m), 0);
    cr_assert_eq(invoke1(t, 0, 1, 1, m), 1);
    assert_move(&m[0], 0, 0, 1, 0);
    cr_assert_eq(mp_tier_stats_of(t)->refused, 1);
    mp_tier_free(t);
}

Test(tier, cost_admits_when_the_routes_pay_for_the_copy)
{
    /* alpha 0.5, a route saves 100 ns, a copy costs 150 ns; 1 slot. The candidate's routes to come
     * are its score before the invocation, (score - rows now) / alpha. Expert 0 one row at a time:
     * scores 1, 1.5, 1.75, 1.875, so before 0 (refused even into a free slot), 1 (100 < 150), 1.5
     * (150, not above: refused), 1.75 (175: admitted). Expert 1 two rows: score 2, before 0 (0 is at
     * 0.9375: refused); again: 3, before 2, 0 at 0.46875: gain 1.53125 (153: swap). */
    const uint32_t cap[] = {1};
    mp_tier_params p = params(MP_TIER_COST);
    p.alpha = 0.5;
    p.route_saving_ns = 100;
    p.copy_cost_ns = 150;
    mp_tier *t = make(1, 2, cap, NULL, &p);
    mp_tier_move m[1];
    cr_assert_eq(invoke1(t, 0, 0, 1, m), 0);
    cr_assert_eq(invoke1(t, 0, 0, 1, m), 0);
    cr_assert_eq(invoke1(t, 0, 0, 1, m), 0);
    cr_assert_eq(invoke1(t, 0, 0, 1, m), 1);
    assert_move(&m[0], 0, 0, 0, -1);
    cr_assert_eq(invoke1(t, 0, 1, 2, m), 0);
    cr_assert_eq(invoke1(t, 0, 1, 2, m), 1);
    assert_move(&m[0], 0, 0, 1, 0);
    cr_assert_eq(mp_tier_stats_of(t)->refused, 4);
    mp_tier_free(t);
    /* a copy that costs nothing: any gain pays, from the second use (a first use is no evidence);
     * a saving of 0 (unknown): nothing is admitted */
    for (int k = 0; k < 2; k++) {
        p.copy_cost_ns = 0;
        p.route_saving_ns = k ? 0 : 100;
        t = make(1, 2, cap, NULL, &p);
        cr_assert_eq(invoke1(t, 0, 0, 1, m), 0);
        cr_assert_eq(invoke1(t, 0, 0, 1, m), k ? 0 : 1);
        mp_tier_free(t);
    }
}

Test(tier, loading_slots_are_never_victims)
{
    /* lfu, 2 slots. 1 with 9 rows lands (READY, 9); 0 with 1 row goes into the free slot and stays
     * LOADING (1, the weakest); 2 with 10 rows: the victim is 1, the weakest READY, not 0. */
    const uint32_t cap[] = {2};
    mp_tier_params p = params(MP_TIER_LFU);
    mp_tier *t = make(1, 3, cap, NULL, &p);
    mp_tier_move m[1];
    cr_assert_eq(invoke1(t, 0, 1, 9, m), 1);
    const uint16_t zero = 0, two = 2;
    const uint32_t one_row = 1, ten_rows = 10;
    cr_assert_eq(invoke(t, 0, &zero, &one_row, 1, m), 1);
    assert_move(&m[0], 0, 1, 0, -1);
    cr_assert_eq(mp_tier_state_of(t, 0, 0), MP_TIER_LOADING);
    cr_assert_eq(invoke(t, 0, &two, &ten_rows, 1, m), 1);
    assert_move(&m[0], 0, 0, 2, 1);
    /* now both slots LOADING: no victim at all, whatever the score */
    const uint16_t one = 1;
    const uint32_t many = 1000;
    cr_assert_eq(invoke(t, 0, &one, &many, 1, m), 0);
    cr_assert_eq(mp_tier_stats_of(t)->refused, 1);
    check_invariants(t, 1, 3, NULL);
    mp_tier_free(t);
    /* lru: the least recently used resident is LOADING, so the READY one goes */
    mp_tier_params q = params(MP_TIER_LRU);
    t = make(1, 3, cap, NULL, &q);
    cr_assert(mp_tier_place(t, 0, 1));                /* READY, slot 0 */
    cr_assert_eq(invoke(t, 0, &zero, NULL, 1, m), 1); /* LOADING in slot 1, used at 1 */
    cr_assert_eq(invoke(t, 0, &one, NULL, 1, m), 0);  /* a hit: 1 used at 2 */
    cr_assert_eq(invoke(t, 0, &two, NULL, 1, m), 1);  /* 0 is the least recent but LOADING: 1 goes */
    assert_move(&m[0], 0, 0, 2, 1);
    mp_tier_free(t);
}

Test(tier, landed_moves_loading_to_ready)
{
    const uint32_t cap[] = {2, 1};
    mp_tier_params p = params(MP_TIER_LRU);
    mp_tier *t = make(2, 4, cap, NULL, &p);
    mp_tier_move m[2];
    const uint16_t e3 = 3;
    cr_assert_eq(mp_tier_state_of(t, 1, 3), MP_TIER_NONE);
    cr_assert_eq(mp_tier_expert_in(t, 1, 0), -1);
    cr_assert_eq(invoke(t, 1, &e3, NULL, 1, m), 1);
    assert_move(&m[0], 1, 0, 3, -1);
    cr_assert_eq(mp_tier_state_of(t, 1, 3), MP_TIER_LOADING);
    cr_assert_eq(mp_tier_slot_of(t, 1, 3), 0);
    cr_assert_eq(mp_tier_expert_in(t, 1, 0), 3);
    cr_assert_eq(mp_tier_loading(t), 1);
    /* a route to it while LOADING is late, not a hit */
    cr_assert_eq(invoke(t, 1, &e3, NULL, 1, m), 0);
    cr_assert_eq(mp_tier_stats_of(t)->late, 1);
    cr_assert_eq(mp_tier_stats_of(t)->hits, 0);
    mp_tier_landed(t, 1, 0);
    cr_assert_eq(mp_tier_state_of(t, 1, 3), MP_TIER_READY);
    cr_assert_eq(mp_tier_loading(t), 0);
    mp_tier_landed(t, 1, 0); /* again: nothing changes */
    mp_tier_landed(t, 0, 1); /* a free slot: nothing */
    cr_assert_eq(mp_tier_loading(t), 0);
    cr_assert_eq(invoke(t, 1, &e3, NULL, 1, m), 0);
    cr_assert_eq(mp_tier_stats_of(t)->hits, 1);
    /* the same expert in another layer is another expert */
    cr_assert_eq(mp_tier_state_of(t, 0, 3), MP_TIER_NONE);
    check_invariants(t, 2, 4, NULL);
    mp_tier_free(t);
}

Test(tier, max_loading_bounds_copies_over_all_layers)
{
    /* 2 layers of 2 slots, at most 2 copies in flight: layer 0's two admissions fill the bound, so
     * layer 1's candidate is refused until one lands */
    const uint32_t cap[] = {2, 2};
    mp_tier_params p = params(MP_TIER_LRU);
    p.max_loading = 2;
    mp_tier *t = make(2, 4, cap, NULL, &p);
    mp_tier_move m[3];
    const uint16_t ids[] = {0, 1, 2};
    cr_assert_eq(invoke(t, 0, ids, NULL, 3, m), 2);
    cr_assert_eq(mp_tier_stats_of(t)->refused, 1); /* the third: the bound */
    cr_assert_eq(invoke(t, 1, ids, NULL, 1, m), 0);
    cr_assert_eq(mp_tier_stats_of(t)->refused, 2);
    cr_assert_eq(mp_tier_loading(t), 2);
    mp_tier_landed(t, 0, 1);
    cr_assert_eq(invoke(t, 1, ids, NULL, 2, m), 1);
    assert_move(&m[0], 1, 0, 0, -1);
    cr_assert_eq(mp_tier_loading(t), 2);
    check_invariants(t, 2, 4, NULL);
    mp_tier_free(t);
}

Test(tier, pinned_experts_are_never_admitted)
{
    /* layer 0 pins 0 and 2: routes to them are the placement's, not the tier's (no hit, no
     * candidate); 1 is admitted (by cost at its second use). mp_tier_place refuses a pinned expert too. */
    const uint32_t cap[] = {2};
    const uint8_t pinned[] = {1, 0, 1, 0};
    for (int policy = MP_TIER_LRU; policy <= MP_TIER_COST; policy++) {
        mp_tier_params p = params((mp_tier_policy)policy);
        p.route_saving_ns = 100;
        mp_tier *t = make(1, 4, cap, pinned, &p);
        mp_tier_move m[3];
        const uint16_t ids[] = {0, 2, 1};
        if (policy == MP_TIER_COST) /* a first use is no evidence of routes to come: the second admits */
            cr_assert_eq(invoke(t, 0, ids, NULL, 3, m), 0, "cost");
        cr_assert_eq(invoke(t, 0, ids, NULL, 3, m), 1, "%s", mp_tier_policy_name(p.policy));
        assert_move(&m[0], 0, 0, 1, -1);
        cr_assert_eq(mp_tier_state_of(t, 0, 0), MP_TIER_NONE);
        cr_assert(!mp_tier_place(t, 0, 2));
        cr_assert(mp_tier_place(t, 0, 3));
        cr_assert(!mp_tier_place(t, 0, 3)); /* placed already, and no free slot */
        cr_assert_eq(mp_tier_stats_of(t)->hits, 0);
        check_invariants(t, 1, 4, pinned);
        mp_tier_free(t);
    }
    /* more slots than experts outside the pinned set: refused, naming the layer */
    const uint32_t too_many[] = {3};
    mp_tier *t;
    mp_error err;
    mp_tier_params p = params(MP_TIER_LRU);
    cr_assert_eq(mp_tier_new(&t, 1, 4, too_many, pinned, &p, &err), MP_ERR_ARG);
    cr_assert_not_null(strstr(err.msg, "layer 0: 3 slots: expected at most its 2 experts"), "%s", err.msg);
}

Test(tier, off_counts_and_moves_nothing)
{
    const uint32_t cap[] = {1};
    mp_tier_params p = params(MP_TIER_OFF);
    mp_tier *t = make(1, 2, cap, NULL, &p);
    mp_tier_move m[1];
    cr_assert(mp_tier_place(t, 0, 1));
    cr_assert_eq(invoke1(t, 0, 0, 1, m), 0);
    cr_assert_eq(invoke1(t, 0, 1, 3, m), 0);
    cr_assert_eq(mp_tier_stats_of(t)->hits, 3);
    cr_assert_eq(mp_tier_stats_of(t)->admissions, 0);
    mp_tier_free(t);
}

Test(tier, split_over_layers_by_hand)
{
    uint32_t cap[3];
    /* no pinned experts: 7 over 3 layers is 3, 2, 2 */
    cr_assert_eq(mp_tier_split(7, 3, 8, NULL, cap), 7);
    cr_assert(cap[0] == 3 && cap[1] == 2 && cap[2] == 2, "%u %u %u", cap[0], cap[1], cap[2]);
    /* layer 1 all pinned (no slot), layer 2 with one expert outside: 5 slots are 4 + 1, and 10 are
     * still 4 + 1 (all the room there is) */
    uint8_t pinned[3 * 4] = {0, 0, 0, 0, /**/ 1, 1, 1, 1, /**/ 1, 1, 0, 1};
    cr_assert_eq(mp_tier_split(5, 3, 4, pinned, cap), 5);
    cr_assert(cap[0] == 4 && cap[1] == 0 && cap[2] == 1, "%u %u %u", cap[0], cap[1], cap[2]);
    cr_assert_eq(mp_tier_split(10, 3, 4, pinned, cap), 5);
    cr_assert(cap[0] == 4 && cap[1] == 0 && cap[2] == 1, "%u %u %u", cap[0], cap[1], cap[2]);
    /* 3 slots: equal shares of 1, the remainder to the first layer with room */
    cr_assert_eq(mp_tier_split(3, 3, 4, pinned, cap), 3);
    cr_assert(cap[0] == 2 && cap[1] == 0 && cap[2] == 1, "%u %u %u", cap[0], cap[1], cap[2]);
    cr_assert_eq(mp_tier_split(1, 3, 4, pinned, cap), 1);
    cr_assert(cap[0] == 1 && cap[1] == 0 && cap[2] == 0, "%u %u %u", cap[0], cap[1], cap[2]);
    cr_assert_eq(mp_tier_split(0, 3, 4, pinned, cap), 0);
    cr_assert(cap[0] == 0 && cap[1] == 0 && cap[2] == 0);
}

Test(tier, policy_names_and_parameter_errors_are_one_line)
{
    for (int p = MP_TIER_OFF; p <= MP_TIER_COST; p++) {
        mp_tier_policy q;
        mp_error err;
        cr_assert_eq(mp_tier_policy_parse(mp_tier_policy_name((mp_tier_policy)p), &q, &err), MP_OK);
        cr_assert_eq(q, (mp_tier_policy)p);
    }
    mp_tier_policy q;
    mp_error err;
    cr_assert_eq(mp_tier_policy_parse("fifo", &q, &err), MP_ERR_ARG);
    cr_assert_str_eq(err.msg, "adaptive tier policy 'fifo': expected off, lru, lfu, decayed-lfu, window-lfu or cost");
    cr_assert_eq(mp_tier_policy_parse("LRU", &q, &err), MP_ERR_ARG);
    const uint32_t cap[] = {1};
    mp_tier *t;
    mp_tier_params p = params(MP_TIER_DECAYED_LFU);
    p.alpha = 0;
    cr_assert_eq(mp_tier_new(&t, 1, 4, cap, NULL, &p, &err), MP_ERR_ARG);
    cr_assert_str_eq(err.msg, "adaptive tier (decayed-lfu): alpha 0: expected 0 < alpha <= 1");
    p = params(MP_TIER_WINDOW_LFU);
    p.window = 0;
    cr_assert_eq(mp_tier_new(&t, 1, 4, cap, NULL, &p, &err), MP_ERR_ARG);
    cr_assert_str_eq(err.msg, "adaptive tier (window-lfu): window 0: expected an integer window 1..65536");
    p = params(MP_TIER_COST);
    p.copy_cost_ns = NAN;
    cr_assert_eq(mp_tier_new(&t, 1, 4, cap, NULL, &p, &err), MP_ERR_ARG);
    cr_assert_not_null(strstr(err.msg, "expected finite prices >= 0"), "%s", err.msg);
    /* a parameter the policy does not read is not checked: lru with alpha 0 runs */
    p = params(MP_TIER_LRU);
    p.alpha = 0;
    cr_assert_eq(mp_tier_new(&t, 1, 4, cap, NULL, &p, &err), MP_OK);
    mp_tier_free(t);
}

/* Random routing, landings at random times and a small in-flight bound, for every policy: the
 * invariants hold after every call, no move evicts a LOADING expert or a pinned one, the bound is
 * never passed, and the stats add up to the moves and routes seen. */
Test(tier, random_sequences_keep_the_invariants)
{
    seed_rng();
    enum { L = 3, E = 12, K = 3 };
    uint8_t pinned[L * E] = {0};
    for (uint32_t c = 0; c < L * E; c++)
        pinned[c] = rnd_u64() % 5 == 0;
    uint32_t cap[L];
    mp_tier_split(10, L, E, pinned, cap);
    for (int policy = MP_TIER_LRU; policy <= MP_TIER_COST; policy++) {
        mp_tier_params p = params((mp_tier_policy)policy);
        p.top_k = K;
        p.max_rows = 2;
        p.window = 4;
        p.max_loading = 3;
        p.route_saving_ns = 10;
        p.copy_cost_ns = 15;
        mp_tier *t = make(L, E, cap, pinned, &p);
        uint64_t moves = 0, evictions = 0, routes_tier = 0;
        for (int i = 0; i < 2000; i++) {
            const uint32_t l = (uint32_t)(rnd_u64() % L), rows = 1 + (uint32_t)(rnd_u64() % 2);
            uint16_t used[E];
            uint32_t rows_of[E] = {0}, n = 0;
            for (uint32_t r = 0; r < rows; r++)
                for (uint32_t k = 0; k < K; k++) {
                    const uint16_t e = (uint16_t)(rnd_u64() % 4 == 0 ? rnd_u64() % E : rnd_u64() % 4);
                    if (!rows_of[e]++)
                        used[n++] = e;
                }
            uint8_t before[E];
            for (uint32_t e = 0; e < E; e++) {
                before[e] = mp_tier_states(t, l)[e];
                routes_tier += before[e] != MP_TIER_NONE ? rows_of[e] : 0;
            }
            mp_tier_move m[E];
            const uint32_t k = mp_tier_after(t, l, used, rows_of, n, m, n);
            for (uint32_t j = 0; j < k; j++) {
                cr_assert_eq(m[j].layer, l);
                cr_assert(!pinned[l * E + m[j].expert], "seed %llu: a pinned expert admitted",
                          (unsigned long long)g_seed);
                cr_assert(rows_of[m[j].expert], "seed %llu: an expert the invocation did not route to",
                          (unsigned long long)g_seed);
                if (m[j].victim >= 0) {
                    cr_assert_eq(before[m[j].victim], MP_TIER_READY, "seed %llu %s: victim %d was %d",
                                 (unsigned long long)g_seed, mp_tier_policy_name(p.policy), m[j].victim,
                                 before[m[j].victim]);
                    evictions++;
                }
            }
            moves += k;
            cr_assert_leq(mp_tier_loading(t), 3, "seed %llu", (unsigned long long)g_seed);
            for (uint32_t ll = 0; ll < L; ll++) /* some copies land */
                for (uint32_t s = 0; s < cap[ll]; s++)
                    if (rnd_u64() % 3 == 0)
                        mp_tier_landed(t, ll, s);
            check_invariants(t, L, E, pinned);
        }
        const mp_tier_stats *s = mp_tier_stats_of(t);
        cr_assert_eq(s->admissions, moves);
        cr_assert_eq(s->evictions, evictions);
        cr_assert_eq(s->hits + s->late, routes_tier);
        cr_assert_gt(moves, 0, "%s admitted nothing", mp_tier_policy_name(p.policy));
        mp_tier_free(t);
    }
}

/* mp_tier_carve by hand: 3 layers × 4 experts; the placement holds layer 0 whole, layer 1's
 * experts 0 and 1, layer 2's expert 3; its ranking (best first) 0:0 0:1 0:2 0:3 1:0 2:3 1:1.
 * No room left (free 0), 3 slots: carved from the lowest-ranked residents outside whole layers,
 * 1:1, 2:3, 1:0 (layer 0 never), best first in warm: 1:0, 2:3, 1:1; caps 0, 2, 1. With 1 slot of
 * room and 2 asked: the room goes to the layer with experts off the GPU first in line (layer 1,
 * by mp_tier_split's order), the other slot is carved (1:1); nothing to carve: only the room. */
Test(tier, carve_takes_room_then_the_lowest_ranked_outside_whole_layers)
{
    enum { L = 3, E = 4 };
    const uint32_t order[] = {0, 1, 2, 3, 4, 11, 5};
    uint8_t res[L * E] = {1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1};
    uint32_t cap[L], warm[4];
    uint64_t n_warm = 99;
    cr_assert_eq(mp_tier_carve(res, L, E, order, 7, 3, 0, cap, warm, &n_warm), 3);
    cr_assert_eq(n_warm, 3);
    cr_assert(warm[0] == 4 && warm[1] == 11 && warm[2] == 5, "warm %u %u %u", warm[0], warm[1], warm[2]);
    cr_assert(cap[0] == 0 && cap[1] == 2 && cap[2] == 1, "caps %u %u %u", cap[0], cap[1], cap[2]);
    const uint8_t left[L * E] = {1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0};
    cr_assert_eq(memcmp(res, left, sizeof res), 0, "the carved experts leave the placement; layer 0 stays whole");
    uint8_t res2[L * E] = {1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1};
    cr_assert_eq(mp_tier_carve(res2, L, E, order, 7, 2, 1, cap, warm, &n_warm), 2);
    cr_assert_eq(n_warm, 1);
    cr_assert_eq(warm[0], 5);
    cr_assert_eq(cap[0], 0, "a whole layer gets no slot");
    cr_assert(cap[1] == 2 && cap[2] == 0, "caps %u %u: the room's slot and the carved one, both layer 1's", cap[1],
              cap[2]);
    uint8_t res3[L * E] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    cr_assert_eq(mp_tier_carve(res3, L, E, order, 7, 2, 0, cap, warm, &n_warm), 0, "every layer whole: nothing");
    cr_assert_eq(n_warm, 0);
}
