/* bench/cupti_overhead.c — what `collect --cupti` costs per step, and flushing per step versus
 * once at the end (run on the GPU machine; built where the toolkit has CUPTI).
 *
 * usage: bench_cupti [--layers 48] [--kernels 12] [--steps 200] [--n 4096]
 * A "step" is what a decode step of the GPU forward looks like to CUPTI: per layer, `kernels`
 * small launches (mp_cuda_add on n floats, default stream) inside layer_begin / layer_end, then a
 * device synchronization (the logits). Modes, in this order:
 *   off        no CUPTI
 *   per-step   collect's hooks (mp_cupti_hooks): push/pop per step and layer, flush at step_end
 *   at-end     the same pushes, one flush after the last step (memory grows with the run)
 *   off-again  no CUPTI, after it was used (CUPTI stays attached to the process)
 * The sink counts records (SQLite is not timed: collect writes on its writer thread). Prints
 * µs per step, per launch, per flush, and the most 1 MiB buffers held.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collector/cupti.h"
#include "kernels/cuda/cuda_ops.h"

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int64_t g_records;
static mp_status count_sink(void *user, const mp_trace_cupti_rec *rec, mp_error *err)
{
    g_records++;
    return MP_OK;
}

typedef struct cfg {
    int64_t layers, kernels, steps, n;
    float *d_a, *d_b; /* (n) */
} cfg;

/* Runs the steps through hooks h (NULL: none); returns µs per step, or -1 on a CUDA error. */
static double run(const cfg *c, const mp_hooks *h)
{
    const double t0 = now_us();
    for (int64_t s = 0; s < c->steps; s++) {
        if (h)
            h->step_begin(h->user, 0, s, MP_PHASE_DECODE, 1, s);
        for (int64_t l = 0; l < c->layers; l++) {
            if (h)
                h->layer_begin(h->user, l);
            for (int64_t k = 0; k < c->kernels; k++)
                if (mp_cuda_add(c->d_a, c->d_b, c->n, NULL))
                    return -1;
            if (h)
                h->layer_end(h->user, l);
        }
        if (cudaDeviceSynchronize() != cudaSuccess)
            return -1;
        if (h)
            h->step_end(h->user, 0);
    }
    return (now_us() - t0) / (double)c->steps;
}

static void report(const char *mode, double us_step, const cfg *c, double off_us,
                   const mp_cupti_counts *n)
{
    printf("%-10s %9.1f us/step  %6.2f us/launch  x%.3f", mode, us_step,
           us_step / (double)(c->layers * c->kernels), off_us > 0 ? us_step / off_us : 1.0);
    if (n)
        printf("  flushes %lld at %.1f us each, records %lld (dropped %lld), max buffers %lld",
               (long long)n->n_flushes,
               n->n_flushes ? (double)n->flush_ns * 1e-3 / (double)n->n_flushes : 0.0,
               (long long)(n->n_kernel + n->n_memcpy), (long long)n->n_dropped,
               (long long)n->max_buffers);
    printf("\n");
}

int main(int argc, char **argv)
{
    cfg c = {.layers = 48, .kernels = 12, .steps = 200, .n = 4096};
    for (int i = 1; i + 1 < argc; i += 2) {
        int64_t v = strtoll(argv[i + 1], NULL, 10);
        if (v < 1) {
            fprintf(stderr, "bench_cupti: %s %s: expected a positive integer\n", argv[i],
                    argv[i + 1]);
            return 2;
        }
        if (!strcmp(argv[i], "--layers"))
            c.layers = v;
        else if (!strcmp(argv[i], "--kernels"))
            c.kernels = v;
        else if (!strcmp(argv[i], "--steps"))
            c.steps = v;
        else if (!strcmp(argv[i], "--n"))
            c.n = v;
        else {
            fprintf(stderr, "usage: bench_cupti [--layers N] [--kernels N] [--steps N] [--n N]\n");
            return 2;
        }
    }
    char why[256];
    if (!mp_cuda_available(why, sizeof why)) {
        fprintf(stderr, "bench_cupti: %s\n", why);
        return 1;
    }
    if (cudaMalloc((void **)&c.d_a, (size_t)c.n * 4) || cudaMalloc((void **)&c.d_b, (size_t)c.n * 4) ||
        cudaMemset(c.d_a, 0, (size_t)c.n * 4) || cudaMemset(c.d_b, 0, (size_t)c.n * 4)) {
        fprintf(stderr, "bench_cupti: cannot allocate device buffers\n");
        return 1;
    }
    printf("%lld steps x %lld layers x %lld launches of add(%lld floats)\n", (long long)c.steps,
           (long long)c.layers, (long long)c.kernels, (long long)c.n);
    run(&c, NULL); /* warm-up: module load, clocks */
    const double off = run(&c, NULL);
    report("off", off, &c, off, NULL);

    mp_error err;
    for (int at_end = 0; at_end < 2; at_end++) {
        mp_cupti *cu;
        if (mp_cupti_start(&cu, &err)) {
            fprintf(stderr, "bench_cupti: %s\n", err.msg);
            return 1;
        }
        mp_hooks none = {0}, h;
        mp_cupti_hooks_state hs;
        g_records = 0;
        h = mp_cupti_hooks(&hs, cu, &none, count_sink, NULL);
        double us;
        if (!at_end) {
            us = run(&c, &h);
        } else { /* the same tagging without the per-step flush: push/pop by hand */
            const double t0 = now_us();
            for (int64_t s = 0; s < c.steps; s++) {
                mp_cupti_push(cu, 0, s, -1, &err);
                for (int64_t l = 0; l < c.layers; l++) {
                    mp_cupti_push(cu, 0, s, l, &err);
                    for (int64_t k = 0; k < c.kernels; k++)
                        mp_cuda_add(c.d_a, c.d_b, c.n, NULL);
                    mp_cupti_pop(cu, &err);
                }
                mp_cupti_pop(cu, &err);
                cudaDeviceSynchronize();
            }
            mp_cupti_flush(cu, count_sink, NULL, &err);
            us = (now_us() - t0) / (double)c.steps;
        }
        if (us < 0 || hs.status) {
            fprintf(stderr, "bench_cupti: %s\n", hs.status ? hs.error.msg : "CUDA error");
            return 1;
        }
        mp_cupti_counts n;
        mp_cupti_stop(cu, &n, &err);
        report(at_end ? "at-end" : "per-step", us, &c, off, &n);
    }
    report("off-again", run(&c, NULL), &c, off, NULL);
    cudaFree(c.d_a);
    cudaFree(c.d_b);
    return 0;
}
