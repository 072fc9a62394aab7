/* tests/tools/bench_tokenizer.c — timing of the vocabulary builder and the encoder (not a test:
 * performance is never checked by unit tests). Usage: bench_tokenizer [PRE [N_VOCAB [MIB]]]
 * Prints build time, tokenizer construction time and encode throughput on the built-in corpus
 * repeated to MIB mebibytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tokenizer/tokenizer.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    const char *pre = argc > 1 ? argv[1] : "qwen2";
    long long n_vocab = argc > 2 ? atoll(argv[2]) : 151936;
    double mib = argc > 3 ? atof(argv[3]) : 8.0;
    size_t len;
    const char *corpus = mp_vocab_default_corpus(&len);
    mp_vocab v;
    mp_error err;
    double t0 = now_s();
    if (mp_vocab_build(corpus, len, n_vocab, pre, &v, &err) != MP_OK) {
        fprintf(stderr, "bench_tokenizer: error: %s\n", err.msg);
        return 1;
    }
    double t1 = now_s();
    mp_tokenizer *t;
    if (mp_tokenizer_from_vocab(&v, pre, &t, &err) != MP_OK) {
        fprintf(stderr, "bench_tokenizer: error: %s\n", err.msg);
        return 1;
    }
    double t2 = now_s();
    size_t text_bytes = (size_t)(mib * 1048576.0);
    char *text = malloc(text_bytes + len);
    size_t n = 0;
    while (n < text_bytes) {
        memcpy(text + n, corpus, len);
        n += len;
    }
    int32_t *ids;
    size_t n_ids;
    double t3 = now_s();
    if (mp_tokenizer_encode(t, text, n, true, &ids, &n_ids, &err) != MP_OK) {
        fprintf(stderr, "bench_tokenizer: error: %s\n", err.msg);
        return 1;
    }
    double t4 = now_s();
    printf("pre=%s n_vocab=%lld merges=%lld corpus=%zu bytes\n", pre, n_vocab,
           (long long)v.n_merges, len);
    printf("vocab build: %.3f s; tokenizer from vocab: %.3f s\n", t1 - t0, t2 - t1);
    printf("encode: %zu bytes -> %zu tokens (%.2f bytes/token) in %.3f s = %.1f MiB/s\n", n, n_ids,
           (double)n / (double)n_ids, t4 - t3, (double)n / 1048576.0 / (t4 - t3));
    free(ids);
    free(text);
    mp_tokenizer_free(t);
    mp_vocab_free(&v);
    return 0;
}
