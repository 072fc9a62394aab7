/* mkmodel/cmd_mkmodel.c — `moeplan mkmodel`: write a synthetic GGUF MoE model.
 *
 * Flags are applied in a fixed order whatever their order on the command line: the preset or
 * architecture first, then --quant, then the --type-CLASS overrides (left to right, so a later one
 * wins), then the shape and generator flags. Exit status: 0 written, 1 failure, 2 usage error.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/args.h"
#include "base/atomic_file.h"
#include "mkmodel/commands.h"
#include "kernels/quant.h"
#include "mkmodel/mkmodel.h"
#include "base/progress.h"

/* The weight types' list, wrapped after a comma at 76 columns, each line indented like the
 * options' descriptions. */
static void print_type_list(FILE *f)
{
    const char *p = mp_type_names();
    const size_t width = 76 - 21;
    while (*p) {
        size_t take = strlen(p);
        if (take > width) {
            take = width;
            while (take > 0 && p[take - 1] != ',')
                take--;
            if (!take) /* no comma within a line: cut it */
                take = width;
        }
        fprintf(f, "%21s%.*s\n", "", (int)take, p);
        p += take;
        while (*p == ' ')
            p++;
    }
}

static void usage(FILE *f)
{
    fprintf(f,
        "usage: moeplan mkmodel (--preset NAME | --arch ARCH) [options] -o OUT.gguf\n"
        "\n"
        "Write a synthetic MoE model in GGUF: real tensor names, shapes and metadata keys, random\n"
        "weights from a seed, a byte-level BPE vocabulary, and routers with a tunable popularity\n"
        "skew. The same flags and seed always give the same bytes.\n"
        "\n"
        "  --preset NAME      tiny (CI-sized, default q4_k_m: a few MB), flame (25 x 64 experts,\n"
        "                     top-6: FLAME-MoE-290M's routing geometry), qwen3-30b-a3b, olmoe, mixtral,\n"
        "                     qwen2-57b-a14b, gpt-oss-20b (default mxfp4_moe)\n"
        "  --arch ARCH        qwen3moe, olmoe, mixtral, qwen2moe or gpt-oss with tiny shapes (then set\n"
        "                     the shape flags)\n"
        "  --layers N  --hidden N  --heads N  --kv-heads N  --head-dim N\n"
        "  --experts N  --top-k N  --expert-ff N  --vocab N  --ctx N\n"
        "                     override the preset's shape\n"
        "  --shared-ff N      the shared expert's FFN size (qwen2moe only; --arch qwen2moe: 1024)\n"
        "  --sliding-window N the window of the sliding-window layers, in positions (gpt-oss only;\n"
        "                     default 128)\n"
        "  --yarn-factor F  --yarn-ctx N\n"
        "                     YaRN context extension: factor and original context (0: none; gpt-oss:\n"
        "                     4 and 128, the gpt-oss-20b preset 32 and 4096)\n"
        "  --rope-base F  --rms-eps F  --name STR\n"
        "  --quant MIX        q4_k_m (default: attn_v, ffn_down_exps/shexp and output Q6_K, other\n"
        "                     matrices Q4_K), q5_k_m (the same with Q5_K), q3_k_m (Q3_K; attn_v\n"
        "                     Q5_K, ffn_down_exps/shexp Q4_K, output Q6_K), q2_k (Q2_K; attn_v and\n"
        "                     ffn_down_exps/shexp Q4_K, output Q6_K), q8_0, mxfp4_moe (routed\n"
        "                     experts MXFP4, the other matrices Q8_0; --arch gpt-oss's default),\n"
        "                     bf16, f16, f32; norms, biases, sinks, router and shared expert gate\n"
        "                     vector stay F32\n"
        "  --layer-mix MODE   uniform (default: each class one type in every layer) or llama\n"
        "                     (q4_k_m, q5_k_m: attn_v and ffn_down_* 6 bits only in the first and\n"
        "                     last eighth of the layers and every third layer between, as llama.cpp's\n"
        "                     Q4_K_M and Q5_K_M; with 8 experts attn_k and attn_v Q8_0)\n"
        "  --type-CLASS TYPE  override one class: CLASS is embd, output, attn, attn-q, attn-k,\n"
        "                     attn-v, attn-output, router, experts, ffn-gate, ffn-up, ffn-down, norm,\n"
        "                     qwen2moe's and gpt-oss's bias, qwen2moe's shexp-gate-inp, shexp (the\n"
        "                     shared expert's gate, up, down), shexp-gate, shexp-up, shexp-down,\n"
        "                     gpt-oss's sinks (norm, bias, sinks: F32 only; router, shexp-gate-inp:\n"
        "                     F32, F16, BF16); TYPE is one of\n");
    print_type_list(f);
    fprintf(f,
        "  --skew S           Zipf exponent of each layer's expert popularity (default %.2f;\n"
        "                     0 = uniform); each layer ranks its experts in its own random order\n"
        "  -s, --seed N       PRNG seed (default 0)\n"
        "  -t, --threads N    quantization threads (default: the CPUs this process may use; same output)\n"
        "  -o, --output PATH  output file (written to PATH.tmp.<pid>, then renamed)\n"
        "  --force            overwrite PATH if it exists\n"
        "  --quiet            no progress output\n"
        "  --dry-run          check the flags and print the tensor count and data size; write nothing\n"
        "  --split-experts    each expert its own tensor (blk.N.ffn_gate.E.weight), the layout of GGUFs\n"
        "                     written before llama.cpp merged them (2024); the same values\n"
        "  --fuse-gate-up     each layer's gate and up experts in one tensor (blk.N.ffn_gate_up_exps.weight:\n"
        "                     each expert's gate rows, then its up rows), as llama.cpp's converter\n"
        "                     writes with --fuse-gate-up-exps; the same values\n"
        "  -h, --help         this help\n",
        MP_MK_DEFAULT_SKEW);
}

