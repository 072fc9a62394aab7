/* tests/unit/test_sim.c — the replay engine and the policies: small traces with hit rates and
 * times computed by hand (in the comments), the admission timing and the shared link, Belady as
 * an upper bound of every online policy and the planner as the fastest static placement on random
 * traces (seed printed on failure), and rejection of bad traces and budgets. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mkmodel/mkmodel.h"
#include "runtime/model.h"
#include "simulator/calibrate_impl.h"
#include "simulator/sim.h"
#include "simulator/sim_internal.h"

/* Round-number costs: GPU expert 10 ns and CPU expert 100 ns at any rows; D2H 7 ns; sync 20 ns;
 * combine 3 ns; H2D 5 ns up to 1000 bytes then 1 ns per byte (so a row of activations, n_embd 4
 * = 16 bytes, costs 5 ns and an expert of B > 1000 bytes 5 + (B - 1000) ns); non-MoE 0. */
static mp_cost_stat pts_flat[2];
static double xs_rows[2] = {1, 2};
static mp_cost_stat gpu_y[2] = {{10, 0}, {10, 0}}, cpu_y[2] = {{100, 0}, {100, 0}};
static mp_cost_stat d2h_y[2] = {{7, 0}, {7, 0}}, comb_y[2] = {{3, 0}, {3, 0}}, zero_y[2] = {{0, 0}, {0, 0}};
static double xs_h2d[2] = {1000, 2000};
static mp_cost_stat h2d_y[2] = {{5, 0}, {1005, 0}};

static mp_costs costs;
static mp_cost_expert gpu_entry, cpu_entry;

static void make_costs(uint64_t expert_bytes)
{
    (void)pts_flat;
    memset(&costs, 0, sizeof costs);
    mp_cost_curve rows_flat = {2, xs_rows, NULL};
    gpu_entry = (mp_cost_expert){"Q4_K", 4, 8, expert_bytes, 0, rows_flat, {0, NULL, NULL}};
    gpu_entry.by_rows.y = gpu_y;
    cpu_entry = (mp_cost_expert){"Q4_K", 4, 8, expert_bytes, 8, rows_flat, {0, NULL, NULL}};
    cpu_entry.by_rows.y = cpu_y;
    costs.gpu_expert = &gpu_entry;
    costs.n_gpu_expert = 1;
    costs.cpu_expert = &cpu_entry;
    costs.n_cpu_expert = 1;
    costs.h2d_pinned = costs.h2d_pageable = (mp_cost_curve){2, xs_h2d, h2d_y};
    costs.d2h_pinned = costs.d2h_pageable = (mp_cost_curve){2, xs_rows, d2h_y};
    costs.sync = (mp_cost_stat){20, 0};
    costs.combine = (mp_cost_curve){2, xs_rows, comb_y};
    costs.non_moe = (mp_cost_curve){2, xs_rows, zero_y};
}

static mp_sim_config config(uint64_t expert_bytes, uint64_t slots)
{
    make_costs(expert_bytes);
    mp_sim_config c;
    mp_sim_config_init(&c);
    c.costs = &costs;
    c.gpu = &gpu_entry;
    c.cpu = &cpu_entry;
    c.non_expert_bytes = 1000;
    c.budget_bytes = 1000 + slots * expert_bytes;
    c.train_frac = 1.0;
    return c;
}

/* A decode trace of one request: ids (n_steps, n_layers, top_k). */
static void decode_trace(mp_sim_trace *t, uint32_t L, uint32_t E, uint32_t K, uint32_t n_steps, const uint16_t *ids)
{
    mp_error err;
    cr_assert_eq(mp_sim_trace_init(t, L, E, K, NULL, &err), MP_OK, "%s", err.msg);
    for (uint32_t s = 0; s < n_steps; s++)
        cr_assert_eq(mp_sim_trace_add_step(t, 0, 1, ids + (size_t)s * L * K, "test", &err), MP_OK, "%s", err.msg);
}

static mp_sim_result run(const mp_sim_trace *t, const mp_sim_config *c, mp_sim_policy p)
{
    mp_sim_result r;
    mp_error err;
    cr_assert_eq(mp_sim_run(t, c, p, &r, &err), MP_OK, "%s: %s", mp_sim_policy_name(p), err.msg);
    return r;
}

/* Layer 0 routes {0,1} {0,1} {0,2} {0,3}; layer 1 {0,2} {0,3} {1,3} {0,2}.
 * Train counts: layer 0: e0 4, e1 2, e2 1, e3 1; layer 1: e0 3, e2 2, e3 2, e1 1. */
static const uint16_t small_ids[] = {0, 1, 0, 2, /**/ 0, 1, 0, 3, /**/ 0, 2, 1, 3, /**/ 0, 3, 0, 2};

Test(sim, static_topn_by_hand)
{
    mp_sim_trace t;
    decode_trace(&t, 2, 4, 2, 4, small_ids);
    mp_sim_config c = config(1500, 2);
    mp_sim_result r = run(&t, &c, MP_POL_STATIC_TOPN);
    /* 2 slots: (layer 0, e0) and (layer 1, e0). Hits: 4 in layer 0, 3 in layer 1, of 16. */
    cr_assert_eq(r.slots, 2);
    cr_assert_eq(r.train.decisions, 16);
    cr_assert_eq(r.train.hits, 7);
    cr_assert_eq(r.train.layer_hits[0], 4);
    cr_assert_eq(r.train.layer_hits[1], 3);
    /* one hit + one miss: max(10, 7 + 20 + 100 + 5) + 3 = 135; two misses: 7 + 20 + 200 + 5 + 3
     * = 235 (layer 1, step 2). 7 * 135 + 235 = 1180 ns for 4 tokens. */
    cr_assert_float_eq(r.train.time_ns, 1180, 1e-9);
    cr_assert_eq(r.train.tokens, 4);
    cr_assert_eq(r.train.cpu_invocations, 8);
    cr_assert_eq(r.train.d2h_act_bytes, 8 * 16);
    cr_assert_eq(r.train.admissions, 0);
    cr_assert_eq(r.test.decisions, 0);
    /* the profile: the 2 resident as its pairs (slots = n_ranked), counts table = train counts, and
     * from it every other expert by count, ties by (layer, expert): layer 0 routes e0 x4, e1 x2,
     * e2 x1, e3 x1; layer 1 e0 x3, e1 x1, e2 x2, e3 x2 */
    cr_assert_eq(r.profile.slots, 2);
    cr_assert_eq(r.profile.n_ranked, 2);
    cr_assert_eq(r.profile.ranked[0].layer, 0);
    cr_assert_eq(r.profile.ranked[0].expert, 0);
    cr_assert_eq(r.profile.ranked[1].layer, 1);
    cr_assert_eq(r.profile.ranked[1].expert, 0);
    cr_assert_eq(r.profile.counts[0 * 4 + 0], 4);
    cr_assert_eq(r.profile.counts[1 * 4 + 2], 2);
    const mp_strp_pair tail[] = {{0, 1}, {1, 2}, {1, 3}, {0, 2}, {0, 3}, {1, 1}};
    cr_assert_eq(r.profile.n_tail, 6);
    for (int i = 0; i < 6; i++)
        cr_assert(r.profile.tail[i].layer == tail[i].layer && r.profile.tail[i].expert == tail[i].expert,
                  "tail %d: (%u, %u)", i, r.profile.tail[i].layer, r.profile.tail[i].expert);
    mp_sim_result_free(&r);
    mp_sim_trace_free(&t);
}

/* When the round trip costs nothing next to the GPU experts, a layer's capacities from "every
 * expert its train split routes to" up to all of them tie; the planner takes the largest, since
 * the held-out requests may route to the rest. small_ids route to experts 0-3 only: in layers of
 * 6 experts, e4 and e5 are never used. */
Test(sim, plan_breaks_ties_toward_more_resident_experts)
{
    mp_sim_trace t;
    decode_trace(&t, 2, 6, 2, 4, small_ids);
    mp_sim_config c = config(1500, 12);
    /* GPU side 200 per step > a round trip without CPU work (35); a CPU expert costs 1000 */
    gpu_y[0].median_ns = gpu_y[1].median_ns = 100;
    cpu_y[0].median_ns = cpu_y[1].median_ns = 1000;
    mp_sim_result r = run(&t, &c, MP_POL_PLAN);
    gpu_y[0].median_ns = gpu_y[1].median_ns = 10;
    cpu_y[0].median_ns = cpu_y[1].median_ns = 100;
    cr_assert_eq(r.resident_initial, 12, "plan kept %u of 12 experts resident", (unsigned)r.resident_initial);
    cr_assert_float_eq(r.train.time_ns, 8 * 200.0, 1e-9);
    mp_sim_result_free(&r);
    mp_sim_trace_free(&t);
}

Test(sim, baselines_and_whole_layers_by_hand)
{
    mp_sim_trace t;
    decode_trace(&t, 2, 4, 2, 4, small_ids);
    mp_sim_config c = config(1500, 4);
    mp_sim_result g = run(&t, &c, MP_POL_ALL_GPU);
    cr_assert_eq(g.train.hits, 16);
    cr_assert_float_eq(g.train.time_ns, 8 * 20.0, 1e-9); /* two GPU experts per invocation */
    mp_sim_result cpu = run(&t, &c, MP_POL_ALL_CPU);
    cr_assert_eq(cpu.train.hits, 0);
    cr_assert_float_eq(cpu.train.time_ns, 8 * 235.0, 1e-9);
    /* 4 slots = one whole layer. first-n-cpu keeps the last layer resident; last-n-cpu the first */
    mp_sim_result first = run(&t, &c, MP_POL_FIRST_N_CPU);
    cr_assert_eq(first.train.layer_hits[0], 0);
    cr_assert_eq(first.train.layer_hits[1], 8);
    cr_assert_float_eq(first.train.time_ns, 4 * 235.0 + 4 * 20.0, 1e-9);
    mp_sim_result last = run(&t, &c, MP_POL_LAST_N_CPU);
    cr_assert_eq(last.train.layer_hits[0], 8);
    cr_assert_eq(last.train.layer_hits[1], 0);
    mp_sim_result_free(&g);
    mp_sim_result_free(&cpu);
    mp_sim_result_free(&first);
    mp_sim_result_free(&last);
    mp_sim_trace_free(&t);
}

/* Non-MoE time from the trace (MP_NON_MOE_TRACE): each step takes its own measured value instead
 * of the cost file's curve (which the config makes 0 ns, and then 50 ns, to tell them apart), and
 * the non_moe cost scale applies to it. All-GPU: 2 layers x 20 ns per step, so 4 steps of the
 * small trace with measured 100, 200, 300, 400 ns take 160 + 1000 = 1160 ns; x2: 160 + 2000. */
