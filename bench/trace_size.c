/* bench/trace_size.c — trace size and write cost per (token, MoE layer), through the same hooks
 * the runtime calls during `moeplan collect`.
 *
 * usage: mp_trace_size [--layers 48] [--experts 128] [--top-k 8] [--requests 20] [--prompt 128]
 *                      [--gen 256] [--weights f16|f32] [--out /tmp/mp_trace_size.db] [--async 1]
 *                      [--step-us N] [--trace 0|1]
 * --step-us N busy-waits N us per step (a simulated forward pass); compare steps/s with
 * --trace 0 (tracing off: no hook is called) and --trace 1 for the tok/s ratio on vs off.
 * Routing is drawn from a skewed (Zipf-like) distribution with a fixed seed; the size does not
 * depend on the values (blobs are fixed-width), only on the shape. Prints file bytes, bytes per
 * (token, layer), bytes per token, and the time the hooks take on the caller's thread per step
 * (--async 1: the writer thread of mp_trace_async_start does the SQLite work).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "collector/trace.h"
#include "base/clock.h"

/* A skewed draw in [0, 1): popular experts near 0, as real routing is (u^3). */
static double pow2_skew(int r)
{
    double u = (double)r / ((double)RAND_MAX + 1.0);
    return u * u * u;
}