static int usage_error(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "moeplan mkmodel: error: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, " (see moeplan mkmodel --help)\n");
    return 2;
}

static int parse_i64(const char *flag, const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < 1)
        return usage_error("%s '%s': expected a positive integer", flag, s);
    *out = v;
    return 0;
}

static int parse_u64(const char *flag, const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    if (*s == '-')
        return usage_error("%s '%s': expected a non-negative integer", flag, s);
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end)
        return usage_error("%s '%s': expected a non-negative integer", flag, s);
    *out = v;
    return 0;
}

static int parse_f64(const char *flag, const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v))
        return usage_error("%s '%s': expected a number", flag, s);
    *out = v;
    return 0;
}

static double since(const struct timespec *t0)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t0->tv_sec) + (double)(now.tv_nsec - t0->tv_nsec) * 1e-9;
}

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

/* Counts the bytes written into the progress line; false stops the writer after a signal. */
static bool on_progress(void *user, uint64_t done, uint64_t total)
{
    if (interrupted)
        return false;
    mp_progress_set_total(user, (int64_t)total);
    mp_progress_set(user, (int64_t)done);
    return true;
}

enum { OPT_VALUE = 1, OPT_TYPE, OPT_FORCE, OPT_QUIET, OPT_DRY_RUN, OPT_SPLIT, OPT_FUSE };

/* Every flag that takes a value is OPT_VALUE (told apart by its name), each --type-CLASS is
 * OPT_TYPE (the class is the name's tail: mp_mkmodel_set_type checks it again). */
