/* runtime/cmd_run.c — `moeplan run`: generate text from a GGUF MoE model.
 *
 * Loads the model and its tokenizer, applies the chatml template (qwen3moe, unless --raw),
 * prefills the prompt, then decodes until -n tokens or an end-of-generation token, streaming the
 * text to stdout. A summary line goes to stderr. Placement flags (runtime/placement.h) are checked
 * against the GPU budget before any work; the GPU executor runs them when a CUDA device is usable
 * (runtime/executor.h), else (or with --executor cpu) every expert runs on the CPU and the summary
 * says so. --route-replay goes through the function table the CLI passes to
 * mp_cmd_run_with (the runtime never links the trace reader). Every numeric flag is parsed strictly (whole
 * string, range-checked); a bad flag is a usage error (exit 2), any other failure exit 1. Flags are
 * read by the shared parser (base/args.h).
 */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/args.h"
#include "runtime/commands.h"
#include "kernels/quant.h"
#include "runtime/model.h"
#include "runtime/engine.h"
#include "runtime/gpu.h"
#include "runtime/placement.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "runtime/threadpool.h"
#include "tokenizer/tokenizer.h"
#include "base/input_file.h"
#include "base/numparse.h"
#include "base/clock.h"
#include "runtime/knobs_apply.h"

static void usage(FILE *f)
{
    char archs[256];
    mp_arch_names(archs, sizeof archs); /* the loader's table: the help cannot fall behind it */
    fprintf(f,
            "usage: moeplan run -m MODEL (-p PROMPT | -f FILE) [options]\n"
            "\n"
            "Generate text from a GGUF MoE model (%s): on the GPU\n"
            "executor when a CUDA device is usable (the placement's experts on the GPU, the others\n"
            "on the CPU), else on the CPU.\n"
            "\n", archs);
    fprintf(f,
            "  -m, --model PATH     GGUF model file\n"
            "  -p, --prompt TEXT    prompt text\n"
            "  -f, --file PATH      read the prompt from a file\n"
            "  -n, --n-predict N    tokens to generate (default 64, 0..1000000)\n"
            "  -t, --threads N      CPU threads (default: the CPUs this process may use, 1..1024)\n"
            "      --temp T         sampling temperature (default 0: greedy, 0..100)\n"
            "      --top-k K        keep the K most likely tokens (default 0: off)\n"
            "      --top-p P        nucleus sampling mass (default 1: off, 0..1)\n"
            "  -s, --seed S         sampler seed (default 0, unsigned 64-bit)\n"
            "  -c, --ctx-size, --ctx N  context length in tokens (default min(model's, 4096))\n"
            "  -b, --batch-size N   rows per prefill chunk (default: 512, at most the context)\n"
            "      --raw            feed the prompt as is (no chat template)\n"
            "      --no-simd        use the scalar reference kernels (as MP_ISA=scalar)\n"
            "      --route-replay TRACE  take every layer's expert choices from a trace of a model\n"
            "                       with the same layers, experts and top-k (docs/placement.md)\n"
            "%s"
            MP_CLI_NGL_HELP
            "  -h, --help           show this help\n"
            "\n"
            "Text goes to stdout; a summary line (prompt tokens, prefill tok/s, generated tokens,\n"
            "decode tok/s, threads, ISA) goes to stderr, then the placement and the executor that\n"
            "ran it. With --executor cpu a placement is only checked against the budget and\n"
            "reported: every expert runs on the CPU.\n", mp_placement_flags_help);
}

static int usage_error(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "moeplan run: error: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, " (see moeplan run --help)\n");
    return 2;
}

typedef struct run_opts {
    const char *model, *prompt, *file;
    int64_t n_predict, threads, top_k, ctx, batch; /* batch 0: the runtime's default */
    float temp, top_p;
    uint64_t seed;
    bool raw, no_simd;
    mp_placement_opts pl;
    const char *route_replay;
} run_opts;

enum { OPT_TEMP = 256, OPT_TOP_K, OPT_TOP_P, OPT_RAW, OPT_NO_SIMD, OPT_ROUTE_REPLAY, OPT_PLACEMENT,
       OPT_NGL };

