/* bench/gen_routing_trace.c — writes a synthetic routing trace for benchmarking `moeplan analyze`.
 *
 * usage: gen_routing_trace OUT.db REQUESTS TOKENS [LAYERS EXPERTS TOP_K PREFILL SEED [EXPERT_BYTES [SKEW [DRIFT [TIMING]]]]]
 * Defaults: 48 layers, 128 experts, top-8, 100-token prefill (then 1-row decode steps up to
 * TOKENS per request), seed 1, experts of 3 x 2048 x 768 x 9/16 bytes (a Q4_K 30B-A3B expert;
 * give the model's to simulate it with -m), Zipf exponent 0.8. The trace is written with the
 * collector's writer (f16 weights, u8 ids), exactly what a live capture stores; with TIMING 1,
 * also what a live capture adds beside the routing: a timing row per step and layer whose served
 * codes put experts below EXPERTS / 2 on the GPU and the others on the CPU (hits, misses to match;
 * the analyzer checks and sums them). Default 0: routing only.
 *
 * Routing model (so the statistics have something to find): each layer has its own Zipf-like
 * popularity (exponent SKEW over a per-layer random permutation of the experts); with probability
 * 0.3 a slot repeats an expert of the same layer's previous token (temporal locality). Ids within
 * a row are distinct; weights are a decreasing softmax-like sequence renormalized to sum to 1.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collector/trace.h"

static uint64_t rng_state;

static uint64_t rng(void) /* xorshift64* */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}

