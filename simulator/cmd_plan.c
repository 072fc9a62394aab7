/* simulator/cmd_plan.c — `moeplan plan TRACE.db -m MODEL --costs costs.json --budget SIZE -o P.strp`:
 * the closed loop. The profile is made (simulate: the policy and the baselines it must not lose to,
 * every trace row replayed as a decode step), then checked: a short decode of the model under that
 * profile and budget, with the trace's routing replayed and the executor deciding its far routes
 * from the same cost file, measured as `bench` measures (one warm-up, then repetitions), and the
 * prediction for the same rows set beside it. A check on the CPU executor is said not to compare
 * (the prediction is the GPU executor's); on the GPU, a difference over 10 % gets one warning line
 * with the likely cause. Where CPU experts ran, the check's rows are predicted again at the memory
 * rate they read at (the host's level during the check, set beside the cost file's grid): a
 * prediction that holds there says the CPU experts' speed moved since calibration (the host's
 * memory where the probe moved too, else the cores' time beyond the bytes: mp_plan_miss_cause);
 * one that does not points to an uncosted path or a stale calibration.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/args.h"
#include "simulator/commands.h"
#include "simulator/plan_check.h"
#include "collector/route_replay.h"
#include "runtime/engine.h"
#include "runtime/bench.h"
#include "runtime/executor.h"
#include "runtime/knobs_apply.h"
#include "runtime/gpu.h"
#include "runtime/decide.h"
#include "base/numparse.h"
#include "kernels/quant.h"
#include "runtime/placement.h"
#include "runtime/session.h"
#include "simulator/simulate.h"


static void usage(FILE *f)
{
    fprintf(f,
            "usage: moeplan plan TRACE.db -m MODEL --costs costs.json --budget SIZE -o PROFILE.strp [options]\n\n"
            "Make a placement profile for one GPU budget, then check it: decode with it and the trace's\n"
            "routing, and set the measured speed beside the predicted one (docs/simulator.md, plan).\n\n"
            "  -m, --model GGUF      the traced model\n"
            "  --costs FILE          its cost file from `moeplan calibrate` on this machine\n"
            "  --budget SIZE         GPU memory, as --gpu-budget counts it (16GiB, 12GB, bytes)\n"
            "  -o, --output P.strp   the profile (+ P.strp.json manifest); an existing one only with\n"
            "                        --force\n"
            "  --force               replace an existing profile\n"
            "  --policy P            the placement policy (default plan; a static policy)\n"
            "  -c, --ctx-size, --ctx N  the context the profile is for (the budget's KV cache; default the\n"
            "                        runtime's)\n"
            "  -t, --threads N       CPU threads (default: the CPUs this process may use; the cost file's grid must\n"
            "                        have been measured on as many)\n"
            "  --verify-tokens N     decode steps of the check (default 128, at most the trace's rows\n"
            "                        - 1; 0: make the profile only)\n"
            "  -r, --repetitions R   timed repetitions of the check (default 3, 1..100)\n"
            "  --executor E          auto (default), gpu or cpu, as run's\n"
            "  -h, --help            show this help\n");
}

typedef struct plan_opts {
    const char *trace, *model, *costs, *budget, *out, *policy, *executor;
    uint64_t budget_bytes; /* budget, parsed */
    bool force;
    int64_t ctx, threads, verify, reps;
    const mp_knobs *knobs; /* the measured session's */
} plan_opts;

enum { OPT_COSTS = 256, OPT_BUDGET, OPT_POLICY, OPT_EXECUTOR, OPT_VERIFY, OPT_FORCE };

static const mp_cli_opt plan_flags[] = {
    {"model", 'm', true, 'm', NULL},
    {"costs", 0, true, OPT_COSTS, NULL},
    {"budget", 0, true, OPT_BUDGET, NULL},
    {"output", 'o', true, 'o', NULL},
    {"force", 0, false, OPT_FORCE, NULL},
    {"policy", 0, true, OPT_POLICY, NULL},
    {"ctx-size", 'c', true, 'c', NULL},
    {"ctx", 0, true, 'c', NULL},
    {"threads", 't', true, 't', NULL},
    {"verify-tokens", 0, true, OPT_VERIFY, NULL},
    {"repetitions", 'r', true, 'r', NULL},
    {"executor", 0, true, OPT_EXECUTOR, NULL},
    {"help", 'h', false, 'h', NULL},
    {0},
};

