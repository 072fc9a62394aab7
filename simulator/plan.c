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
 * run on the CPU. Each piece is added to a difference array. */
mp_status plan_layer_costs(const mp_sim_trace *t, const sim_tab *tab, const sim_stats *st, double *cost,
                           mp_error *err)
{
    const uint32_t L = t->n_layers, E = t->n_experts, K = t->top_k;
    uint32_t *rank_of = malloc(sizeof *rank_of * E);   // (E) rank of each expert in the layer
    uint32_t *rows_of = calloc(E, sizeof *rows_of);    // (E) rows per expert in the invocation
    uint16_t *used = malloc(sizeof *used * E);         // (E) distinct experts, sorted by rank
    double *diff = malloc(sizeof *diff * ((size_t)E + 2));      // (E + 2)
    double *cpu_from = malloc(sizeof *cpu_from * ((size_t)E + 1)); // (E + 1) CPU time of used[j..m)
    if (!rank_of || !rows_of || !used || !diff || !cpu_from) {
        free(rank_of), free(rows_of), free(used), free(diff), free(cpu_from);
        return mp_fail(err, MP_ERR_NOMEM, "simulate: plan: out of memory");
    }
    for (uint32_t l = 0; l < L; l++) {
        const uint32_t *order = st->order + (size_t)l * E;
        for (uint32_t r = 0; r < E; r++)
            rank_of[order[r]] = r;
        memset(diff, 0, sizeof *diff * ((size_t)E + 2));
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
            /* j = 0: nothing hits; move one expert at a time from the CPU side to the GPU side.
             * Every capacity below E makes the round trip (sim_layer_ns), so the last piece, all
             * used experts resident, splits into capacities < E (round trip, no CPU experts) and
             * E (none). */
            double gpu_ns = 0;
            const uint32_t rows = step->rows;
            cpu_from[m] = 0;
            for (uint32_t j = m; j-- > 0;)
                cpu_from[j] = cpu_from[j + 1] + tab->cpu_ns[rows_of[used[j]]];
            const uint32_t far_hi = E / 2; /* capacities with far routes (sim_far_layer): 0 .. E / 2 */
            for (uint32_t j = 0; j <= m; j++) {
                if (j > 0)
                    gpu_ns += tab->gpu_ns[rows_of[used[j - 1]]] + (j == 1 ? tab->gpu_fixed_ns : 0);
                /* the CPU side's fixed cost while it has experts, and far routes by capacity */
                const double cpu_ns = j < m ? cpu_from[j] + tab->cpu_fixed_ns : 0;
                const uint32_t lo = j == 0 ? 0 : rank_of[used[j - 1]] + 1;
                const uint32_t hi = j == m ? E - 1 : rank_of[used[j]]; /* inclusive */
                for (int far = 1; far >= 0; far--) {
                    const uint32_t a = far ? lo : (lo > far_hi ? lo : far_hi + 1);
                    const uint32_t b = far ? (hi < far_hi ? hi : far_hi) : hi;
                    if (a > b)
                        continue;
                    const double piece =
                        sim_layer_ns(tab, gpu_ns, sim_cpu_side_ns(tab, rows, K, m - j, far, cpu_ns), rows);
                    diff[a] += piece;
                    diff[b + 1] -= piece;
                }
                if (j == m) { /* capacity E: the whole layer resident, no round trip */
                    diff[E] += gpu_ns;
                    diff[E + 1] -= gpu_ns;
                }
            }
            for (uint32_t j = 0; j < m; j++)
                rows_of[used[j]] = 0;
        }
        double run = 0;
        for (uint32_t c = 0; c <= E; c++) {
            run += diff[c];
            cost[(size_t)l * (E + 1) + c] = run;
        }
    }
    free(rank_of), free(rows_of), free(used), free(diff), free(cpu_from);
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
