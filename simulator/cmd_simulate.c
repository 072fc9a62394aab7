/* simulator/cmd_simulate.c — `moeplan simulate TRACE.db --costs costs.json --budget 8GiB,...`:
 * the command line into mp_simulate_options, the simulation (simulator/simulate.h: it loads,
 * replays every chosen policy at every budget plus the all-GPU and all-CPU baselines, and writes
 * the JSON, SVG, STRP profile and manifest asked for), then what it found printed: the notes on
 * stderr, the table and the profile written on stdout.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/args.h"
#include "base/progress.h"
#include "simulator/commands.h"
#include "base/numparse.h"
#include "runtime/placement.h"
#include "simulator/report.h"
#include "simulator/simulate.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: moeplan simulate TRACE.db [TRACE.db...] --costs costs.json --budget SIZE[,SIZE...] [options]\n\n"
            "Replay the trace's routing under each GPU memory budget and placement policy with the\n"
            "cost model, and predict hit rates, transfers and decode speed (docs/simulator.md).\n"
            "Several traces of one model (collected on several machines) replay as one, in the order\n"
            "given, their requests distinct (docs/collect.md).\n\n"
            "  --costs FILE          cost model (schemas/costs.schema.json, from moeplan calibrate)\n"
            "  --budget LIST         GPU memory for the model, e.g. 8GiB,16GiB,24GiB (B, KB MB GB TB,\n"
            "                        KiB MiB GiB TiB, case-insensitive): the same meaning as\n"
            "                        run/bench/collect --gpu-budget, so a profile made for B runs\n"
            "                        under --gpu-budget B: weights + KV cache for --ctx-size +\n"
            "                        scratch for --batch-size + resident experts\n"
            "  -m, --model GGUF      the traced model: the budget's fixed part (weights, KV cache,\n"
            "                        scratch), expert sizes, and a check that its shape is the trace's\n"
            "  -c, --ctx-size, --ctx N  context the runtime will hold (default: the runtime's, the\n"
            "                        model's trained context up to 4096)\n"
            "  -b, --batch-size N    rows per prefill chunk (default: the runtime's, 512 up to --ctx-size)\n"
            "  --non-expert-bytes N  the GPU bytes besides the expert pool, instead of -m's estimate\n"
            "                        (weights + KV cache + scratch, as bench reports gpu_fixed_bytes)\n"
            "  --policy LIST         policies, comma-separated, or 'all' (default): %s",
            "");
    for (int p = 0; p < MP_POL_COUNT; p++)
        fprintf(f, "%s%s", p ? ", " : "", mp_sim_policy_name(p));
    fprintf(f,
            "\n  --train-frac F        share of requests (in trace order) used to plan (default 0.7, and\n"
            "                        at least one request); the rest is held out and every result is\n"
            "                        shown for both parts\n"
            "  --as-decode           replay every row as its own one-row step (prefill routing as decode)\n"
            "  --max-rows N          replay only the trace's first N routing rows (per layer)\n"
            "  --non-moe costs|trace non-MoE time per step (attention, norms, router, head): the cost\n"
            "                        file's curve by the step's rows (costs, default), or the trace's\n"
            "                        measured step duration minus its MoE time from the timing table\n"
            "                        (trace; with --as-decode a prefill step's rows each take the median\n"
            "                        of the decode steps); a trace without durations or timing is refused\n"
            "  --expert QUANT        choose the cost entries of this quant type (default: the trace's,\n"
            "                        or the cost file's only GPU entry)\n"
            "  -t, --threads N       CPU entry with N threads (default: the most threads in the file)\n"
            "  --pageable            host buffers are pageable (default pinned)\n"
            "  --host-read-gbs GBS   predict for a host that reads its memory at GBS GB/s now (a busy or\n"
            "                        another host; default: as calibrated): the CPU's expert costs scale\n"
            "                        by the calibration's level (host_read.level_gbs, else gbs) / GBS\n"
            "  --bus-gbs GBS         predict for a GPU link that moves GBS GB/s host to device now (another\n"
            "                        process's copies on it, a narrower slot; default: as calibrated): the\n"
            "                        experts' copies and the far routes' reads scale by the calibration's\n"
            "                        best pinned copy / GBS\n"
            "  --alpha A --beta B --epsilon E   decayed LFU (defaults 0.9, 1, 0.1; alpha also cost's memory)\n"
            "  --window W            windowed LFU: invocations per layer (default 64)\n"
            "  --adaptive POLICY     replay every static policy again with the runtime's adaptive expert\n"
            "                        tier beside its placement: lru, lfu, decayed-lfu, window-lfu or cost\n"
            "                        (runtime/tier.h, with the runtime's parameters), its slots taken from\n"
            "                        the budget's; a step's admissions are copied when the step ends\n"
            "  --adaptive-slots N    the tier's size (needs --adaptive): N expert slots, or P%% of each\n"
            "                        budget's (default 10%%, as run/bench/collect): the room the static\n"
            "                        placement leaves, then its lowest-ranked experts outside whole layers\n"
            "  --adaptive-inflight N the tier's copies in flight at once (default 2 x top-k)\n"
            "  --json OUT.json       write every result as JSON\n"
            "  --svg OUT.svg         write a chart of tok/s by budget and policy\n"
            "  --force               replace existing output files (never an input)\n"
            "  --emit-profile OUT.strp  write the STRP profile (+ OUT.strp.json manifest) of\n"
            "                        --profile-policy (default plan) at the first budget\n"
            "  --profile-policy P    a static policy for --emit-profile\n"
            "  --placement-profile P.strp  also replay this STRP profile's placement (policy\n"
            "                        'profile': its resident set, or as much of it as the budget's\n"
            "                        slots hold), e.g. a profile made from another trace\n"
            "  --emit-llamacpp       print, per budget, the llama-server command (needs -m) whose -ot or\n"
            "                        --n-cpu-moe keeps the best whole layers' experts on the GPU under the\n"
            "                        budget less llama.cpp's weights, KV cache and compute buffers, with its\n"
            "                        predicted ms/token beside the per-expert plan's\n"
            "  --llamacpp-compute-buffer SIZE  llama.cpp's compute buffers for --emit-llamacpp as\n"
            "                        llama-server printed them (\"CUDA0 compute buffer size\"),\n"
            "                        instead of the estimate (an upper bound)\n"
            "  --sensitivity         re-rank the policies with each cost x0.8 and x1.2\n"
            "  --sweep PARAM=V,V,..  run one online policy over values of a parameter at every\n"
            "                        budget: alpha, beta, epsilon (decayed-lfu) or window\n"
            "                        (window-lfu); e.g. --sweep alpha=0.5,0.8,0.9,0.99\n"
            "  --progress            a progress line on stderr (decisions and replays done, ETA) even\n"
            "                        when stderr is not a terminal (then a line every 10 s and the last)\n"
            "  --no-progress         no progress line, not even on a terminal\n");
}

static int parse_num(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}


/* --budget LIST: comma-separated sizes in the runtime's grammar (mp_parse_bytes, as --gpu-budget);
 * an empty item is an error. Returns 0, or 2 after saying what is wrong. */
