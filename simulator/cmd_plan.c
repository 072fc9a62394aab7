/* simulator/cmd_plan.c — `moeplan plan TRACE.db -m MODEL --costs costs.json --budget SIZE -o P.strp`:
 * the closed loop. The profile is made (simulate: the policy and the baselines it must not lose to,
 * every trace row replayed as a decode step), then checked: a short decode of the model under that
 * profile and budget, with the trace's routing replayed and the executor deciding its far routes
 * from the same cost file, measured as `bench` measures (one warm-up, then repetitions), and the
 * prediction for the same rows set beside it. A check on the CPU executor is said not to compare
 * (the prediction is the GPU executor's); on the GPU, a difference over 10 % gets one warning line
 * with the likely cause: the host's read bandwidth now against the calibration's, or else an
 * uncosted path or a stale calibration.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/args.h"
#include "simulator/commands.h"
#include "collector/route_replay.h"
#include "runtime/bench.h"
#include "runtime/costs.h"
#include "runtime/executor.h"
#include "runtime/gpu.h"
#include "base/input_file.h"
#include "base/json.h"
#include "base/numparse.h"
#include "runtime/placement.h"
#include "runtime/session.h"
#include "simulator/sim.h"
#include "simulator/sim_load.h"

#define HOST_PROBE_BYTES ((size_t)1 << 30)

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
            "  -t, --threads N       CPU threads (default: all online CPUs; the cost file's grid must\n"
            "                        have been measured on as many)\n"
            "  --verify-tokens N     decode steps of the check (default 128, at most the trace's rows\n"
            "                        - 1; 0: make the profile only)\n"
            "  -r, --repetitions R   timed repetitions of the check (default 3, 1..100)\n"
            "  --executor E          auto (default), gpu or cpu, as run's\n"
            "  -h, --help            show this help\n");
}

typedef struct plan_opts {
    const char *trace, *model, *costs, *budget, *out, *policy, *executor;
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
        case 'c': ok = mp_parse_i64(v, 1, (int64_t)1 << 22, &o->ctx); break;
        case 't': ok = mp_parse_i64(v, 1, 1024, &o->threads); break;
        case OPT_VERIFY: ok = mp_parse_i64(v, 0, (int64_t)1 << 20, &o->verify); break;
        case 'r': ok = mp_parse_i64(v, 1, 100, &o->reps); break;
        }
        if (!ok) {
            fprintf(stderr, "moeplan plan: error: invalid value '%s' for %s\n", v, c.given);
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
    return 0;
}

/* The predicted ms/token of policy in simulate's JSON report (in-sample and held-out together). */
static mp_status predicted_ms(const char *json_path, const char *policy, double *ms, mp_error *err)
{
    char *text;
    size_t len;
    mp_status st = mp_input_read_all(json_path, "simulate's report", (uint64_t)1 << 30, &text, &len, err);
    if (st)
        return st;
    mp_json_error je;
    cJSON *root = mp_json_parse_strict(text, len, &je);
    free(text);
    if (!root)
        return mp_fail(err, MP_ERR_FORMAT, "simulate's report %s: offset %zu: %s", json_path, je.offset, je.what);
    const cJSON *pols = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(root, "budgets"), 0), "policies");
    const cJSON *p;
    st = mp_fail(err, MP_ERR_INTERNAL, "simulate's report %s: no result for policy %s", json_path, policy);
    cJSON_ArrayForEach(p, pols) {
        const cJSON *name = cJSON_GetObjectItem(p, "policy");
        if (!cJSON_IsString(name) || strcmp(name->valuestring, policy))
            continue;
        const cJSON *in = cJSON_GetObjectItem(p, "in_sample"), *out = cJSON_GetObjectItem(p, "held_out");
        const cJSON *v[4] = {cJSON_GetObjectItem(in, "time_ns"), cJSON_GetObjectItem(out, "time_ns"),
                             cJSON_GetObjectItem(in, "tokens"), cJSON_GetObjectItem(out, "tokens")};
        bool ok = true;
        for (int i = 0; i < 4; i++)
            ok &= cJSON_IsNumber(v[i]);
        if (!ok) {
            st = mp_fail(err, MP_ERR_INTERNAL, "simulate's report %s: policy %s: expected in_sample and held_out "
                         "time_ns and tokens", json_path, policy);
            break;
        }
        const double t = v[0]->valuedouble + v[1]->valuedouble, n = v[2]->valuedouble + v[3]->valuedouble;
        *ms = n > 0 ? t / n / 1e6 : 0;
        st = MP_OK;
        break;
    }
    cJSON_Delete(root);
    return st;
}

