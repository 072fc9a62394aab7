/* simulator/plan.c — the planner: per-layer capacities chosen by simulated time, not popularity.
 *
 * With a static placement and no admissions, the replay's time is a sum over layers of each
 * layer's invocation times (plus non-MoE time, which no placement changes), and a layer's time
 * depends only on how many of its experts are resident if they are its top-c by train count.
 * So the planner tabulates, for every layer and every c = 0..E, the layer's train time with its
 * top-c resident (cost[l][c]), and picks capacities minimizing sum cost[l][c_l] subject to
 * sum c_l <= slots by dynamic programming: exact for this family, which contains static-topn
 * (global top-N = per-layer top-c for some c) and whole-layer placements (c = 0 or E). A layer
 * with c = E never pays the round trip: the planner finds "some layers fully resident, hot sets
 * elsewhere" when the costs say so, and every c < E pays it at every step, as the runtime does
 * (sim_layer_ns).
 */
#include "simulator/sim_internal.h"

#include <stdlib.h>
#include <string.h>

/* Per invocation, the time as a function of c is piecewise constant: it changes only at the
 * ranks of the experts the invocation routes to. With those m experts sorted by rank
 * r_1 < ... < r_m, for c in [r_j + 1, r_{j+1}] exactly the first j are hits and the other m - j
 * are cold. Each piece is added to a difference array. A one-row step's time also depends on the
 * layer's far decision, which depends on c (through the cold share of the top-c placement): such
 * pieces go to two arrays, one with far routes on and one off, and each capacity takes the one of
 * its decision (far_on). */
