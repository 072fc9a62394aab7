/* runtime/executor.c — the executor decision (executor.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/costs.h"
#include "runtime/cpus.h"
#include "runtime/decide.h"
#include "runtime/executor.h"
#include "runtime/gpu.h"

bool mp_placement_opts_given(const mp_placement_opts *o)
{
    return o->spec || o->file || o->profile || o->budget_text;
}

mp_status mp_executor_plan(const mp_model *m, mp_executor_kind kind, const mp_placement_opts *o,
                           const mp_session_params *sp, mp_placement *pl, bool *use_gpu,
                           mp_error *err)
{
    memset(pl, 0, sizeof *pl);
    *use_gpu = false;
    int64_t n_ctx, n_batch;
    mp_status st = mp_session_resolve_sizes(m, sp, &n_ctx, &n_batch, err);
    if (st)
        return st;
    const int usable = mp_cpu_usable();
    if (sp->n_threads > usable)
        fprintf(stderr, "moeplan: warning: %d threads, more than the %d CPU%s this process may use (its affinity "
                "mask, at most its cgroup's CPU quota): the threads take each other's time slices\n",
                sp->n_threads, usable, usable == 1 ? "" : "s");
    char why[256] = "";
    const bool have_gpu = kind != MP_EXECUTOR_CPU && mp_gpu_available(why, sizeof why);
    const bool placement_named = o->spec || o->file || o->profile;
    if (kind == MP_EXECUTOR_GPU && !have_gpu)
        return mp_fail(err, MP_ERR_DEVICE, "--executor gpu: %s", why);
    if (kind == MP_EXECUTOR_AUTO && !have_gpu && placement_named && o->mode != MP_PLACEMENT_CPU)
        return mp_fail(err, MP_ERR_DEVICE, "placement '%s' needs the GPU executor, but %s (use "
                       "--placement cpu, or --executor cpu to only check the placement)",
                       o->spec ? o->spec : o->file ? "--placement-file" : "--profile", why);
    if (!have_gpu) { /* built even without flags: callers report it ("cpu: 0/N experts ...") */
        /* --costs is the GPU executor's (far routes); read here all the same, so that a path that
         * does not exist or a file that is no cost file is refused on every executor, not ignored */
        if (o->costs) {
            mp_costs c;
            if ((st = mp_costs_load(o->costs, &c, err)))
                return mp_error_prefix(err, "--costs");
            mp_costs_free(&c);
        }
        return mp_placement_for_model(m, o, n_ctx, n_batch, pl, err);
    }
    mp_placement_opts eff = *o;
    if (!placement_named) { /* fill what fits */
        eff.mode = MP_PLACEMENT_FILL;
        eff.spec = "fill";
        if (!eff.budget_bytes) {
            uint64_t free_b = 0, total_b = 0;
            if ((st = mp_gpu_memory_info(&free_b, &total_b, err)))
                return st;
            if (free_b <= MP_EXECUTOR_RESERVE_BYTES)
                return mp_fail(err, MP_ERR_LIMIT, "GPU executor: the device has only %" PRIu64
                               " bytes free", free_b);
            eff.budget_bytes = free_b - MP_EXECUTOR_RESERVE_BYTES;
        }
    }
    if ((st = mp_placement_for_model(m, &eff, n_ctx, n_batch, pl, err)))
        return st;
    if (o->costs) { /* the decisions' costs: this model's, on this many threads */
        if (!(pl->decode_costs = malloc(sizeof *pl->decode_costs))) {
            mp_placement_free(pl);
            return mp_fail(err, MP_ERR_NOMEM, "--costs: out of memory");
        }
        const int threads = sp->n_threads > 0 ? sp->n_threads : mp_cpu_threads_default();
        mp_costs c;
        if ((st = mp_costs_load(o->costs, &c, err))) {
            mp_placement_free(pl);
            return mp_error_prefix(err, "--costs");
        }
        st = mp_decode_costs_of_model(&c, o->costs, m, threads, pl->decode_costs, err);
        /* prefill copies of the experts left in host memory, priced as the planner prices them
         * where the cost file measured the CPU experts at a prompt's rows */
        if (!st && pl->host_expert_bytes > 0 && mp_decide_step_copies(n_batch) && !o->no_prompts) {
            pl->cpu_rows_max = (uint32_t)n_batch;
            double measured = 0;
            st = mp_decide_cpu_rows_ns(&c, o->costs, m, threads, pl->cpu_rows_max, &pl->cpu_rows_ns, &measured, err);
            if (!st && measured < MP_DECIDE_PREFILL_ROWS_MIN) {
                free(pl->cpu_rows_ns);
                pl->cpu_rows_ns = NULL;
                pl->cpu_rows_max = 0;
                fprintf(stderr, "moeplan: note: --costs %s measured the CPU experts up to %g rows, under the %d a "
                        "prompt's prices need (runtime/decide.h): a prompt's copies, if any, follow the CPU time "
                        "measured in the run; `moeplan calibrate --rows 1,4,16,64` prices them\n",
                        o->costs, measured, MP_DECIDE_PREFILL_ROWS_MIN);
            }
        }
        mp_costs_free(&c);
        if (st) {
            mp_placement_free(pl);
            return mp_error_prefix(err, "--costs");
        }
        /* a grid in coarser far units than the rule's, on a placement that leaves experts in host
         * memory (hybrid layers): said */
        const mp_decode_costs *dc = pl->decode_costs;
        const int rule = mp_decide_far_split((int)m->hp.n_expert_used, m->hp.n_ff_exp,
                                             mp_decide_split_granule(m->layers[0].down_exps.type));
        if (dc->far_max > 0 && dc->far_split < rule && pl->host_expert_bytes > 0)
            fprintf(stderr, "moeplan: note: --costs %s counts far work in 1/%d of an expert, this build's rule in "
                    "1/%d (runtime/decide.h): `moeplan calibrate` now may balance the cores and the bus closer\n",
                    o->costs, dc->far_split, rule);
        char knobs[400];
        if (mp_decide_other_knobs(&pl->decode_costs->knobs, sp->knobs, knobs, sizeof knobs))
            fprintf(stderr, "moeplan: warning: --costs %s was calibrated under other knobs (%s): its costs and the "
                    "far routes decided from them may not hold here; run with the calibration's values, or "
                    "`moeplan calibrate` under these\n", o->costs, knobs);
    }
    *use_gpu = true;
    return MP_OK;
}
