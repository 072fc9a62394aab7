/* collector/cmd_collect.c — `moeplan collect`: run a prompt set through the model with the trace
 * hooks on, and write the trace plus a results JSON beside it (docs/trace-format.md).
 *
 * Order of work (each failure is one line and exit 1, usage errors exit 2):
 *   options and path checks (before opening anything) → CUPTI (--cupti: refused here, before any
 *   output exists, without a device or a CUPTI build) → prompts → model, tokenizer, SHA-256 →
 *   route replay (--route-replay) → session → placement (checked against --gpu-budget) →
 *   trace (run metadata, one node per MoE layer with bytes per expert) → per prompt: template,
 *   encode, prefill, greedy decode, with the routing recorded through the hooks → footer →
 *   results JSON (temp name, then rename).
 * The trace is written as a temporary beside --trace and renamed over it only once its footer
 * is written (collector/trace.h, mp_trace_writer_create): a run that fails for any reason (a
 * prompt too long for the context, a full disk, a file-size limit, --trace-max-bytes) removes
 * the temporary and leaves an existing trace and results file as they were.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/json.h"
#include "base/args.h"
#include "collector/commands.h"
#include "collector/collect_opts.h"
#include "collector/cupti.h"
#include "collector/prompts.h"
#include "collector/route_replay.h"
#include "base/sha256.h"
#include "collector/trace.h"
#include "kernels/quant.h"
#include "base/atomic_file.h"
#include "runtime/model.h"
#include "runtime/executor.h"
#include "runtime/gpu.h"
#include "runtime/placement.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "tokenizer/tokenizer.h"
#include "base/clock.h"

typedef struct prompt_result {
    int64_t n_prompt_tokens, n_gen_tokens;
    int64_t prefill_ns, decode_ns;
} prompt_result;


static void cpu_model(char *out, size_t cap)
{
    snprintf(out, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            char *c = strchr(line, ':');
            if (c) {
                c += 1 + (c[1] == ' ');
                c[strcspn(c, "\n")] = 0;
                snprintf(out, cap, "%s", c);
            }
            break;
        }
    fclose(f);
}

/* "Q4_K:ffn_gate_exps,Q4_K:ffn_up_exps,Q6_K:ffn_down_exps" for layer 0 (the expert weights). */
static void quant_types(const mp_model *m, char *out, size_t cap)
{
    const mp_layer *l = &m->layers[0];
    const char *g = mp_type_name(l->gate_exps.type), *u = mp_type_name(l->up_exps.type),
               *d = mp_type_name(l->down_exps.type);
    snprintf(out, cap, "%s:ffn_gate_exps,%s:ffn_up_exps,%s:ffn_down_exps", g ? g : "?",
             u ? u : "?", d ? d : "?");
}

/* The model file's SHA-256, with its own progress line (a model read from disk takes minutes). */
static mp_status hash_model(const mp_collect_opts *o, char sha[65], mp_error *err)
{
    mp_progress pr;
    mp_progress_begin(&pr, mp_progress_stream(o->progress), "collect: SHA-256 of the model",
                      MP_PROGRESS_BYTES, 0);
    const mp_status st = mp_sha256_file_progress(o->model_path, "model", sha, NULL, &pr, err);
    mp_progress_end(&pr);
    return st;
}