static const mp_cli_opt run_flags[] = {
    {"model", 'm', true, 'm', NULL},
    {"prompt", 'p', true, 'p', NULL},
    {"file", 'f', true, 'f', NULL},
    {"n-predict", 'n', true, 'n', NULL},
    {"threads", 't', true, 't', NULL},
    {"temp", 0, true, OPT_TEMP, NULL},
    {"top-k", 0, true, OPT_TOP_K, NULL},
    {"top-p", 0, true, OPT_TOP_P, NULL},
    {"seed", 's', true, 's', NULL},
    {"ctx-size", 'c', true, 'c', NULL},
    {"ctx", 0, true, 'c', NULL},
    {"batch-size", 'b', true, 'b', NULL},
    {"raw", 0, false, OPT_RAW, NULL},
    {"no-simd", 0, false, OPT_NO_SIMD, NULL},
    {"route-replay", 0, true, OPT_ROUTE_REPLAY, NULL},
    MP_CLI_PLACEMENT_OPTS(OPT_PLACEMENT),
    MP_CLI_NGL_OPTS(OPT_NGL),
    {"help", 'h', false, 'h', NULL},
    {0},
};

/* 0 ok, 1 help shown, 2 usage error (reported) */
static int parse_args(int argc, char **argv, run_opts *o)
{
    *o = (run_opts){.n_predict = 64, .threads = 0, .top_k = 0, .ctx = 0, .temp = 0.0f,
                    .top_p = 1.0f, .seed = 0};
    mp_cli c;
    mp_cli_init(&c, "run", run_flags, argc, argv);
    const char *v;
    for (int id; (id = mp_cli_next(&c, &v)) != MP_CLI_END;) {
        bool ok = true;
        char expect[64] = "";
        double f;
        mp_status pst;
        mp_error perr;
        int64_t ngl;
        switch (id) {
        case MP_CLI_ERROR:
            return mp_cli_usage_error("run", c.err.msg);
        case MP_CLI_POSITIONAL:
            return usage_error("unexpected argument '%s'%s", v, "");
        case 'h':
            usage(stdout);
            return 1;
        case OPT_RAW: o->raw = true; break;
        case OPT_NO_SIMD: o->no_simd = true; break;
        case OPT_PLACEMENT:
            if (mp_placement_opts_set(&o->pl, c.flag, v, &pst, &perr), pst)
                return usage_error("%s%s", perr.msg, "");
            break;
        case OPT_NGL:
            if (!(ok = mp_parse_i64_said(v, -1, INT32_MAX, &ngl, expect, sizeof expect)))
                break;
            mp_cli_note_ngl("run", v);
            break;
        case OPT_ROUTE_REPLAY: o->route_replay = v; break;
        case 'm': o->model = v; break;
        case 'p': o->prompt = v; break;
        case 'f': o->file = v; break;
        case 'n': ok = mp_parse_i64_said(v, 0, 1000000, &o->n_predict, expect, sizeof expect); break;
        case 't': ok = mp_parse_i64_said(v, 1, 1024, &o->threads, expect, sizeof expect); break;
        case OPT_TEMP:
            if ((ok = mp_parse_f64_said(v, 0.0, 100.0, &f, expect, sizeof expect)))
                o->temp = (float)f;
            break;
        case OPT_TOP_K: ok = mp_parse_i64_said(v, 0, INT32_MAX, &o->top_k, expect, sizeof expect); break;
        case OPT_TOP_P:
            if ((ok = mp_parse_f64_said(v, 0.0, 1.0, &f, expect, sizeof expect)))
                o->top_p = (float)f;
            break;
        case 's': ok = mp_parse_u64_said(v, &o->seed, expect, sizeof expect); break;
        case 'c': ok = mp_parse_i64_said(v, 1, (int64_t)1 << 22, &o->ctx, expect, sizeof expect); break;
        case 'b': ok = mp_parse_i64_said(v, 1, (int64_t)1 << 20, &o->batch, expect, sizeof expect); break;
        }
        if (!ok) {
            char what[160];
            snprintf(what, sizeof what, "'%s' for %s: expected %s", v, c.given, expect);
            return usage_error("invalid value %s%s", what, "");
        }
    }
    if (!o->model)
        return usage_error("-m MODEL is required%s%s", "", "");
    if (!o->prompt == !o->file)
        return usage_error("give exactly one of -p PROMPT and -f FILE%s%s", "", "");
    return 0;
}

static mp_status read_file(const char *path, char **out, size_t *len, mp_error *err)
{
    return mp_input_read_all(path, "prompt file", (uint64_t)1 << 30, out, len, err);
}