int main(int argc, char **argv)
{
    int64_t layers = 48, experts = 128, top_k = 8, requests = 20, prompt = 128, gen = 256;
    const char *out = "/tmp/mp_trace_size.db", *weights = "f16";
    int async = 0;
    int64_t step_us = 0; /* simulated forward pass per step (busy), to measure tok/s on vs off */
    int trace_on = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        int64_t x = strtoll(v, NULL, 10);
        if (!strcmp(a, "--layers")) layers = x;
        else if (!strcmp(a, "--experts")) experts = x;
        else if (!strcmp(a, "--top-k")) top_k = x;
        else if (!strcmp(a, "--requests")) requests = x;
        else if (!strcmp(a, "--prompt")) prompt = x;
        else if (!strcmp(a, "--gen")) gen = x;
        else if (!strcmp(a, "--weights")) weights = v;
        else if (!strcmp(a, "--out")) out = v;
        else if (!strcmp(a, "--async")) async = (int)x;
        else if (!strcmp(a, "--step-us")) step_us = x;
        else if (!strcmp(a, "--trace")) trace_on = (int)x;
        else {
            fprintf(stderr, "mp_trace_size: unknown option %s\n", a);
            return 2;
        }
    }
    if (layers < 1 || experts < top_k || top_k < 1 || requests < 1 || prompt < 1 || gen < 0) {
        fprintf(stderr, "mp_trace_size: bad shape\n");
        return 2;
    }
    mp_error err;
    mp_trace_writer *w;
    if (mp_trace_writer_open(out, true, &w, &err)) {
        fprintf(stderr, "mp_trace_size: %s\n", err.msg);
        return 1;
    }
    mp_trace_run_info info;
    mp_trace_run_info_init(&info);
    info.source = "moeplan";
    info.n_experts = experts;
    info.top_k = top_k;
    if (mp_trace_set_run(w, &info, &err))
        goto fail;
    mp_trace_weight_format wf = strcmp(weights, "f32") ? MP_TRACE_W_F16 : MP_TRACE_W_F32;
    for (int64_t l = 0; l < layers; l++) {
        char name[32];
        snprintf(name, sizeof name, "blk.%lld.ffn_moe", (long long)l);
        mp_trace_node n = {.node_index = l, .node_type = "moe", .node_name = name, .layer = l,
                           .n_experts = experts, .top_k = top_k, .expert_bytes = 4718592,
                           .weight_format = wf};
        if (mp_trace_add_node(w, &n, &err))
            goto fail;
    }
    mp_trace_hooks_state hs = {.status = MP_OK};
    mp_hooks h;
    mp_trace_async *as = NULL;
    if (async) {
        if (mp_trace_async_start(w, &as, &h, &err))
            goto fail;
    } else {
        h = mp_trace_hooks(&hs, w);
    }
    double t_all0 = mp_now_s();
    int32_t *ids = malloc((size_t)(prompt * top_k) * sizeof *ids); /* (prompt, top_k) */
    float *wt = malloc((size_t)(prompt * top_k) * sizeof *wt);     /* (prompt, top_k) */
    int32_t *tokens = calloc((size_t)prompt, sizeof *tokens);
    srand(1234);
    double t_write = 0;
    int64_t n_steps = 0;
    for (int64_t r = 0; r < requests; r++) {
        if (trace_on)
            h.request_begin(h.user, r, tokens, prompt);
        for (int64_t s = 0; s <= gen; s++) {
            int64_t rows = s == 0 ? prompt : 1;
            for (int64_t l = 0; l < layers; l++) {
                for (int64_t i = 0; i < rows; i++) /* distinct ids: skewed start, stride 1 */
                    for (int64_t k = 0; k < top_k; k++) {
                        int64_t base = (int64_t)((double)experts * pow2_skew(rand()));
                        ids[i * top_k + k] = (int32_t)((base + k) % experts);
                        wt[i * top_k + k] = 1.0f / (float)top_k;
                    }
                if (l == 0 && step_us > 0) { /* the forward pass this step would take */
                    double until = mp_now_s() + (double)step_us * 1e-6;
                    while (mp_now_s() < until)
                        ;
                }
                if (!trace_on)
                    continue;
                double t0 = mp_now_s();
                if (l == 0)
                    h.step_begin(h.user, r, s, s ? MP_PHASE_DECODE : MP_PHASE_PREFILL, rows,
                                 s ? prompt + s - 1 : 0);
                h.routing(h.user, l, rows, top_k, ids, wt);
                if (l == layers - 1)
                    h.step_end(h.user, 1000);
                t_write += mp_now_s() - t0;
            }
            n_steps++;
        }
        if (trace_on)
            h.request_end(h.user, gen);
    }
    if (async && mp_trace_async_stop(as, &err))
        goto fail;
    double t_all = mp_now_s() - t_all0;
    if (hs.status) {
        err = hs.error;
        goto fail;
    }
    if (mp_trace_finish(w, &err))
        goto fail;
    mp_trace_writer_close(w);
    struct stat sb;
    stat(out, &sb);
    int64_t tokens_total = requests * (prompt + gen);
    double per = (double)sb.st_size / (double)(tokens_total * layers);
    printf("shape: %lld layers, %lld experts, top-%lld, weights %s; %lld requests × (%lld prompt + "
           "%lld generated) = %lld tokens\n", (long long)layers, (long long)experts,
           (long long)top_k, weights, (long long)requests, (long long)prompt, (long long)gen,
           (long long)tokens_total);
    printf("trace: %lld bytes = %.2f bytes per (token, layer) = %.0f bytes per token\n",
           (long long)sb.st_size, per, per * (double)layers);
    printf("hot path (%s writer): %.1f us per step (%lld steps), %.0f ns per (step, layer) "
           "record; all writes done after %.2f s\n", async ? "async" : "sync",
           1e6 * t_write / (double)n_steps, (long long)n_steps,
           1e9 * t_write / (double)(n_steps * layers), t_all);
    if (step_us > 0)
        printf("run: %.3f s wall for %lld steps of %lld us simulated forward pass (tracing %s) = "
               "%.1f steps/s\n", t_all, (long long)n_steps, (long long)step_us,
               trace_on ? (async ? "on, async" : "on, sync") : "off",
               (double)n_steps / t_all);
    free(ids);
    free(wt);
    free(tokens);
    return 0;
fail:
    fprintf(stderr, "mp_trace_size: %s\n", err.msg);
    mp_trace_writer_close(w);
    return 1;
}