/* The run's config JSON plus what placement and route replay add (strings escaped by cJSON). */
static char *config_with_placement(const char *base, const mp_collect_opts *o,
                                   const mp_placement *pl, const mp_route_replay *rr, bool gpu,
                                   const mp_knobs *knobs)
{
    cJSON *c = cJSON_Parse(base);
    if (!c)
        return NULL;
    char summary[1024];
    mp_placement_summary(pl, summary, sizeof summary);
    cJSON_AddStringToObject(c, "placement", pl->desc);
    cJSON_AddStringToObject(c, "placement_summary", summary);
    cJSON_AddStringToObject(c, "executor", gpu ? "gpu" : "cpu (every expert ran on the CPU; the "
                                                         "placement was only checked)");
    cJSON_AddBoolToObject(c, "cupti", o->cupti);
    if (o->placement.budget_bytes)
        cJSON_AddNumberToObject(c, "gpu_budget_bytes", (double)o->placement.budget_bytes);
    else
        cJSON_AddNullToObject(c, "gpu_budget_bytes");
    if (rr) {
        cJSON_AddStringToObject(c, "route_replay", o->route_replay);
        cJSON_AddStringToObject(c, "route_replay_sha256", mp_route_replay_sha256(rr));
    } else {
        cJSON_AddNullToObject(c, "route_replay");
    }
    char *text = mp_knobs_add_json(knobs, c) ? cJSON_PrintUnformatted(c) : NULL;
    cJSON_Delete(c);
    return text;
}

/* The results JSON, written into out's temporary (renamed by the caller once the trace is in
 * place, so that a trace that fails to finish leaves the old results file too). */
static mp_status write_results(const mp_collect_opts *o, const mp_prompt_set *ps,
                               const prompt_result *res, int64_t n_done, mp_outfile *out,
                               mp_error *err)
{
    const mp_json_mark mark = mp_json_begin(); /* a failed cJSON allocation drops a member */
    cJSON *root = cJSON_CreateObject(), *arr = cJSON_CreateArray();
    cJSON_AddStringToObject(root, "model", o->model_path);
    cJSON_AddStringToObject(root, "trace", o->trace_path);
    int64_t tot_gen = 0, tot_decode_ns = 0, tot_prompt = 0, tot_prefill_ns = 0;
    for (int64_t i = 0; i < n_done; i++) {
        const prompt_result *r = &res[i];
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "id", ps->items[i].id);
        cJSON_AddNumberToObject(p, "n_prompt_tokens", (double)r->n_prompt_tokens);
        cJSON_AddNumberToObject(p, "n_gen_tokens", (double)r->n_gen_tokens);
        cJSON_AddNumberToObject(p, "prefill_ms", (double)r->prefill_ns * 1e-6);
        cJSON_AddNumberToObject(p, "decode_ms", (double)r->decode_ns * 1e-6);
        cJSON_AddNumberToObject(p, "prefill_tok_s", r->prefill_ns ? (double)r->n_prompt_tokens * 1e9 / (double)r->prefill_ns : 0);
        /* decode steps evaluate n_gen - 1 tokens (the last sampled token is not evaluated) */
        cJSON_AddNumberToObject(p, "decode_tok_s", r->decode_ns && r->n_gen_tokens > 1 ? (double)(r->n_gen_tokens - 1) * 1e9 / (double)r->decode_ns : 0);
        mp_json_append(arr, p);
        tot_gen += r->n_gen_tokens > 1 ? r->n_gen_tokens - 1 : 0;
        tot_decode_ns += r->decode_ns;
        tot_prompt += r->n_prompt_tokens;
        tot_prefill_ns += r->prefill_ns;
    }
    mp_json_attach(root, "prompts", arr);
    cJSON *tot = cJSON_CreateObject();
    cJSON_AddNumberToObject(tot, "n_prompts", (double)n_done);
    cJSON_AddNumberToObject(tot, "prefill_tok_s", tot_prefill_ns ? (double)tot_prompt * 1e9 / (double)tot_prefill_ns : 0);
    cJSON_AddNumberToObject(tot, "decode_tok_s", tot_decode_ns ? (double)tot_gen * 1e9 / (double)tot_decode_ns : 0);
    mp_json_attach(root, "total", tot);
    char *text = mp_json_failed_since(mark) ? NULL : cJSON_Print(root);
    cJSON_Delete(root);
    if (!text)
        return mp_fail(err, MP_ERR_NOMEM, "results: out of memory");
    const size_t len = strlen(text);
    text[len] = '\n'; /* cJSON_Print's terminator becomes the file's last newline */
    mp_status s = mp_outfile_open(out, o->results_path, "results", 0, err);
    if (!s)
        s = mp_outfile_write(out, text, len + 1, err);
    free(text);
    return s;
}