Test(sim, non_moe_from_the_trace_by_hand)
{
    mp_sim_trace t;
    decode_trace(&t, 2, 4, 2, 4, small_ids);
    mp_sim_config c = config(1500, 4);
    static mp_cost_stat fifty_y[2] = {{50, 0}, {50, 0}};
    costs.non_moe = (mp_cost_curve){2, xs_rows, fifty_y};
    mp_error err;
    mp_sim_result r;
    c.non_moe_source = MP_NON_MOE_TRACE; /* asked before the trace carries any: refused */
    cr_assert_eq(mp_sim_run(&t, &c, MP_POL_ALL_GPU, &r, &err), MP_ERR_ARG);
    cr_assert_not_null(strstr(err.msg, "no measured non-MoE times"), "%s", err.msg);
    const double measured[4] = {100, 200, 300, 400};
    cr_assert_eq(mp_sim_trace_set_non_moe(&t, measured, 4, "test", &err), MP_OK, "%s", err.msg);
    mp_sim_result g = run(&t, &c, MP_POL_ALL_GPU);
    cr_assert_float_eq(g.train.time_ns, 160.0 + 1000.0, 1e-9);
    c.scale[MP_COST_NON_MOE] = 2.0;
    mp_sim_result g2 = run(&t, &c, MP_POL_ALL_GPU);
    cr_assert_float_eq(g2.train.time_ns, 160.0 + 2000.0, 1e-9);
    c.scale[MP_COST_NON_MOE] = 1.0;
    c.non_moe_source = MP_NON_MOE_COSTS; /* the cost file's 50 ns per step, the measured ones ignored */
    mp_sim_result k = run(&t, &c, MP_POL_ALL_GPU);
    cr_assert_float_eq(k.train.time_ns, 160.0 + 4 * 50.0, 1e-9);
    /* all-CPU pays the same MoE time under either source: the difference is the non-MoE sums */
    c.non_moe_source = MP_NON_MOE_TRACE;
    mp_sim_result ct = run(&t, &c, MP_POL_ALL_CPU);
    c.non_moe_source = MP_NON_MOE_COSTS;
    mp_sim_result cc = run(&t, &c, MP_POL_ALL_CPU);
    cr_assert_float_eq(ct.train.time_ns, 8 * 235.0 + 1000.0, 1e-9);
    cr_assert_float_eq(cc.train.time_ns, 8 * 235.0 + 200.0, 1e-9);
    /* one value per step, set once, and steps cannot follow them */
    cr_assert_eq(mp_sim_trace_set_non_moe(&t, measured, 4, "test", &err), MP_ERR_ARG);
    const uint16_t one_step[] = {0, 1, 0, 2};
    cr_assert_eq(mp_sim_trace_add_step(&t, 0, 1, one_step, "test", &err), MP_ERR_ARG);
    cr_assert_not_null(strstr(err.msg, "after the non-MoE times"), "%s", err.msg);
    mp_sim_result_free(&g);
    mp_sim_result_free(&g2);
    mp_sim_result_free(&k);
    mp_sim_result_free(&ct);
    mp_sim_result_free(&cc);
    mp_sim_trace_free(&t);
    decode_trace(&t, 2, 4, 2, 4, small_ids);
    cr_assert_eq(mp_sim_trace_set_non_moe(&t, measured, 3, "test", &err), MP_ERR_ARG);
    cr_assert_not_null(strstr(err.msg, "3 non-MoE times for 4 steps"), "%s", err.msg);
    const double negative[4] = {100, -1, 300, 400}, nan_one[4] = {100, 200, NAN, 400};
    cr_assert_eq(mp_sim_trace_set_non_moe(&t, negative, 4, "test", &err), MP_ERR_FORMAT);
    cr_assert_not_null(strstr(err.msg, "test: step 1: non-MoE time -1 ns"), "%s", err.msg);
    cr_assert_eq(mp_sim_trace_set_non_moe(&t, nan_one, 4, "test", &err), MP_ERR_FORMAT);
    cr_assert_null(t.non_moe_ns);
    mp_sim_trace_free(&t);
}

/* The small trace's train statistics for the planner: every step in the train split, experts
 * ranked by train count (layer 0: e0 e1 e2 e3; layer 1: e0 e2 e3 e1). Free train.count and order. */
static sim_stats small_stats(void)
{
    sim_stats st = {0};
    st.train.count = calloc(8, sizeof *st.train.count);
    st.order = malloc(sizeof *st.order * 8);
    cr_assert(st.train.count && st.order);
    st.train_steps = 4;
    static const uint16_t order[8] = {0, 1, 2, 3, 0, 2, 3, 1};
    memcpy(st.order, order, sizeof order);
    return st;
}

/* Concurrent experts: the GPU's `concurrent` curve {1 expert: 10, 2: 14} splits into fixed 6 +
 * 4 per one-row expert, the CPU's {1: 100, 2: 130} into 70 + 30 (by_rows is flat, so rows add
 * nothing). Per invocation of the small trace (two experts): all on the GPU 6 + 4 + 4 = 14; all on
 * the CPU 7 + 20 + (70 + 30 + 30) + 5 + 3 = 165; one of each max(6 + 4, 7 + 20 + 100 + 5) + 3 =
 * 135. The planner's layer costs are the replay's. */
Test(sim, concurrent_experts_share_a_fixed_cost)
{
    mp_sim_trace t;
    decode_trace(&t, 2, 4, 2, 4, small_ids);
    mp_sim_config c = config(1500, 2);
    static double xs_k[2] = {1, 2};
    static mp_cost_stat gk[2] = {{10, 0}, {14, 0}}, ck[2] = {{100, 0}, {130, 0}};
    gpu_entry.concurrent = (mp_cost_curve){2, xs_k, gk};
    cpu_entry.concurrent = (mp_cost_curve){2, xs_k, ck};
    mp_sim_result g = run(&t, &c, MP_POL_ALL_GPU);
    cr_assert_float_eq(g.train.time_ns, 8 * 14.0, 1e-9);
    mp_sim_result cpu = run(&t, &c, MP_POL_ALL_CPU);
    cr_assert_float_eq(cpu.train.time_ns, 8 * 165.0, 1e-9);
    mp_sim_result top = run(&t, &c, MP_POL_STATIC_TOPN); /* 7 invocations one of each, 1 all-CPU */
    cr_assert_float_eq(top.train.time_ns, 7 * 135.0 + 165.0, 1e-9);

    sim_tab tab;
    mp_error err;
    cr_assert_eq(sim_tab_build(&tab, &c, &t, &err), MP_OK, "%s", err.msg);
    cr_assert_float_eq(tab.kinds[0].gpu_fixed_ns, 6, 1e-9);
    cr_assert_float_eq(tab.kinds[0].cpu_fixed_ns, 70, 1e-9);
    sim_stats st = small_stats();
    double cost[2 * 5];
    cr_assert_eq(plan_layer_costs(&t, &tab, &st, cost, NULL, &err), MP_OK, "%s", err.msg);
    /* layer 0 with e0 resident: every step is one of each (e0 is in every step): 4 * 135 */
    cr_assert_float_eq(cost[0], 4 * 165.0, 1e-9);
    cr_assert_float_eq(cost[1], 4 * 135.0, 1e-9);
    cr_assert_float_eq(cost[4], 4 * 14.0, 1e-9);
    free(st.train.count);
    free(st.order);
    sim_tab_free(&tab);
    mp_sim_result_free(&g);
    mp_sim_result_free(&cpu);
    mp_sim_result_free(&top);
    mp_sim_trace_free(&t);
}

/* A decode grid for the small traces' top-2 Q4_K 4x8 experts on 8 threads: off[c] with far routes
 * off, on[c][f] with them on (f <= min(c, 1)); n_expert E. */
static mp_cost_decode_point grid_pts[16];
static void set_grid(uint32_t E, const double off[3], const double on[3][2])
{
    int n = 0;
    for (int c = 0; c <= 2; c++) {
        grid_pts[n++] = (mp_cost_decode_point){c, 0, false, {off[c], 0}, c * 100.0, 10, 0};
        for (int f = 0; f <= (c < 1 ? c : 1); f++)
            grid_pts[n++] = (mp_cost_decode_point){c, f, true, {on[c][f], 0}, (c - f) * 100.0, 10 + f * 60.0, 0};
    }
    costs.decode = (mp_cost_decode){.n_points = n, .points = grid_pts, .quant = "Q4_K", .n_embd = 4, .n_ff = 8,
                                     .n_expert = E, .top_k = 2, .far_max = 1, .threads = 8};
    costs.decode.expert_bytes = gpu_entry.expert_bytes;
}

/* mp_decide_cpu_rows_ns's table of model m for `costs` on 8 threads, up to R rows, against the
 * planner's kind tables for config c over a trace of one R-row step: equal in every layer, at every
 * rows count and in the fixed part. Returns the table (the caller frees it). */
static double *expect_the_planners_price(const mp_sim_config *c, const mp_model *m, uint32_t R)
{
    const uint32_t L = (uint32_t)m->hp.n_layer, E = (uint32_t)m->hp.n_expert, K = (uint32_t)m->hp.n_expert_used;
    mp_error err;
    double *price = NULL, measured = -1;
    cr_assert_eq(mp_decide_cpu_rows_ns(&costs, "c.json", m, 8, R, &price, &measured, &err), MP_OK, "%s", err.msg);
    double fewest = 0; /* the rows the model's CPU entries were measured up to, the fewest */
    for (int i = 0; i < costs.n_cpu_expert; i++) {
        const mp_cost_curve *rows = &costs.cpu_expert[i].by_rows;
        if (i == 0 || rows->x[rows->n_points - 1] < fewest)
            fewest = rows->x[rows->n_points - 1];
    }
    cr_assert_float_eq(measured, fewest, 1e-12, "the rows the CPU entries were measured up to: %g", measured);
    mp_sim_trace t;
    cr_assert_eq(mp_sim_trace_init(&t, L, E, K, NULL, &err), MP_OK, "%s", err.msg);
    uint16_t *ids = malloc(sizeof *ids * L * R * K);
    for (uint32_t i = 0; i < L * R; i++)
        for (uint32_t k = 0; k < K; k++)
            ids[i * K + k] = (uint16_t)((i + k) % E);
    cr_assert_eq(mp_sim_trace_add_step(&t, 0, R, ids, "t", &err), MP_OK, "%s", err.msg);
    sim_tab tab;
    cr_assert_eq(sim_tab_build(&tab, c, &t, &err), MP_OK, "%s", err.msg);
    for (uint32_t l = 0; l < L; l++) {
        const sim_kind *kd = sim_kind_of(&tab, l);
        cr_assert_gt(kd->cpu_fixed_ns, 0);
        const double *row = price + (size_t)l * (R + 1);
        cr_assert_float_eq(row[0], kd->cpu_fixed_ns, 1e-9 * kd->cpu_fixed_ns, "layer %u fixed", l);
        for (uint32_t r = 1; r <= R; r++)
            cr_assert_float_eq(row[r], kd->cpu_ns[r], 1e-9 * kd->cpu_ns[r], "layer %u, %u rows: %g / %g", l, r,
                               row[r], kd->cpu_ns[r]);
    }
    sim_tab_free(&tab);
    mp_sim_trace_free(&t);
    free(ids);
    return price;
}

/* The GPU executor prices a prefill step's cold experts on the CPU by mp_decide_cpu_rows_ns, made
 * from the model's layers; the planner and the replay by their kind tables: one price at every rows
 * count, an invocation's fixed part and the anchor to the decode grid included. A layer whose
 * experts the cost file has no CPU entry for is refused, naming the layer. */
Test(sim, the_executors_cpu_price_is_the_planners)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/hf/qwen3moe-tiny-f32.gguf", getenv("MP_SOURCE_ROOT"));
    mp_model *m = NULL;
    mp_error err;
    cr_assert_eq(mp_model_load(path, &m, &err), MP_OK, "%s", err.msg);
    const uint32_t E = (uint32_t)m->hp.n_expert, K = (uint32_t)m->hp.n_expert_used;
    const uint64_t bytes = mp_model_expert_bytes(m, 0);
    mp_sim_config c = config(bytes, 2);
    static double xs3[3] = {1, 8, 64}, xs_k[2] = {1, 4};
    static mp_cost_stat cy3[3] = {{120, 0}, {400, 0}, {2600, 0}}, ck[2] = {{150, 0}, {390, 0}};
    cpu_entry = (mp_cost_expert){"F32", m->hp.n_embd, m->hp.n_ff_exp, bytes, 8, {3, xs3, cy3}, {2, xs_k, ck}};
    snprintf(gpu_entry.quant, sizeof gpu_entry.quant, "F32");
    gpu_entry.n_embd = m->hp.n_embd, gpu_entry.n_ff = m->hp.n_ff_exp;
    const double off[3] = {35, 135, 235}, on[3][2] = {{35, 0}, {135, 135}, {235, 235}};
    set_grid(E, off, on);
    snprintf(costs.decode.quant, sizeof costs.decode.quant, "F32");
    costs.decode.n_embd = m->hp.n_embd, costs.decode.n_ff = m->hp.n_ff_exp, costs.decode.top_k = (int)K;
    const double anchor = mp_decide_cpu_anchor(&costs, &cpu_entry, 1.0);
    cr_assert(fabs(anchor - 1) > 0.01, "the grid moves the curves' level: %g", anchor);

    enum { R = 100 }; /* past the curve's last point */
    double *price = expect_the_planners_price(&c, m, R);
    cr_assert_gt(price[64], 2 * price[8], "the curve's rows, not one line");
    free(price);

    snprintf(cpu_entry.quant, sizeof cpu_entry.quant, "Q8_0");
    price = NULL;
    double measured;
    cr_assert_eq(mp_decide_cpu_rows_ns(&costs, "c.json", m, 8, R, &price, &measured, &err), MP_ERR_ARG);
    cr_assert_null(price);
    cr_assert_not_null(strstr(err.msg, "c.json: no CPU expert entry for layer 0's F32 experts (64x48)"), "%s", err.msg);
    mp_model_free(m);
}

