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
#include "runtime/engine.h"
#include "runtime/gpu.h"
#include "runtime/knobs_apply.h"
#include "runtime/placement.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "tokenizer/tokenizer.h"
#include "base/clock.h"
#include "base/machine.h"

typedef struct prompt_result {
    int64_t n_prompt_tokens, n_gen_tokens;
    int64_t prefill_ns, decode_ns;
} prompt_result;


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
                                   const mp_knobs *knobs) /* rr: the engine's replay state, or NULL */
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
    /* the model's chat template (the file's, mp_tokenizer_chat_template, as `run` takes it);
     * --raw-prompts: none */
    const char *tpl = o->raw_prompts ? NULL : mp_tokenizer_chat_template(tok, NULL);
    if (!tpl) {
        text = strdup(p->text);
    } else if ((st = mp_chat_apply(tpl, p->text, &text, err))) {
        return mp_error_prefix(err, "prompt %s", p->id);
    }
    if (!text)
        return mp_fail(err, MP_ERR_NOMEM, "out of memory");
    int32_t *ids = NULL;
    size_t n_ids = 0;
    st = mp_tokenizer_encode(tok, text, strlen(text), tpl != NULL, &ids, &n_ids, err);
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

/* A collect run's state, phase by phase (start → open_trace → run_prompts → finish; close frees
 * whatever was made). */
typedef struct collect_run {
    const mp_collect_opts *o;
    const mp_knobs *knobs;
    mp_prompt_set ps;
    mp_engine e;              /* model, route replay, placement, session */
    mp_tokenizer *tok;
    mp_sampler *smp;
    float *logits;            /* (n_vocab) */
    prompt_result *res;       /* (prompts) */
    const char **labels;      /* (2 × prompts): external ids, then texts */
    mp_trace_writer *w;
    mp_trace_async *as;       /* NULL: the synchronous writer (or stopped) */
    mp_trace_hooks_state hs;
    mp_hooks hooks;           /* filled once the trace exists; the session holds its address */
    mp_cupti *cupti;          /* --cupti, until stopped */
    mp_cupti_hooks_state chs;
    mp_cupti_counts cupti_counts;
    char *config_full;
    mp_outfile results_out;   /* staged until the trace is in place */
    mp_progress pr;           /* the prompts' progress; silent until begun */
    int64_t n_done;
    char sha[65], profile_sha[65], cpu[256], quant[256];
} collect_run;

/* CUPTI (refused here, before any output exists), prompts, the model and its SHA-256, the
 * buffers, then the engine: route replay, executor and placement (checked against the budget),
 * the session. Nothing is written yet. */
static mp_status start(collect_run *c, mp_error *err)
{
    const mp_collect_opts *o = c->o;
    mp_status st;
    if (o->cupti && (st = mp_cupti_start(&c->cupti, err)))
        return mp_error_prefix(err, "--cupti");
    if ((st = mp_prompts_load(o->prompts_path, &c->ps, err)) || (st = mp_engine_load(&c->e, o->model_path, err)) ||
        (st = mp_tokenizer_load(c->e.model->gguf, &c->tok, err)) || (st = hash_model(o, c->sha, err)))
        return st;
    const mp_model *m = c->e.model;
    c->res = calloc((size_t)c->ps.n, sizeof *c->res);
    c->logits = malloc((size_t)m->hp.n_vocab * sizeof *c->logits);
    mp_sampler_params sp = {.temperature = 0, .top_k = 0, .top_p = 1, .seed = 0};
    c->smp = mp_sampler_new(&sp, m->hp.n_vocab);
    c->labels = calloc((size_t)c->ps.n * 2, sizeof *c->labels);
    if (!c->res || !c->logits || !c->smp || !c->labels)
        return mp_fail(err, MP_ERR_NOMEM, "out of memory");
    c->e.params = (mp_session_params){.n_ctx = o->n_ctx, .n_threads = o->n_threads, .n_batch = o->n_batch,
                                      .hooks = &c->hooks, .knobs = c->knobs};
    if ((st = mp_engine_plan(&c->e, &o->placement, o->route_replay, &mp_route_replay_ops, err)))
        return st;
    return mp_engine_start(&c->e, err);
}