static int parse_budgets(const char *v, mp_simulate_options *o)
{
    const char *p = v;
    for (;;) {
        const char *comma = strchr(p, ',');
        const size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[64];
        mp_error perr;
        if (len == 0 || len >= sizeof item) {
            fprintf(stderr, "moeplan simulate: error: --budget '%s': %s at offset %zu: expected SIZE[,SIZE...] like "
                            "8GiB,16GiB\n", v, len ? "an item too long" : "an empty item", (size_t)(p - v));
            return 2;
        }
        memcpy(item, p, len);
        item[len] = 0;
        if (o->n_budgets == MP_SIMULATE_MAX_BUDGETS) {
            fprintf(stderr, "moeplan simulate: error: --budget '%s': more than %d sizes\n", v, MP_SIMULATE_MAX_BUDGETS);
            return 2;
        }
        if (mp_parse_bytes(item, &o->budgets[o->n_budgets], &perr)) {
            fprintf(stderr, "moeplan simulate: error: --budget: %s\n", perr.msg);
            return 2;
        }
        o->n_budgets++;
        if (!comma)
            return 0;
        p = comma + 1;
    }
}

/* --sweep PARAM=V1,V2,...: the parameter, its policy, and values checked as --alpha etc. are */
static int parse_sweep(const char *v, mp_sim_sweep *sw)
{
    static const char *const params[] = {"alpha", "beta", "epsilon", "window"};
    const char *eq = strchr(v, '=');
    size_t plen = eq ? (size_t)(eq - v) : 0;
    int which = -1;
    for (int i = 0; eq && i < 4; i++)
        if (strlen(params[i]) == plen && !strncmp(v, params[i], plen))
            which = i;
    if (which < 0) {
        fprintf(stderr, "moeplan simulate: error: --sweep '%s': expected PARAM=V1,V2,... with PARAM alpha, beta, "
                        "epsilon (decayed-lfu) or window (window-lfu)\n", v);
        return 2;
    }
    sw->param = params[which];
    sw->policy = which == 3 ? MP_POL_WINDOW_LFU : MP_POL_DECAYED_LFU;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", eq + 1);
    for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        double num = NAN;
        const bool parsed = !parse_num(tok, &num);
        const char *range = mp_sim_param_range(sw->param, num);
        if (!parsed || range || sw->n_values == MP_SIM_SWEEP_MAX) {
            fprintf(stderr, "moeplan simulate: error: --sweep %s: value '%s': expected %s (at most %d values)\n",
                    sw->param, tok, range ? range : mp_sim_param_range(sw->param, NAN), MP_SIM_SWEEP_MAX);
            return 2;
        }
        sw->values[sw->n_values++] = num;
    }
    if (!sw->n_values) {
        fprintf(stderr, "moeplan simulate: error: --sweep %s: no values\n", sw->param);
        return 2;
    }
    return -1;
}

