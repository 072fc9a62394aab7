/* bench/trace_overhead.c — decode tok/s with tracing off vs on, same model, same process: the
 * issue's target is on/off >= 0.98.
 *
 * usage: mp_trace_overhead MODEL.gguf [--tokens 64] [--prompt 32] [--rounds 3] [--threads 0]
 * Each round decodes the same token sequence three times: hooks NULL (off), the writer thread
 * (mp_trace_async_start, what collect uses) and the synchronous hooks; the trace goes to
 * /tmp/mp_trace_overhead.db. Rounds alternate the order to spread drift; the best round of each
 * mode is reported.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collector/trace.h"
#include "runtime/model.h"
#include "runtime/session.h"
#include "runtime/knobs_apply.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One request: prefill n_prompt tokens, then decode n_tokens; returns decode tok/s. */
static double run_once(const mp_model *m, const mp_hooks *hooks, int threads, int64_t n_prompt,
                       int64_t n_tokens, int64_t request_id, const mp_knobs *knobs, mp_error *err)
{
    mp_session *s;
    mp_session_params p = {.n_ctx = n_prompt + n_tokens + 1, .n_threads = threads, .hooks = hooks,
                           .knobs = knobs};
    if (mp_session_new(m, &p, &s, err))
        return -1;
    int32_t *toks = malloc((size_t)(n_prompt + n_tokens) * sizeof *toks);
    for (int64_t i = 0; i < n_prompt + n_tokens; i++) /* fixed pseudo-random ids */
        toks[i] = (int32_t)((i * 2654435761u) % (uint64_t)m->hp.n_vocab);
    mp_session_begin_request(s, request_id, toks, n_prompt);
    double rate = -1;
    if (!mp_session_eval(s, toks, n_prompt, false, NULL, err)) {
        double t0 = now_s();
        int64_t i = 0;
        for (; i < n_tokens; i++)
            if (mp_session_eval(s, toks + n_prompt + i, 1, false, NULL, err))
                break;
        if (i == n_tokens)
            rate = (double)n_tokens / (now_s() - t0);
    }
    mp_session_end_request(s, n_tokens);
    free(toks);
    mp_session_free(s);
    return rate;
}

int main(int argc, char **argv)
{
    mp_knobs knobs; /* the environment's MP_* knobs, as moeplan reads them */
    mp_error kerr;
    if (mp_knobs_start(&knobs, &kerr)) {
        fprintf(stderr, "%s: %s\n", "mp_trace_overhead", kerr.msg);
        return 2;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: mp_trace_overhead MODEL.gguf [--tokens N] [--prompt N] "
                        "[--rounds N] [--threads N]\n");
        return 2;
    }
    int64_t n_tokens = 64, n_prompt = 32, rounds = 3;
    int threads = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        int64_t x = strtoll(argv[i + 1], NULL, 10);
        if (!strcmp(argv[i], "--tokens")) n_tokens = x;
        else if (!strcmp(argv[i], "--prompt")) n_prompt = x;
        else if (!strcmp(argv[i], "--rounds")) rounds = x;
        else if (!strcmp(argv[i], "--threads")) threads = (int)x;
    }
    mp_error err;
    mp_model *m;
    if (mp_model_load(argv[1], &m, &err)) {
        fprintf(stderr, "mp_trace_overhead: %s\n", err.msg);
        return 1;
    }
    mp_trace_writer *w;
    if (mp_trace_writer_open("/tmp/mp_trace_overhead.db", true, &w, &err))
        goto fail;
    mp_trace_run_info info;
    mp_trace_run_info_init(&info);
    info.source = "moeplan";
    if (mp_trace_set_run(w, &info, &err))
        goto fail;
    for (int64_t il = 0; il < m->hp.n_layer; il++) {
        mp_trace_node nd = {.node_index = il, .node_type = "moe", .node_name = "blk", .layer = il,
                            .n_experts = m->hp.n_expert, .top_k = m->hp.n_expert_used,
                            .expert_bytes = (int64_t)mp_model_expert_bytes(m, il)};
        if (mp_trace_add_node(w, &nd, &err))
            goto fail;
    }
    double best[3] = {0, 0, 0};
    const char *names[3] = {"off", "on (writer thread)", "on (synchronous)"};
    int64_t req = 0;
    for (int64_t r = 0; r < rounds; r++)
        for (int k = 0; k < 3; k++) {
            int mode = (int)((k + r) % 3);
            mp_hooks h;
            mp_trace_hooks_state hs;
            mp_trace_async *as = NULL;
            if (mode == 1 && mp_trace_async_start(w, &as, &h, &err))
                goto fail;
            if (mode == 2)
                h = mp_trace_hooks(&hs, w);
            double rate = run_once(m, mode ? &h : NULL, threads, n_prompt, n_tokens,
                                   mode ? req++ : 0, &knobs, &err);
            if (as && mp_trace_async_stop(as, &err))
                goto fail;
            if (rate < 0)
                goto fail;
            if (rate > best[mode])
                best[mode] = rate;
        }
    if (mp_trace_finish(w, &err))
        goto fail;
    mp_trace_writer_close(w);
    for (int k = 0; k < 3; k++)
        printf("decode tok/s, tracing %-20s %8.2f   ratio to off %.4f\n", names[k], best[k],
               best[k] / best[0]);
    mp_model_free(m);
    return 0;
fail:
    fprintf(stderr, "mp_trace_overhead: %s\n", err.msg);
    return 1;
}