/* One line of what CUPTI gave, plus a warning for every record that did not reach the trace. */
static void report_cupti(const mp_cupti_counts *c)
{
    printf("cupti: %lld kernel + %lld memcpy records (%lld outside any step, %lld outside any "
           "layer); %lld flushes took %.1f ms (%.1f us each); at most %lld x %lld KiB buffers\n",
           (long long)c->n_kernel, (long long)c->n_memcpy, (long long)c->n_uncorrelated,
           (long long)c->n_no_node, (long long)c->n_flushes, (double)c->flush_ns * 1e-6,
           c->n_flushes ? (double)c->flush_ns * 1e-3 / (double)c->n_flushes : 0.0,
           (long long)c->max_buffers, (long long)(c->buffer_bytes >> 10));
    if (c->n_dropped || c->n_incomplete || c->n_unwritten)
        fprintf(stderr, "moeplan collect: warning: cupti: records missing from the trace: %lld "
                "dropped by CUPTI (buffers full), %lld incomplete, %lld after the last step\n",
                (long long)c->n_dropped, (long long)c->n_incomplete, (long long)c->n_unwritten);
}

/* Prompt i: template, encode, prefill, greedy decode. The hooks record everything. */
static mp_status run_prompt(const mp_collect_opts *o, const mp_prompt *p, int64_t request_id,
                            const mp_model *m, const mp_tokenizer *tok, mp_session *s,
                            mp_sampler *smp, float *logits, prompt_result *r, int64_t *tokens_done,
                            mp_progress *pr, mp_error *err)
{
    char *text = NULL;
    mp_status st;
    if (o->raw_prompts) {
        text = strdup(p->text);
    } else if ((st = mp_chat_apply("chatml", p->text, &text, err))) {
        return mp_error_prefix(err, "prompt %s", p->id);
    }
    if (!text)
        return mp_fail(err, MP_ERR_NOMEM, "out of memory");
    int32_t *ids = NULL;
    size_t n_ids = 0;
    st = mp_tokenizer_encode(tok, text, strlen(text), !o->raw_prompts, &ids, &n_ids, err);
    free(text);
    if (st)
        return mp_error_prefix(err, "prompt %s", p->id);
    int64_t max_tokens = p->max_tokens > 0 ? p->max_tokens : o->max_tokens;
    if (n_ids == 0 || (int64_t)n_ids + max_tokens > mp_session_n_ctx(s)) {
        free(ids);
        return mp_fail(err, MP_ERR_LIMIT, "prompt %s: %zu prompt tokens + %lld to generate exceed "
                       "the context of %lld tokens (use --ctx)", p->id, n_ids,
                       (long long)max_tokens, (long long)mp_session_n_ctx(s));
    }
    r->n_prompt_tokens = (int64_t)n_ids;
    mp_session_begin_request(s, request_id, ids, (int64_t)n_ids);
    int64_t t = mp_now_ns();
    st = mp_session_eval(s, ids, (int64_t)n_ids, false, logits, err);
    free(ids);
    r->prefill_ns = mp_now_ns() - t;
    if (st)
        return mp_error_prefix(err, "prompt %s: prefill", p->id);
    *tokens_done += (int64_t)n_ids;
    mp_progress_add2(pr, (int64_t)n_ids);
    t = mp_now_ns();
    int64_t n_gen = 0;
    for (;;) {
        int32_t next = mp_sampler_sample(smp, logits);
        n_gen++;
        if (mp_tokenizer_is_eog(tok, next) || n_gen >= max_tokens)
            break;
        if ((st = mp_session_eval(s, &next, 1, false, logits, err)))
            return mp_error_prefix(err, "prompt %s: decode step %lld", p->id, (long long)n_gen);
        (*tokens_done)++;
        mp_progress_add2(pr, 1);
        mp_progress_poll(pr); /* a long prompt's tokens redraw the line too */
    }
    r->decode_ns = mp_now_ns() - t;
    r->n_gen_tokens = n_gen;
    mp_session_end_request(s, n_gen);
    (void)m;
    return MP_OK;
}