/* The same on a model whose layers hold two kinds of experts (the tiny qwen3moe in q4_k_m with
 * llama.cpp's layer mix: Q6_K down in layers 2 and 3): each layer is priced by its own kind's CPU
 * entry, anchored with its share of the grid's cold time (its expert bytes over the layers' mean),
 * by the executor as by the planner's kind tables. */
Test(sim, the_executors_cpu_price_is_the_planners_layer_by_layer)
{
    char dir[] = "/tmp/mp-sim-kinds-XXXXXX", path[64];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    mp_mkmodel_config mc;
    mp_error err;
    cr_assert_eq(mp_mkmodel_arch("qwen3moe", &mc, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_mkmodel_set_mix(&mc, "q4_k_m", &err), MP_OK, "%s", err.msg);
    mc.llama_layers = true;
    mc.seed = 3;
    mc.n_threads = 2;
    cr_assert_eq(mp_mkmodel_write(&mc, path, true, NULL, NULL, &err), MP_OK, "%s", err.msg);
    mp_model *m = NULL;
    cr_assert_eq(mp_model_load(path, &m, &err), MP_OK, "%s", err.msg);
    const uint32_t L = (uint32_t)m->hp.n_layer, E = (uint32_t)m->hp.n_expert, K = (uint32_t)m->hp.n_expert_used;
    /* the kinds as the model has them: each layer's expert type names and bytes */
    char quant[2][MP_EXPERT_QUANT_MAX];
    uint64_t bytes[2];
    int n_kinds = 0, kind_of[16];
    cr_assert_leq(L, 16);
    for (uint32_t l = 0; l < L; l++) {
        char q[MP_EXPERT_QUANT_MAX];
        mp_model_expert_quant(&m->layers[l], q);
        int k = 0;
        while (k < n_kinds && strcmp(quant[k], q))
            k++;
        if (k == n_kinds) {
            cr_assert_lt(n_kinds, 2, "more than two kinds: %s", q);
            snprintf(quant[k], sizeof quant[k], "%s", q);
            bytes[k] = mp_model_expert_bytes(m, l);
            n_kinds++;
        }
        kind_of[l] = k;
    }
    cr_assert_eq(n_kinds, 2, "the layer mix gives two kinds of experts");
    cr_assert_neq(bytes[0], bytes[1]);

    mp_sim_config c = config(bytes[0], 2);
    static double xs3[2][3] = {{1, 8, 64}, {1, 8, 48}}, xs_k[2] = {1, 4};
    static mp_cost_stat cy[2][3] = {{{120, 0}, {400, 0}, {2600, 0}}, {{150, 0}, {520, 0}, {3300, 0}}};
    static mp_cost_stat ck[2][2] = {{{150, 0}, {390, 0}}, {{190, 0}, {480, 0}}};
    static mp_cost_expert gpus[2], cpus[2];
    for (int k = 0; k < 2; k++) {
        gpus[k] = gpu_entry;
        memcpy(gpus[k].quant, quant[k], sizeof gpus[k].quant);
        gpus[k].n_embd = m->hp.n_embd, gpus[k].n_ff = m->hp.n_ff_exp, gpus[k].expert_bytes = bytes[k];
        cpus[k] = (mp_cost_expert){"", m->hp.n_embd, m->hp.n_ff_exp, bytes[k], 8, {3, xs3[k], cy[k]}, {2, xs_k, ck[k]}};
        memcpy(cpus[k].quant, quant[k], sizeof cpus[k].quant);
    }
    costs.gpu_expert = gpus, costs.n_gpu_expert = 2;
    costs.cpu_expert = cpus, costs.n_cpu_expert = 2;
    c.gpu = &gpus[0], c.cpu = &cpus[0];
    /* a grid of top_k = K cold routes (the anchor's point), far routes off and on */
    int n_pts = 0;
    for (uint32_t cold = 0; cold <= K; cold++) {
        grid_pts[n_pts++] = (mp_cost_decode_point){(int)cold, 0, false, {35 + 100.0 * cold, 0}, cold * 110.0, 10, 0};
        grid_pts[n_pts++] = (mp_cost_decode_point){(int)cold, 0, true, {35 + 100.0 * cold, 0}, cold * 110.0, 10, 0};
    }
    costs.decode = (mp_cost_decode){.n_points = n_pts, .points = grid_pts, .n_expert = E, .far_max = 1, .threads = 8};
    memcpy(costs.decode.quant, quant[0], sizeof costs.decode.quant);
    costs.decode.n_embd = m->hp.n_embd, costs.decode.n_ff = m->hp.n_ff_exp, costs.decode.top_k = (int)K;
    costs.decode.expert_bytes = bytes[0];
    mp_sim_layer_experts le[16];
    for (uint32_t l = 0; l < L; l++)
        le[l] = (mp_sim_layer_experts){&gpus[kind_of[l]], &cpus[kind_of[l]]};
    c.layer_experts = le;
    cr_assert(fabs(mp_decide_cpu_anchor(&costs, &cpus[0], 1.0) - 1) > 0.01, "the grid moves the curves' level");

    sim_tab tab; /* every layer's kind has a share of its own */
    mp_sim_trace t;
    cr_assert_eq(mp_sim_trace_init(&t, L, E, K, NULL, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(sim_tab_build(&tab, &c, &t, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(tab.n_kinds, 2);
    for (uint32_t l = 0; l < L; l++)
        cr_assert(fabs(sim_kind_of(&tab, l)->grid_cold_scale - 1) > 1e-3, "layer %u: share %g", l,
                  sim_kind_of(&tab, l)->grid_cold_scale);
    sim_tab_free(&tab);
    mp_sim_trace_free(&t);
    free(expect_the_planners_price(&c, m, 70));
    mp_model_free(m);
    unlink(path);
    rmdir(dir);
}

/* The same experts with far work in half experts (far_split 2): on[c][u] for u <= 2c units. */
static void set_split_grid(uint32_t E, const double off[3], const double on[3][5])
{
    int n = 0;
    for (int c = 0; c <= 2; c++) {
        grid_pts[n++] = (mp_cost_decode_point){c, 0, false, {off[c], 0}, c * 100.0, 10, 0};
        for (int u = 0; u <= 2 * c && u <= 2; u++)
            grid_pts[n++] = (mp_cost_decode_point){c, u, true, {on[c][u], 0}, (c - u / 2.0) * 100.0, 10 + u * 30.0, 0};
    }
    costs.decode = (mp_cost_decode){.n_points = n, .points = grid_pts, .quant = "Q4_K", .n_embd = 4, .n_ff = 8,
                                     .n_expert = E, .top_k = 2, .far_max = 2, .far_split = 2, .threads = 8};
    costs.decode.expert_bytes = gpu_entry.expert_bytes;
}

/* A grid in half experts whose best all-cold point gives the bus half of one route: every layer
 * step of all-cpu is charged that point, and each runs one far route, split with the CPU, as the
 * executor counts them (routes_far, routes_split). */
Test(sim, split_far_routes_charged_and_counted)
{
    mp_sim_trace t;
    decode_trace(&t, 2, 4, 2, 4, small_ids);
    mp_sim_config c = config(1500, 2);
    const double off[3] = {40, 150, 250}, on[3][5] = {{45}, {155, 130, 170}, {255, 190, 200}};
    set_split_grid(4, off, on);
    mp_sim_result cpu = run(&t, &c, MP_POL_ALL_CPU);
    cr_assert_float_eq(cpu.train.time_ns, 8 * 190.0, 1e-9);
    cr_assert_eq(cpu.train.routes_far, 8);
    cr_assert_eq(cpu.train.routes_split, 8);
    /* whole routes only, with one whole far route at 200: charged that, and nothing split */
    const double whole_on[3][2] = {{45, 0}, {155, 170}, {255, 200}};
    set_grid(4, off, whole_on);
    mp_sim_result whole = run(&t, &c, MP_POL_ALL_CPU);
    cr_assert_float_eq(whole.train.time_ns, 8 * 200.0, 1e-9);
    cr_assert_eq(whole.train.routes_split, 0);
    cr_assert_eq(whole.train.routes_far, 8);
    mp_sim_result_free(&cpu);
    mp_sim_result_free(&whole);
}

/* A model whose layers' experts differ (llama.cpp's Q4_K_M): layer 0's are the config's (1500
 * bytes, GPU 10, CPU 100 ns), layer 1's another kind (2500 bytes, GPU 20, CPU 300 ns). Without a
 * grid each layer takes its own kind's curves: all-CPU, two misses a step, layer 0 7 + 20 + 200 + 5
 * + 3 = 235, layer 1 7 + 20 + 600 + 5 + 3 = 635 (4 steps each: 3480); all-GPU 4 x 20 + 4 x 40 =
 * 240. With the grid (measured with every layer hybrid: the layers' mean, 2000 bytes an expert),
 * its cold part goes to each layer in the ratio of its bytes: all-cold 40 + 210 x 0.75 = 197.5 and
 * 40 + 210 x 1.25 = 302.5, the same 2000 ns in all as the grid says for two layers; the planner's
 * layer costs are the replay's. */
Test(sim, layers_of_two_expert_kinds)
{
    mp_sim_trace t;
    decode_trace(&t, 2, 4, 2, 4, small_ids);
    mp_sim_config c = config(1500, 2);
    static mp_cost_stat gy2[2] = {{20, 0}, {20, 0}}, cy2[2] = {{300, 0}, {300, 0}};
    mp_cost_curve rows_flat = {2, xs_rows, NULL};
    mp_cost_expert gpu2 = {"Q4_K/Q6_K", 4, 8, 2500, 0, rows_flat, {0, NULL, NULL}};
    mp_cost_expert cpu2 = {"Q4_K/Q6_K", 4, 8, 2500, 8, rows_flat, {0, NULL, NULL}};
    gpu2.by_rows.y = gy2;
    cpu2.by_rows.y = cy2;
    const mp_sim_layer_experts layers[2] = {{&gpu_entry, &cpu_entry}, {&gpu2, &cpu2}};
    c.layer_experts = layers;
    mp_sim_result cpu = run(&t, &c, MP_POL_ALL_CPU);
    cr_assert_float_eq(cpu.train.time_ns, 4 * 235.0 + 4 * 635.0, 1e-9);
    mp_sim_result gpu = run(&t, &c, MP_POL_ALL_GPU);
    cr_assert_float_eq(gpu.train.time_ns, 4 * 20.0 + 4 * 40.0, 1e-9);
    mp_sim_result_free(&cpu);
    mp_sim_result_free(&gpu);

    const double off[3] = {40, 150, 250}, loses[3][2] = {{45, 0}, {155, 160}, {255, 260}};
    set_grid(4, off, loses);
    cpu = run(&t, &c, MP_POL_ALL_CPU);
    cr_assert_float_eq(cpu.train.time_ns, 4 * 197.5 + 4 * 302.5, 1e-9);
    sim_tab tab;
    mp_error err;
    cr_assert_eq(sim_tab_build(&tab, &c, &t, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(tab.n_kinds, 2);
    cr_assert_float_eq(tab.kinds[0].grid_cold_scale, 0.75, 1e-12);
    cr_assert_float_eq(tab.kinds[1].grid_cold_scale, 1.25, 1e-12);
    cr_assert_eq(sim_kind_of(&tab, 1)->expert_bytes, 2500);
    sim_stats st = small_stats();
    static const uint64_t counts[8] = {4, 2, 1, 1, 3, 1, 2, 2};
    memcpy(st.train.count, counts, sizeof counts);
    double cost[2 * 5];
    cr_assert_eq(plan_layer_costs(&t, &tab, &st, cost, NULL, &err), MP_OK, "%s", err.msg);
    cr_assert_float_eq(cost[0], 4 * 197.5, 1e-9);
    cr_assert_float_eq(cost[5], 4 * 302.5, 1e-9);
    cr_assert_float_eq(cost[4], 4 * 20.0, 1e-9);
    cr_assert_float_eq(cost[5 + 4], 4 * 40.0, 1e-9);
    sim_tab_free(&tab);
    free(st.train.count), free(st.order);
    mp_sim_result_free(&cpu);
    mp_sim_trace_free(&t);
}

/* The grid's all-cold point with far routes off anchors the CPU entry's level: 2 one-row CPU
 * experts cost 70 + 2 * 30 = 130 ns by the curve; the runtime's step spent 200 (set_grid: 100 per
 * CPU expert), so every CPU cost of the curves (steps the grid lacks) is x 200/130. Another thread
 * count than the entry's leaves it alone. */
Test(sim, decode_grid_anchors_the_cpu_entry)
{
    mp_sim_config c = config(1500, 2);
    static double xs_k[2] = {1, 2};
    static mp_cost_stat ck[2] = {{100, 0}, {130, 0}};
    cpu_entry.concurrent = (mp_cost_curve){2, xs_k, ck};
    const double off[3] = {35, 135, 235}, on[3][2] = {{35, 0}, {135, 135}, {235, 235}};
    set_grid(4, off, on);
    cr_assert_float_eq(mp_decide_cpu_anchor(&costs, &cpu_entry, 1.0), 200.0 / 130.0, 1e-12);
    /* two rows of one expert on the CPU: 70 + (30 + 100 - 100) scaled, through the curves */
    sim_tab tab;
    mp_error err;
    mp_sim_trace t;
    cr_assert_eq(mp_sim_trace_init(&t, 1, 4, 2, NULL, &err), MP_OK);
    const uint16_t two_rows[4] = {0, 1, 0, 1};
    cr_assert_eq(mp_sim_trace_add_step(&t, 0, 2, two_rows, "t", &err), MP_OK, "%s", err.msg);
    cr_assert_eq(sim_tab_build(&tab, &c, &t, &err), MP_OK, "%s", err.msg);
    cr_assert_float_eq(tab.kinds[0].cpu_fixed_ns, 70 * 200.0 / 130.0, 1e-9);
    cr_assert_float_eq(tab.kinds[0].cpu_ns[2], 30 * 200.0 / 130.0, 1e-9);
    sim_tab_free(&tab);
    mp_sim_trace_free(&t);
    costs.decode.threads = 16; /* measured on 16 threads, the entry is 8 */
    cr_assert_float_eq(mp_decide_cpu_anchor(&costs, &cpu_entry, 1.0), 1.0, 1e-12);
    mp_sim_result r;
    decode_trace(&t, 2, 4, 2, 4, small_ids);
    cr_assert_eq(mp_sim_run(&t, &c, MP_POL_ALL_CPU, &r, &err), MP_ERR_ARG, "a grid of another thread count");
    cr_assert_not_null(strstr(err.msg, "measured on 16 CPU threads, this run uses 8"), "%s", err.msg);
    mp_sim_trace_free(&t);
}

/* One-row steps of hybrid layers take the grid's time for their count of cold routes, with the far
 * decision the runtime makes (runtime/decide.h): here far routes pay (one of a step's cold routes
 * far: c=1 120 instead of 150, c=2 180 instead of 250; the gather costs 5 when none runs).
 * all-cpu: cold share 1, every step c=2: 8 x 180, one far route per layer step.
 * static-topn, e0 resident in both layers: layer 0's train routes are cold with share 4/8 (e1 2,
 * e2 1, e3 1 of 8), layer 1's 5/8: both expect less with far routes on (layer 0: 0.25 x 45 + 0.5 x
 * 120 + 0.25 x 180 = 116.25 against 147.5). Layer 0: 4 steps c=1 (480); layer 1: 3 steps c=1, one
 * c=2 (540): 1020. With far routes dearer than the CPU alone, every layer turns them off and the
 * grid's off points are charged: all-cpu 8 x 250, static-topn 4 x 150 + 3 x 150 + 250. The
 * planner's layer costs are the replay's, with its decision per capacity. */
Test(sim, decode_grid_with_far_decisions_by_hand)
{
    mp_sim_trace t;
    decode_trace(&t, 2, 4, 2, 4, small_ids);
    mp_sim_config c = config(1500, 2);
    const double off[3] = {40, 150, 250}, pays[3][2] = {{45, 0}, {155, 120}, {255, 180}};
    set_grid(4, off, pays);
    mp_sim_result cpu = run(&t, &c, MP_POL_ALL_CPU);
    cr_assert_float_eq(cpu.train.time_ns, 8 * 180.0, 1e-9);
    cr_assert_eq(cpu.train.routes_far, 8);
    mp_sim_result top = run(&t, &c, MP_POL_STATIC_TOPN);
    cr_assert_float_eq(top.train.time_ns, 480 + 540, 1e-9);
    cr_assert_eq(top.train.routes_far, 8);
    mp_sim_result gpu = run(&t, &c, MP_POL_ALL_GPU); /* no hybrid layer: the GPU curve, no grid */
    cr_assert_float_eq(gpu.train.time_ns, 8 * 20.0, 1e-9);
    sim_tab tab;
    mp_error err;
    cr_assert_eq(sim_tab_build(&tab, &c, &t, &err), MP_OK, "%s", err.msg);
    sim_stats st = small_stats();
    static const uint64_t counts[8] = {4, 2, 1, 1, 3, 1, 2, 2};
    memcpy(st.train.count, counts, sizeof counts);
    double cost[2 * 5];
    cr_assert_eq(plan_layer_costs(&t, &tab, &st, cost, NULL, &err), MP_OK, "%s", err.msg);
    cr_assert_float_eq(cost[0], 4 * 180.0, 1e-9); /* layer 0, capacity 0 */
    cr_assert_float_eq(cost[1], 4 * 120.0, 1e-9); /* capacity 1 (e0): as the replay */
    cr_assert_float_eq(cost[5 + 1], 540, 1e-9);
    cr_assert_float_eq(cost[4], 4 * 20.0, 1e-9);  /* capacity 4: all resident, no round trip */
    sim_tab_free(&tab);
    /* a given profile (policy profile) is decided from its own table, as the runtime reads it:
     * static-topn's profile (the train counts) replays as static-topn, far routes and all; the
     * same placement with counts that put 100 of 105 routes on e0 has cold share 5/105 in both
     * layers, where far routes lose (expected on - off = 0.907 x 5 - 0.0907 x 30 - 0.0023 x 70 >
     * 0): the grid's off points, layer 0 4 x 150, layer 1 3 x 150 + 250 */
    cr_assert_not_null(top.profile.counts);
    c.profile = &top.profile;
    mp_sim_result prof = run(&t, &c, MP_POL_PROFILE);
    cr_assert_float_eq(prof.train.time_ns, 480 + 540, 1e-9);
    cr_assert_eq(prof.train.routes_far, 8);
    mp_sim_result_free(&prof);
    static const uint64_t skewed[8] = {100, 2, 2, 1, 100, 2, 2, 1};
    memcpy(top.profile.counts, skewed, sizeof skewed);
    prof = run(&t, &c, MP_POL_PROFILE);
    cr_assert_float_eq(prof.train.time_ns, 4 * 150.0 + 3 * 150.0 + 250, 1e-9);
    cr_assert_eq(prof.train.routes_far, 0);
    mp_sim_result_free(&prof);
    c.profile = NULL;
    mp_sim_result_free(&cpu);
    mp_sim_result_free(&top);
    mp_sim_result_free(&gpu);

    const double loses[3][2] = {{45, 0}, {155, 160}, {255, 260}};
    set_grid(4, off, loses);
    cpu = run(&t, &c, MP_POL_ALL_CPU);
    cr_assert_float_eq(cpu.train.time_ns, 8 * 250.0, 1e-9);
    cr_assert_eq(cpu.train.routes_far, 0);
    top = run(&t, &c, MP_POL_STATIC_TOPN);
    cr_assert_float_eq(top.train.time_ns, 7 * 150.0 + 250, 1e-9);
    cr_assert_eq(sim_tab_build(&tab, &c, &t, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(plan_layer_costs(&t, &tab, &st, cost, NULL, &err), MP_OK, "%s", err.msg);
    cr_assert_float_eq(cost[1], 4 * 150.0, 1e-9);
    free(st.train.count);
    free(st.order);
    sim_tab_free(&tab);
    mp_sim_result_free(&cpu);
    mp_sim_result_free(&top);
    mp_sim_trace_free(&t);
}

/* The cost file's grid as the runtime loads it for the small traces' shape (4 experts, top-2). */
static void loaded_grid(mp_decode_costs *dc)
{
    mp_error err;
    const mp_decode_shape shape = {NULL, 4, 8, 4, 2, 8, 0};
    cr_assert_eq(mp_decode_costs_from(&costs, "grid", &shape, dc, &err), MP_OK, "%s", err.msg);
}

/* The simulator's grid (a built tab's) against want, point for point. */
static void tab_grid_equals(const sim_tab *tab, const mp_decode_costs *want)
{
    for (int cold = 0; cold <= 2; cold++) {
        cr_assert_float_eq(tab->dc.off_ns[cold], want->off_ns[cold], 1e-9, "off, %d cold", cold);
        cr_assert_float_eq(tab->dc.cpu_off_ns[cold], want->cpu_off_ns[cold], 1e-9, "off, %d cold", cold);
        for (int f = 0; f <= (cold < 1 ? cold : 1); f++) {
            cr_assert_float_eq(tab->dc.on_ns[cold][f], want->on_ns[cold][f], 1e-9, "on, %d cold, %d far", cold, f);
            cr_assert_float_eq(tab->dc.gpu_on_ns[cold][f], want->gpu_on_ns[cold][f], 1e-9, "on, %d cold, %d far",
                               cold, f);
        }
    }
}

/* Far routes need the staging buffers (a batch of MP_GPU_COPY_MIN_ROWS rows: no_copies below it)
 * and the page-locked host copy (not with pageable buffers): without either the runtime runs none,
 * so the grid where far routes pay (the test above: all-cpu 8 x 180 with 8 far routes) is charged
 * at its off points in the replay and the planner alike: 8 x 250, layer 0 at capacity 0 4 x 250. */
Test(sim, no_far_routes_without_staging_or_pinned_host)
{
    mp_sim_trace t;
    decode_trace(&t, 2, 4, 2, 4, small_ids);
    const double off[3] = {40, 150, 250}, pays[3][2] = {{45, 0}, {155, 120}, {255, 180}};
    for (int without = 0; without < 2; without++) {
        mp_sim_config c = config(1500, 2);
        set_grid(4, off, pays);
        if (without)
            c.pageable = true;
        else
            c.no_copies = true;
        mp_sim_result cpu = run(&t, &c, MP_POL_ALL_CPU);
        cr_assert_float_eq(cpu.train.time_ns, 8 * 250.0, 1e-9, "%s: %g", without ? "pageable" : "no staging", cpu.train.time_ns);
        cr_assert_eq(cpu.train.routes_far, 0);
        sim_tab tab;
        mp_error err;
        cr_assert_eq(sim_tab_build(&tab, &c, &t, &err), MP_OK, "%s", err.msg);
        sim_stats st = small_stats();
        double cost[2 * 5];
        cr_assert_eq(plan_layer_costs(&t, &tab, &st, cost, NULL, &err), MP_OK, "%s", err.msg);
        cr_assert_float_eq(cost[0], 4 * 250.0, 1e-9);
        sim_tab_free(&tab);
        free(st.train.count);
        free(st.order);
        mp_sim_result_free(&cpu);
    }
    mp_sim_trace_free(&t);
}

/* simulate at another host bandwidth rebuilds the grid by the decision model's rule and decides far
 * routes on it: the grid where far routes lose (every side measured at a host reading 100 GB/s),
 * predicted at 50, charges each point's CPU side twice (the all-cold off point 2 x 200 + 50 = 450,
 * the one-far point 2 x 100 + 160 = 360), so that the all-CPU placement turns far routes on; the
 * simulator's grid is the cost file's grid rebuilt at factor level / 50 = 2 (runtime/decide.h,
 * mp_decode_costs_scale), point for point. */
Test(sim, host_bandwidth_rebuilds_the_grid_by_the_decision_rule)
{
    mp_sim_trace t;
    decode_trace(&t, 2, 4, 2, 4, small_ids);
    mp_sim_config c = config(1500, 2);
    const double off[3] = {40, 150, 250}, loses[3][2] = {{45, 0}, {155, 160}, {255, 260}};
    set_grid(4, off, loses);
    costs.host_read_gbs = 100;
    mp_sim_result quiet = run(&t, &c, MP_POL_ALL_CPU);
    cr_assert_eq(quiet.train.routes_far, 0);
    c.host_read_gbs = 50;
    mp_sim_result busy = run(&t, &c, MP_POL_ALL_CPU);
    cr_assert_eq(busy.train.routes_far, 8, "the cores at half speed give one route of each cold pair to the bus");
    cr_assert_float_eq(busy.train.time_ns, 8 * 360.0, 1e-9);
    sim_tab tab;
    mp_error err;
    cr_assert_eq(sim_tab_build(&tab, &c, &t, &err), MP_OK, "%s", err.msg);
    mp_decode_costs dc;
    loaded_grid(&dc);
    cr_assert_float_eq(mp_decide_host_factor(&dc, 50), 2, 1e-12);
    mp_decode_costs_scale(&dc, mp_decide_host_factor(&dc, 50), 1, 1, 1);
    tab_grid_equals(&tab, &dc);
    cr_assert_float_eq(dc.off_ns[2], 450, 1e-9);
    cr_assert_float_eq(dc.on_ns[2][1], 360, 1e-9);
    sim_tab_free(&tab);
    mp_sim_result_free(&quiet);
    mp_sim_result_free(&busy);
    mp_sim_trace_free(&t);
}

/* simulate at another bus bandwidth: the grid where a far route wins (the all-cold layer 140 ns with
 * one far, 250 without) keeps it while the link moves 200 bytes/ns as calibrated (the costs' best
 * pinned copy: 1000 bytes in 5 ns); at 6.25 (factor 32) the far unit's 1500 bytes take 7.5 x 32 =
 * 240 ns of its 70 ns GPU side, whose other 62.5 stay, so the point costs 140 + (302.5 - 100) =
 * 342.5 and the all-CPU placement runs no far route. The simulator's grid is the cost file's rebuilt
 * at that bus factor (mp_decode_costs_scale), its floor's bus is the link's now, and an expert's copy
 * (505 ns as calibrated) takes 32 times as long. */
Test(sim, bus_bandwidth_rebuilds_the_grid_by_the_decision_rule)
{
    mp_sim_trace t;
    decode_trace(&t, 2, 4, 2, 4, small_ids);
    mp_sim_config c = config(1500, 2);
    const double off[3] = {40, 150, 250}, wins[3][2] = {{45, 0}, {155, 110}, {255, 140}};
    set_grid(4, off, wins);
    costs.host_read_gbs = 100;
    mp_sim_result as_calibrated = run(&t, &c, MP_POL_ALL_CPU);
    cr_assert_eq(as_calibrated.train.routes_far, 8);
    c.bus_gbs = 6.25;
    mp_sim_result narrow = run(&t, &c, MP_POL_ALL_CPU);
    cr_assert_eq(narrow.train.routes_far, 0, "a far route loses on a link 32 times narrower");
    cr_assert_float_eq(narrow.train.time_ns, 8 * 250.0, 1e-9);
    sim_tab tab;
    mp_error err;
    cr_assert_eq(sim_tab_build(&tab, &c, &t, &err), MP_OK, "%s", err.msg);
    mp_decode_costs dc;
    loaded_grid(&dc);
    cr_assert_float_eq(mp_decide_bus_factor(&dc, 6.25), 32, 1e-12);
    mp_decode_costs_now(&dc, 0, 6.25);
    mp_decode_costs_scale(&dc, 1, 1, mp_decide_bus_factor(&dc, 6.25), 1);
    tab_grid_equals(&tab, &dc);
    cr_assert_float_eq(dc.on_ns[2][1], 342.5, 1e-9);
    cr_assert_float_eq(tab.dc.bus_bytes_per_ns, 6.25, 1e-12);
    cr_assert_float_eq(tab.kinds[0].weight_h2d_ns, 32 * 505.0, 1e-6);
    sim_tab_free(&tab);
    c.bus_gbs = -1;
    cr_assert_eq(sim_tab_build(&tab, &c, &t, &err), MP_ERR_ARG);
    cr_assert_not_null(strstr(err.msg, "bus bandwidth -1 GB/s"), "%s", err.msg);
    mp_sim_result_free(&as_calibrated);
    mp_sim_result_free(&narrow);
    mp_sim_trace_free(&t);
}

/* The floor: no layer step beats reading its cold experts from host memory. With the host read at
 * 0.001 bytes/ns beside the bus's 200 (the costs' best pinned copy, 1000 bytes in 5 ns), two cold
 * experts of 1e6 bytes take at least 2e6 / 200.001 = 9999.95 ns, far above the curves' 235: all-cpu
 * is charged the floor in every layer step, and counts them. */
Test(sim, no_prediction_beats_the_floor)
{
    mp_sim_trace t;
    decode_trace(&t, 2, 4, 2, 4, small_ids);
    mp_sim_config c = config(1000000, 2);
    costs.host_read_gbs = 0.001;
    const double fl = 2e6 / (0.001 + 200.0);
    mp_sim_result cpu = run(&t, &c, MP_POL_ALL_CPU);
    cr_assert_float_eq(cpu.train.time_ns, 8 * fl, 1e-6);
    cr_assert_float_eq(cpu.train.floor_ns, 8 * fl, 1e-6);
    cr_assert_eq(cpu.train.floored, 8);
    mp_sim_result gpu = run(&t, &c, MP_POL_ALL_GPU); /* nothing cold: no floor */
    cr_assert_float_eq(gpu.train.floor_ns, 0, 1e-12);
    cr_assert_float_eq(gpu.train.time_ns, 8 * 20.0, 1e-9);
    /* a grid below the floor is held to it as well */
    const double off[3] = {1, 2, 3}, on[3][2] = {{1, 0}, {2, 2}, {3, 3}};
    set_grid(4, off, on);
    mp_sim_result g = run(&t, &c, MP_POL_ALL_CPU);
    cr_assert_float_eq(g.train.time_ns, 8 * fl, 1e-6);
    for (int p = 0; p < MP_POL_COUNT; p++) {
        if (p == MP_POL_PROFILE)
            continue;
        mp_sim_result r = run(&t, &c, (mp_sim_policy)p);
        cr_assert_geq(r.train.time_ns, r.train.floor_ns, "%s", mp_sim_policy_name(p));
        mp_sim_result_free(&r);
    }
    mp_sim_result_free(&cpu);
    mp_sim_result_free(&gpu);
    mp_sim_result_free(&g);
    mp_sim_trace_free(&t);
}

/* non_moe_context: a one-row step at position p attends p + 1 keys and pays per_key_ns for each
 * key beyond the point's (keys 2, 10 ns per key here); multi-row steps pay the curve as it is;
 * every request starts at position 0. One layer, every route to expert 0 (resident): each step's
 * MoE costs 10 ns, its non-MoE 100 ns by the curve. */
Test(sim, non_moe_context_by_position)
{
    mp_sim_trace t;
    mp_error err;
    cr_assert_eq(mp_sim_trace_init(&t, 1, 4, 1, NULL, &err), MP_OK, "%s", err.msg);
    const uint16_t one[1] = {0}, two[2] = {0, 0};
    const struct { uint32_t request, rows; } steps[] = {{0, 1}, {0, 1}, {0, 1}, {1, 2}, {1, 1}, {1, 1}};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        cr_assert_eq(mp_sim_trace_add_step(&t, steps[i].request, steps[i].rows, steps[i].rows == 1 ? one : two,
                                           "test", &err), MP_OK, "%s", err.msg);
    mp_sim_config c = config(1500, 4);
    static mp_cost_stat hundred[2] = {{100, 0}, {100, 0}};
    costs.non_moe = (mp_cost_curve){2, xs_rows, hundred};
    mp_sim_result plain = run(&t, &c, MP_POL_ALL_GPU);
    cr_assert_float_eq(plain.train.time_ns, 6 * 110.0, 1e-9);
    costs.non_moe_linear = true;
    costs.non_moe_keys = 2;
    costs.non_moe_per_key_ns = 10;
    /* request 0: keys 1, 2, 3 -> 90, 100, 110; request 1: the 2-row step 100, then keys 3, 4 */
    mp_sim_result ctx = run(&t, &c, MP_POL_ALL_GPU);
    cr_assert_float_eq(ctx.train.time_ns, 90 + 100 + 110 + 100 + 110 + 120 + 6 * 10.0, 1e-9);
    mp_sim_result_free(&plain);
    mp_sim_result_free(&ctx);
    mp_sim_trace_free(&t);
}

/* The measured context curve in the replay: each one-row step pays the curve at its keys (here 100
 * ns at 2 keys, 140 at 6: 10 ns per key, extended below the first point), the 2-row step the rows
 * curve, as with the older linear term above. */
Test(sim, non_moe_context_curve_by_position)
{
    mp_sim_trace t;
    mp_error err;
    cr_assert_eq(mp_sim_trace_init(&t, 1, 4, 1, NULL, &err), MP_OK, "%s", err.msg);
    const uint16_t one[1] = {0}, two[2] = {0, 0};
    const struct { uint32_t request, rows; } steps[] = {{0, 1}, {0, 1}, {0, 1}, {1, 2}, {1, 1}, {1, 1}};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        cr_assert_eq(mp_sim_trace_add_step(&t, steps[i].request, steps[i].rows, steps[i].rows == 1 ? one : two,
                                           "test", &err), MP_OK, "%s", err.msg);
    mp_sim_config c = config(1500, 4);
    static mp_cost_stat hundred[2] = {{100, 0}, {100, 0}}, by_keys[2] = {{100, 0}, {140, 0}};
    static double keys[2] = {2, 6};
    costs.non_moe = (mp_cost_curve){2, xs_rows, hundred};
    costs.non_moe_by_keys = (mp_cost_curve){2, keys, by_keys};
    /* request 0: keys 1, 2, 3 -> 90, 100, 110; request 1: the 2-row step 100, then keys 3, 4 */
    mp_sim_result r = run(&t, &c, MP_POL_ALL_GPU);
    cr_assert_float_eq(r.train.time_ns, 90 + 100 + 110 + 100 + 110 + 120 + 6 * 10.0, 1e-9);
    c.scale[MP_COST_NON_MOE] = 2; /* sensitivity scales it as the rest of the non-MoE time */
    mp_sim_result r2 = run(&t, &c, MP_POL_ALL_GPU);
    cr_assert_float_eq(r2.train.time_ns, 2 * (90 + 100 + 110 + 100 + 110 + 120) + 6 * 10.0, 1e-9);
    mp_sim_result_free(&r);
    mp_sim_result_free(&r2);
    mp_sim_trace_free(&t);
}

/* What a one-row step with hybrid layers pays once (decode_layers.hybrid_step, S = 60 here, the
 * grid's levels measured with both layers hybrid): all-cpu, both layers hybrid, pays its levels
 * (2 x 250 a step: the levels hold S / 2 each); first-n-cpu with one whole layer resident pays
 * layer 0's level less S / 2, S once, and layer 1's GPU experts (20): 250 + 30 + 20 a step. A step
 * with one hybrid layer measured at 300 (level 250, the resident layer 20) gives S = 60 through
 * calibrate's derivation, and the replay rebuilds it. The planner: the same layer costs, net of
 * S / 2 for each hybrid layer, and S once per one-row train step beside them; with room for every
 * expert the placement without hybrid layers, which pays no once, wins. */
Test(sim, the_once_per_step_cost_of_hybrid_steps)
{
    mp_sim_trace t;
    decode_trace(&t, 2, 4, 2, 4, small_ids);
    mp_sim_config c = config(1500, 4);
    const double off[3] = {40, 150, 250}, loses[3][2] = {{45, 0}, {155, 160}, {255, 260}};
    set_grid(4, off, loses);
    mp_sim_result cpu0 = run(&t, &c, MP_POL_ALL_CPU), first0 = run(&t, &c, MP_POL_FIRST_N_CPU);
    cr_assert_float_eq(first0.train.time_ns, 4 * (250 + 20.0), 1e-9);
    const double S = mp_calib_hybrid_step_ns(300, 0, 20, 250, 2);
    cr_assert_float_eq(S, 60, 1e-9);
    costs.decode.hybrid_step = (mp_cost_stat){S, 0};
    costs.decode.hybrid_step_layers = 2;
    mp_sim_result cpu = run(&t, &c, MP_POL_ALL_CPU), first = run(&t, &c, MP_POL_FIRST_N_CPU);
    cr_assert_float_eq(cpu.train.time_ns, cpu0.train.time_ns, 1e-9);
    cr_assert_float_eq(cpu.train.time_ns, 8 * 250.0, 1e-9);
    cr_assert_float_eq(first.train.time_ns, 4 * 300.0, 1e-9); /* the step it was derived from */
    cr_assert_float_eq(first.train.floor_ns, first0.train.floor_ns, 1e-9);
    sim_tab tab;
    mp_error err;
    cr_assert_eq(sim_tab_build(&tab, &c, &t, &err), MP_OK, "%s", err.msg);
    cr_assert_float_eq(tab.hybrid_step_ns, 60, 1e-12);
    cr_assert_float_eq(tab.hybrid_share_ns, 30, 1e-12);
    sim_stats st = small_stats();
    static const uint64_t counts[8] = {4, 2, 1, 1, 3, 1, 2, 2};
    memcpy(st.train.count, counts, sizeof counts);
    double cost[2 * 5], once = 0;
    cr_assert_eq(plan_layer_costs(&t, &tab, &st, cost, &once, &err), MP_OK, "%s", err.msg);
    cr_assert_float_eq(once, 4 * 60.0, 1e-9);
    cr_assert_float_eq(cost[0], 4 * (250 - 30.0), 1e-9); /* layer 0, capacity 0: net of S / 2 */
    cr_assert_float_eq(cost[4], 4 * 20.0, 1e-9);          /* capacity 4: whole, no share */
    cr_assert_float_eq(cost[0] + cost[5 + 4] + once, first.train.time_ns, 1e-9);
    sim_tab_free(&tab);
    free(st.train.count);
    free(st.order);
    /* Layers of 6 experts, e4 and e5 never routed to, and room for all 12: a layer holding its 4 or
     * 5 used experts nets 4 x (40 - 30) = 40 against 4 x 20 whole, so the layer costs alone keep
     * both hybrid (80 against 160); with the once (4 x 60) whole layers win, and plan takes them. */
    mp_sim_trace t6;
    decode_trace(&t6, 2, 6, 2, 4, small_ids);
    mp_sim_config all = config(1500, 12);
    set_grid(6, off, loses);
    costs.decode.hybrid_step = (mp_cost_stat){S, 0};
    costs.decode.hybrid_step_layers = 2;
    cr_assert_eq(sim_tab_build(&tab, &all, &t6, &err), MP_OK, "%s", err.msg);
    st = small_stats();
    st.train.count = realloc(st.train.count, 12 * sizeof *st.train.count);
    st.order = realloc(st.order, 12 * sizeof *st.order);
    static const uint64_t counts6[12] = {4, 2, 1, 1, 0, 0, 3, 1, 2, 2, 0, 0};
    static const uint16_t order6[12] = {0, 1, 2, 3, 4, 5, 0, 2, 3, 1, 4, 5};
    memcpy(st.train.count, counts6, sizeof counts6);
    memcpy(st.order, order6, sizeof order6);
    double cost6[2 * 7];
    uint32_t cap[2];
    cr_assert_eq(plan_layer_costs(&t6, &tab, &st, cost6, &once, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(plan_capacities(cost6, 2, 6, 12, cap, &err), MP_OK);
    cr_assert(cap[0] < 6 && cap[1] < 6, "the summed layer costs alone keep hybrid layers: (%u, %u)", cap[0], cap[1]);
    cr_assert_float_eq(cost6[cap[0]] + cost6[7 + cap[1]], 80, 1e-9);
    sim_tab_free(&tab);
    free(st.train.count);
    free(st.order);
    mp_sim_result plan = run(&t6, &all, MP_POL_PLAN), gpu = run(&t6, &all, MP_POL_ALL_GPU);
    cr_assert_eq(plan.resident_initial, 12);
    cr_assert_float_eq(plan.train.time_ns, gpu.train.time_ns, 1e-9);
    cr_assert_float_eq(gpu.train.time_ns, 8 * 20.0, 1e-9);
    mp_sim_trace_free(&t6);
    mp_sim_result_free(&cpu0);
    mp_sim_result_free(&first0);
    mp_sim_result_free(&cpu);
    mp_sim_result_free(&first);
    mp_sim_result_free(&plan);
    mp_sim_result_free(&gpu);
    mp_sim_trace_free(&t);
}

Test(sim, plan_layer_costs_by_hand)
{
    /* cost[l][c] of the small trace, computed in the comments of the expected arrays */
    mp_sim_trace t;
    decode_trace(&t, 2, 4, 2, 4, small_ids);
    mp_sim_config c = config(1500, 2);
    sim_tab tab;
    mp_error err;
    cr_assert_eq(sim_tab_build(&tab, &c, &t, &err), MP_OK, "%s", err.msg);
    sim_stats st = {0};
    st.train.count = calloc(8, sizeof *st.train.count);
    st.order = malloc(sizeof *st.order * 8);
    st.train_steps = 4;
    /* layer 0 order e0 e1 e2 e3; layer 1 order e0 e2 e3 e1 */
    uint16_t order[8] = {0, 1, 2, 3, 0, 2, 3, 1};
    memcpy(st.order, order, sizeof order);
    double cost[2 * 5];
    cr_assert_eq(plan_layer_costs(&t, &tab, &st, cost, NULL, &err), MP_OK, "%s", err.msg);
    /* Below c = 4 every step makes the round trip: one with both experts resident costs
     * max(20, 7 + 20 + 5) + 3 = 35. Layer 0: c=0 4*235; c=1 4*135; c=2 35+35+135+135;
     * c=3 35+35+35+135; c=4 4*20 (no round trip) */
    const double l0[5] = {940, 540, 340, 240, 80};
    /* layer 1: c=0 940; c=1 135+135+235+135; c=2 35+135+235+35; c=3 35+35+135+35; c=4 80 */
    const double l1[5] = {940, 640, 440, 240, 80};
    for (int k = 0; k < 5; k++) {
        cr_assert_float_eq(cost[k], l0[k], 1e-9, "layer 0, c=%d: %g", k, cost[k]);
        cr_assert_float_eq(cost[5 + k], l1[k], 1e-9, "layer 1, c=%d: %g", k, cost[5 + k]);
    }
    uint32_t cap[2];
    cr_assert_eq(plan_capacities(cost, 2, 4, 3, cap, &err), MP_OK);
    /* 3 slots: (3,0) 1180, (2,1) 980, (1,2) 980, (0,3) 1180 */
    cr_assert(cap[0] + cap[1] <= 3);
    cr_assert_float_eq(cost[cap[0]] + cost[5 + cap[1]], 980, 1e-9);
    cr_assert_eq(plan_capacities(cost, 2, 4, 6, cap, &err), MP_OK);
    /* 6 slots: (2,4) 420 beats (3,3) 480 and (4,2) 520: a whole layer resident saves its round
     * trips */
    cr_assert_eq(cap[0], 2);
    cr_assert_eq(cap[1], 4);
    cr_assert_float_eq(cost[cap[0]] + cost[5 + cap[1]], 420, 1e-9);
    free(st.train.count);
    free(st.order);
    sim_tab_free(&tab);
    mp_sim_trace_free(&t);
}

Test(sim, lru_admissions_wait_for_their_copy)
{
    /* one layer, 2 experts, top-1, 1 slot, expert copy 5 + 100 = 105 ns. Steps e0 e0 e1 e1 e1.
     * s0 [0,135) miss, admit e0: copy [135,240). s1 [135,270) late miss. s2 [270,405) e1 miss:
     * evict e0, admit e1: copy [405,510). s3 [405,540) late miss. s4 [540,575) hit, with the
     * round trip of a layer that holds an expert off the GPU: max(10, 7 + 20 + 5) + 3 = 35. */
    const uint16_t ids[] = {0, 0, 1, 1, 1};
    mp_sim_trace t;
    decode_trace(&t, 1, 2, 1, 5, ids);
    mp_sim_config c = config(1100, 1);
    mp_sim_result r = run(&t, &c, MP_POL_LRU);
    cr_assert_eq(r.train.hits, 1);
    cr_assert_eq(r.train.late, 2);
    cr_assert_eq(r.train.admissions, 2);
    cr_assert_eq(r.train.evictions, 1);
    cr_assert_eq(r.train.h2d_weight_bytes, 2200);
    cr_assert_float_eq(r.train.time_ns, 575, 1e-9);
    mp_sim_result_free(&r);
    mp_sim_trace_free(&t);
}

Test(sim, activation_copies_delay_weight_copies_on_the_shared_link)
{
    /* one layer, one expert used every step, 1 slot, copy 5 + 395 = 400 ns. s0 [0,135) miss, admit
     * e0: copy [135,535). The partial-output copies at 262, 397, 532 (each 5 ns) land while it
     * runs and push its end to 550. s4 starts at 540: without the shared link it would hit (535),
     * with it it misses; s5 at 675 hits (35 ns: the layer still makes its round trip). */
    const uint16_t ids[] = {0, 0, 0, 0, 0, 0};
    mp_sim_trace t;
    decode_trace(&t, 1, 2, 1, 6, ids);
    mp_sim_config c = config(1395, 1);
    mp_sim_result r = run(&t, &c, MP_POL_LRU);
    cr_assert_eq(r.train.hits, 1);
    cr_assert_eq(r.train.late, 4);
    cr_assert_float_eq(r.train.time_ns, 5 * 135.0 + 35, 1e-9);
    mp_sim_result_free(&r);
    mp_sim_trace_free(&t);
}

Test(sim, belady_by_hand)
{
    /* 1 slot, sequence 0 1 0 1 2 0. Belady starts with e0 (used first) and never swaps it for e1
     * (next used later than e0): hits at steps 0, 2, 5. LRU starts empty: s0 [0,135) admits e0, copy
     * [135,240); s1 [135,270) e1 finds e0 LOADING, never a victim: refused; s2 [270,305) e0 hits;
     * s3 [305,440) e1 evicts e0, copy [440,545); s4 e2 finds e1 LOADING: refused; s5 e0 misses. */
    const uint16_t ids[] = {0, 1, 0, 1, 2, 0};
    mp_sim_trace t;
    decode_trace(&t, 1, 3, 1, 6, ids);
    mp_sim_config c = config(1100, 1);
    mp_sim_result b = run(&t, &c, MP_POL_BELADY);
    cr_assert_eq(b.train.hits, 3);
    cr_assert_eq(b.train.admissions, 0);
    mp_sim_result l = run(&t, &c, MP_POL_LRU);
    cr_assert_eq(l.train.hits, 1);
    cr_assert_eq(l.train.admissions, 3);
    cr_assert_eq(l.train.tier_refused, 2);
    mp_sim_result_free(&b);
    mp_sim_result_free(&l);
    mp_sim_trace_free(&t);
}

Test(sim, lfu_variants_by_hand)
{
    /* 1 slot, sequence 0 0 1 1 1 with instant-enough copies (105 ns after each 135 ns step).
     * LFU: s0 admit e0 (count 1); s2 e1 count 1 vs e0 2: stay; s3 e1 2 vs 2: stay (needs >);
     * s4 e1 3 > 2: swap. Hits: s1 only (e0 ready at 240 > 135: late!) -> 0 hits, 1 late. */
    const uint16_t ids[] = {0, 0, 1, 1, 1, 1};
    mp_sim_trace t;
    decode_trace(&t, 1, 2, 1, 6, ids);
    mp_sim_config c = config(1100, 1);
    mp_sim_result r = run(&t, &c, MP_POL_LFU);
    /* s0 [0,135) admit e0 -> ready 240; s1 [135,270) late; s2 [270,405) e1 miss (1 < 2);
     * s3 [405,540) e1 miss (2 = 2); s4 [540,675) e1 miss (3 > 2: swap, copy [675,780));
     * s5 [675,810) late. */
    cr_assert_eq(r.train.hits, 0);
    cr_assert_eq(r.train.late, 2);
    cr_assert_eq(r.train.admissions, 2);
    cr_assert_eq(r.train.evictions, 1);
    mp_sim_result_free(&r);
    /* decayed LFU, alpha 0.5, epsilon 0: after s2 scores e0 = 0.25 + 0.5 = 0.75... computed on
     * the layer's invocation clock: s0 e0=1; s1 e0=1.5; s2 e0=.75 e1=1 > .75: swap at s2 */
    c.alpha = 0.5;
    c.epsilon = 0;
    r = run(&t, &c, MP_POL_DECAYED_LFU);
    cr_assert_eq(r.train.admissions, 2);
    cr_assert_eq(r.train.evictions, 1);
    /* e1 admitted after s2 ([270,405)) -> copy [405,510): s3 late, s4 and s5 hit */
    cr_assert_eq(r.train.hits, 2);
    mp_sim_result_free(&r);
    /* epsilon 1: e1 must reach twice e0: s2 1 vs .75 no; s3 e1 1.5 vs e0 .375: swap */
    c.epsilon = 1;
    r = run(&t, &c, MP_POL_DECAYED_LFU);
    cr_assert_eq(r.train.hits, 1);
    mp_sim_result_free(&r);
    /* windowed LFU, window 2: s2 window {0,1}: e1 1 vs e0 1 no; s3 {1,1}: e1 2 > e0 0: swap */
    c.window = 2;
    r = run(&t, &c, MP_POL_WINDOW_LFU);
    cr_assert_eq(r.train.admissions, 2);
    cr_assert_eq(r.train.hits, 1); /* copy [540,645): s4 [540,675) late, s5 hit */
    mp_sim_result_free(&r);
    mp_sim_trace_free(&t);
}

/* The cost policy prices admissions from the decode grid (runtime/decide.h): a route saves
 * (240 - 40) / 2 = 100 ns (the all-cold step less the all-resident one, per route) and a copy of
 * 1000 bytes at the host's 10 bytes/ns costs 100 ns, so a swap needs a gain above 1 route (alpha
 * 0.5). A candidate's routes to come are its score before the invocation, (score - rows now) /
 * alpha. 1 slot, top-2, steps {0,1} {0,1} {0,2} {2,3} {2,3} {2,3}, each after 100 ns of non-MoE
 * time (the 5 ns copies land before the next step):
 *   s0 0 = 1 = 1, before 0: both refused;
 *   s1 0 = 1 = 1.5, before 1: gain 1 into the free slot, not above: both refused;
 *   s2 0 = 1.75, before 1.5: admitted; 2 finds 0 LOADING: refused;
 *   s3 2 = 1.5, before 1, against 0 = 0.875: gain 0.125, refused (both);
 *   s4 2 = 1.75, before 1.5, against 0 = 0.4375: gain 1.0625, swap; 3 finds 2 LOADING: refused;
 *   s5 2 hits (1.875); 3 (before 1.5) against it: refused.
 * Time: cold routes 2 2 2 2 2 1 at the grid's 240 / 140, plus 6 x 100 = 1940. With the host at
 * 1 byte/ns a copy costs 1000 ns (10 routes: alpha 0.5 never scores 2): nothing is admitted and
 * every step is all-cold, 6 x 340. */
Test(sim, cost_policy_by_hand)
{
    const uint16_t ids[] = {0, 1, 0, 1, 0, 2, 2, 3, 2, 3, 2, 3};
    mp_sim_trace t;
    decode_trace(&t, 1, 4, 2, 6, ids);
    mp_sim_config c = config(1000, 1);
    static mp_cost_stat non_moe_y[2] = {{100, 0}, {100, 0}};
    costs.non_moe = (mp_cost_curve){2, xs_rows, non_moe_y};
    const double off[3] = {40, 140, 240}, loses[3][2] = {{45, 0}, {155, 160}, {255, 260}};
    set_grid(4, off, loses);
    costs.host_read_gbs = 10;
    c.alpha = 0.5;
    mp_sim_result r = run(&t, &c, MP_POL_COST);
    cr_assert_eq(r.tier_policy, MP_TIER_COST);
    cr_assert_eq(r.train.admissions, 2);
    cr_assert_eq(r.train.evictions, 1);
    cr_assert_eq(r.train.hits, 1);
    cr_assert_eq(r.train.tier_hits, 1);
    cr_assert_eq(r.train.late, 0);
    cr_assert_eq(r.train.tier_refused, 9);
    cr_assert_float_eq(r.train.time_ns, 1940, 1e-9);
    mp_sim_result_free(&r);
    costs.host_read_gbs = 1;
    r = run(&t, &c, MP_POL_COST);
    cr_assert_eq(r.train.admissions, 0);
    cr_assert_float_eq(r.train.time_ns, 6 * 340.0, 1e-9);
    mp_sim_result_free(&r);
    mp_sim_trace_free(&t);
}

/* A prefill step's cold experts are shared between the CPU and the link (mp_decide_copies): 1
 * layer, 4 experts, top-2, nothing resident; one step of 4 rows gives each expert 2 rows. Each
 * costs the CPU 100 ns and a copy of its 1100 bytes 105: copying 2 leaves the CPU 200 beside the
 * link's 210 (all on the CPU: 400; 1 copy: 300; 3: 315). Layer time: max(GPU side: the copies'
 * 210 + their kernels' 2 × 10 = 230, rows' path: D2H 7 + sync 20 + CPU 200 + H2D 5 (4 rows of 16
 * bytes) + combine 3 = 235) = 235. */
Test(sim, a_prefill_step_shares_its_cold_experts_between_the_cpu_and_the_link)
{
    const uint16_t ids[] = {0, 1, 2, 3, 0, 1, 2, 3};
    mp_sim_trace t;
    mp_error err;
    cr_assert_eq(mp_sim_trace_init(&t, 1, 4, 2, NULL, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_sim_trace_add_step(&t, 0, 4, ids, "test", &err), MP_OK, "%s", err.msg);
    mp_sim_config c = config(1100, 0);
    mp_sim_result a = run(&t, &c, MP_POL_ALL_CPU);
    cr_assert_eq(a.train.experts_copied, 2);
    cr_assert_eq(a.train.h2d_weight_bytes, 2 * 1100);
    cr_assert_float_eq(a.train.time_ns, 235, 1e-9, "%.1f", a.train.time_ns);
    mp_sim_result_free(&a);
    c.no_copies = true; /* everything on the CPU: 7 + 20 + 400 + 5 + 3 */
    a = run(&t, &c, MP_POL_ALL_CPU);
    cr_assert_eq(a.train.experts_copied, 0);
    cr_assert_float_eq(a.train.time_ns, 435, 1e-9, "%.1f", a.train.time_ns);
    mp_sim_result_free(&a);
    mp_sim_trace_free(&t);
}

/* A prefill admission whose expert the step copies to the GPU goes into its slot from the staging
 * buffer, as the runtime's promotion does (gpu/gpu_tier.c): READY when the step ends, no copy on
 * the link. 1 layer, 2 experts, top-1, all on the CPU with a tier of 1 slot (lru): a prefill step
 * of 2 rows both routed to e0 (2 rows on the CPU take 100 ns, its copy 5: the step copies it), then
 * two decode steps routed to e0. With the promotion both decode steps hit the slot; the only
 * weight bytes on the link are the step's own copy (1000). A runtime without prefill copies
 * copies e0 from the host when the prefill step ends: the first decode step finds it LOADING
 * (late), the second hits, and the tier's copy is on the link. */
Test(sim, prefill_admissions_go_from_staging)
{
    const uint16_t prefill[] = {0, 0}, decode[] = {0};
    mp_sim_trace t;
    mp_error err;
    cr_assert_eq(mp_sim_trace_init(&t, 1, 2, 1, NULL, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_sim_trace_add_step(&t, 0, 2, prefill, "test", &err), MP_OK, "%s", err.msg);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(mp_sim_trace_add_step(&t, 0, 1, decode, "test", &err), MP_OK, "%s", err.msg);
    mp_sim_config c = config(1000, 1);
    c.adaptive = MP_TIER_LRU;
    c.adaptive_slots = 1;
    mp_sim_result a = run(&t, &c, MP_POL_ALL_CPU);
    cr_assert_eq(a.train.experts_copied, 1, "the prefill step copies e0");
    cr_assert_eq(a.train.admissions, 1);
    cr_assert_eq(a.train.tier_promoted, 1);
    cr_assert_eq(a.train.late, 0);
    cr_assert_eq(a.train.tier_hits, 2);
    cr_assert_eq(a.train.h2d_weight_bytes, 1000, "the step's copy only");
    mp_sim_result_free(&a);
    c.no_copies = true;
    a = run(&t, &c, MP_POL_ALL_CPU);
    cr_assert_eq(a.train.experts_copied, 0);
    cr_assert_eq(a.train.admissions, 1);
    cr_assert_eq(a.train.tier_promoted, 0);
    cr_assert_eq(a.train.late, 1);
    cr_assert_eq(a.train.tier_hits, 1);
    cr_assert_eq(a.train.h2d_weight_bytes, 1000, "the tier's copy only");
    mp_sim_result_free(&a);
    mp_sim_trace_free(&t);
}

/* The adaptive tier beside a static placement, as the runtime runs it: a step's moves start their
 * copies when the step ends, and copies landed during a step serve from the next step on. 2
 * layers, layer 0 routing e0 and layer 1 e1 at every step, top-1, copies of 105 ns.
 *   all-cpu + lru, 2 slots (one per layer): s0 l0 [0,135) and l1 [135,270) miss, both admitted;
 *   their copies start at 270: [270,375), [375,480). s1: both LOADING (late): l0 [270,405), whose
 *   partial output (at 397) delays the queued copy to 485, l1 [405,540). They land at 540: s2 and
 *   s3 hit (35 each, the layers still hybrid): 270 + 270 + 70 + 70 = 680, 4 hits, 2 late.
 *   The online lru of the same slots copies at each invocation's end and lands at the next's
 *   start: l0's copy [135,240) serves s1 (hit, 35), l1's [270,375) is pushed to 380 by l0's
 *   partial at 297 and misses s1's l1 at 305: 270 + 170 + 70 + 70 = 580, 5 hits, 1 late.
 *   One copy in flight at most: l1's candidate is refused at s0 and s1 (l0's copy lands at the end
 *   of s1), admitted at s2 (copy [710,815)), late at s3: 270 + 270 + 170 + 170 = 880.
 *   first-n-cpu with 3 slots, 1 of them the tier's: layer 1 whole (pinned, no round trip: 10 ns),
 *   the tier's slot in layer 0 (the only one with room): s0 135 + 10, copy [145,250); s1 late
 *   [145,280) + 10; s2, s3 hit: 45 each: 380, 6 hits (2 the tier's), 1 late. */
Test(sim, adaptive_tier_copies_at_step_ends)
{
    const uint16_t ids[] = {0, 1, 0, 1, 0, 1, 0, 1};
    mp_sim_trace t;
    decode_trace(&t, 2, 2, 1, 4, ids);
    mp_sim_config c = config(1100, 2);
    c.adaptive = MP_TIER_LRU;
    c.adaptive_slots = 2;
    mp_sim_result a = run(&t, &c, MP_POL_ALL_CPU);
    cr_assert_eq(a.tier_slots, 2);
    cr_assert_eq(a.tier_inflight, 2, "the runtime's default: 2 x top-k");
    cr_assert_eq(a.resident_initial, 0);
    cr_assert_float_eq(a.train.time_ns, 680, 1e-9);
    cr_assert_eq(a.train.hits, 4);
    cr_assert_eq(a.train.tier_hits, 4);
    cr_assert_eq(a.train.late, 2);
    cr_assert_eq(a.train.admissions, 2);
    cr_assert_eq(a.train.h2d_weight_bytes, 2200);
    mp_sim_result_free(&a);
    mp_sim_config online = config(1100, 2);
    mp_sim_result o = run(&t, &online, MP_POL_LRU);
    cr_assert_float_eq(o.train.time_ns, 580, 1e-9);
    cr_assert_eq(o.train.hits, 5);
    cr_assert_eq(o.train.late, 1);
    mp_sim_result_free(&o);
    c.adaptive_inflight = 1;
    a = run(&t, &c, MP_POL_ALL_CPU);
    cr_assert_float_eq(a.train.time_ns, 880, 1e-9);
    cr_assert_eq(a.train.hits, 2);
    cr_assert_eq(a.train.late, 2);
    cr_assert_eq(a.train.tier_refused, 2);
    mp_sim_result_free(&a);
    c = config(1100, 3);
    c.adaptive = MP_TIER_LRU;
    c.adaptive_slots = 1;
    a = run(&t, &c, MP_POL_FIRST_N_CPU);
    cr_assert_eq(a.resident_initial, 2, "the static placement gets the budget's slots less the tier's");
    cr_assert_eq(a.tier_slots, 1);
    cr_assert_float_eq(a.train.time_ns, 380, 1e-9);
    cr_assert_eq(a.train.hits, 6);
    cr_assert_eq(a.train.tier_hits, 2);
    cr_assert_eq(a.train.late, 1);
    mp_sim_result_free(&a);
    /* refusals: a tier larger than the budget's slots; a tier beside an online policy */
    mp_sim_result r;
    mp_error err;
    c.adaptive_slots = 4;
    cr_assert_eq(mp_sim_run(&t, &c, MP_POL_FIRST_N_CPU, &r, &err), MP_ERR_LIMIT);
    cr_assert_str_eq(err.msg, "simulate: the adaptive tier's 4 slots exceed the budget's 3 expert slots: expected at "
                              "most them");
    c.adaptive_slots = 1;
    cr_assert_eq(mp_sim_run(&t, &c, MP_POL_LFU, &r, &err), MP_ERR_ARG);
    cr_assert_not_null(strstr(err.msg, "beside online policy lfu"), "%s", err.msg);
    mp_sim_trace_free(&t);
}

/* A random skewed decode trace: expert popularity ~ 1/(rank+1)^skew, a per-layer permutation,
 * and some temporal locality (a row repeats the previous step's choice with probability 1/3). */
static void random_trace(mp_sim_trace *t, unsigned seed, uint32_t L, uint32_t E, uint32_t K, uint32_t n_req,
                         uint32_t steps_per_req, bool prefill)
{
    srand(seed);
    mp_error err;
    cr_assert_eq(mp_sim_trace_init(t, L, E, K, NULL, &err), MP_OK);
    double *w = malloc(sizeof *w * E);
    double total = 0;
    for (uint32_t e = 0; e < E; e++)
        total += w[e] = 1.0 / pow(e + 1, 1.1);
    uint16_t *perm = malloc(sizeof *perm * L * E);
    for (uint32_t l = 0; l < L; l++) {
        for (uint32_t e = 0; e < E; e++)
            perm[l * E + e] = (uint16_t)e;
        for (uint32_t e = E - 1; e > 0; e--) {
            uint32_t j = (uint32_t)rand() % (e + 1);
            uint16_t x = perm[l * E + e];
            perm[l * E + e] = perm[l * E + j];
            perm[l * E + j] = x;
        }
    }
    uint16_t *ids = malloc(sizeof *ids * L * K), *prev = calloc(L * K, sizeof *prev);
    for (uint32_t q = 0; q < n_req; q++) {
        uint32_t rows = 1 + (prefill && q % 3 == 0 ? (uint32_t)rand() % 4 : 0); /* some prefill steps */
        for (uint32_t s = 0; s < steps_per_req; s++) {
            uint32_t r_rows = s == 0 ? rows : 1;
            uint16_t *block = malloc(sizeof *block * L * r_rows * K);
            for (uint32_t l = 0; l < L; l++)
                for (uint32_t r = 0; r < r_rows; r++) {
                    uint16_t *row = block + ((size_t)l * r_rows + r) * K;
                    for (uint32_t j = 0; j < K; j++) {
                        uint16_t e;
                        bool dup;
                        do {
                            if (s > 0 && rand() % 3 == 0) {
                                e = prev[l * K + (uint32_t)rand() % K];
                            } else {
                                double u = (double)rand() / RAND_MAX * total, acc = 0;
                                uint32_t k = 0;
                                while (k < E - 1 && (acc += w[k]) < u)
                                    k++;
                                e = perm[l * E + k];
                            }
                            dup = false;
                            for (uint32_t i = 0; i < j; i++)
                                dup = dup || row[i] == e;
                        } while (dup);
                        row[j] = e;
                    }
                    if (r == r_rows - 1)
                        memcpy(prev + l * K, row, sizeof *row * K);
                }
            cr_assert_eq(mp_sim_trace_add_step(t, q, r_rows, block, "random", &err), MP_OK, "%s", err.msg);
            free(block);
        }
    }
    free(w), free(perm), free(ids), free(prev);
}

Test(sim, belady_bounds_every_online_policy_on_random_traces)
{
    unsigned seed0 = (unsigned)time(NULL);
    const mp_sim_policy online[] = {MP_POL_LFU, MP_POL_DECAYED_LFU, MP_POL_WINDOW_LFU, MP_POL_LRU};
    for (unsigned k = 0; k < 6; k++) {
        unsigned seed = seed0 + k;
        mp_sim_trace t;
        random_trace(&t, seed, 3, 16, 2, 12, 30, false); /* decode: Belady's bound is on unit requests */
        for (uint64_t slots = 0; slots <= 48; slots += 6) {
            mp_sim_config c = config(1100, slots);
            c.train_frac = 0.5;
            mp_sim_result b = run(&t, &c, MP_POL_BELADY);
            for (int p = 0; p < 4; p++) {
                mp_sim_result r = run(&t, &c, online[p]);
                uint64_t bh = b.train.hits + b.test.hits, rh = r.train.hits + r.test.hits;
                cr_assert_geq(bh, rh, "seed %u slots %llu: belady %llu hits < %s %llu", seed,
                              (unsigned long long)slots, (unsigned long long)bh, mp_sim_policy_name(online[p]),
                              (unsigned long long)rh);
                cr_assert_eq(r.train.decisions + r.test.decisions, b.train.decisions + b.test.decisions);
                mp_sim_result_free(&r);
            }
            mp_sim_result_free(&b);
        }
        mp_sim_trace_free(&t);
    }
}

Test(sim, plan_is_the_fastest_static_placement_on_random_traces)
{
    unsigned seed0 = (unsigned)time(NULL);
    const mp_sim_policy statics[] = {MP_POL_STATIC_TOPN, MP_POL_STATIC_EQUAL, MP_POL_FIRST_N_CPU,
                                     MP_POL_LAST_N_CPU, MP_POL_BEST_LAYERS, MP_POL_ALL_CPU};
    for (unsigned k = 0; k < 6; k++) {
        unsigned seed = seed0 + k;
        mp_sim_trace t;
        random_trace(&t, seed, 4, 16, 3, 10, 25, true);
        for (uint64_t slots = 0; slots <= 64; slots += 8) {
            mp_sim_config c = config(1100, slots);
            /* a dear round trip makes concentrating CPU work pay: vary it with the seed; and a once
             * per step of hybrid layers (no sum over layers: the planner adds it apart) */
            costs.sync.median_ns = 20.0 * (1 + k * 10);
            costs.decode.hybrid_step = (mp_cost_stat){k % 2 ? 50.0 * k : 0, 0};
            costs.decode.hybrid_step_layers = 4;
            c.train_frac = 1.0; /* in-sample: the planner optimizes exactly what is measured */
            mp_sim_result plan = run(&t, &c, MP_POL_PLAN);
            cr_assert_leq(plan.profile.slots, slots);
            for (int p = 0; p < 6; p++) {
                mp_sim_result r = run(&t, &c, statics[p]);
                cr_assert_leq(plan.train.time_ns, r.train.time_ns * (1 + 1e-12),
                              "seed %u slots %llu sync %g once %g: plan %.1f ns > %s %.1f ns", seed,
                              (unsigned long long)slots, costs.sync.median_ns, costs.decode.hybrid_step.median_ns,
                              plan.train.time_ns, mp_sim_policy_name(statics[p]), r.train.time_ns);
                mp_sim_result_free(&r);
            }
            mp_sim_result_free(&plan);
        }
        mp_sim_trace_free(&t);
    }
}

Test(sim, replay_is_deterministic_and_splits_by_request)
{
    mp_sim_trace t;
    random_trace(&t, 7, 3, 16, 2, 10, 20, true);
    mp_sim_config c = config(1100, 12);
    c.train_frac = 0.7;
    mp_sim_result topn = run(&t, &c, MP_POL_STATIC_TOPN);
    c.profile = &topn.profile; /* policy profile replays static-topn's placement, the same times */
    for (int p = 0; p < MP_POL_COUNT; p++) {
        mp_sim_result a = run(&t, &c, (mp_sim_policy)p), b = run(&t, &c, (mp_sim_policy)p);
        if (p == MP_POL_PROFILE)
            cr_assert_eq(a.test.time_ns, topn.test.time_ns);
        cr_assert_eq(a.test.hits, b.test.hits, "%s", mp_sim_policy_name(p));
        cr_assert_eq(a.test.time_ns, b.test.time_ns, "%s", mp_sim_policy_name(p));
        /* 7 of 10 requests train: 7 * 20 steps */
        cr_assert_eq(a.train.steps, 140, "%s: %llu", mp_sim_policy_name(p), (unsigned long long)a.train.steps);
        cr_assert_eq(a.test.steps, 60);
        mp_strp q;
        mp_error err;
        uint8_t *img;
        size_t size;
        cr_assert_eq(mp_strp_encode(&a.profile, &img, &size, &err), MP_OK, "%s: %s", mp_sim_policy_name(p), err.msg);
        cr_assert_eq(mp_strp_read_buffer(img, size, "sim", NULL, &q, &err), MP_OK, "%s", err.msg);
        mp_strp_free(&q);
        free(img);
        mp_sim_result_free(&a);
        mp_sim_result_free(&b);
    }
    mp_sim_result_free(&topn);
    mp_sim_trace_free(&t);
}

Test(sim, rejects_bad_traces_and_budgets)
{
    mp_sim_trace t;
    mp_error err;
    cr_assert_eq(mp_sim_trace_init(&t, 2, 4, 5, NULL, &err), MP_ERR_ARG);
    cr_assert_not_null(strstr(err.msg, "top-k 5"), "%s", err.msg);
    cr_assert_eq(mp_sim_trace_init(&t, 2, 4, 2, NULL, &err), MP_OK);
    const uint16_t bad_range[] = {0, 4, 1, 2};
    cr_assert_eq(mp_sim_trace_add_step(&t, 0, 1, bad_range, "rec 9", &err), MP_ERR_FORMAT);
    cr_assert_not_null(strstr(err.msg, "rec 9: request 0 layer 0 row 0: expert 4: expected < 4"), "%s", err.msg);
    const uint16_t dup[] = {0, 1, 2, 2};
    cr_assert_eq(mp_sim_trace_add_step(&t, 0, 1, dup, "rec 10", &err), MP_ERR_FORMAT);
    cr_assert_not_null(strstr(err.msg, "layer 1 row 0: expert 2 chosen twice"), "%s", err.msg);
    const uint16_t ok[] = {0, 1, 2, 3};
    cr_assert_eq(mp_sim_trace_add_step(&t, 0, 1, ok, "r", &err), MP_OK);
    cr_assert_eq(mp_sim_trace_add_step(&t, 1, 1, ok, "r", &err), MP_OK);
    cr_assert_eq(mp_sim_trace_add_step(&t, 0, 1, ok, "rec 12", &err), MP_ERR_FORMAT);
    cr_assert_not_null(strstr(err.msg, "request 0 resumes after request 1"), "%s", err.msg);
    cr_assert_eq(mp_sim_trace_add_step(&t, 1, 0, ok, "r", &err), MP_ERR_FORMAT);
    mp_sim_config c = config(1100, 2);
    c.budget_bytes = 999; /* below the 1000 bytes of non-expert weights */
    mp_sim_result r;
    cr_assert_eq(mp_sim_run(&t, &c, MP_POL_LFU, &r, &err), MP_ERR_LIMIT);
    cr_assert_not_null(strstr(err.msg, "budget 999 bytes is smaller than what the runtime holds besides experts "
                                       "(1000 bytes"), "%s", err.msg);
    c = config(1100, 2);
    c.alpha = 0;
    cr_assert_eq(mp_sim_run(&t, &c, MP_POL_DECAYED_LFU, &r, &err), MP_ERR_ARG);
    cr_assert_not_null(strstr(err.msg, "alpha 0"), "%s", err.msg);
    mp_sim_trace_free(&t);
}

/* A trace of one request (one long prompt) trains on that request: the static policies are never
 * planned from nothing, whatever the share (0.7 of 1 request is no whole request). */
Test(sim, one_request_is_the_train_split)
{
    mp_sim_trace t;
    random_trace(&t, 11, 3, 16, 2, 1, 20, false); /* 20 one-row steps */
    mp_sim_config c = config(1100, 12);
    c.train_frac = 0.7;
    mp_sim_result r = run(&t, &c, MP_POL_STATIC_TOPN);
    cr_assert_eq(r.train.steps, 20);
    cr_assert_eq(r.test.steps, 0);
    uint64_t routes = 0;
    for (size_t i = 0; i < (size_t)r.profile.n_layers * r.profile.n_experts; i++)
        routes += r.profile.counts[i];
    cr_assert_eq(routes, 20 * 3 * 2, "the profile's counts are the request's routes");
    mp_sim_result_free(&r);
    mp_sim_trace_free(&t);
}