/* 0 go on, 1 help shown, 2 usage error (said) */
static int parse_args(int argc, char **argv, plan_opts *o)
{
    *o = (plan_opts){.policy = "plan", .verify = 128, .reps = 3, .executor = "auto"};
    mp_cli c;
    mp_cli_init(&c, "plan", plan_flags, argc, argv);
    const char *v;
    for (int id; (id = mp_cli_next(&c, &v)) != MP_CLI_END;) {
        bool ok = true;
        char expect[64] = "";
        switch (id) {
        case MP_CLI_ERROR:
            return mp_cli_usage_error("plan", c.err.msg);
        case 'h':
            usage(stdout);
            return 1;
        case MP_CLI_POSITIONAL:
            if (o->trace) {
                fprintf(stderr, "moeplan plan: error: unexpected argument '%s' (see moeplan plan --help)\n", v);
                return 2;
            }
            o->trace = v;
            break;
        case OPT_FORCE: o->force = true; break;
        case 'm': o->model = v; break;
        case OPT_COSTS: o->costs = v; break;
        case OPT_BUDGET: o->budget = v; break;
        case 'o': o->out = v; break;
        case OPT_POLICY: o->policy = v; break;
        case OPT_EXECUTOR: o->executor = v; break;
        case 'c': ok = mp_parse_i64_said(v, 1, (int64_t)1 << 22, &o->ctx, expect, sizeof expect); break;
        case 't': ok = mp_parse_i64_said(v, 1, 1024, &o->threads, expect, sizeof expect); break;
        case OPT_VERIFY: ok = mp_parse_i64_said(v, 0, (int64_t)1 << 20, &o->verify, expect, sizeof expect); break;
        case 'r': ok = mp_parse_i64_said(v, 1, 100, &o->reps, expect, sizeof expect); break;
        }
        if (!ok) {
            fprintf(stderr, "moeplan plan: error: invalid value '%s' for %s: expected %s\n", v, c.given, expect);
            return 2;
        }
    }
    const int p = o->policy ? mp_sim_policy_from_name(o->policy) : -1;
    if (!o->trace || !o->model || !o->costs || !o->budget || !o->out) {
        fprintf(stderr, "moeplan plan: error: needs TRACE.db, -m MODEL, --costs, --budget and -o PROFILE.strp "
                        "(see moeplan plan --help)\n");
        return 2;
    }
    if (p < 0 || mp_sim_policy_is_online(p) || p == MP_POL_ALL_GPU || p == MP_POL_PROFILE) {
        fprintf(stderr, "moeplan plan: error: --policy '%s': expected a static policy that fits a budget (plan, "
                        "static-topn, static-equal, first-n-cpu, last-n-cpu, best-layers)\n", o->policy);
        return 2;
    }
    if (strchr(o->budget, ',')) {
        fprintf(stderr, "moeplan plan: error: --budget '%s': one size (simulate compares several)\n", o->budget);
        return 2;
    }
    mp_error perr;
    if (mp_parse_bytes(o->budget, &o->budget_bytes, &perr)) {
        fprintf(stderr, "moeplan plan: error: --budget: %s\n", perr.msg);
        return 2;
    }
    return 0;
}

/* What both simulations share: the trace's rows as decode steps, at the budget, for the model,
 * context and threads the check runs with. */
static void simulate_options(const plan_opts *o, mp_simulate_options *so)
{
    mp_simulate_options_init(so);
    so->traces[0] = o->trace;
    so->n_traces = 1;
    so->costs = o->costs;
    so->model = o->model;
    so->budgets[0] = o->budget_bytes;
    so->n_budgets = 1;
    so->as_decode = true;
    so->ctx = o->ctx;
    if (o->threads)
        so->threads = (int)o->threads;
}

/* 1. The profile, from the whole trace: the policy beside the baselines it must not lose to,
 * written to o->out (replaced only with --force). */
static void profile_options(const plan_opts *o, mp_simulate_options *so)
{
    simulate_options(o, so);
    const mp_sim_policy p = (mp_sim_policy)mp_sim_policy_from_name(o->policy);
    const mp_sim_policy beside[] = {MP_POL_FIRST_N_CPU, MP_POL_STATIC_TOPN, MP_POL_STATIC_EQUAL, MP_POL_ALL_CPU, p};
    for (size_t i = 0; i < sizeof beside / sizeof beside[0]; i++)
        so->policies[beside[i]] = true;
    so->profile_policy = p;
    so->profile = o->out;
    so->force = o->force;
}