/* --policy or --profile-policy (flag) LIST: every item a policy by name ("all" too for --policy).
 * Returns 0, or 2 after saying what is wrong. */
static int parse_policies(const char *a, const char *v, mp_simulate_options *o, bool *any_policy)
{
    char buf[1024];
    if ((size_t)snprintf(buf, sizeof buf, "%s", v) >= sizeof buf) {
        fprintf(stderr, "moeplan simulate: error: %s: a list longer than %zu characters\n", a, sizeof buf - 1);
        return 2;
    }
    for (char *tok = buf, *next; tok; tok = next) { /* every item, empty ones too */
        next = strchr(tok, ',');
        if (next)
            *next++ = 0;
        if (!*tok) {
            fprintf(stderr, "moeplan simulate: error: %s '%s': an empty item at offset %zu: expected "
                            "P[,P...] (see moeplan simulate --help)\n", a, v, (size_t)(tok - buf));
            return 2;
        }
        int p = mp_sim_policy_from_name(tok);
        if (!strcmp(a, "--policy") && !strcmp(tok, "all")) {
            for (int q = 0; q < MP_POL_COUNT; q++)
                o->policies[q] = q != MP_POL_PROFILE; /* with --placement-profile only */
            *any_policy = true;
            continue;
        }
        if (p < 0) {
            fprintf(stderr, "moeplan simulate: error: %s '%s': unknown policy (see moeplan simulate --help)\n", a, tok);
            return 2;
        }
        if (!strcmp(a, "--policy")) {
            o->policies[p] = true;
            *any_policy = true;
        } else {
            mp_error perr;
            if (mp_simulate_check_profile_policy(p, &perr)) {
                fprintf(stderr, "moeplan simulate: error: %s\n", perr.msg);
                return 2;
            }
            o->profile_policy = p;
        }
    }
    return 0;
}

/* --train-frac, --alpha, --beta, --epsilon, --window or --threads (flag) V: a number in the flag's
 * range. Returns 0, or 2 after saying what is wrong. */