static void emit(const mp_tokenizer *tok, int32_t id)
{
    char buf[256];
    size_t n = mp_tokenizer_decode_token(tok, id, buf, sizeof buf);
    if (n > sizeof buf)
        n = sizeof buf; /* no token text is this long in practice; truncation is visible */
    fwrite(buf, 1, n, stdout);
    fflush(stdout);
}

/* The prompt's tokens: the text (-p, or -f's file), in the chatml template for qwen3moe unless
 * --raw, after BOS when the tokenizer adds one. *out is malloc'd; at least one token. */
static mp_status encode_prompt(const run_opts *o, const mp_model *m, const mp_tokenizer *tok,
                               int32_t **out, size_t *n_out, mp_error *err)
{
    char *text = NULL, *templated = NULL;
    int32_t *enc = NULL;
    size_t text_len = 0, n_enc = 0;
    mp_status st;
    if (o->file)
        st = read_file(o->file, &text, &text_len, err);
    else if ((text = strdup(o->prompt)))
        text_len = strlen(text), st = MP_OK;
    else
        st = mp_fail(err, MP_ERR_NOMEM, "out of memory");
    /* the model's chat template (the file's, mp_tokenizer_chat_template; --raw: none); the BOS,
     * where the vocabulary wants one, comes from the encoder */
    const char *tpl = o->raw ? NULL : mp_tokenizer_chat_template(tok, NULL);
    if (!st && tpl)
        st = mp_chat_apply(tpl, text, &templated, err);
    if (!st && (st = mp_tokenizer_encode(tok, tpl ? templated : text, tpl ? strlen(templated) : text_len, tpl != NULL,
                                         &enc, &n_enc, err)))
        mp_error_prefix(err, "%s", o->file ? o->file : "prompt");
    if (!st && n_enc == 0)
        st = mp_fail(err, MP_ERR_ARG, "the prompt is empty (no tokens)");
    free(templated);
    free(text);
    if (st) {
        free(enc);
        return st;
    }
    *out = enc;
    *n_out = n_enc;
    return MP_OK;
}

typedef struct gen_timing {
    double prefill_s, decode_s;
    int64_t n_gen;
} gen_timing;

/* Prefill the prompt, then sample and stream tokens until -n, an end-of-generation token or a full
 * context. */
static mp_status prefill_and_decode(const run_opts *o, mp_session *s, const mp_tokenizer *tok,
                                    mp_sampler *smp, const int32_t *prompt, size_t n_prompt, float *logits,
                                    gen_timing *t, mp_error *err)
{
    const int64_t n_ctx = mp_session_n_ctx(s);
    const double t0 = mp_now_s();
    mp_status st = mp_session_eval(s, prompt, (int64_t)n_prompt, false, logits, err);
    if (st)
        return st;
    t->prefill_s = mp_now_s() - t0;
    const double t1 = mp_now_s();
    while (t->n_gen < o->n_predict) {
        const int32_t next = mp_sampler_sample(smp, logits);
        t->n_gen++;
        if (mp_tokenizer_is_eog(tok, next))
            break;
        emit(tok, next);
        if (t->n_gen == o->n_predict)
            break;
        if (mp_session_n_past(s) >= n_ctx) {
            fprintf(stderr, "\nmoeplan run: context of %" PRId64 " tokens is full; stopping\n", n_ctx);
            break;
        }
        if ((st = mp_session_eval(s, &next, 1, false, logits, err)))
            return st;
    }
    t->decode_s = mp_now_s() - t1;
    return MP_OK;
}

/* The summary on stderr: speeds, then the placement and executor, then the replay. */
static void print_summary(const run_opts *o, const mp_engine *e, size_t n_prompt, const gen_timing *t)
{
    /* decode speed counts forward passes: the first token comes from the prefill's logits */
    const int64_t n_decode_evals = t->n_gen > 0 ? t->n_gen - 1 : 0;
    printf("\n");
    fflush(stdout); /* the text's last line before the summary on stderr */
    fprintf(stderr,
            "moeplan run: prompt tokens %zu, prefill %.2f tok/s, generated tokens %" PRId64
            ", decode %.2f tok/s, threads %d, isa %s\n",
            n_prompt, t->prefill_s > 0 ? (double)n_prompt / t->prefill_s : 0.0, t->n_gen,
            t->decode_s > 0 && n_decode_evals > 0 ? (double)n_decode_evals / t->decode_s : 0.0,
            mp_session_n_threads(e->session), mp_kernels_isa());
    char line[1024];
    if (e->gpu) {
        mp_placement_summary(&e->placement, line, sizeof line);
        fprintf(stderr, "moeplan run: placement: %s\n", line);
        mp_gpu_report(mp_session_gpu(e->session), line, sizeof line);
        fprintf(stderr, "moeplan run: executor gpu: %s\n", line);
    } else if (mp_placement_opts_given(&o->pl)) {
        mp_placement_summary(&e->placement, line, sizeof line);
        fprintf(stderr, "moeplan run: placement: %s (executor cpu: all experts ran on the CPU)\n", line);
    }
    if (e->replay_state) {
        e->replay->describe(e->replay_state, line, sizeof line);
        fprintf(stderr, "moeplan run: %s\n", line);
    }
}