/* 2. The prediction for the rows the check decodes, with the profile just written placed as the
 * runtime places it under the budget (policy profile) and its far routes decided from its table. */
static void check_options(const plan_opts *o, int64_t rows, mp_simulate_options *so)
{
    simulate_options(o, so);
    so->policies[MP_POL_PROFILE] = true;
    so->placement_profile = o->out;
    so->max_rows = rows;
}

/* Run one simulation into r: its notes on stderr, or its error; the exit status of a failure, 0 on
 * success. The check's simulation (after: the profile's, whose notes were said) says only the
 * notes that differ, as the check's. */
static int simulate(const mp_simulate_options *so, mp_simulate_result *r, const mp_simulate_result *after)
{
    mp_error err;
    const mp_status st = mp_simulate(so, r, &err);
    for (int i = 0; i < r->n_notes; i++) {
        bool said = false;
        for (int j = 0; after && j < after->n_notes; j++)
            said |= !strcmp(r->notes[i], after->notes[j]);
        if (!said)
            fprintf(stderr, "moeplan plan: note: %s%s\n", after ? "the check's rows: " : "", r->notes[i]);
    }
    if (!st)
        return MP_EXIT_OK;
    fprintf(stderr, "moeplan plan: error: %s\n", err.msg);
    return mp_simulate_refused(st, r) ? MP_EXIT_USAGE : MP_EXIT_FAILURE;
}

/* The check's GPU statistics cover its timed repetitions, as bench's rows do. */
static void check_progress(void *ctx, int rep, int reps)
{
    mp_gpu *g = mp_session_gpu(ctx);
    (void)reps;
    if (g && rep == 0)
        mp_gpu_stats_reset(g);
}

/* What the check measured: the median ms/token, the host's read bandwidth (mean of a probe before
 * and one after), whether the GPU executor ran, and its CPU experts' time per step over the
 * repetitions (ms; 0 when none ran on the CPU or the CPU executor ran). */
typedef struct check_result {
    double ms, gbs;
    double cpu_ms;
    int threads;
    bool gpu;
    char other_machine[400]; /* what differs from the machine the costs measured ("": the same or not known) */
} check_result;

/* The check: n decode steps after a 1-token prompt under the profile and the budget, the trace's
 * routing replayed, in the session production runs the profile in: the context and batch the
 * simulation sized the budget by (ctx, batch: its KV cache and scratch, and from a batch of
 * MP_GPU_COPY_MIN_ROWS rows the staging buffers with which the page-locked host copy and far
 * routes come). A session of n + 1 positions would run a tg16 check without them: its CPU experts
 * on the model's file pages, no far route, and more room for experts than the budget left. */
static mp_status measure(const plan_opts *o, int64_t n, int64_t ctx, int64_t batch, check_result *out,
                         char *placement, size_t cap, mp_error *err)
{
    mp_engine e = {.params = {.n_ctx = ctx > n + 1 ? ctx : n + 1, .n_batch = batch, .n_threads = (int)o->threads,
                              .knobs = o->knobs}};
    float *logits = NULL;
    double *samples = calloc((size_t)o->reps, sizeof *samples);
    mp_placement_opts po = {0};
    mp_status st = samples ? mp_engine_load(&e, o->model, err) : mp_fail(err, MP_ERR_NOMEM, "plan: out of memory");
    const char *const flags[][2] = {{"--profile", o->out}, {"--gpu-budget", o->budget}, {"--costs", o->costs},
                                    {"--executor", o->executor}};
    for (size_t i = 0; !st && i < sizeof flags / sizeof flags[0]; i++) {
        mp_status pst = MP_OK;
        mp_placement_opts_set(&po, flags[i][0], flags[i][1], &pst, err);
        st = pst;
    }
    if (!st && !(st = mp_engine_plan(&e, &po, o->trace, &mp_route_replay_ops, err))) {
        out->gpu = e.gpu;
        snprintf(placement, cap, "%s", e.placement.desc);
        st = mp_engine_start(&e, err);
    }
    if (!st && !(logits = malloc((size_t)e.model->hp.n_vocab * sizeof *logits)))
        st = mp_fail(err, MP_ERR_NOMEM, "plan: out of memory");
    if (!st) {
        const int threads = out->threads = mp_session_n_threads(e.session);
        const double before = mp_bench_host_read_gbs(mp_bench_host_probe_bytes(false), threads, 2);
        fprintf(stderr, "moeplan plan: check: tg%" PRId64 " x %" PRId64 " with the profile (%s), routing from %s\n", n,
                o->reps, out->gpu ? "GPU executor" : "CPU executor", o->trace);
        st = mp_bench_run_test(e.session, MP_BENCH_TG, n, 0, e.model->hp.n_vocab, (int)o->reps, logits, samples,
                               check_progress, e.session, err);
        if (st)
            mp_engine_step_error(&e, err);
        const double after = mp_bench_host_read_gbs(mp_bench_host_probe_bytes(false), threads, 2);
        out->gbs = (before + after) / 2;
    }
    if (!st) {
        mp_bench_stats bs; /* the median as bench reports it */
        mp_bench_stats_compute(samples, (int)o->reps, &bs);
        out->ms = bs.median > 0 ? 1000.0 / bs.median : 0;
        mp_gpu *g = mp_session_gpu(e.session);
        if (g) {
            mp_gpu_stats gs;
            mp_gpu_get_stats(g, &gs);
            out->cpu_ms = gs.steps > 0 ? (double)gs.cpu_expert_ns / (double)gs.steps / 1e6 : 0;
            snprintf(out->other_machine, sizeof out->other_machine, "%s", mp_gpu_costs_machine(g));
        }
    }
    char profile[512]; /* MP_MOE_CPU_PROFILE=1 */
    mp_engine_profile_line(&e, profile, sizeof profile);
    if (profile[0])
        fprintf(stderr, "moeplan plan: %s\n", profile);
    mp_engine_close(&e);
    free(logits);
    free(samples);
    return st;
}