static int parse_number(const char *a, const char *v, mp_simulate_options *o)
{
    mp_sim_config *cfg = &o->cfg;
    double num;
    if (parse_num(v, &num)) {
        fprintf(stderr, "moeplan simulate: error: %s '%s': expected a number\n", a, v);
        return 2;
    }
    if (!strcmp(a, "--train-frac")) {
        if (!(num > 0 && num <= 1)) {
            fprintf(stderr, "moeplan simulate: error: --train-frac %s: expected a share > 0 and <= 1 "
                            "(the static policies are planned from it)\n", v);
            return 2;
        }
        cfg->train_frac = num;
    } else if (!strcmp(a, "--alpha")) {
        cfg->alpha = num;
    } else if (!strcmp(a, "--beta")) {
        cfg->beta = num;
    } else if (!strcmp(a, "--epsilon")) {
        cfg->epsilon = num;
    } else if (!strcmp(a, "--window")) {
        if (num < 1 || num > 65536 || num != floor(num)) {
            fprintf(stderr, "moeplan simulate: error: --window %s: expected an integer 1..65536\n", v);
            return 2;
        }
        cfg->window = (uint32_t)num;
    } else {
        if (num < 1 || num > 4096 || num != floor(num)) {
            fprintf(stderr, "moeplan simulate: error: --threads %s: expected an integer 1..4096\n", v);
            return 2;
        }
        o->threads = (int)num;
    }
    return 0;
}

static const mp_cli_opt simulate_flags[] = {
    {"costs", 0, true, 1, NULL}, {"budget", 0, true, 1, NULL}, {"model", 'm', true, 1, NULL},
    {"ctx-size", 'c', true, 1, NULL}, {"ctx", 0, true, 1, NULL}, {"batch-size", 'b', true, 1, NULL},
    {"non-expert-bytes", 0, true, 1, NULL}, {"policy", 0, true, 1, NULL},
    {"train-frac", 0, true, 1, NULL}, {"as-decode", 0, false, 1, NULL},
    {"max-rows", 0, true, 1, NULL}, {"non-moe", 0, true, 1, NULL}, {"expert", 0, true, 1, NULL},
    {"threads", 't', true, 1, NULL}, {"pageable", 0, false, 1, NULL},
    {"host-read-gbs", 0, true, 1, NULL}, {"bus-gbs", 0, true, 1, NULL},
    {"alpha", 0, true, 1, NULL}, {"beta", 0, true, 1, NULL},
    {"epsilon", 0, true, 1, NULL}, {"window", 0, true, 1, NULL}, {"json", 0, true, 1, NULL},
    {"svg", 0, true, 1, NULL}, {"force", 0, false, 1, NULL}, {"emit-profile", 0, true, 1, NULL},
    {"profile-policy", 0, true, 1, NULL}, {"placement-profile", 0, true, 1, NULL},
    {"emit-llamacpp", 0, false, 1, NULL}, {"sensitivity", 0, false, 1, NULL},
    {"llamacpp-compute-buffer", 0, true, 1, NULL},
    {"sweep", 0, true, 1, NULL}, {"progress", 0, false, 1, NULL}, {"no-progress", 0, false, 1, NULL},
    {"adaptive", 0, true, 1, NULL}, {"adaptive-slots", 0, true, 1, NULL}, {"adaptive-inflight", 0, true, 1, NULL},
    {"help", 'h', false, 'h', NULL}, {0},
};

/* ---- the progress line (base/progress.h) ----
 * Drawn here, by the command; the library only counts (mp_simulate_options.progress): the
 * decisions of every replay against their total, with the replay in hand in the detail. */
static void on_progress(void *user, const mp_simulate_progress *p)
{
    mp_progress *pl = user;
    if (pl->total != (int64_t)p->decisions_total)
        mp_progress_set_total(pl, (int64_t)p->decisions_total);
    mp_progress_detail(pl, "replay %d/%d", p->replays, p->replays_total);
    mp_progress_set(pl, (int64_t)p->decisions);
}

/* The command line into o (mp_simulate checks how the options go together). Returns -1 to go on,
 * or the exit status: 0 after --help, 2 after saying what is wrong. */