static mp_status generate(const run_opts *o, const mp_route_replay_api *replay, const mp_knobs *knobs,
                          mp_error *err)
{
    mp_engine e = {.params = {.n_ctx = o->ctx, .n_threads = (int)o->threads, .n_batch = o->batch, .knobs = knobs}};
    mp_tokenizer *tok = NULL;
    mp_sampler *smp = NULL;
    int32_t *prompt = NULL;
    float *logits = NULL;
    size_t n_prompt = 0;
    gen_timing t = {0};
    mp_status st;
    if ((st = mp_engine_load(&e, o->model, err)) || (st = mp_tokenizer_load(e.model->gguf, &tok, err)))
        goto done;
    const mp_model *m = e.model;
    if (mp_tokenizer_n_vocab(tok) > m->hp.n_vocab) {
        st = mp_fail(err, MP_ERR_FORMAT, "%s: tokenizer has %d tokens, token_embd.weight only %" PRId64
                     " rows", o->model, (int)mp_tokenizer_n_vocab(tok), m->hp.n_vocab);
        goto done;
    }
    if ((st = encode_prompt(o, m, tok, &prompt, &n_prompt, err)) ||
        (st = mp_engine_plan(&e, &o->pl, o->route_replay, replay, err)) || (st = mp_engine_start(&e, err)))
        goto done;
    if ((int64_t)n_prompt > mp_session_n_ctx(e.session)) {
        st = mp_fail(err, MP_ERR_LIMIT, "the prompt has %zu tokens, more than the context of %" PRId64
                     " (use -c/--ctx-size)", n_prompt, mp_session_n_ctx(e.session));
        goto done;
    }
    mp_sampler_params smp_p = {.temperature = o->temp, .top_k = (int32_t)o->top_k,
                               .top_p = o->top_p, .seed = o->seed};
    logits = malloc((size_t)m->hp.n_vocab * sizeof *logits);
    smp = mp_sampler_new(&smp_p, m->hp.n_vocab);
    if (!logits || !smp) {
        st = mp_fail(err, MP_ERR_NOMEM, "out of memory for the logits");
        goto done;
    }
    if ((st = prefill_and_decode(o, e.session, tok, smp, prompt, n_prompt, logits, &t, err)))
        mp_engine_step_error(&e, err);
    else
        print_summary(o, &e, n_prompt, &t);
done:
    mp_sampler_free(smp);
    free(logits);
    free(prompt);
    char profile[512]; /* MP_MOE_CPU_PROFILE=1 */
    mp_engine_profile_line(&e, profile, sizeof profile);
    if (profile[0])
        fprintf(stderr, "moeplan run: %s\n", profile);
    mp_engine_close(&e);
    mp_tokenizer_free(tok);
    return st;
}

int mp_cmd_run(int argc, char **argv)
{
    mp_knobs defaults;
    mp_knobs_defaults(&defaults);
    return mp_cmd_run_with(argc, argv, NULL, &defaults);
}

int mp_cmd_run_with(int argc, char **argv, const mp_route_replay_api *replay, const mp_knobs *knobs)
{
    run_opts o;
    const int rc = parse_args(argc, argv, &o);
    if (rc == 1)
        return 0;
    if (rc == 2)
        return 2;
    mp_error err = {0};
    mp_knobs k = *knobs;
    if (mp_knobs_of_flags(&k, o.no_simd, o.pl.costs, &err)) {
        fprintf(stderr, "moeplan run: error: %s\n", err.msg);
        return 1;
    }
    if (generate(&o, replay, &k, &err) != MP_OK) {
        fflush(stdout);
        fprintf(stderr, "moeplan run: error: %s\n", err.msg);
        return 1;
    }
    return 0;
}