/* The host's level during the check, as the simulator takes it (--host-read-gbs): the calibration's
 * level (mp_costs_host_level_gbs) scaled by the CPU experts' predicted time for the check's rows
 * over the time they took, route mix for route mix (pred_cpu_ms: the grid's CPU share of each
 * hybrid layer step the simulation charged), so that the CPU's costs scale by measured / predicted.
 * 0 when either time or the calibration's bandwidth is not known, or the grid was measured with
 * other threads than the check ran (its times are then another pool's). */
static double check_level_gbs(const mp_costs *c, const check_result *r, double pred_cpu_ms)
{
    return pred_cpu_ms > 0 && r->cpu_ms > 0 && c->host_read_gbs > 0 && r->threads == c->decode.threads
               ? mp_costs_host_level_gbs(c) * pred_cpu_ms / r->cpu_ms
               : 0;
}

void mp_plan_miss_cause(const mp_plan_miss *m, char *cause, size_t cap)
{
    const double cpu_ratio = m->pred_cpu_ms > 0 ? m->cpu_ms / m->pred_cpu_ms : 0;
    /* the prediction holds at the CPU experts' level, and their time moved */
    const bool cpu_moved = m->level_made && fabs(m->level_err) <= 10 && cpu_ratio > 0 && fabs(cpu_ratio - 1) > 0.1;
    const bool probe_held = m->by_window && m->cal_gbs > 0 && m->now_gbs > 0 &&
                            !mp_decide_host_moved(m->cal_gbs, true, m->now_gbs);
    if (m->cal_kernels && m->run_kernels)
        snprintf(cause, cap, "the CPU kernels: the calibration ran %s, this process %s (its CPU or MP_ISA; "
                 "calibrate again with the level the runs will use)", m->cal_kernels, m->run_kernels);
    else if (cpu_moved && probe_held)
        snprintf(cause, cap, "the CPU experts: they took %.3f ms/token where the calibration predicts %.3f for "
                 "the same routes while the host's memory read as calibrated (%.1f GB/s now, %.1f then): time "
                 "beyond their bytes, such as small experts' fixed cost per call or threads the system took "
                 "(check again later; `simulate --host-read-gbs %.1f` predicts for CPU experts at this speed)",
                 m->cpu_ms, m->pred_cpu_ms, m->now_gbs, m->cal_gbs, m->level_gbs);
    else if (cpu_moved)
        snprintf(cause, cap, "the host's memory: the check's CPU experts took %.3f ms/token where the "
                 "calibration predicts %.3f for the same routes (a busier or a quieter host: check again later, "
                 "or `simulate --host-read-gbs %.1f` predicts for the host as it is now)", m->cpu_ms, m->pred_cpu_ms,
                 m->level_gbs);
    else if (m->other_machine)
        snprintf(cause, cap, "another machine: the calibration measured %.200s (run `moeplan calibrate` on this "
                 "machine)", m->other_machine);
    else if (m->other_knobs)
        snprintf(cause, cap, "other knobs: %.200s (run with the calibration's values, or `moeplan calibrate` "
                 "under these)", m->other_knobs);
    else if (mp_decide_host_moved(m->cal_gbs, m->by_window, m->now_gbs))
        snprintf(cause, cap, "the host's read bandwidth differs from the calibration's (a busy host: check again "
                 "later, or `simulate --host-read-gbs` for the bandwidth it has)");
    else
        snprintf(cause, cap, "an uncosted path or a stale calibration (calibrate this model again)");
}