mp_status plan_layer_costs(const mp_sim_trace *t, const sim_tab *tab, const sim_stats *st, double *cost,
                           double *once_ns, mp_error *err)
{
    const uint32_t L = t->n_layers, E = t->n_experts, K = t->top_k;
    uint32_t *rank_of = malloc(sizeof *rank_of * E);   // (E) rank of each expert in the layer
    uint32_t *rows_of = calloc(E, sizeof *rows_of);    // (E) rows per expert in the invocation
    uint16_t *used = malloc(sizeof *used * E);         // (E) distinct experts, sorted by rank
    double *diff = malloc(sizeof *diff * 2 * ((size_t)E + 2)); // (2, E + 2): far routes off, on
    double *cpu_from = malloc(sizeof *cpu_from * 3 * ((size_t)E + 1)); // (3, E + 1) of used[j..m):
    // CPU time, copy time, copied experts' GPU time
    uint32_t *copied_from = malloc(sizeof *copied_from * ((size_t)E + 1)); // (E + 1) copied experts of used[j..m)
    mp_far_layer *far = malloc(sizeof *far * (size_t)E); // (E) the decision of capacities 0 .. E - 1
    double *cand_cpu = malloc(sizeof *cand_cpu * E);     // (E) the copy candidates of used[j..m), by CPU time
    uint32_t *cand_rows = malloc(sizeof *cand_rows * E); // (E) and their rows
    if (!rank_of || !rows_of || !used || !diff || !cpu_from || !copied_from || !far || !cand_cpu || !cand_rows) {
        free(rank_of), free(rows_of), free(used), free(diff), free(cpu_from), free(copied_from), free(far);
        free(cand_cpu), free(cand_rows);
        return mp_fail(err, MP_ERR_NOMEM, "simulate: plan: out of memory");
    }
    double *copy_from = cpu_from + (E + 1), *gcopy_from = cpu_from + 2 * ((size_t)E + 1);
    double *diff_on = diff + (E + 2);
    if (once_ns) { /* every one-row train step of a placement with a hybrid layer pays it once */
        *once_ns = 0;
        for (uint64_t si = 0; si < st->train_steps; si++)
            *once_ns += t->steps[si].rows == 1 ? tab->hybrid_step_ns : 0;
    }
    for (uint32_t l = 0; l < L; l++) {
        const uint16_t *order = st->order + (size_t)l * E;
        const sim_kind *kd = sim_kind_of(tab, l);
        const uint64_t *counts = st->train.count + (size_t)l * E;
        for (uint32_t r = 0; r < E; r++)
            rank_of[order[r]] = r;
        /* the far decision of each capacity below E: its top-c resident, the rest's train routes
         * cold (decide_far in sim.c, and the runtime from the profile's counts) */
        double all = 0, cold = 0;
        for (uint32_t e = 0; e < E; e++)
            all += (double)counts[e];
        cold = all;
        const mp_far_layer *far_on = NULL; /* the table f(c) is the grid's, the same for every
                                            * capacity: only whether a capacity turns it on differs */
        for (uint32_t c = 0; c < E; c++) {
            mp_decide_far_layer(&tab->dc, mp_decide_cold_share(cold, all, c, E), &far[c]);
            cold -= (double)counts[order[c]];
            if (far[c].on && !far_on)
                far_on = &far[c];
        }
        memset(diff, 0, sizeof *diff * 2 * ((size_t)E + 2));
        for (uint64_t si = 0; si < st->train_steps; si++) {
            const mp_sim_step *step = &t->steps[si];
            const uint16_t *ids = mp_sim_step_ids(t, step, l);
            uint64_t n_ids = (uint64_t)step->rows * K;
            uint32_t m = 0;
            for (uint64_t i = 0; i < n_ids; i++) {
                uint16_t e = ids[i];
                if (!rows_of[e]++) {
                    uint32_t j = m++;
                    while (j > 0 && rank_of[used[j - 1]] > rank_of[e]) {
                        used[j] = used[j - 1];
                        j--;
                    }
                    used[j] = e;
                }
            }
            /* j = 0: nothing hits; move one expert at a time from the cold side to the GPU side.
             * Every capacity below E makes the round trip (sim_layer_ns), so the last piece, all
             * used experts resident, splits into capacities < E (round trip, no cold experts) and
             * E (none). */
            double gpu_ns = 0;
            const uint32_t rows = step->rows;
            cpu_from[m] = copy_from[m] = gcopy_from[m] = 0;
            copied_from[m] = 0;
            if (mp_decide_step_copies(rows) && tab->copies && kd->weight_h2d_ns > 0) {
                /* a step of several rows: the runtime copies a share of the cold experts
                 * used[j..m), chosen over the whole set (mp_decide_copies, runtime/decide.h).
                 * Going down from j = m, each j adds used[j] to the cold set: its candidates (two
                 * rows or more) are kept in the rule's order (mp_decide_copy_first) and its
                 * count is taken on them */
                double total = 0;
                uint32_t nc = 0;
                bool unknown = false; /* a candidate without a CPU time: mp_decide_copies copies none */
                for (uint32_t j = m; j-- > 0;) {
                    const uint32_t c = rows_of[used[j]];
                    total += kd->cpu_ns[c] > 0 ? kd->cpu_ns[c] : 0;
                    if (c >= 2) {
                        unknown = unknown || !(kd->cpu_ns[c] > 0);
                        uint32_t at = nc++;
                        while (at > 0 && mp_decide_copy_first(kd->cpu_ns[c], c, cand_cpu[at - 1], cand_rows[at - 1])) {
                            cand_cpu[at] = cand_cpu[at - 1];
                            cand_rows[at] = cand_rows[at - 1];
                            at--;
                        }
                        cand_cpu[at] = kd->cpu_ns[c];
                        cand_rows[at] = c;
                    }
                    const int k = unknown ? 0 : mp_decide_copy_count((int)nc, cand_cpu, NULL, total, kd->weight_h2d_ns);
                    double copied_cpu = 0, copied_gpu = 0;
                    for (int i = 0; i < k; i++) {
                        copied_cpu += cand_cpu[i];
                        copied_gpu += kd->gpu_ns[cand_rows[i]];
                    }
                    cpu_from[j] = total - copied_cpu;
                    copy_from[j] = (double)k * kd->weight_h2d_ns;
                    gcopy_from[j] = copied_gpu;
                    copied_from[j] = (uint32_t)k;
                }
            } else {
                for (uint32_t j = m; j-- > 0;) { /* cold experts run on the CPU */
                    cpu_from[j] = cpu_from[j + 1] + kd->cpu_ns[rows_of[used[j]]];
                    copy_from[j] = gcopy_from[j] = 0;
                    copied_from[j] = 0;
                }
            }
            for (uint32_t j = 0; j <= m; j++) {
                if (j > 0)
                    gpu_ns += kd->gpu_ns[rows_of[used[j - 1]]];
                const uint32_t n_cold = m - j;
                const bool gpu_any = j > 0 || copied_from[j] > 0;
                const double g = gpu_ns + (gpu_any ? kd->gpu_fixed_ns : 0);
                const double cpu_ns = n_cold > copied_from[j] ? cpu_from[j] + kd->cpu_fixed_ns : 0;
                const double curve =
                    sim_layer_ns(tab, kd, g, cpu_ns, copy_from[j], gcopy_from[j], n_cold, rows);
                const uint32_t lo = j == 0 ? 0 : rank_of[used[j - 1]] + 1;
                const uint32_t hi = j == m ? E - 1 : rank_of[used[j]]; /* inclusive, capacities < E */
                if (lo <= hi) {
                    double piece[2] = {curve, curve};
                    if (rows == 1) { /* the decode grid, far routes off and on (as the replay) */
                        uint32_t unused, unused_split;
                        const mp_far_layer off = {0};
                        const double t_off = sim_decode_layer_ns(tab, kd, &off, n_cold, &unused, &unused_split);
                        if (!isnan(t_off))
                            piece[0] = t_off;
                        /* read only by the piece's capacities that turn far routes on */
                        if (far_on) {
                            const double t_on = sim_decode_layer_ns(tab, kd, far_on, n_cold, &unused, &unused_split);
                            piece[1] = isnan(t_on) ? curve : t_on;
                        }
                        /* net of the step's once, which *once_ns carries */
                        piece[0] = sim_hybrid_layer_ns(tab, kd, piece[0], n_cold, false);
                        piece[1] = sim_hybrid_layer_ns(tab, kd, piece[1], n_cold, false);
                    }
                    diff[lo] += piece[0];
                    diff[hi + 1] -= piece[0];
                    diff_on[lo] += piece[1];
                    diff_on[hi + 1] -= piece[1];
                }
                if (j == m) { /* capacity E: the whole layer resident, no round trip */
                    const double full = j > 0 ? gpu_ns + kd->gpu_fixed_ns : 0;
                    diff[E] += full;
                    diff_on[E] += full;
                }
            }
            for (uint32_t j = 0; j < m; j++)
                rows_of[used[j]] = 0;
        }
        double run = 0, run_on = 0;
        for (uint32_t c = 0; c <= E; c++) {
            run += diff[c];
            run_on += diff_on[c];
            cost[(size_t)l * (E + 1) + c] = c < E && far[c].on ? run_on : run;
        }
    }
    free(rank_of), free(rows_of), free(used), free(diff), free(cpu_from), free(copied_from), free(far);
    free(cand_cpu), free(cand_rows);
    return MP_OK;
}