static int parse_args(int argc, char **argv, mp_simulate_options *o, mp_progress_mode *progress)
{
    mp_simulate_options_init(o);
    *progress = MP_PROGRESS_AUTO;
    mp_sim_config *cfg = &o->cfg;
    bool any_policy = false;
    mp_cli c;
    mp_cli_init(&c, "simulate", simulate_flags, argc, argv);
    const char *v;
    for (int id; (id = mp_cli_next(&c, &v)) != MP_CLI_END;) {
        if (id == MP_CLI_ERROR)
            return mp_cli_usage_error("simulate", c.err.msg);
        if (id == 'h') {
            usage(stdout);
            return MP_EXIT_OK;
        }
        if (id == MP_CLI_POSITIONAL) {
            if (o->n_traces == MP_SIMULATE_MAX_TRACES) {
                fprintf(stderr, "moeplan simulate: error: '%s': more than %d traces\n", v, MP_SIMULATE_MAX_TRACES);
                return 2;
            }
            o->traces[o->n_traces++] = v;
            continue;
        }
        /* the option by its canonical spelling ("--ctx-size" for -c and --ctx too) */
        const char *a = c.flag;
        double num;
        if (!strcmp(a, "--costs")) {
            o->costs = v;
        } else if (!strcmp(a, "--json")) {
            o->json = v;
        } else if (!strcmp(a, "--svg")) {
            o->svg = v;
        } else if (!strcmp(a, "--emit-profile")) {
            o->profile = v;
        } else if (!strcmp(a, "--placement-profile")) {
            o->placement_profile = v;
        } else if (!strcmp(a, "--expert")) {
            o->expert_quant = v;
        } else if (!strcmp(a, "--non-moe")) {
            if (!strcmp(v, "costs")) {
                cfg->non_moe_source = MP_NON_MOE_COSTS;
            } else if (!strcmp(v, "trace")) {
                cfg->non_moe_source = MP_NON_MOE_TRACE;
            } else {
                fprintf(stderr, "moeplan simulate: error: --non-moe '%s': expected costs or trace\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--budget")) {
            if (parse_budgets(v, o))
                return 2;
        } else if (!strcmp(a, "--sweep")) {
            if (o->sweep.n_values) {
                fprintf(stderr, "moeplan simulate: error: --sweep given twice: one parameter per run\n");
                return 2;
            }
            int r = parse_sweep(v, &o->sweep);
            if (r >= 0)
                return r;
        } else if (!strcmp(a, "--model")) {
            o->model = v;
        } else if (!strcmp(a, "--non-expert-bytes")) {
            o->non_expert_given = true;
            mp_error perr;
            if (mp_parse_bytes(v, &cfg->non_expert_bytes, &perr)) {
                fprintf(stderr, "moeplan simulate: error: --non-expert-bytes: %s\n", perr.msg);
                return 2;
            }
        } else if (!strcmp(a, "--ctx-size") || !strcmp(a, "--batch-size")) {
            const bool ctx = !strcmp(a, "--ctx-size");
            if (!mp_parse_i64(v, 1, ctx ? (int64_t)1 << 22 : 65536, ctx ? &o->ctx : &o->batch)) {
                fprintf(stderr, "moeplan simulate: error: %s '%s': expected an integer 1..%d\n", c.given, v,
                        ctx ? 1 << 22 : 65536);
                return 2;
            }
        } else if (!strcmp(a, "--policy") || !strcmp(a, "--profile-policy")) {
            if (parse_policies(a, v, o, &any_policy))
                return 2;
        } else if (!strcmp(a, "--adaptive")) {
            mp_error perr;
            if (o->adaptive != MP_TIER_OFF || mp_tier_policy_parse(v, &o->adaptive, &perr)) {
                fprintf(stderr, "moeplan simulate: error: --adaptive: %s\n",
                        o->adaptive != MP_TIER_OFF ? "given twice: one tier per run" : perr.msg);
                return 2;
            }
        } else if (!strcmp(a, "--adaptive-slots")) {
            mp_error perr;
            if (mp_tier_size_parse(v, &o->adaptive_slots, &o->adaptive_share, &perr)) {
                fprintf(stderr, "moeplan simulate: error: %s\n", perr.msg);
                return 2;
            }
        } else if (!strcmp(a, "--adaptive-inflight")) {
            mp_error perr;
            if (mp_tier_inflight_parse(v, &o->adaptive_inflight, &perr)) {
                fprintf(stderr, "moeplan simulate: error: %s\n", perr.msg);
                return 2;
            }
        } else if (!strcmp(a, "--max-rows")) {
            if (!mp_parse_i64(v, 1, INT64_MAX, &o->max_rows)) {
                fprintf(stderr, "moeplan simulate: error: --max-rows '%s': expected a row count >= 1\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--host-read-gbs")) {
            if (parse_num(v, &num) || !(num > 0) || num > 1e6) {
                fprintf(stderr, "moeplan simulate: error: --host-read-gbs '%s': expected a bandwidth > 0 in GB/s\n", v);
                return 2;
            }
            cfg->host_read_gbs = num;
        } else if (!strcmp(a, "--bus-gbs")) {
            if (parse_num(v, &num) || !(num > 0) || num > 1e6) {
                fprintf(stderr, "moeplan simulate: error: --bus-gbs '%s': expected a bandwidth > 0 in GB/s\n", v);
                return 2;
            }
            cfg->bus_gbs = num;
        } else if (!strcmp(a, "--train-frac") || !strcmp(a, "--alpha") || !strcmp(a, "--beta") ||
                   !strcmp(a, "--epsilon") || !strcmp(a, "--window") || !strcmp(a, "--threads")) {
            if (parse_number(a, v, o))
                return 2;
        } else if (!strcmp(a, "--as-decode")) {
            o->as_decode = true;
        } else if (!strcmp(a, "--pageable")) {
            cfg->pageable = true;
        } else if (!strcmp(a, "--emit-llamacpp")) {
            o->llamacpp = true;
        } else if (!strcmp(a, "--llamacpp-compute-buffer")) {
            mp_error perr;
            if (mp_parse_bytes(v, &o->llamacpp_compute_bytes, &perr)) {
                fprintf(stderr, "moeplan simulate: error: --llamacpp-compute-buffer: %s\n", perr.msg);
                return 2;
            }
        } else if (!strcmp(a, "--sensitivity")) {
            o->sensitivity = true;
        } else if (!strcmp(a, "--force")) {
            o->force = true;
        } else if (!strcmp(a, "--progress") || !strcmp(a, "--no-progress")) {
            *progress = !strcmp(a, "--progress") ? MP_PROGRESS_ON : MP_PROGRESS_OFF;
        } else {
            fprintf(stderr, "moeplan simulate: error: internal: option %s not handled\n", a);
            return MP_EXIT_FAILURE;
        }
    }
    if (!any_policy)
        for (int q = 0; q < MP_POL_COUNT; q++)
            o->policies[q] = q != MP_POL_PROFILE; /* with --placement-profile only */
    return -1; /* go on */
}

/* What the simulation found: the table, and the profile it wrote, on stdout. */
static void print_result(const mp_simulate_result *r)
{
    const mp_sim_report rep = mp_simulate_report(r);
    mp_sim_report_table(stdout, &rep);
    if (r->profile_line[0])
        printf("\n%s\n", r->profile_line);
}

int mp_cmd_simulate(int argc, char **argv)
{
    mp_simulate_options o;
    mp_progress_mode mode;
    const int rc = parse_args(argc, argv, &o, &mode);
    if (rc >= 0)
        return rc;
    mp_error err;
    mp_simulate_result *r = malloc(sizeof *r); /* large: every policy's results at every budget */
    if (!r) {
        fprintf(stderr, "moeplan simulate: error: out of memory\n");
        return 1;
    }
    mp_progress pl;
    mp_progress_begin(&pl, mp_progress_stream(mode), "simulate", "decisions", 0);
    if (pl.out) {
        o.progress = on_progress;
        o.progress_user = &pl;
    }
    const mp_status st = mp_simulate(&o, r, &err);
    mp_progress_end(&pl);
    for (int i = 0; i < r->n_notes; i++) /* what the replays rest on, even when a later step failed */
        fprintf(stderr, "moeplan simulate: note: %s\n", r->notes[i]);
    if (st)
        fprintf(stderr, "moeplan simulate: error: %s\n", err.msg);
    else
        print_result(r);
    const int status = !st ? MP_EXIT_OK : mp_simulate_refused(st, r) ? MP_EXIT_USAGE : MP_EXIT_FAILURE;
    mp_simulate_result_free(r);
    free(r);
    return status;
}