int mp_cmd_collect(int argc, char **argv, const mp_knobs *knobs)
{
    mp_collect_opts o;
    mp_error err;
    if (mp_collect_opts_parse(argc, argv, &o, &err))
        return mp_cli_usage_error("collect", err.msg);
    if (o.help) {
        mp_collect_usage(stdout);
        return 0;
    }
    mp_status st = mp_collect_check_paths(&o, &err);
    if (st) {
        fprintf(stderr, "moeplan collect: error: %s\n", err.msg);
        return st == MP_ERR_ARG ? 2 : 1;
    }
    mp_prompt_set ps = {0};
    mp_model *m = NULL;
    mp_tokenizer *tok = NULL;
    mp_trace_writer *w = NULL;
    mp_trace_async *as = NULL;
    mp_session *s = NULL;
    mp_sampler *smp = NULL;
    float *logits = NULL;
    prompt_result *res = NULL;
    const char **labels = NULL; /* (2 × n prompts): external ids, then texts */
    mp_trace_hooks_state hs;
    mp_hooks hooks = {0}; /* filled once the trace exists; the session holds its address */
    mp_placement pl = {0};
    bool use_gpu = false;
    mp_route_replay *rr = NULL;
    mp_route_source route_src;
    mp_cupti *cupti = NULL;
    mp_cupti_hooks_state chs;
    char *config_full = NULL;
    mp_outfile results_out = {.fd = -1}; /* staged until the trace is in place */
    char profile_sha[65];
    int64_t n_done = 0;
    char sha[65], cpu[256], quant[256], config[512];
    mp_progress pr = {0}; /* the prompts' progress; silent until begun */
    if (o.cupti && (st = mp_cupti_start(&cupti, &err))) {
        mp_error_prefix(&err, "--cupti");
        goto out;
    }
    if ((st = mp_prompts_load(o.prompts_path, &ps, &err)) ||
        (st = mp_model_load(o.model_path, &m, &err)) ||
        (st = mp_tokenizer_load(m->gguf, &tok, &err)) ||
        (st = hash_model(&o, sha, &err)))
        goto out;
    if (!o.raw_prompts && m->hp.arch != MP_ARCH_QWEN3MOE) {
        st = mp_fail(&err, MP_ERR_UNSUPPORTED, "%s: no chat template for architecture %s; use "
                     "--raw-prompts", o.model_path, mp_arch_get(m->hp.arch)->name);
        goto out;
    }
    res = calloc((size_t)ps.n, sizeof *res);
    logits = malloc((size_t)m->hp.n_vocab * sizeof *logits);
    mp_sampler_params sp = {.temperature = 0, .top_k = 0, .top_p = 1, .seed = 0};
    smp = mp_sampler_new(&sp, m->hp.n_vocab);
    if (!res || !logits || !smp) {
        st = mp_fail(&err, MP_ERR_NOMEM, "out of memory");
        goto out;
    }
    mp_session_params sessp = {.n_ctx = o.n_ctx, .n_threads = o.n_threads, .n_batch = o.n_batch,
                               .hooks = &hooks, .knobs = knobs};
    if (o.route_replay) {
        if ((st = mp_route_replay_open(o.route_replay, m->hp.n_layer, m->hp.n_expert,
                                       m->hp.n_expert_used, &rr, &err)))
            goto out;
        route_src = mp_route_replay_source(rr);
        sessp.route_src = &route_src;
    }
    /* executor and placement (checked against the budget) before anything is written */
    if ((st = mp_executor_plan(m, o.placement.executor, &o.placement, &sessp, &pl,
                               &use_gpu, &err)))
        goto out;
    sessp.placement = use_gpu ? &pl : NULL;
    if ((st = mp_session_new(m, &sessp, &s, &err)))
        goto out;
    /* the trace is created only once the run is known to be possible (replay geometry,
     * placement and budget checked): a refused run leaves no file behind */
    if ((st = mp_trace_writer_create(o.trace_path, o.force, &w, &err)))
        goto out;
    labels = calloc((size_t)ps.n * 2, sizeof *labels); /* ids, then texts */
    if (!labels) {
        st = mp_fail(&err, MP_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int64_t i = 0; i < ps.n; i++) {
        labels[i] = ps.items[i].id;
        labels[ps.n + i] = ps.items[i].text;
    }
    mp_trace_writer_set_request_labels(w, labels, o.store_prompts ? labels + ps.n : NULL, ps.n);
    if (o.trace_max_bytes && (st = mp_trace_writer_limit_bytes(w, o.trace_max_bytes, &err)))
        goto out;
    if (o.sync_writer) {
        hooks = mp_trace_hooks(&hs, w);
    } else if ((st = mp_trace_async_start(w, &as, &hooks, &err))) {
        goto out;
    }
    if (cupti) { /* tag GPU work per (step, layer); records stored at each step's end */
        mp_hooks inner = hooks;
        hooks = o.sync_writer ? mp_cupti_hooks(&chs, cupti, &inner, mp_cupti_sink_trace, w)
                              : mp_cupti_hooks(&chs, cupti, &inner, mp_cupti_sink_async, as);
    }
    cpu_model(cpu, sizeof cpu);
    quant_types(m, quant, sizeof quant);
    snprintf(config, sizeof config,
             "{\"max_tokens\":%lld,\"raw_prompts\":%s,\"store_prompts\":%s,\"n_ctx\":%lld,"
             "\"n_batch\":%lld,\"threads\":%d,\"sampling\":\"greedy\",\"writer\":\"%s\","
             "\"prompts\":\"%s\"}",
             (long long)o.max_tokens, o.raw_prompts ? "true" : "false",
             o.store_prompts ? "true" : "false", (long long)mp_session_n_ctx(s),
             (long long)o.n_batch, mp_session_n_threads(s), o.sync_writer ? "sync" : "thread",
             "see requests.external_id");
    if (!(config_full = config_with_placement(config, &o, &pl, rr, use_gpu, knobs))) {
        st = mp_fail(&err, MP_ERR_NOMEM, "out of memory");
        goto out;
    }
    mp_trace_run_info info;
    mp_trace_run_info_init(&info);
    info.source = "moeplan";
    info.model_path = o.model_path;
    info.model_sha256 = sha;
    info.architecture = mp_arch_get(m->hp.arch)->name;
    info.n_layers = m->hp.n_layer;
    info.n_moe_layers = m->hp.n_layer;
    info.n_experts = m->hp.n_expert;
    info.top_k = m->hp.n_expert_used;
    info.n_embd = m->hp.n_embd;
    info.n_ff_expert = m->hp.n_ff_exp;
    info.n_vocab = m->hp.n_vocab;
    info.quant_types = quant;
    info.device = use_gpu ? mp_gpu_device_name(mp_session_gpu(s)) : "cpu";
    info.cpu_model = cpu;
    info.threads = mp_session_n_threads(s);
    info.config_json = config_full;
    if (pl.profile_image) { /* the hash of the bytes the placement was built from */
        mp_sha256 psh;
        uint8_t d[32];
        mp_sha256_init(&psh);
        mp_sha256_update(&psh, pl.profile_image, pl.profile_image_bytes);
        if (!mp_sha256_final(&psh, d)) {
            st = mp_fail(&err, MP_ERR_NOMEM, "out of memory for the profile's hash");
            goto out;
        }
        mp_sha256_hex(d, profile_sha);
        info.profile_sha256 = profile_sha;
    }
    if (o.placement.budget_bytes)
        info.budget_bytes = (int64_t)(o.placement.budget_bytes > INT64_MAX ? INT64_MAX
                                                                          : o.placement.budget_bytes);
    if ((st = mp_trace_set_run(w, &info, &err)))
        goto out;
    for (int64_t il = 0; il < m->hp.n_layer; il++) {
        char name[48];
        snprintf(name, sizeof name, "blk.%lld.ffn_moe", (long long)il);
        mp_trace_node nd = {.node_index = il, .node_type = "moe", .node_name = name, .layer = il,
                            .n_experts = m->hp.n_expert, .top_k = m->hp.n_expert_used,
                            .expert_bytes = (int64_t)mp_model_expert_bytes(m, il),
                            .weight_format = MP_TRACE_W_F16};
        if ((st = mp_trace_add_node(w, &nd, &err)))
            goto out;
    }
    int64_t tokens_done = 0;
    mp_progress_begin(&pr, mp_progress_stream(o.progress), "collect", "prompts", ps.n);
    mp_progress_count2(&pr, "tokens");
    for (int64_t i = 0; i < ps.n; i++) {
        if ((st = run_prompt(&o, &ps.items[i], i, m, tok, s, smp, logits, &res[i], &tokens_done,
                             &pr, &err)))
            goto out;
        n_done++;
        if (o.sync_writer && hs.status) { /* the async writer reports at stop */
            err = hs.error;
            st = hs.status;
            goto out;
        }
        if (cupti && chs.status) {
            err = chs.error;
            st = chs.status;
            goto out;
        }
        mp_progress_set(&pr, i + 1);
    }
    mp_progress_end(&pr);
    if (as) {
        st = mp_trace_async_stop(as, &err);
        as = NULL;
        if (st)
            goto out;
    }
    mp_cupti_counts cc = {0};
    if (cupti) { /* stopped before finish: records that arrive now have no step to go to */
        st = mp_cupti_stop(cupti, &cc, &err);
        cupti = NULL;
        if (st)
            goto out;
    }
    if ((st = write_results(&o, &ps, res, n_done, &results_out, &err)))
        goto out;
    if ((st = mp_trace_finish(w, &err)) || (st = mp_outfile_commit(&results_out, &err)))
        goto out;
    mp_trace_counts c = mp_trace_writer_counts(w);
    printf("collected %lld prompts: %lld steps, %lld routing records -> %s (results: %s)\n",
           (long long)c.n_requests, (long long)c.n_steps, (long long)c.n_routing, o.trace_path,
           o.results_path);
    {
        char line[1024];
        mp_placement_summary(&pl, line, sizeof line);
        if (use_gpu) {
            printf("placement: %s\n", line);
            mp_gpu_report(mp_session_gpu(s), line, sizeof line);
            printf("executor gpu: %s\n", line);
        } else {
            printf("placement: %s (executor cpu: all experts ran on the CPU)\n", line);
        }
        if (rr)
            printf("routing replayed from %s: %lld rows per layer, %lld wrap(s)\n", o.route_replay,
                   (long long)mp_route_replay_rows(rr), (long long)mp_route_replay_wraps(rr));
        if (o.cupti)
            report_cupti(&cc);
    }
out:
    /* a replay that stopped the run knows why; the runtime only knows that it stopped */
    if (st && rr && mp_route_replay_error(rr)->code)
        err = *mp_route_replay_error(rr);
    if (as) {
        mp_error e2;
        mp_status s2 = mp_trace_async_stop(as, &e2);
        if (st == MP_OK && s2) {
            st = s2;
            err = e2;
        }
    }
    if (st && w) {
        mp_error e3;
        mp_trace_abort(w, err.msg, &e3);
    }
    if (cupti) {
        mp_error e4;
        mp_cupti_stop(cupti, NULL, &e4); /* the run failed already; its error is the one shown */
    }
    mp_outfile_abort(&results_out);
    mp_trace_writer_close(w);
    mp_session_free(s);
    mp_route_replay_close(rr);
    mp_placement_free(&pl);
    free(config_full);
    mp_sampler_free(smp);
    free(logits);
    free(res);
    free(labels);
    mp_tokenizer_free(tok);
    mp_model_free(m);
    mp_prompts_free(&ps);
    if (st) {
        mp_progress_end(&pr); /* ends the line where the run stopped */
        fprintf(stderr, "moeplan collect: error: %s\n", err.msg);
        return 1;
    }
    return 0;
}
