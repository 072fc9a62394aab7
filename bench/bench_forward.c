/* bench/bench_forward.c — thread-pool region overhead and end-to-end prefill/decode speed.
 *
 * Usage: bench_forward [-m MODEL.gguf] [--threads T=all] [--prompt P=64] [--gen G=32]
 *                      [--layers L=4] [--type Q4_K] [--scalar] [--regions R=200000]
 *
 * 1. pool: mp_pool_run with one empty task per thread, R times: ns per region (what every
 *    parallel region of a decode step pays on top of its work).
 * 2. forward: a model from -m, or a synthetic one with Qwen3-30B-A3B's layer shapes (hidden
 *    2048, 32 q heads / 4 kv heads of 128, 128 experts, top-8, expert FFN 768) and L layers,
 *    weights of --type filled with random blocks (speed does not depend on the values; block
 *    scales are set to sane halves so that no NaN appears). Reports prefill and decode tok/s and
 *    the decode's effective weight bandwidth: bytes of dense weights + 8 experts per layer per
 *    token, over the time per token.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/quant.h"
#include "runtime/model.h"
#include "runtime/session.h"
#include "runtime/cpus.h"
#include "runtime/threadpool.h"
#include "runtime/knobs_apply.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void empty_task(void *ctx, int64_t task, int thread)
{
    (void)ctx, (void)task, (void)thread;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next_u64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Random blocks with valid scales: offsets of the f16 scale fields per block. */
static void *random_tensor(mp_tensor *t, int type, int64_t ne0, int64_t ne1, int64_t ne2)
{
    t->type = type;
    t->ne[0] = ne0, t->ne[1] = ne1, t->ne[2] = ne2, t->ne[3] = 1;
    t->row_bytes = mp_type_row_bytes(type, ne0);
    t->nbytes = t->row_bytes * (size_t)(ne1 * ne2);
    uint8_t *d = malloc(t->nbytes);
    if (!d) {
        fprintf(stderr, "bench_forward: out of memory\n");
        exit(1);
    }
    if (type == MP_TYPE_F32) {
        float *f = (float *)d;
        for (size_t i = 0; i < t->nbytes / 4; i++)
            f[i] = (float)((int64_t)(next_u64() % 2001) - 1000) * 1e-5f;
    } else {
        for (size_t i = 0; i + 8 <= t->nbytes; i += 8) {
            uint64_t v = next_u64();
            memcpy(d + i, &v, 8);
        }
        const size_t bb = mp_type_block_bytes(type);
        const mp_f16 small = mp_f32_to_f16(0.002f);
        for (size_t b = 0; b + bb <= t->nbytes; b += bb) {
            size_t off[2] = {0, (size_t)-1};
            if (type == MP_TYPE_Q4_K)
                off[1] = 2;
            if (type == MP_TYPE_Q6_K)
                off[0] = 208;
            for (int k = 0; k < 2; k++)
                if (off[k] != (size_t)-1)
                    memcpy(d + b + off[k], &small, 2);
        }
    }
    t->data = d;
    return d;
}

static void ones(mp_tensor *t, int64_t n)
{
    float *f = malloc((size_t)n * sizeof *f);
    for (int64_t i = 0; i < n; i++)
        f[i] = 1.0f;
    t->type = MP_TYPE_F32;
    t->ne[0] = n, t->ne[1] = 1, t->ne[2] = 1, t->ne[3] = 1;
    t->row_bytes = t->nbytes = (size_t)n * 4;
    t->data = f;
}

static mp_model *synthetic(int64_t n_layer, int type)
{
    mp_model *m = calloc(1, sizeof *m);
    mp_hparams *hp = &m->hp;
    *hp = (mp_hparams){.arch = MP_ARCH_QWEN3MOE, .n_layer = n_layer, .n_embd = 2048, .n_head = 32,
                       .n_head_kv = 4, .head_dim = 128, .rot_dim = 128, .n_expert = 128,
                       .n_expert_used = 8, .n_ff_exp = 768, .n_vocab = 4096, .n_ctx_train = 4096,
                       .rope_freq_base = 1e6f, .rms_eps = 1e-6f, .expert_weights_norm = true};
    m->layers = calloc((size_t)n_layer, sizeof *m->layers);
    const int64_t E = 2048, Q = 32 * 128, KV = 4 * 128;
    random_tensor(&m->tok_embd, MP_TYPE_Q8_0, E, hp->n_vocab, 1);
    random_tensor(&m->output, MP_TYPE_Q8_0, E, hp->n_vocab, 1);
    ones(&m->output_norm, E);
    for (int64_t il = 0; il < n_layer; il++) {
        mp_layer *L = &m->layers[il];
        ones(&L->attn_norm, E);
        ones(&L->ffn_norm, E);
        ones(&L->q_norm, 128);
        ones(&L->k_norm, 128);
        random_tensor(&L->wq, type, E, Q, 1);
        random_tensor(&L->wk, type, E, KV, 1);
        random_tensor(&L->wv, type, E, KV, 1);
        random_tensor(&L->wo, type, Q, E, 1);
        random_tensor(&L->gate_inp, MP_TYPE_F32, E, 128, 1);
        random_tensor(&L->gate_exps, type, E, 768, 128);
        random_tensor(&L->up_exps, type, E, 768, 128);
        random_tensor(&L->down_exps, type, 768, E, 128);
    }
    mp_error err = {0};
    if (mp_model_validate(m, &err)) {
        fprintf(stderr, "bench_forward: %s\n", err.msg);
        exit(1);
    }
    return m;
}