/* The check's measured speed beside the prediction and, where its CPU experts ran, beside the
 * prediction at the level they ran at (pred_level at the host level `level`, check_level_gbs, from
 * their measured time against pred_cpu, the predicted; 0: not made); a warning where the two do not
 * compare (a CPU executor) or differ by more than 10 % (with the likely cause: the CPU kernels when
 * the calibration's one-row kernels are not this process's; the host's memory when the CPU experts
 * took more than 10 % more or less time than predicted and the prediction at their level holds;
 * another machine when the calibration measured another CPU, CPU count or GPU
 * (mp_decide_other_machine); other knobs when the run's differ from the calibration's in one that
 * changes what calibrate times (mp_decide_other_knobs);
 * else the host's read bandwidth when the probes moved (a calibration by the same probe only); else an
 * uncosted path or a stale calibration). */
static void say_comparison(const plan_opts *o, int64_t n, double pred, double pred_cpu, double pred_level,
                           double level, const check_result *r, const mp_costs *c, const char *placement)
{
    const double meas = r->ms, cal = mp_costs_host_level_gbs(c);
    const double e = meas > 0 ? 100 * (pred - meas) / meas : 0;
    const double e_level = meas > 0 && pred_level > 0 ? 100 * (pred_level - meas) / meas : 0;
    const double cpu_ratio = pred_cpu > 0 ? r->cpu_ms / pred_cpu : 0; /* measured / predicted CPU time */
    printf("plan: measured %.3f ms/token (%.1f tok/s; %s; tg%" PRId64 ", median of %" PRId64 "): predicted %+.1f %%; "
           "host read %.1f GB/s now, %.1f at calibration%s\n", meas, meas > 0 ? 1000 / meas : 0.0, placement, n,
           o->reps, e, r->gbs, cal,
           c->host_read_window ? "" : " (by an older probe, which read 20-40 % low on a busy host: not comparable)");
    if (r->gpu && pred_level > 0)
        printf("plan: at the level the check's CPU experts ran (%.3f ms/token of CPU experts, %.3f predicted: the "
               "host's memory at %.2fx the calibration's): predicted %.3f ms/token, %+.1f %%\n", r->cpu_ms, pred_cpu,
               1 / cpu_ratio, pred_level, e_level);
    if (!r->gpu) /* a match within 10 % would be a coincidence, a miss says nothing about the plan */
        printf("plan: warning: the check ran on the CPU executor, the prediction is the GPU executor's: the two do "
               "not compare (run the check where a CUDA device is usable)\n");
    else if (fabs(e) > 10) {
        char cause[400], knobs[256];
        const bool kernels_differ = c->cpu_kernels[0] && strcmp(mp_kernels_isa_one_row(c->cpu_kernels),
                                                                mp_kernels_isa_one_row(mp_kernels_isa())) != 0;
        const mp_plan_miss miss = {
            .cal_kernels = kernels_differ ? c->cpu_kernels : NULL,
            .run_kernels = kernels_differ ? mp_kernels_isa() : NULL,
            .level_made = pred_level > 0, .level_err = e_level, .cpu_ms = r->cpu_ms, .pred_cpu_ms = pred_cpu,
            .level_gbs = level, .cal_gbs = cal, .now_gbs = r->gbs, .by_window = c->host_read_window,
            .other_machine = r->other_machine[0] ? r->other_machine : NULL,
            .other_knobs = mp_decide_other_knobs(&c->knobs, o->knobs, knobs, sizeof knobs) ? knobs : NULL,
        };
        mp_plan_miss_cause(&miss, cause, sizeof cause);
        printf("plan: warning: measured and predicted differ by %.1f %% (more than 10 %%): likely %s\n", fabs(e),
               cause);
    }
}

