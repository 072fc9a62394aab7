/* bench/bench_simulate.c — routing decisions per second of the replay, per policy, on one core.
 *
 * usage: bench_simulate TRACE.db COSTS.json [--as-decode] [--budget-slots N] [--reps R] [--expert Q] [--repeat N]
 * Loads the trace once, then for each policy replays it R times and reports the best rate in
 * thread CPU time (immune to other jobs on a shared machine; wall time matches on an idle one)
 * (decisions = rows x top-k x layers, the unit the >= 5 M/s target is stated in). Setup (loading,
 * statistics, the planner's DP) is inside the timed region: it is part of what a user waits for.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/costs.h"
#include "simulator/sim.h"
#include "simulator/sim_load.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* CPU time: the build machine is shared */
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s TRACE.db COSTS.json [--as-decode] [--budget-slots N] [--reps R] [--expert Q]\n",
                argv[0]);
        return 2;
    }
    mp_sim_load_options lo = {.as_decode = false};
    long slots = -1, reps = 3, repeat = 10;
    const char *quant = NULL;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--as-decode"))
            lo.as_decode = true;
        else if (!strcmp(argv[i], "--budget-slots") && i + 1 < argc)
            slots = atol(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atol(argv[++i]);
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc)
            repeat = atol(argv[++i]);
        else if (!strcmp(argv[i], "--expert") && i + 1 < argc)
            quant = argv[++i];
        else {
            fprintf(stderr, "bench_simulate: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    mp_error err;
    mp_costs costs;
    mp_sim_trace t;
    mp_sim_trace_facts facts;
    if (mp_costs_load(argv[2], &costs, &err) || mp_sim_load_trace(argv[1], &lo, &t, &facts, &err)) {
        fprintf(stderr, "bench_simulate: %s\n", err.msg);
        return 1;
    }
    /* --repeat: the trace's requests N times over (fresh request ids), so that a run lasts long
     * enough to time; the policies see a longer but equally real routing stream */
    if (repeat > 1) {
        mp_sim_trace big;
        if (mp_sim_trace_init(&big, t.n_layers, t.n_experts, t.top_k, t.model_layer, &err))
            return fprintf(stderr, "bench_simulate: %s\n", err.msg), 1;
        for (long r = 0; r < repeat; r++)
            for (uint64_t s = 0; s < t.n_steps; s++)
                if (mp_sim_trace_add_step(&big, (uint32_t)(r * (t.steps[t.n_steps - 1].request + 1) + t.steps[s].request),
                                          t.steps[s].rows, t.ids + t.steps[s].ids_off, "repeat", &err))
                    return fprintf(stderr, "bench_simulate: %s\n", err.msg), 1;
        mp_sim_trace_free(&t);
        t = big;
    }
    const mp_cost_expert *gpu = &costs.gpu_expert[0];
    for (int i = 0; quant && i < costs.n_gpu_expert; i++)
        if (!strcmp(costs.gpu_expert[i].quant, quant))
            gpu = &costs.gpu_expert[i];
    const mp_cost_expert *cpu = mp_costs_find_cpu(&costs, gpu->quant, gpu->n_embd, gpu->n_ff, 1 << 20);
    if (!cpu) {
        fprintf(stderr, "bench_simulate: no CPU entry for %s\n", gpu->quant);
        return 1;
    }
    uint64_t cells = (uint64_t)t.n_layers * t.n_experts;
    if (slots < 0)
        slots = (long)(cells / 4);
    mp_sim_config cfg;
    mp_sim_config_init(&cfg);
    cfg.costs = &costs;
    cfg.gpu = gpu;
    cfg.cpu = cpu;
    cfg.budget_bytes = (uint64_t)slots * gpu->expert_bytes;
    uint64_t decisions = 0;
    for (uint64_t s = 0; s < t.n_steps; s++)
        decisions += (uint64_t)t.steps[s].rows * t.top_k * t.n_layers;
    printf("trace %s: %u layers x %u experts, top-%u, %llu steps, %llu routing decisions; %ld slots (%.0f%%)%s\n",
           argv[1], t.n_layers, t.n_experts, t.top_k, (unsigned long long)t.n_steps, (unsigned long long)decisions,
           slots, 100.0 * (double)slots / (double)cells, lo.as_decode ? "; as decode" : "");
    printf("%-13s %12s %10s\n", "policy", "M decisions/s", "best s");
    for (int p = 0; p < MP_POL_COUNT; p++) {
        if (p == MP_POL_PROFILE) /* needs a profile file; it replays like any static placement */
            continue;
        double best = 1e30;
        for (long r = 0; r < reps; r++) {
            mp_sim_result res;
            double t0 = now_s();
            if (mp_sim_run(&t, &cfg, (mp_sim_policy)p, &res, &err)) {
                fprintf(stderr, "bench_simulate: %s\n", err.msg);
                return 1;
            }
            double dt = now_s() - t0;
            mp_sim_result_free(&res);
            best = dt < best ? dt : best;
        }
        printf("%-13s %12.2f %10.4f\n", mp_sim_policy_name(p), (double)decisions / best / 1e6, best);
    }
    mp_sim_trace_free(&t);
    mp_costs_free(&costs);
    return 0;
}