mp_status plan_capacities(const double *cost, uint32_t n_layers, uint32_t n_experts, uint64_t slots, uint32_t *cap,
                          mp_error *err)
{
    const uint64_t cells = (uint64_t)n_layers * n_experts;
    const uint64_t S = slots < cells ? slots : cells;
    double *prev = malloc(sizeof *prev * (S + 1));                     // (S + 1) best cost of layers < l
    double *next = malloc(sizeof *next * (S + 1));                     // (S + 1)
    uint32_t *choice = malloc(sizeof *choice * (size_t)n_layers * (S + 1)); // (L, S + 1) c of layer l
    if (!prev || !next || !choice) {
        free(prev), free(next), free(choice);
        return mp_fail(err, MP_ERR_NOMEM, "simulate: plan: out of memory for %llu slots", (unsigned long long)S);
    }
    for (uint64_t s = 0; s <= S; s++)
        prev[s] = 0; /* "at most s slots" over no layers */
    /* where the time goes: n_layers * S * n_experts additions */
    for (uint32_t l = 0; l < n_layers; l++) {
        const double *cl = cost + (size_t)l * (n_experts + 1);
        uint32_t *ch = choice + (size_t)l * (S + 1);
        for (uint64_t s = 0; s <= S; s++) {
            uint32_t cmax = s < n_experts ? (uint32_t)s : n_experts;
            double best = prev[s] + cl[0];
            uint32_t arg = 0;
            for (uint32_t c = 1; c <= cmax; c++) {
                double v = prev[s - c] + cl[c];
                if (v <= best) { /* ties: the larger capacity (experts the train split never
                                  * routes to still serve the held-out requests) */
                    best = v;
                    arg = c;
                }
            }
            next[s] = best;
            ch[s] = arg;
        }
        double *tmp = prev;
        prev = next;
        next = tmp;
    }
    uint64_t s = S;
    for (uint32_t l = n_layers; l-- > 0;) {
        cap[l] = choice[(size_t)l * (S + 1) + s];
        s -= cap[l];
    }
    free(prev), free(next), free(choice);
    return MP_OK;
}