int mp_cmd_plan(int argc, char **argv, const mp_knobs *knobs)
{
    plan_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc == 1 ? 0 : 2;
    mp_error err;
    /* the rows the check decodes: the trace's first n + 1 (a 1-token prompt, then n steps) */
    mp_sim_trace t;
    mp_sim_trace_facts facts;
    const mp_sim_load_options lo = {.as_decode = true};
    if (mp_sim_load_trace(o.trace, &lo, &t, &facts, &err)) {
        fprintf(stderr, "moeplan plan: error: %s\n", err.msg);
        return 1;
    }
    const int64_t rows = (int64_t)t.n_steps;
    mp_sim_trace_free(&t);
    const int64_t n = o.verify < rows - 1 ? o.verify : rows - 1;
    if (o.verify > 0 && n < 1) {
        fprintf(stderr, "moeplan plan: error: %s: %" PRId64 " routing row(s): the check needs at least 2 (or "
                        "--verify-tokens 0)\n", o.trace, rows);
        return 1;
    }
    if (access(o.out, F_OK) == 0 && !o.force) {
        fprintf(stderr, "moeplan plan: error: %s exists (use --force to replace it)\n", o.out);
        return 1;
    }
    mp_knobs k = *knobs; /* with the cost file's tuned knobs where the environment left them */
    if (mp_knobs_take_costs(&k, "--costs", o.costs, &err)) {
        fprintf(stderr, "moeplan plan: error: %s\n", err.msg);
        return 1;
    }
    o.knobs = &k;
    mp_simulate_result *made = calloc(1, sizeof *made), *chk = calloc(1, sizeof *chk), *at = NULL; /* large */
    if (!made || !chk) {
        free(made), free(chk);
        fprintf(stderr, "moeplan plan: error: out of memory\n");
        return 1;
    }
    mp_simulate_options so;
    profile_options(&o, &so);
    if ((rc = simulate(&so, made, NULL)))
        goto done;
    const mp_sim_report rep = mp_simulate_report(made);
    mp_sim_report_table(stdout, &rep);
    printf("\n%s\n", made->profile_line);
    const mp_sim_policy policy = so.profile_policy;
    const double pred_all = mp_simulate_ms_per_token(made, 0, policy);
    printf("\nplan: %s at %s: predicted %.3f ms/token (%.1f tok/s) over the trace's %" PRId64 " rows as decode "
           "steps\n", o.policy, o.budget, pred_all, pred_all > 0 ? 1000 / pred_all : 0.0, rows);
    if (o.verify == 0)
        goto done;
    check_options(&o, n + 1, &so);
    if ((rc = simulate(&so, chk, made)))
        goto done;
    const double pred = mp_simulate_ms_per_token(chk, 0, MP_POL_PROFILE);
    printf("plan: the check's %" PRId64 " rows: predicted %.3f ms/token (%.1f tok/s)\n", n + 1, pred,
           pred > 0 ? 1000 / pred : 0.0);
    /* 3. the check */
    check_result cr = {0};
    char placement[400] = "";
    fflush(stdout);
    if (measure(&o, n, made->ctx, made->batch, &cr, placement, sizeof placement, &err)) {
        fprintf(stderr, "moeplan plan: error: check: %s\n", err.msg);
        rc = 1;
        goto done;
    }
    /* 4. the check's rows again at the level its CPU experts ran at (the host's then) */
    double pred_level = 0;
    const double pred_cpu = mp_simulate_cpu_ms_per_token(chk, 0, MP_POL_PROFILE);
    const double level = check_level_gbs(&made->costs, &cr, pred_cpu);
    if (cr.gpu && level > 0) {
        check_options(&o, n + 1, &so);
        so.cfg.host_read_gbs = level;
        if (!(at = calloc(1, sizeof *at))) {
            fprintf(stderr, "moeplan plan: error: out of memory\n");
            rc = 1;
            goto done;
        }
        if ((rc = simulate(&so, at, chk)))
            goto done;
        pred_level = mp_simulate_ms_per_token(at, 0, MP_POL_PROFILE);
    }
    say_comparison(&o, n, pred, pred_cpu, pred_level, level, &cr, &made->costs, placement);
done:
    mp_simulate_result_free(made);
    mp_simulate_result_free(chk);
    if (at)
        mp_simulate_result_free(at);
    free(made), free(chk), free(at);
    return rc;
}