/* The trace's run row: the model, the device, the config with the placement, replay and knobs. */
static mp_status set_run(collect_run *c, mp_error *err)
{
    const mp_collect_opts *o = c->o;
    const mp_model *m = c->e.model;
    mp_session *s = c->e.session;
    const mp_placement *pl = &c->e.placement;
    char config[512];
    mp_cpu_model_name(c->cpu, sizeof c->cpu);
    quant_types(m, c->quant, sizeof c->quant);
    const char *tpl = o->raw_prompts ? NULL : mp_tokenizer_chat_template(c->tok, NULL);
    snprintf(config, sizeof config,
             "{\"max_tokens\":%lld,\"raw_prompts\":%s,\"chat_template\":%s%s%s,\"store_prompts\":%s,"
             "\"n_ctx\":%lld,\"n_batch\":%lld,\"threads\":%d,\"sampling\":\"greedy\",\"writer\":\"%s\","
             "\"prompts\":\"%s\"}",
             (long long)o->max_tokens, o->raw_prompts ? "true" : "false", tpl ? "\"" : "", tpl ? tpl : "null",
             tpl ? "\"" : "", o->store_prompts ? "true" : "false",
             (long long)mp_session_n_ctx(s), (long long)o->n_batch, mp_session_n_threads(s),
             o->sync_writer ? "sync" : "thread", "see requests.external_id");
    if (!(c->config_full = config_with_placement(config, o, pl, c->e.replay_state, c->e.gpu, c->knobs)))
        return mp_fail(err, MP_ERR_NOMEM, "out of memory");
    mp_trace_run_info info;
    mp_trace_run_info_init(&info);
    info.source = "moeplan";
    info.model_path = o->model_path;
    info.model_sha256 = c->sha;
    info.architecture = mp_arch_get(m->hp.arch)->name;
    info.n_layers = m->hp.n_layer;
    info.n_moe_layers = m->hp.n_layer;
    info.n_experts = m->hp.n_expert;
    info.top_k = m->hp.n_expert_used;
    info.n_embd = m->hp.n_embd;
    info.n_ff_expert = m->hp.n_ff_exp;
    info.n_vocab = m->hp.n_vocab;
    info.quant_types = c->quant;
    info.device = c->e.gpu ? mp_gpu_device_name(mp_session_gpu(s)) : "cpu";
    info.cpu_model = c->cpu;
    info.threads = mp_session_n_threads(s);
    info.config_json = c->config_full;
    if (pl->profile_image) { /* the hash of the bytes the placement was built from */
        mp_sha256 psh;
        uint8_t d[32];
        mp_sha256_init(&psh);
        mp_sha256_update(&psh, pl->profile_image, pl->profile_image_bytes);
        if (!mp_sha256_final(&psh, d))
            return mp_fail(err, MP_ERR_NOMEM, "out of memory for the profile's hash");
        mp_sha256_hex(d, c->profile_sha);
        info.profile_sha256 = c->profile_sha;
    }
    if (o->placement.budget_bytes)
        info.budget_bytes = (int64_t)(o->placement.budget_bytes > INT64_MAX ? INT64_MAX : o->placement.budget_bytes);
    return mp_trace_set_run(c->w, &info, err);
}

/* The trace, created only once the run is known to be possible (replay geometry, placement and
 * budget checked: a refused run leaves no file behind), its hooks (synchronous or on the writer
 * thread; CUPTI's around them), the run row and one node per MoE layer. */
static mp_status open_trace(collect_run *c, mp_error *err)
{
    const mp_collect_opts *o = c->o;
    mp_status st;
    if ((st = mp_trace_writer_create(o->trace_path, o->force, &c->w, err)))
        return st;
    for (int64_t i = 0; i < c->ps.n; i++) {
        c->labels[i] = c->ps.items[i].id;
        c->labels[c->ps.n + i] = c->ps.items[i].text;
    }
    mp_trace_writer_set_request_labels(c->w, c->labels, o->store_prompts ? c->labels + c->ps.n : NULL, c->ps.n);
    if (o->trace_max_bytes && (st = mp_trace_writer_limit_bytes(c->w, o->trace_max_bytes, err)))
        return st;
    if (o->sync_writer)
        c->hooks = mp_trace_hooks(&c->hs, c->w);
    else if ((st = mp_trace_async_start(c->w, &c->as, &c->hooks, err)))
        return st;
    if (c->cupti) { /* tag GPU work per (step, layer); records stored at each step's end */
        mp_hooks inner = c->hooks;
        c->hooks = o->sync_writer ? mp_cupti_hooks(&c->chs, c->cupti, &inner, mp_cupti_sink_trace, c->w)
                                  : mp_cupti_hooks(&c->chs, c->cupti, &inner, mp_cupti_sink_async, c->as);
    }
    if ((st = set_run(c, err)))
        return st;
    const mp_model *m = c->e.model;
    for (int64_t il = 0; il < m->hp.n_layer; il++) {
        char name[48];
        snprintf(name, sizeof name, "blk.%lld.ffn_moe", (long long)il);
        mp_trace_node nd = {.node_index = il, .node_type = "moe", .node_name = name, .layer = il,
                            .n_experts = m->hp.n_expert, .top_k = m->hp.n_expert_used,
                            .expert_bytes = (int64_t)mp_model_expert_bytes(m, il), .weight_format = MP_TRACE_W_F16};
        if ((st = mp_trace_add_node(c->w, &nd, err)))
            return st;
    }
    return MP_OK;
}