/* The check: n decode steps after a 1-token prompt under the profile and the budget, the trace's
 * routing replayed; *ms the median ms/token, *gbs the host's read bandwidth (mean of a probe before
 * and one after), *gpu whether the GPU executor ran. */
static mp_status measure(const plan_opts *o, int64_t n, double *ms, double *gbs, bool *gpu, char *placement,
                         size_t cap, mp_error *err)
{
    mp_model *m = NULL;
    mp_session *s = NULL;
    mp_placement pl = {0};
    void *replay = NULL;
    mp_route_source src;
    float *logits = NULL;
    double *samples = calloc((size_t)o->reps, sizeof *samples);
    mp_placement_opts po = {0};
    mp_status st = samples ? mp_model_load(o->model, &m, err) : mp_fail(err, MP_ERR_NOMEM, "plan: out of memory");
    const char *const flags[][2] = {{"--profile", o->out}, {"--gpu-budget", o->budget}, {"--costs", o->costs},
                                    {"--executor", o->executor}};
    for (size_t i = 0; !st && i < sizeof flags / sizeof flags[0]; i++) {
        mp_status pst = MP_OK;
        mp_placement_opts_set(&po, flags[i][0], flags[i][1], &pst, err);
        st = pst;
    }
    mp_session_params sp = {.n_ctx = n + 1, .n_threads = (int)o->threads, .knobs = o->knobs};
    if (!st)
        st = mp_route_replay_ops.open(o->trace, m->hp.n_layer, m->hp.n_expert, m->hp.n_expert_used, &replay, &src,
                                      err);
    if (!st) {
        sp.route_src = &src;
        st = mp_executor_plan(m, po.executor, &po, &sp, &pl, gpu, err);
    }
    if (!st) {
        sp.placement = *gpu ? &pl : NULL;
        snprintf(placement, cap, "%s", pl.desc);
        st = mp_session_new(m, &sp, &s, err);
    }
    if (!st && !(logits = malloc((size_t)m->hp.n_vocab * sizeof *logits)))
        st = mp_fail(err, MP_ERR_NOMEM, "plan: out of memory");
    if (!st) {
        const int threads = mp_session_n_threads(s);
        const double before = mp_bench_host_read_gbs(HOST_PROBE_BYTES, threads, 2);
        fprintf(stderr, "moeplan plan: check: tg%" PRId64 " x %" PRId64 " with the profile (%s), routing from %s\n", n,
                o->reps, *gpu ? "GPU executor" : "CPU executor", o->trace);
        st = mp_bench_run_test(s, MP_BENCH_TG, n, 0, m->hp.n_vocab, (int)o->reps, logits, samples, NULL, NULL, err);
        if (st && replay && mp_route_replay_ops.error(replay)->code) /* the source's own reason */
            *err = *mp_route_replay_ops.error(replay);
        const double after = mp_bench_host_read_gbs(HOST_PROBE_BYTES, threads, 2);
        *gbs = (before + after) / 2;
    }
    if (!st) {
        mp_bench_stats bs; /* the median as bench reports it */
        mp_bench_stats_compute(samples, (int)o->reps, &bs);
        *ms = bs.median > 0 ? 1000.0 / bs.median : 0;
    }
    mp_session_free(s);
    mp_placement_free(&pl);
    if (replay)
        mp_route_replay_ops.close(replay);
    mp_model_free(m);
    free(logits);
    free(samples);
    return st;
}