static const mp_cli_opt mkmodel_flags[] = {
    {"preset", 0, true, OPT_VALUE, NULL}, {"arch", 0, true, OPT_VALUE, NULL},
    {"layers", 0, true, OPT_VALUE, NULL}, {"hidden", 0, true, OPT_VALUE, NULL},
    {"heads", 0, true, OPT_VALUE, NULL}, {"kv-heads", 0, true, OPT_VALUE, NULL},
    {"head-dim", 0, true, OPT_VALUE, NULL}, {"experts", 0, true, OPT_VALUE, NULL},
    {"top-k", 0, true, OPT_VALUE, NULL}, {"expert-ff", 0, true, OPT_VALUE, NULL},
    {"shared-ff", 0, true, OPT_VALUE, NULL}, {"sliding-window", 0, true, OPT_VALUE, NULL},
    {"yarn-factor", 0, true, OPT_VALUE, NULL}, {"yarn-ctx", 0, true, OPT_VALUE, NULL},
    {"vocab", 0, true, OPT_VALUE, NULL}, {"ctx", 0, true, OPT_VALUE, NULL},
    {"rope-base", 0, true, OPT_VALUE, NULL}, {"rms-eps", 0, true, OPT_VALUE, NULL},
    {"name", 0, true, OPT_VALUE, NULL}, {"quant", 0, true, OPT_VALUE, NULL},
    {"layer-mix", 0, true, OPT_VALUE, NULL},
    {"skew", 0, true, OPT_VALUE, NULL}, {"seed", 's', true, OPT_VALUE, NULL},
    {"threads", 't', true, OPT_VALUE, NULL}, {"output", 'o', true, OPT_VALUE, NULL},
    {"type-embd", 0, true, OPT_TYPE, NULL}, {"type-output", 0, true, OPT_TYPE, NULL},
    {"type-attn", 0, true, OPT_TYPE, NULL}, {"type-attn-q", 0, true, OPT_TYPE, NULL},
    {"type-attn-k", 0, true, OPT_TYPE, NULL}, {"type-attn-v", 0, true, OPT_TYPE, NULL},
    {"type-attn-output", 0, true, OPT_TYPE, NULL}, {"type-router", 0, true, OPT_TYPE, NULL},
    {"type-experts", 0, true, OPT_TYPE, NULL}, {"type-ffn-gate", 0, true, OPT_TYPE, NULL},
    {"type-ffn-up", 0, true, OPT_TYPE, NULL}, {"type-ffn-down", 0, true, OPT_TYPE, NULL},
    {"type-norm", 0, true, OPT_TYPE, NULL}, {"type-bias", 0, true, OPT_TYPE, NULL},
    {"type-shexp", 0, true, OPT_TYPE, NULL}, {"type-shexp-gate-inp", 0, true, OPT_TYPE, NULL},
    {"type-shexp-gate", 0, true, OPT_TYPE, NULL}, {"type-shexp-up", 0, true, OPT_TYPE, NULL},
    {"type-shexp-down", 0, true, OPT_TYPE, NULL}, {"type-sinks", 0, true, OPT_TYPE, NULL},
    {"force", 0, false, OPT_FORCE, NULL}, {"quiet", 0, false, OPT_QUIET, NULL},
    {"dry-run", 0, false, OPT_DRY_RUN, NULL}, {"split-experts", 0, false, OPT_SPLIT, NULL},
    {"fuse-gate-up", 0, false, OPT_FUSE, NULL},
    {"help", 'h', false, 'h', NULL},
    {0},
};

/* One flag with a value as given, by its canonical name ("--seed" for -s too). */
typedef struct mk_flag {
    int id;
    char name[32];
    const char *value;
} mk_flag;

static int mkmodel(int argc, char **argv, mk_flag *flags, int *n_flags);

int mp_cmd_mkmodel(int argc, char **argv)
{
    mk_flag *flags = calloc((size_t)argc + 1, sizeof *flags);
    if (!flags) {
        fprintf(stderr, "moeplan mkmodel: error: out of memory\n");
        return MP_EXIT_FAILURE;
    }
    int n_flags = 0;
    const int rc = mkmodel(argc, argv, flags, &n_flags);
    free(flags);
    return rc;
}

/* Pass 1 (the command line, the preset or architecture, --quant, the --type-CLASS overrides in
 * order), then pass 2 (shapes and generator settings) over the flags pass 1 kept. */