/* Every prompt in turn, the hooks recording it; a writer or CUPTI failure stops the run. */
static mp_status run_prompts(collect_run *c, mp_error *err)
{
    int64_t tokens_done = 0;
    mp_progress_begin(&c->pr, mp_progress_stream(c->o->progress), "collect", "prompts", c->ps.n);
    mp_progress_count2(&c->pr, "tokens");
    for (int64_t i = 0; i < c->ps.n; i++) {
        mp_status st = run_prompt(c->o, &c->ps.items[i], i, c->e.model, c->tok, c->e.session, c->smp, c->logits,
                                  &c->res[i], &tokens_done, &c->pr, err);
        if (st)
            return st;
        c->n_done++;
        if (c->o->sync_writer && c->hs.status) { /* the async writer reports at stop */
            *err = c->hs.error;
            return c->hs.status;
        }
        if (c->cupti && c->chs.status) {
            *err = c->chs.error;
            return c->chs.status;
        }
        mp_progress_set(&c->pr, i + 1);
    }
    mp_progress_end(&c->pr);
    return MP_OK;
}

/* The writer thread and CUPTI stopped, the results staged, the trace's footer written, then the
 * results renamed into place, and the summary printed. */
static mp_status finish(collect_run *c, mp_error *err)
{
    const mp_collect_opts *o = c->o;
    mp_status st;
    if (c->as) {
        st = mp_trace_async_stop(c->as, err);
        c->as = NULL;
        if (st)
            return st;
    }
    if (c->cupti) { /* stopped before finish: records that arrive now have no step to go to */
        st = mp_cupti_stop(c->cupti, &c->cupti_counts, err);
        c->cupti = NULL;
        if (st)
            return st;
    }
    if ((st = write_results(o, &c->ps, c->res, c->n_done, &c->results_out, err)) ||
        (st = mp_trace_finish(c->w, err)) || (st = mp_outfile_commit(&c->results_out, err)))
        return st;
    mp_trace_counts n = mp_trace_writer_counts(c->w);
    printf("collected %lld prompts: %lld steps, %lld routing records -> %s (results: %s)\n",
           (long long)n.n_requests, (long long)n.n_steps, (long long)n.n_routing, o->trace_path, o->results_path);
    const char *why = NULL;
    const char *tpl = mp_tokenizer_chat_template(c->tok, &why);
    if (o->raw_prompts)
        printf("prompts: as they are (--raw-prompts)\n");
    else if (tpl)
        printf("prompts: in the %s chat template (%s)\n", tpl, why);
    else
        printf("prompts: as they are (%s)\n", why);
    char line[1024];
    mp_placement_summary(&c->e.placement, line, sizeof line);
    if (c->e.gpu) {
        printf("placement: %s\n", line);
        mp_gpu_report(mp_session_gpu(c->e.session), line, sizeof line);
        printf("executor gpu: %s\n", line);
    } else {
        printf("placement: %s (executor cpu: all experts ran on the CPU)\n", line);
    }
    if (c->e.replay_state) {
        c->e.replay->describe(c->e.replay_state, line, sizeof line);
        printf("%s\n", line);
    }
    if (o->cupti)
        report_cupti(&c->cupti_counts);
    return MP_OK;
}

/* Free everything; after a failure, the trace's temporary is removed (an existing trace and
 * results file stay as they were) and the error st carries is kept over any later one. */
static void close_run(collect_run *c, mp_status st, mp_error *err)
{
    if (c->as) {
        mp_error e2;
        mp_trace_async_stop(c->as, &e2); /* the run failed already; its error is the one shown */
    }
    if (st && c->w) {
        mp_error e3;
        mp_trace_abort(c->w, err->msg, &e3);
    }
    if (c->cupti) {
        mp_error e4;
        mp_cupti_stop(c->cupti, NULL, &e4);
    }
    mp_outfile_abort(&c->results_out);
    mp_trace_writer_close(c->w);
    mp_engine_close(&c->e);
    free(c->config_full);
    mp_sampler_free(c->smp);
    free(c->logits);
    free(c->res);
    free(c->labels);
    mp_tokenizer_free(c->tok);
    mp_prompts_free(&c->ps);
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
    mp_knobs k = *knobs; /* with a cost file's tuned knobs where the environment left them */
    if (o.placement.costs && mp_knobs_take_costs(&k, "--costs", o.placement.costs, &err)) {
        fprintf(stderr, "moeplan collect: error: %s\n", err.msg);
        return 1;
    }
    collect_run c = {.o = &o, .knobs = &k, .results_out = {.fd = -1}};
    if (!(st = start(&c, &err)) && !(st = open_trace(&c, &err)) && !(st = run_prompts(&c, &err)))
        st = finish(&c, &err);
    if (st)
        mp_engine_step_error(&c.e, &err); /* a replay that stopped the run knows why */
    close_run(&c, st, &err);
    if (st) {
        mp_progress_end(&c.pr); /* ends the line where the run stopped */
        fprintf(stderr, "moeplan collect: error: %s\n", err.msg);
        return 1;
    }
    return 0;
}