int mp_cmd_plan(int argc, char **argv, const mp_knobs *knobs)
{
    plan_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc == 1 ? 0 : 2;
    o.knobs = knobs;
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
    char json_path[] = "/tmp/moeplan-plan-XXXXXX";
    const int fd = mkstemp(json_path);
    if (fd < 0) {
        fprintf(stderr, "moeplan plan: error: a temporary file in /tmp: %s\n", strerror(errno));
        return 1;
    }
    close(fd);
    unlink(json_path); /* simulate writes it through its own temporary and rename */
    /* 1. the profile, from the whole trace: the policy beside the baselines it must not lose to */
    char policies[160], max_rows[32], ctx[32], threads[32];
    snprintf(policies, sizeof policies, "first-n-cpu,static-topn,static-equal,all-cpu,%s", o.policy);
    snprintf(max_rows, sizeof max_rows, "%" PRId64, n + 1);
    snprintf(ctx, sizeof ctx, "%" PRId64, o.ctx);
    snprintf(threads, sizeof threads, "%" PRId64, o.threads);
    const char *sargv[32] = {"simulate", o.trace, "--costs", o.costs, "-m", o.model, "--budget", o.budget,
                             "--as-decode", "--json", json_path};
    int sargc = 11;
    if (o.ctx)
        sargv[sargc++] = "--ctx-size", sargv[sargc++] = ctx;
    if (o.threads)
        sargv[sargc++] = "--threads", sargv[sargc++] = threads;
    const int common = sargc;
    const char *make[] = {"--policy", policies, "--profile-policy", o.policy, "--emit-profile", o.out};
    for (size_t i = 0; i < sizeof make / sizeof make[0]; i++)
        sargv[sargc++] = make[i];
    if (o.force)
        sargv[sargc++] = "--force"; /* simulate replaces an existing profile only with it */
    rc = mp_cmd_simulate(sargc, (char **)sargv);
    double pred_all = 0;
    mp_status pst = rc ? MP_ERR_ARG : predicted_ms(json_path, o.policy, &pred_all, &err);
    unlink(json_path);
    if (rc)
        return rc;
    if (pst) {
        fprintf(stderr, "moeplan plan: error: %s\n", err.msg);
        return 1;
    }
    printf("\nplan: %s at %s: predicted %.3f ms/token (%.1f tok/s) over the trace's %" PRId64 " rows as decode "
           "steps\n", o.policy, o.budget, pred_all, pred_all > 0 ? 1000 / pred_all : 0.0, rows);
    if (o.verify == 0)
        return 0;
    /* the prediction for the rows the check decodes, with the profile just written placed as the
     * runtime places it under the budget (policy profile) and its far routes decided from its table */
    sargc = common;
    const char *check[] = {"--policy", "profile", "--placement-profile", o.out, "--max-rows", max_rows};
    for (size_t i = 0; i < sizeof check / sizeof check[0]; i++)
        sargv[sargc++] = check[i];
    fflush(stdout);
    const int saved = dup(STDOUT_FILENO), null = open("/dev/null", O_WRONLY);
    if (saved < 0 || null < 0 || dup2(null, STDOUT_FILENO) < 0) { /* its table would repeat the one above */
        fprintf(stderr, "moeplan plan: error: redirecting the second simulation's table: %s\n", strerror(errno));
        return 1;
    }
    close(null);
    rc = mp_cmd_simulate(sargc, (char **)sargv);
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    double pred = 0;
    pst = rc ? MP_ERR_ARG : predicted_ms(json_path, "profile", &pred, &err);
    unlink(json_path);
    if (rc)
        return rc;
    if (pst) {
        fprintf(stderr, "moeplan plan: error: %s\n", err.msg);
        return 1;
    }
    printf("plan: the check's %" PRId64 " rows: predicted %.3f ms/token (%.1f tok/s)\n", n + 1, pred,
           pred > 0 ? 1000 / pred : 0.0);
    /* 2. the check */
    double meas = 0, gbs = 0;
    bool gpu = false;
    char placement[400] = "";
    if (measure(&o, n, &meas, &gbs, &gpu, placement, sizeof placement, &err)) {
        fprintf(stderr, "moeplan plan: error: check: %s\n", err.msg);
        return 1;
    }
    mp_costs costs;
    double cal = 0;
    if (!mp_costs_load(o.costs, &costs, &err)) {
        cal = costs.host_read_gbs;
        mp_costs_free(&costs);
    }
    const double e = meas > 0 ? 100 * (pred - meas) / meas : 0;
    printf("plan: measured %.3f ms/token (%.1f tok/s; %s; tg%" PRId64 ", median of %" PRId64 "): predicted %+.1f %%; "
           "host read %.1f GB/s now, %.1f at calibration\n", meas, meas > 0 ? 1000 / meas : 0.0, placement, n, o.reps,
           e, gbs, cal);
    if (!gpu) /* a match within 10 % would be a coincidence, a miss says nothing about the plan */
        printf("plan: warning: the check ran on the CPU executor, the prediction is the GPU executor's: the two do "
               "not compare (run the check where a CUDA device is usable)\n");
    else if (fabs(e) > 10) {
        const char *cause = cal > 0 && fabs(gbs / cal - 1) > 0.1
                                ? "the host's read bandwidth differs from the calibration's (a busy host: check "
                                  "again later, or `simulate --host-read-gbs` for the bandwidth it has)"
                                : "an uncosted path or a stale calibration (calibrate this model again)";
        printf("plan: warning: measured and predicted differ by %.1f %% (more than 10 %%): likely %s\n", fabs(e),
               cause);
    }
    return 0;
}