static int mkmodel(int argc, char **argv, mk_flag *flags, int *n_flags)
{
    const char *preset = NULL, *arch = NULL, *quant = NULL, *out_path = NULL;
    bool force = false, quiet = false, dry_run = false, split = false, fuse = false;
    mp_cli c;
    mp_cli_init(&c, "mkmodel", mkmodel_flags, argc, argv);
    const char *given;
    for (int id; (id = mp_cli_next(&c, &given)) != MP_CLI_END;) {
        const char *v = given;
        switch (id) {
        case MP_CLI_ERROR:
            return mp_cli_usage_error("mkmodel", c.err.msg);
        case MP_CLI_POSITIONAL:
            return usage_error("unexpected argument '%s'%s", v, "");
        case 'h':
            usage(stdout);
            return MP_EXIT_OK;
        case OPT_FORCE: force = true; break;
        case OPT_QUIET: quiet = true; break;
        case OPT_DRY_RUN: dry_run = true; break;
        case OPT_SPLIT: split = true; break;
        case OPT_FUSE: fuse = true; break;
        default:
            flags[*n_flags].id = id;
            snprintf(flags[*n_flags].name, sizeof flags[*n_flags].name, "%s", c.flag);
            flags[*n_flags].value = v;
            const char *a = c.flag;
            if (!strcmp(a, "--preset"))
                preset = v;
            else if (!strcmp(a, "--arch"))
                arch = v;
            else if (!strcmp(a, "--quant"))
                quant = v;
            else if (!strcmp(a, "--output"))
                out_path = v;
            (*n_flags)++;
        }
    }
    if (!preset == !arch)
        return usage_error("expected exactly one of --preset NAME or --arch ARCH%s%s", "", "");
    if (!out_path || !*out_path)
        return usage_error("expected -o OUT.gguf%s%s", "", "");
    mp_mkmodel_config cfg;
    mp_error err = {0};
    mp_status st = preset ? mp_mkmodel_preset(preset, &cfg, &err) : mp_mkmodel_arch(arch, &cfg, &err);
    if (!st && quant)
        st = mp_mkmodel_set_mix(&cfg, quant, &err);
    for (int i = 0; i < *n_flags && !st; i++)
        if (flags[i].id == OPT_TYPE)
            st = mp_mkmodel_set_type(&cfg, flags[i].name + 7, flags[i].value, &err);
    if (st) {
        fprintf(stderr, "moeplan mkmodel: error: %s\n", err.msg);
        return 2;
    }
    /* Pass 2: shapes and generator settings. */
    for (int i = 0; i < *n_flags; i++) {
        const char *a = flags[i].name, *v = flags[i].value;
        struct {
            const char *flag;
            int64_t *dst;
        } shape[] = {{"--layers", &cfg.n_layer},     {"--hidden", &cfg.n_embd},
                     {"--heads", &cfg.n_head},       {"--kv-heads", &cfg.n_head_kv},
                     {"--head-dim", &cfg.head_dim},  {"--experts", &cfg.n_expert},
                     {"--top-k", &cfg.n_expert_used}, {"--expert-ff", &cfg.n_ff_exp},
                     {"--shared-ff", &cfg.n_ff_shexp}, {"--vocab", &cfg.n_vocab},
                     {"--ctx", &cfg.n_ctx}, {"--sliding-window", &cfg.n_swa},
                     {"--yarn-ctx", &cfg.rope_yarn_orig_ctx}};
        int matched = 0;
        for (size_t k = 0; k < sizeof shape / sizeof shape[0]; k++)
            if (!strcmp(a, shape[k].flag)) {
                if (parse_i64(a, v, shape[k].dst))
                    return 2;
                matched = 1;
            }
        if (matched)
            continue;
        double d;
        if (!strcmp(a, "--skew")) {
            if (parse_f64(a, v, &d))
                return 2;
            if (d < 0 || d > 16)
                return usage_error("--skew '%s': expected a number in 0..16%s", v, "");
            cfg.skew = d;
        } else if (!strcmp(a, "--rope-base") || !strcmp(a, "--rms-eps")) {
            if (parse_f64(a, v, &d))
                return 2;
            if (!(d > 0) || d > 1e30)
                return usage_error("%s '%s': expected a positive number", a, v);
            *(!strcmp(a, "--rope-base") ? &cfg.rope_freq_base : &cfg.rms_eps) = (float)d;
        } else if (!strcmp(a, "--yarn-factor")) {
            if (parse_f64(a, v, &d))
                return 2;
            if (d != 0 && !(d >= 1 && d <= 1e6))
                return usage_error("--yarn-factor '%s': expected 0 (no YaRN) or a number in 1..1e6%s", v, "");
            cfg.rope_yarn_factor = (float)d;
        } else if (!strcmp(a, "--seed")) {
            if (parse_u64(a, v, &cfg.seed))
                return 2;
        } else if (!strcmp(a, "--threads")) {
            int64_t n;
            if (parse_i64(a, v, &n))
                return 2;
            if (n > 1024)
                return usage_error("--threads '%s': expected 1..1024%s", v, "");
            cfg.n_threads = (int)n;
        } else if (!strcmp(a, "--layer-mix")) {
            if (strcmp(v, "uniform") && strcmp(v, "llama"))
                return usage_error("--layer-mix '%s': expected uniform or llama%s", v, "");
            cfg.llama_layers = !strcmp(v, "llama");
        } else if (!strcmp(a, "--name")) {
            if (strlen(v) >= sizeof cfg.name)
                return usage_error("--name '%s': expected at most 63 bytes%s", v, "");
            snprintf(cfg.name, sizeof cfg.name, "%s", v);
        }
    }
    cfg.split_experts = split;
    cfg.fuse_gate_up = fuse;
    /* an original context with YaRN off would be dropped from the file without a word */
    for (int i = 0; i < *n_flags; i++)
        if (!strcmp(flags[i].name, "--yarn-ctx") && cfg.rope_yarn_factor == 0.0f)
            return usage_error("--yarn-ctx %s: YaRN is off (give --yarn-factor F, F >= 1, to extend the context%s)",
                               flags[i].value, "");
    st = mp_mkmodel_validate(&cfg, &err);
    if (st) {
        fprintf(stderr, "moeplan mkmodel: error: %s\n", err.msg);
        return 2;
    }

    char fallbacks[512];
    if (mp_mkmodel_describe_fallbacks(&cfg, fallbacks, sizeof fallbacks))
        fprintf(stderr, "moeplan mkmodel: note: rows that do not divide into the %s mix's blocks take another type, "
                "as llama.cpp's quantizer falls back: %s\n", cfg.mix, fallbacks);
    mp_mk_tensor *tensors = NULL;
    int64_t n_tensors = 0;
    st = mp_mkmodel_plan(&cfg, &tensors, &n_tensors, &err);
    uint64_t total = st ? 0 : mp_mkmodel_data_bytes(tensors, n_tensors);
    free(tensors);
    if (!st && dry_run) {
        printf("would write %s: %lld tensors, %llu bytes of tensor data, %s %s%s\n", out_path,
               (long long)n_tensors, (unsigned long long)total,
               cfg.preset[0] ? cfg.preset : "custom", cfg.mix, cfg.llama_layers ? " (llama layers)" : "");
        return 0;
    }
    /* a model of tens of GB that cannot fit fails now, not after minutes of writing */
    if (!st && mp_output_check_space(out_path, "file", total, &err)) {
        fprintf(stderr, "moeplan mkmodel: error: %s\n", err.msg);
        return 1;
    }
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    /* Only large models are worth a progress line (a terminal's redrawn, a log's every 10 s). */
    mp_progress pr;
    mp_progress_begin(&pr, !quiet && total >= ((uint64_t)64 << 20) ? stderr : NULL, "mkmodel",
                      MP_PROGRESS_BYTES, (int64_t)total);
    /* Ctrl-C / SIGTERM stop at the next chunk, and the writer removes its temporary file. */
    struct sigaction sa = {.sa_handler = on_signal}, old_int, old_term;
    sigemptyset(&sa.sa_mask);
    interrupted = 0;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    if (!st)
        st = mp_mkmodel_write(&cfg, out_path, force, on_progress, &pr, &err);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    mp_progress_end(&pr);
    if (st) {
        fprintf(stderr, "moeplan mkmodel: error: %s\n", err.msg);
        return st == MP_ERR_ARG ? 2 : 1;
    }
    struct stat sb;
    long long size = stat(out_path, &sb) == 0 ? (long long)sb.st_size : -1;
    printf("wrote %s: %lld bytes, %lld tensors, %s %s%s, %lld layers x %lld experts (top-%lld), "
           "skew %.2f, seed %llu, %.1f s\n",
           out_path, size, (long long)n_tensors, cfg.preset[0] ? cfg.preset : "custom", cfg.mix,
           cfg.llama_layers ? " (llama layers)" : "",
           (long long)cfg.n_layer, (long long)cfg.n_expert, (long long)cfg.n_expert_used, cfg.skew,
           (unsigned long long)cfg.seed, since(&start));
    return 0;
}