static double uniform(void)
{
    return (double)(rng() >> 11) / 9007199254740992.0;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s OUT.db REQUESTS TOKENS [LAYERS EXPERTS TOP_K PREFILL SEED [EXPERT_BYTES [SKEW [DRIFT [TIMING]]]]]\n",
                argv[0]);
        return 2;
    }
    const char *out = argv[1];
    const int n_req = atoi(argv[2]), n_tok = atoi(argv[3]);
    const int L = argc > 4 ? atoi(argv[4]) : 48, E = argc > 5 ? atoi(argv[5]) : 128;
    const int K = argc > 6 ? atoi(argv[6]) : 8, P = argc > 7 ? atoi(argv[7]) : 100;
    rng_state = argc > 8 ? strtoull(argv[8], NULL, 10) | 1 : 1;
    const long long expert_bytes = argc > 9 ? atoll(argv[9]) : 3LL * 2048 * 768 * 9 / 16;
    const double skew = argc > 10 ? atof(argv[10]) : 0.8;
    const double drift = argc > 11 ? atof(argv[11]) : 0.0;
    const int timing = argc > 12 ? atoi(argv[12]) : 0;
    if ((timing != 0 && timing != 1) || n_req < 1 || n_tok < 1 || L < 1 || L > 4096 || E < 2 || E > 256 || K < 1 || K > E ||
        P < 1 || P > n_tok || expert_bytes < 1 || !(skew >= 0 && skew <= 16) || !(drift >= 0 && drift <= 1)) {
        fprintf(stderr, "gen_routing_trace: bad arguments\n");
        return 2;
    }
    /* cdf: (L, E) cumulative popularity over each layer's permutation perm (L, E) */
    double *cdf = malloc((size_t)L * E * sizeof *cdf);
    int *perm = malloc((size_t)L * E * sizeof *perm);
    int32_t *ids = malloc((size_t)P * K * L * sizeof *ids);  /* (L, P, K) */
    float *w = malloc((size_t)P * K * sizeof *w);            /* (P, K) */
    uint8_t *served = malloc((size_t)P * K);                 /* (P, K) */
    int32_t *prev = malloc((size_t)L * K * sizeof *prev);    /* (L, K) last token's ids */
    for (int l = 0; l < L; l++) {
        double acc = 0;
        for (int e = 0; e < E; e++)
            perm[l * E + e] = e;
        for (int e = E - 1; e > 0; e--) {
            int j = (int)(rng() % (uint64_t)(e + 1)), t = perm[l * E + e];
            perm[l * E + e] = perm[l * E + j], perm[l * E + j] = t;
        }
        for (int e = 0; e < E; e++)
            cdf[l * E + e] = (acc += pow(e + 1, -skew));
        for (int e = 0; e < E; e++)
            cdf[l * E + e] /= acc;
    }
    double wsum = 0;
    float wk[64];
    for (int j = 0; j < K; j++)
        wsum += (wk[j] = (float)exp(-0.4 * j));
    for (int j = 0; j < K; j++)
        wk[j] = (float)(wk[j] / wsum);
    for (int r = 0; r < P * K; r++)
        w[r] = wk[r % K];

    mp_error err;
    mp_trace_writer *tw;
    if (mp_trace_writer_open(out, true, &tw, &err) != MP_OK)
        goto fail;
    mp_trace_run_info info;
    mp_trace_run_info_init(&info);
    info.source = "moeplan";
    info.model_path = "synthetic";
    info.architecture = "synthetic";
    info.n_layers = L, info.n_moe_layers = L, info.n_experts = E, info.top_k = K;
    info.config_json = "{\"generator\": \"bench/gen_routing_trace\"}";
    if (mp_trace_set_run(tw, &info, &err) != MP_OK)
        goto fail;
    for (int l = 0; l < L; l++) {
        char name[32];
        snprintf(name, sizeof name, "blk.%d.ffn_moe", l);
        mp_trace_node nd = {.node_index = l, .node_type = "moe", .node_name = name, .layer = l,
                            .n_experts = E, .top_k = K, .expert_bytes = expert_bytes,
                            .weight_format = MP_TRACE_W_F16};
        if (mp_trace_add_node(tw, &nd, &err) != MP_OK)
            goto fail;
    }
    for (int rq = 0; rq < n_req; rq++) {
        for (int l = 0; rq > 0 && drift > 0 && l < L; l++) /* the popularity drifts */
            for (int e = 0; e < E; e++)
                if (uniform() < drift) {
                    int j = (int)(rng() % (uint64_t)E), t = perm[l * E + e];
                    perm[l * E + e] = perm[l * E + j], perm[l * E + j] = t;
                }
        if (mp_trace_request_begin(tw, rq, NULL, NULL, P, NULL, -1, &err) != MP_OK)
            goto fail;
        for (int i = 0; i < L * K; i++)
            prev[i] = -1;
        int pos = 0;
        for (int step = 0; pos < n_tok; step++) {
            const int rows = step == 0 ? P : 1;
            if (mp_trace_step_begin(tw, step, step == 0 ? MP_PHASE_PREFILL : MP_PHASE_DECODE, rows,
                                    pos, &err) != MP_OK)
                goto fail;
            for (int l = 0; l < L; l++) {
                for (int row = 0; row < rows; row++) {
                    int32_t *x = ids + ((size_t)row * K);
                    for (int j = 0; j < K; j++) {
                        int32_t e;
                        bool dup;
                        do {
                            if (prev[l * K + j] >= 0 && uniform() < 0.3) {
                                e = prev[l * K + (int)(rng() % (uint64_t)K)];
                            } else {
                                double u = uniform();
                                int lo = 0, hi = E - 1;
                                while (lo < hi) {
                                    int mid = (lo + hi) / 2;
                                    if (cdf[l * E + mid] < u)
                                        lo = mid + 1;
                                    else
                                        hi = mid;
                                }
                                e = perm[l * E + lo];
                            }
                            dup = false;
                            for (int q = 0; q < j; q++)
                                dup |= x[q] == e;
                        } while (dup);
                        x[j] = e;
                    }
                    memcpy(prev + l * K, x, (size_t)K * sizeof *x);
                }
                if (mp_trace_add_routing(tw, l, rows, K, ids, w, &err) != MP_OK)
                    goto fail;
                if (timing) {
                    mp_moe_timing t = {.served = served};
                    for (int i = 0; i < rows * K; i++) {
                        served[i] = ids[i] < E / 2 ? MP_SERVED_GPU : MP_SERVED_CPU;
                        t.hits += served[i] == MP_SERVED_GPU;
                    }
                    t.misses = (int64_t)rows * K - t.hits;
                    if (mp_trace_add_timing(tw, l, &t, &err) != MP_OK)
                        goto fail;
                }
            }
            if (mp_trace_step_end(tw, -1, &err) != MP_OK)
                goto fail;
            pos += rows;
        }
        if (mp_trace_request_end(tw, n_tok - P, -1, &err) != MP_OK)
            goto fail;
    }
    if (mp_trace_finish(tw, &err) != MP_OK)
        goto fail;
    mp_trace_writer_close(tw);
    printf("%s: %d requests × %d tokens × %d layers × top-%d = %.1f M routing decisions\n", out,
           n_req, n_tok, L, K, (double)n_req * n_tok * L * K / 1e6);
    free(cdf), free(perm), free(ids), free(w), free(prev), free(served);
    return 0;
fail:
    fprintf(stderr, "gen_routing_trace: %s\n", err.msg);
    return 1;
}