/* The capacities of the baselines plan is compared with, each a per-layer top-c placement like
 * plan's (pol_static_placement places the same experts): all-cpu, first-n-cpu, static-equal,
 * static-topn. */
enum { BASE_ALL_CPU, BASE_FIRST_N_CPU, BASE_STATIC_EQUAL, BASE_STATIC_TOPN, N_BASE };

static void baseline_caps(int which, const sim_stats *st, uint32_t L, uint32_t E, uint64_t slots, uint32_t *cap)
{
    const uint64_t full = slots / E < L ? slots / E : L;
    for (uint32_t l = 0; l < L; l++) {
        uint64_t c = 0;
        if (which == BASE_FIRST_N_CPU)
            c = l >= L - full ? E : 0;
        else if (which == BASE_STATIC_EQUAL)
            c = slots / L + (l < slots % L);
        cap[l] = (uint32_t)(c < E ? c : E);
    }
    if (which == BASE_STATIC_TOPN)
        for (uint64_t i = 0; i < slots && i < (uint64_t)L * E; i++)
            cap[st->global[i] / E]++;
}

/* A placement's planned total: its layers' costs, and the once when any layer is hybrid. */
static double plan_total(const double *cost, uint32_t L, uint32_t E, double once_ns, const uint32_t *cap)
{
    double t = 0;
    bool hybrid = false;
    for (uint32_t l = 0; l < L; l++) {
        t += cost[(size_t)l * (E + 1) + cap[l]];
        hybrid |= cap[l] < E;
    }
    return t + (hybrid ? once_ns : 0);
}

mp_status plan_no_loser(const double *cost, const sim_stats *st, uint32_t L, uint32_t E, uint64_t slots,
                        double once_ns, uint32_t *cap, mp_error *err)
{
    uint32_t *alt = malloc(sizeof *alt * L);
    if (!alt)
        return mp_fail(err, MP_ERR_NOMEM, "simulate: plan: out of memory");
    double best = plan_total(cost, L, E, once_ns, cap);
    for (int b = 0; b < N_BASE; b++) {
        baseline_caps(b, st, L, E, slots, alt);
        const double t = plan_total(cost, L, E, once_ns, alt);
        if (t < best * (1 - 1e-12)) { /* the exact optimum cannot lose: rounding, or a bug */
            best = t;
            memcpy(cap, alt, sizeof *alt * L);
        }
    }
    free(alt);
    return MP_OK;
}