int main(int argc, char **argv)
{
    mp_knobs knobs; /* the environment's MP_* knobs, as moeplan reads them */
    mp_error kerr;
    if (mp_knobs_start(&knobs, &kerr)) {
        fprintf(stderr, "%s: %s\n", "bench_forward", kerr.msg);
        return 2;
    }
    const char *model_path = NULL;
    int threads = mp_cpu_usable(), prompt = 64, gen = 32, layers = 4, type = MP_TYPE_Q4_K;
    long regions = 200000;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--scalar")) {
            mp_kernels_force_scalar(1);
            continue;
        }
        if (!strcmp(a, "-m")) model_path = v;
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--prompt")) prompt = atoi(v);
        else if (!strcmp(a, "--gen")) gen = atoi(v);
        else if (!strcmp(a, "--layers")) layers = atoi(v);
        else if (!strcmp(a, "--regions")) regions = atol(v);
        else if (!strcmp(a, "--type")) type = mp_type_from_name(v);
        else {
            fprintf(stderr, "usage: bench_forward [-m MODEL] [--threads T] [--prompt P] [--gen G] "
                            "[--layers L] [--type T] [--regions R] [--scalar]\n");
            return 2;
        }
        i++;
    }
    if (threads < 1 || prompt < 1 || gen < 1 || layers < 1 || regions < 1 || !mp_type_supported(type)) {
        fprintf(stderr, "bench_forward: bad argument\n");
        return 2;
    }

    mp_pool *pool = mp_pool_new(threads, knobs.pool_pin);
    for (long r = 0; r < 1000; r++) /* warm up: wake every worker */
        mp_pool_run(pool, threads, empty_task, NULL);
    double t0 = now_s();
    for (long r = 0; r < regions; r++)
        mp_pool_run(pool, threads, empty_task, NULL);
    const double region_ns = (now_s() - t0) * 1e9 / (double)regions;
    printf("pool: %d threads, %ld regions of %d empty tasks: %.0f ns per region\n", threads,
           regions, threads, region_ns);
    mp_pool_free(pool);

    mp_model *m = NULL;
    mp_error err = {0};
    if (model_path) {
        if (mp_model_load(model_path, &m, &err)) {
            fprintf(stderr, "bench_forward: %s\n", err.msg);
            return 1;
        }
    } else {
        m = synthetic(layers, type);
    }
    const mp_hparams *hp = &m->hp;
    mp_session_params sp = {.n_ctx = prompt + gen + 1, .n_threads = threads, .n_batch = 0, .knobs = &knobs};
    mp_session *s = NULL;
    if (mp_session_new(m, &sp, &s, &err)) {
        fprintf(stderr, "bench_forward: %s\n", err.msg);
        return 1;
    }
    int32_t *tok = malloc((size_t)(prompt + gen) * sizeof *tok);
    for (int i = 0; i < prompt + gen; i++)
        tok[i] = (int32_t)(next_u64() % (uint64_t)hp->n_vocab);
    float *logits = malloc((size_t)hp->n_vocab * sizeof *logits);
    t0 = now_s();
    if (mp_session_eval(s, tok, prompt, false, logits, &err)) {
        fprintf(stderr, "bench_forward: %s\n", err.msg);
        return 1;
    }
    const double prefill_s = now_s() - t0;
    t0 = now_s();
    for (int i = 0; i < gen; i++)
        if (mp_session_eval(s, tok + prompt + i, 1, false, logits, &err)) {
            fprintf(stderr, "bench_forward: %s\n", err.msg);
            return 1;
        }
    const double decode_s = now_s() - t0;
    size_t bytes = mp_model_dense_bytes(m) - m->tok_embd.nbytes; /* one embedding row is read */
    if (m->output.data == m->tok_embd.data)
        bytes += m->output.nbytes;
    for (int64_t il = 0; il < hp->n_layer; il++)
        bytes += (size_t)hp->n_expert_used * mp_model_expert_bytes(m, il);
    printf("forward: %s, %lld layers, %s, %d threads, isa %s\n",
           model_path ? model_path : "synthetic qwen3moe shapes", (long long)hp->n_layer,
           mp_type_name(m->layers[0].gate_exps.type), threads, mp_kernels_isa());
    printf("  prefill %d tokens: %.1f tok/s\n", prompt, prompt / prefill_s);
    printf("  decode %d tokens: %.2f tok/s, %.1f ms/token, %.1f MB weights/token, %.2f GB/s\n",
           gen, gen / decode_s, decode_s * 1e3 / gen, (double)bytes / 1e6,
           (double)bytes * gen / decode_s / 1e9);
    mp_session_free(s);
    free(tok);
    free(logits);
    if (model_path) {
        mp_model_free(m);
    } /* the synthetic model's buffers die with the process */
    return 0;
}
