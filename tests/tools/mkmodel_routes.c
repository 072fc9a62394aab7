/* tests/tools/mkmodel_routes.c — measure a model's routing concentration on the built-in corpus.
 *
 * usage: mkmodel_routes MODEL.gguf [N_SEQ [SEQ_LEN [THREADS]]]   (defaults 32 64 1)
 * Prints, per layer and pooled, the share of routes served by the most-used half of the experts:
 * the statistic used to tune mkmodel's default --skew against the FLAME-MoE trace (58.1 % over
 * 32 sequences x 64 tokens; docs/mkmodel.md). Runs the real forward pass with a routing hook.
 */
#include <stdio.h>
#include <stdlib.h>

#include "mkmodel/mkmodel.h"

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 5) {
        fprintf(stderr, "usage: mkmodel_routes MODEL.gguf [N_SEQ [SEQ_LEN [THREADS]]]\n");
        return 2;
    }
    long n_seq = argc > 2 ? strtol(argv[2], NULL, 10) : 32;
    long seq_len = argc > 3 ? strtol(argv[3], NULL, 10) : 64;
    int threads = argc > 4 ? (int)strtol(argv[4], NULL, 10) : 1;
    mp_mk_routes r;
    mp_error err = {0};
    if (mp_mkmodel_measure_routes(argv[1], n_seq, seq_len, threads, &r, &err)) {
        fprintf(stderr, "mkmodel_routes: error: %s\n", err.msg);
        return 1;
    }
    printf("model %s: %lld layers x %lld experts, top-%lld, %lld tokens\n", argv[1],
           (long long)r.n_layer, (long long)r.n_expert, (long long)r.top_k, (long long)r.n_tokens);
    for (int64_t l = 0; l < r.n_layer; l++)
        printf("layer %3lld: top-half share %.3f\n", (long long)l,
               mp_mk_routes_layer_top_half_share(&r, l));
    printf("pooled top-half share %.4f\n", mp_mk_routes_top_half_share(&r));
    mp_mk_routes_free(&r);
    return 0;
}
