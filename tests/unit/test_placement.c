/* tests/unit/test_placement.c — placement maps and the GPU budget (runtime/placement.h): byte-size
 * and spec parsing (good and bad), placement files (every refusal with its file:line), the budget
 * arithmetic and the fill policy on a hand-computed geometry, STRP profiles (slots, budget-limited
 * ranked prefix, a profile of another model), and `moeplan run` with the placement flags. */
#include "mp_config.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/sha256.h"
#include "kernels/quant.h"
#include "collector/trace_read.h"
#include "runtime/gpu.h"
#include "runtime/placement.h"
#include "runtime/strp.h"
#include "tests/unit/cli_util.h"

static char tmpdir[256];

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mp_test_placement_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}
static void teardown(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}
TestSuite(placement, .init = setup, .fini = teardown);

/* ---- sizes ---- */

Test(placement, parse_bytes_accepts_units)
{
    static const struct {
        const char *text;
        uint64_t want;
    } ok[] = {
        {"16GiB", 17179869184ull}, {"12GB", 12000000000ull}, {"8000MiB", 8000ull << 20},
        {"123", 123}, {"123B", 123}, {"1.5GiB", 1610612736ull}, {"0.5KB", 500},
        {"16gib", 16ull << 30}, {"2TiB", 2ull << 40}, {"3kib", 3072}, {"1MB", 1000000},
        {"18446744073709551615", UINT64_MAX}, {"24GiB", 24ull << 30},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint64_t v = 0;
        mp_error e = {0};
        cr_assert_eq(mp_parse_bytes(ok[i].text, &v, &e), MP_OK, "%s: %s", ok[i].text, e.msg);
        cr_assert_eq(v, ok[i].want, "%s: got %llu", ok[i].text, (unsigned long long)v);
    }
}

Test(placement, parse_bytes_rejects_garbage_overflow_negative)
{
    static const char *bad[] = {"", "-1", "-16GiB", "+5", "abc", "16XB", "1.5", "16 GiB", " 16GiB",
                                "0", "0GiB", "18446744073709551616", "17179869184TiB",
                                "99999999999999999999999", "1.", ".5GiB", "1..5GiB", "16GiBs",
                                "16Gi", "1e9", "0x10"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v = 42;
        mp_error e = {0};
        cr_assert_eq(mp_parse_bytes(bad[i], &v, &e), MP_ERR_ARG, "'%s' accepted as %llu", bad[i],
                     (unsigned long long)v);
        cr_assert_eq(v, 42, "'%s' wrote a value", bad[i]);
        cr_assert(strstr(e.msg, "size '") != NULL, "%s", e.msg);
        cr_assert(!strchr(e.msg, '\n'));
    }
}

Test(placement, format_bytes)
{
    char b[32];
    mp_format_bytes(512, b, sizeof b);
    cr_assert_str_eq(b, "512 B");
    mp_format_bytes(8ull << 30, b, sizeof b);
    cr_assert_str_eq(b, "8.00 GiB");
    mp_format_bytes(2915041, b, sizeof b); /* 2.78 MiB */
    cr_assert_str_eq(b, "2.78 MiB");
}

/* ---- specs ---- */

Test(placement, spec_parse)
{
    mp_placement_mode m;
    int64_t n;
    mp_error e;
    cr_assert_eq(mp_placement_spec_parse("gpu", &m, &n, &e), MP_OK);
    cr_assert_eq(m, MP_PLACEMENT_GPU);
    cr_assert_eq(mp_placement_spec_parse("cpu", &m, &n, &e), MP_OK);
    cr_assert_eq(m, MP_PLACEMENT_CPU);
    cr_assert_eq(mp_placement_spec_parse("fill", &m, &n, &e), MP_OK);
    cr_assert_eq(m, MP_PLACEMENT_FILL);
    cr_assert_eq(mp_placement_spec_parse("layers:12", &m, &n, &e), MP_OK);
    cr_assert_eq(m, MP_PLACEMENT_LAYERS_FIRST);
    cr_assert_eq(n, 12);
    cr_assert_eq(mp_placement_spec_parse("layers-last:3", &m, &n, &e), MP_OK);
    cr_assert_eq(m, MP_PLACEMENT_LAYERS_LAST);
    cr_assert_eq(n, 3);
    static const char *bad[] = {"", "GPU", "layers:", "layers:-1", "layers:1x", "layers: 1",
                                "layers:99999999", "layers-last", "layers-last:", "random",
                                "gpu ", "layers:+2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(mp_placement_spec_parse(bad[i], &m, &n, &e), MP_ERR_ARG, "'%s'", bad[i]);
        cr_assert(strstr(e.msg, "--placement") != NULL, "%s", e.msg);
    }
}

Test(placement, opts_refuse_two_sources_and_two_budgets)
{
    mp_placement_opts o = {0};
    mp_status st;
    mp_error e;
    cr_assert(mp_placement_opts_set(&o, "--placement", "gpu", &st, &e));
    cr_assert_eq(st, MP_OK);
    cr_assert(mp_placement_opts_set(&o, "--profile", "p.strp", &st, &e));
    cr_assert_eq(st, MP_ERR_ARG);
    cr_assert(strstr(e.msg, "only one of") != NULL, "%s", e.msg);
    cr_assert(mp_placement_opts_set(&o, "--gpu-budget", "8GiB", &st, &e));
    cr_assert_eq(st, MP_OK);
    cr_assert_eq(o.budget_bytes, 8ull << 30);
    cr_assert(mp_placement_opts_set(&o, "--gpu-budget", "8GiB", &st, &e));
    cr_assert_eq(st, MP_ERR_ARG);
    cr_assert(!mp_placement_opts_set(&o, "--threads", "4", &st, &e));
    mp_placement_opts o2 = {0};
    cr_assert(mp_placement_opts_set(&o2, "--gpu-budget", "lots", &st, &e));
    cr_assert_eq(st, MP_ERR_ARG);
    cr_assert(strstr(e.msg, "--gpu-budget") != NULL, "%s", e.msg);
}

/* ---- placement files ---- */

static mp_status parse_file_text(const char *text, int64_t L, int64_t E, uint64_t *bits,
                                 mp_error *e)
{
    memset(bits, 0, sizeof(uint64_t) * (size_t)L * (size_t)((E + 63) / 64));
    return mp_placement_file_parse(text, strlen(text), "pl.txt", L, E, bits, e);
}

Test(placement, file_good)
{
    uint64_t bits[3 * 2]; /* 3 layers × 70 experts: 2 words per layer */
    mp_error e;
    cr_assert_eq(parse_file_text("# resident experts\n\n2: 69, 0-2 ,64\r\n0: none\n 1 : all # all\n",
                                 3, 70, bits, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(bits[0], 0);
    cr_assert_eq(bits[1], 0);
    cr_assert_eq(bits[2], UINT64_MAX);
    cr_assert_eq(bits[3], 0x3f); /* experts 64..69 */
    cr_assert_eq(bits[4], 0x7);
    cr_assert_eq(bits[5], (1ull << 5) | 1ull); /* 69 and 64 */
    cr_assert_eq(parse_file_text("0:\n1:\n2:", 3, 70, bits, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(bits[0] | bits[2] | bits[4], 0);
}

Test(placement, file_bad_inputs_name_the_line)
{
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"0: 1\n1: 2\n", "pl.txt: layer 2 is missing"},
        {"0: 1\n1: 2\n1: 3\n2: 0\n", "pl.txt:3: layer 1 listed twice (first at line 2)"},
        {"0: 1\n1: 8\n2: 0\n", "pl.txt:2: layer 1: expert 8 out of range"},
        {"0: 1\n1: 2-9\n2: 0\n", "pl.txt:2: layer 1: expert 9 out of range"},
        {"0: 1,1\n1:\n2:\n", "pl.txt:1: layer 0: expert 1 listed twice"},
        {"0: 0-3,2\n1:\n2:\n", "pl.txt:1: layer 0: expert 2 listed twice"},
        {"0:\n1:\n2:\n3: 1\n", "pl.txt:4: layer 3 out of range"},
        {"0:\n\nhello\n", "pl.txt:3: expected 'LAYER: EXPERTS'"},
        {"0 1,2\n", "pl.txt:1: expected ':' after layer 0"},
        {"0: 1,,2\n", "pl.txt:1: layer 0: expected an expert id"},
        {"0: 1 2\n", "pl.txt:1: layer 0: expected ',' or the end of the line"},
        {"0: 3-1\n", "pl.txt:1: layer 0: expected a range A-B with A <= B"},
        {"0: -1\n", "pl.txt:1: layer 0: expected an expert id"},
        {"0: x\n", "pl.txt:1: layer 0: expected an expert id"},
        {"-1: 2\n", "pl.txt:1: expected 'LAYER: EXPERTS'"},
        {"", "pl.txt: layer 0 is missing"},
        {"0: 99999999999999999999\n", "pl.txt:1: layer 0: expected an expert id"},
    };
    uint64_t bits[3];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mp_error e = {0};
        cr_assert_eq(parse_file_text(bad[i].text, 3, 8, bits, &e), MP_ERR_FORMAT, "accepted: %s",
                     bad[i].text);
        cr_assert(strstr(e.msg, bad[i].want) != NULL, "'%s': got '%s', want '%s'", bad[i].text,
                  e.msg, bad[i].want);
    }
    const char nul[] = "0: 1\n1: \0\n2: 0\n";
    mp_error e;
    cr_assert_eq(mp_placement_file_parse(nul, sizeof nul - 1, "pl.txt", 3, 8, bits, &e),
                 MP_ERR_FORMAT);
    cr_assert(strstr(e.msg, "pl.txt:2: a NUL byte") != NULL, "%s", e.msg);
}

/* ---- budget arithmetic: a geometry small enough to compute by hand ---- */

static uint64_t hand_expert_bytes[2] = {100, 100};
static int hand_types[3] = {MP_TYPE_F32, MP_TYPE_F32, MP_TYPE_F32}; /* gate, down; a third layer's */
static const mp_placement_geom hand = {
    .n_layer = 2, .n_expert = 4, .n_expert_used = 2, .n_embd = 8, .n_head = 2, .n_head_kv = 1,
    .head_dim = 4, .n_ff_exp = 16, .n_vocab = 10, .dense_bytes = 1000,
    .expert_bytes = hand_expert_bytes, .gate_type = hand_types, .down_type = hand_types};
/* n_ctx 16, n_batch 4:
 *   kv      = 16 ctx × 2 layers × 1 kv head × 4 dim × 2 (K, V) × 2 bytes           = 512
 *   scratch, the executor's buffers (mp_gpu_scratch_plan; B 4, D 8, Q 8, KV 4, E 4, K 2, F 16,
 *   W = max(D, Q) 8), each rounded up to 256:
 *     x, xb, proj, tmp      4 × (4·8·4 = 128 → 256)                                = 1024
 *     q, attention out      2 × (4·8·4 → 256)                                      = 512
 *     k, v                  2 × (4·4·4 → 256)                                      = 512
 *     router                4·4·4 → 256                                            = 256
 *     ids, weights          2 × (4·2·4 → 256)                                      = 512
 *     tokens, positions     2 × (4·4 → 256)                                        = 512
 *     RoPE angles           4·(4 / 2)·8 → 256                                      = 256
 *     two flags             2 × 256                                                = 512
 *     replayed routes       2·2 layers·2·4 → 256                                   = 256
 *     logits                32·10·4                                                = 1280
 *     activations (f32)     4·8·4 → 256                                            = 256
 *     MoE kernels (F32 experts: f32 activations) 4·8·4 → 256, 8 routes·16·4 = 512,
 *                           8·16·4 = 512 (no grouped path under 16 rows)            = 1280
 *     attention             4 rows·2 heads·1 64-key split·(4 + 2)·4 = 192 → 256     = 256
 *     cuBLAS tiles (the output head's 32 rows reach it) 4·8·2 → 256 + 2048·8·2       = 33024
 *     cuBLAS workspace      32 MiB                                                 = 33554432
 *     (no staging: 4 rows < MP_GPU_COPY_MIN_ROWS)
 *     padding               2·(3·(4·8 + 256) + 16·256 + 4·3·256) + 4·256            = 17088
 *     total                                                                        = 33611968
 *   fixed   = 1000 + 512 + 33611968                                                = 33613480 */
#define HAND_SCRATCH 33611968u
#define HAND_FIXED 33613480u

Test(placement, budget_arithmetic_by_hand)
{
    mp_gpu_budget b;
    mp_error e;
    cr_assert_eq(mp_gpu_budget_compute(&hand, 0, 16, 4, &b, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(b.kv_bytes, 512);
    cr_assert_eq(b.scratch_bytes, HAND_SCRATCH);
    cr_assert_eq(b.fixed_bytes, HAND_FIXED);
    cr_assert_eq(b.expert_avail_bytes, UINT64_MAX);
    cr_assert_eq(mp_gpu_budget_compute(&hand, HAND_FIXED + 250, 16, 4, &b, &e), MP_OK);
    cr_assert_eq(b.expert_avail_bytes, 250);
    cr_assert_eq(mp_gpu_budget_compute(&hand, HAND_FIXED, 16, 4, &b, &e), MP_OK);
    cr_assert_eq(b.expert_avail_bytes, 0);
    cr_assert_eq(mp_gpu_budget_compute(&hand, HAND_FIXED - 1, 16, 4, &b, &e), MP_ERR_LIMIT);
    cr_assert(strstr(e.msg, "non-expert weights 1000 B + KV cache 512 B (--ctx 16) + scratch "
                     "32.05 MiB (--batch 4) = 32.06 MiB do not fit") != NULL, "%s", e.msg);
    cr_assert_eq(mp_gpu_budget_compute(&hand, 999, 16, 4, &b, &e), MP_ERR_LIMIT);
    cr_assert(strstr(e.msg, "smaller than the non-expert weights alone (1000 B)") != NULL, "%s",
              e.msg);
}

/* The staging buffers' experts (mp_gpu_stage_experts) by the largest expert's bytes: 96 MiB worth,
 * at least ceil(top_k / 2), at most 16 and n_expert. */
static int64_t stage_experts(int64_t n_expert, int64_t top_k, uint64_t expert_bytes)
{
    uint64_t eb[2] = {expert_bytes / 2, expert_bytes}; /* the largest counts */
    mp_placement_geom g = hand;
    g.n_expert = n_expert, g.n_expert_used = top_k, g.expert_bytes = eb;
    return mp_gpu_stage_experts(&g);
}

Test(placement, stage_experts_by_expert_size)
{
    cr_assert_eq(stage_experts(128, 8, 3059712), 16);   /* 30B preset, Q4_K_M */
    cr_assert_eq(stage_experts(128, 8, 5013504), 16);   /* 30B preset, Q8_0 */
    cr_assert_eq(stage_experts(32, 4, 13219200), 8);    /* gpt-oss-20b, MXFP4: ceil(96 MiB / 13.2 MB) */
    cr_assert_eq(stage_experts(8, 2, 118095872), 1);    /* Mixtral, Q4_K_M */
    cr_assert_eq(stage_experts(64, 8, 300000000), 4);   /* huge experts: the two buffers hold top_k */
    cr_assert_eq(stage_experts(64, 7, 300000000), 4);
    cr_assert_eq(stage_experts(12, 1, 4096), 12);       /* tiny experts: one layer's at most */
    cr_assert_eq(stage_experts(1, 1, 1u << 30), 1);
    cr_assert_eq(stage_experts(40, 8, 8u << 20), 12); /* exactly twelve fill the buffer */
    cr_assert_eq(stage_experts(40, 8, (8u << 20) - 1), 13);
}

/* The budget counts two staging buffers of mp_gpu_stage_experts experts when batches reach
 * MP_GPU_COPY_MIN_ROWS: Mixtral-sized experts take one each, small ones a layer's 8 (nothing else
 * in the budget depends on the experts' bytes). */
Test(placement, budget_counts_the_staging_experts)
{
    uint64_t big[2] = {118095872, 118095872}, small[2] = {1000000, 1000000};
    mp_placement_geom g = hand;
    g.n_expert = 8;
    mp_gpu_budget bb, bs;
    mp_error e;
    g.expert_bytes = big;
    cr_assert_eq(mp_gpu_budget_compute(&g, 0, 16, MP_GPU_COPY_MIN_ROWS, &bb, &e), MP_OK, "%s", e.msg);
    g.expert_bytes = small;
    cr_assert_eq(mp_gpu_budget_compute(&g, 0, 16, MP_GPU_COPY_MIN_ROWS, &bs, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(bb.scratch_bytes - bs.scratch_bytes,
                 2 * (1 * (118095872u + 3 * 256)) - 2 * (8 * (1000000u + 3 * 256)));
    /* below MP_GPU_COPY_MIN_ROWS rows there is no staging to count */
    g.expert_bytes = big;
    cr_assert_eq(mp_gpu_budget_compute(&g, 0, 16, MP_GPU_COPY_MIN_ROWS - 1, &bb, &e), MP_OK, "%s", e.msg);
    g.expert_bytes = small;
    cr_assert_eq(mp_gpu_budget_compute(&g, 0, 16, MP_GPU_COPY_MIN_ROWS - 1, &bs, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(bb.scratch_bytes, bs.scratch_bytes);
}

static mp_status build(const char *spec, uint64_t budget, mp_placement *p, mp_error *e)
{
    mp_placement_opts o = {0};
    mp_status st;
    if (spec) {
        cr_assert(mp_placement_opts_set(&o, "--placement", spec, &st, e));
        cr_assert_eq(st, MP_OK, "%s", e->msg);
    }
    o.budget_bytes = budget;
    return mp_placement_build(&hand, &o, 16, 4, p, e);
}

static void assert_layer_bits(const mp_placement *p, int64_t il, uint64_t want)
{
    cr_assert_eq(p->bits[il * p->words_per_layer], want, "layer %lld: bits %llx, want %llx",
                 (long long)il, (unsigned long long)p->bits[il * p->words_per_layer],
                 (unsigned long long)want);
}

Test(placement, fill_policy_by_hand)
{
    mp_placement p;
    mp_error e;
    /* 250 B for experts of 100 B: (0,0), (1,0) fit; (0,1) would need 300 */
    cr_assert_eq(build("fill", HAND_FIXED + 250, &p, &e), MP_OK, "%s", e.msg);
    assert_layer_bits(&p, 0, 0x1);
    assert_layer_bits(&p, 1, 0x1);
    cr_assert_eq(p.n_resident_total, 2);
    cr_assert_eq(p.gpu_expert_bytes, 200);
    cr_assert_eq(p.host_expert_bytes, 600);
    mp_placement_free(&p);
    /* 300 B: a third expert, in layer 0 (expert-major order, lowest ids first) */
    cr_assert_eq(build("fill", HAND_FIXED + 300, &p, &e), MP_OK, "%s", e.msg);
    assert_layer_bits(&p, 0, 0x3);
    assert_layer_bits(&p, 1, 0x1);
    cr_assert_eq(p.n_resident[0], 2);
    cr_assert_eq(p.n_resident[1], 1);
    mp_placement_free(&p);
    /* everything fits */
    cr_assert_eq(build("fill", HAND_FIXED + 10000, &p, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(p.n_resident_total, 8);
    mp_placement_free(&p);
    /* nothing fits: a valid, empty pool */
    cr_assert_eq(build("fill", HAND_FIXED + 99, &p, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(p.n_resident_total, 0);
    mp_placement_free(&p);
    /* fill without a budget is refused */
    cr_assert_eq(build("fill", 0, &p, &e), MP_ERR_ARG);
    cr_assert(strstr(e.msg, "fill needs --gpu-budget") != NULL, "%s", e.msg);
}

Test(placement, fill_with_unequal_layers_stops_at_first_misfit)
{
    uint64_t eb[3] = {100, 300, 100};
    mp_placement_geom g = hand;
    g.n_layer = 3;
    g.expert_bytes = eb;
    mp_gpu_budget b;
    mp_error e;
    cr_assert_eq(mp_gpu_budget_compute(&g, 0, 16, 4, &b, &e), MP_OK);
    mp_placement_opts o = {.spec = "fill", .mode = MP_PLACEMENT_FILL,
                           .budget_bytes = b.fixed_bytes + 450};
    mp_placement p;
    /* (0,0) 100, (1,0) 300 -> 400; (2,0) 100 would be 500 > 450: stop */
    cr_assert_eq(mp_placement_build(&g, &o, 16, 4, &p, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(p.n_resident[0], 1);
    cr_assert_eq(p.n_resident[1], 1);
    cr_assert_eq(p.n_resident[2], 0);
    cr_assert_eq(p.gpu_expert_bytes, 400);
    mp_placement_free(&p);
}

Test(placement, modes_and_budget_refusal)
{
    mp_placement p;
    mp_error e;
    cr_assert_eq(build("gpu", 0, &p, &e), MP_OK);
    assert_layer_bits(&p, 0, 0xf);
    assert_layer_bits(&p, 1, 0xf);
    cr_assert(mp_placement_resident(&p, 1, 3));
    mp_placement_free(&p);
    cr_assert_eq(build("cpu", HAND_FIXED, &p, &e), MP_OK, "%s", e.msg); /* no room: still fine */
    cr_assert_eq(p.n_resident_total, 0);
    cr_assert_eq(p.host_expert_bytes, 800);
    mp_placement_free(&p);
    cr_assert_eq(build("layers:1", 0, &p, &e), MP_OK);
    assert_layer_bits(&p, 0, 0);
    assert_layer_bits(&p, 1, 0xf);
    mp_placement_free(&p);
    cr_assert_eq(build("layers-last:1", 0, &p, &e), MP_OK);
    assert_layer_bits(&p, 0, 0xf);
    assert_layer_bits(&p, 1, 0);
    mp_placement_free(&p);
    cr_assert_eq(build("layers:2", 0, &p, &e), MP_OK);
    cr_assert_eq(p.n_resident_total, 0);
    mp_placement_free(&p);
    cr_assert_eq(build("layers:3", 0, &p, &e), MP_ERR_ARG);
    cr_assert(strstr(e.msg, "the model has 2 layers") != NULL, "%s", e.msg);
    /* gpu needs 800 B of experts; 799 are left */
    cr_assert_eq(build("gpu", HAND_FIXED + 799, &p, &e), MP_ERR_LIMIT);
    cr_assert(strstr(e.msg, "budget 32.06 MiB: non-expert weights 1000 B + KV cache 512 B + "
                     "scratch 32.05 MiB leave 799 B for experts; placement 'gpu' needs 800 B "
                     "(8 experts × 100 B)") != NULL, "%s", e.msg);
    cr_assert_eq(p.bits, NULL);
    cr_assert_eq(build("gpu", HAND_FIXED + 800, &p, &e), MP_OK, "%s", e.msg);
    char line[512];
    mp_placement_summary(&p, line, sizeof line);
    cr_assert(strstr(line, "gpu: 8/8 experts on the GPU (layers 0-1: 4/4)") != NULL, "%s", line);
    cr_assert(strstr(line, "of budget") != NULL, "%s", line);
    mp_placement_free(&p);
    cr_assert_eq(build("layers:1", HAND_FIXED + 399, &p, &e), MP_ERR_LIMIT);
    cr_assert(strstr(e.msg, "placement 'layers:1' needs 400 B (4 experts × 100 B)") != NULL, "%s",
              e.msg);
    cr_assert_eq(build("gpu", 999, &p, &e), MP_ERR_LIMIT);
    cr_assert(strstr(e.msg, "smaller than the non-expert weights") != NULL, "%s", e.msg);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

Test(placement, file_mode_through_build)
{
    char path[300];
    snprintf(path, sizeof path, "%s/pl.txt", tmpdir);
    write_text(path, "0: 1,3\n1: 0-2\n");
    mp_placement_opts o = {.file = path};
    mp_placement p;
    mp_error e;
    cr_assert_eq(mp_placement_build(&hand, &o, 16, 4, &p, &e), MP_OK, "%s", e.msg);
    assert_layer_bits(&p, 0, 0xa);
    assert_layer_bits(&p, 1, 0x7);
    cr_assert_eq(p.mode, MP_PLACEMENT_FILE);
    mp_placement_free(&p);
    o.budget_bytes = HAND_FIXED + 400;
    cr_assert_eq(mp_placement_build(&hand, &o, 16, 4, &p, &e), MP_ERR_LIMIT);
    cr_assert(strstr(e.msg, "needs 500 B (5 experts × 100 B)") != NULL, "%s", e.msg);
    snprintf(path, sizeof path, "%s/none.txt", tmpdir);
    o.file = path;
    cr_assert_eq(mp_placement_build(&hand, &o, 16, 4, &p, &e), MP_ERR_IO);
    cr_assert(strstr(e.msg, "none.txt: cannot open") != NULL, "%s", e.msg);
}

/* ---- STRP profiles ---- */

/* A profile without a table, in any convention (slots < n as moeplan's older files have it): its
 * bytes straight from the encoder, since the file writer lists no more pairs than slots. */
static void write_profile(const char *path, uint32_t L, uint32_t E, uint32_t slots,
                          const mp_strp_pair *pairs, uint32_t n)
{
    mp_strp prof = {.n_layers = L, .n_experts = E, .slots = slots, .n_ranked = n,
                    .ranked = (mp_strp_pair *)pairs, .table = MP_STRP_TABLE_NONE};
    mp_error e;
    uint8_t *img;
    size_t size;
    cr_assert_eq(mp_strp_encode(&prof, &img, &size, &e), MP_OK, "%s", e.msg);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(img, 1, size, f), size);
    cr_assert_eq(fclose(f), 0);
    free(img);
}

Test(placement, profile_slots_and_budget_prefix)
{
    char path[300];
    snprintf(path, sizeof path, "%s/p.strp", tmpdir);
    const mp_strp_pair pairs[] = {{1, 3}, {0, 0}, {0, 2}, {1, 1}};
    write_profile(path, 2, 4, 2, pairs, 4);
    mp_placement_opts o = {.profile = path};
    mp_placement p;
    mp_error e;
    /* no budget: the profile's 2 slots */
    cr_assert_eq(mp_placement_build(&hand, &o, 16, 4, &p, &e), MP_OK, "%s", e.msg);
    assert_layer_bits(&p, 0, 0x1);
    assert_layer_bits(&p, 1, 0x8);
    cr_assert_not_null(p.profile_image);
    cr_assert_eq(p.profile_image_bytes, 24 + 4 * 4);
    cr_assert(strstr(p.desc, "2 of 4 ranked experts") != NULL, "%s", p.desc);
    mp_placement_free(&p);
    /* a budget with room for 3 experts: still the profile's 2 slots (the placement it was made
     * for; a profile made for a budget runs under it as simulated) */
    o.budget_bytes = HAND_FIXED + 350;
    cr_assert_eq(mp_placement_build(&hand, &o, 16, 4, &p, &e), MP_OK, "%s", e.msg);
    assert_layer_bits(&p, 0, 0x1);
    assert_layer_bits(&p, 1, 0x8);
    cr_assert(strstr(p.desc, "2 of 4 ranked experts, of its slots as many as the budget holds") != NULL, "%s", p.desc);
    mp_placement_free(&p);
    /* a budget with room for 1 */
    o.budget_bytes = HAND_FIXED + 199;
    cr_assert_eq(mp_placement_build(&hand, &o, 16, 4, &p, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(p.n_resident_total, 1);
    assert_layer_bits(&p, 1, 0x8);
    mp_placement_free(&p);

    /* the same resident set as moeplan writes it: only the 2 resident pairs, slots 2, and counts
     * that rank the other 6 experts after them. The same placement, under any budget. */
    uint64_t counts[8] = {9, 0, 5, 0, /**/ 0, 4, 0, 9};
    mp_strp prof = {.n_layers = 2, .n_experts = 4, .slots = 2, .n_ranked = 2, .ranked = (mp_strp_pair *)pairs,
                    .table = MP_STRP_TABLE_U64_COUNT, .counts = counts};
    cr_assert_eq(mp_strp_write_file(path, &prof, &e), MP_OK, "%s", e.msg);
    mp_test_strp_loads(path);
    o.budget_bytes = 0;
    cr_assert_eq(mp_placement_build(&hand, &o, 16, 4, &p, &e), MP_OK, "%s", e.msg);
    assert_layer_bits(&p, 0, 0x1);
    assert_layer_bits(&p, 1, 0x8);
    cr_assert(strstr(p.desc, "2 of 8 ranked experts") != NULL, "%s", p.desc);
    mp_placement_free(&p);
    o.budget_bytes = HAND_FIXED + 350;
    cr_assert_eq(mp_placement_build(&hand, &o, 16, 4, &p, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(p.n_resident_total, 2);
    assert_layer_bits(&p, 0, 0x1);
    assert_layer_bits(&p, 1, 0x8);
    mp_placement_free(&p);
    o.budget_bytes = HAND_FIXED + 199;
    cr_assert_eq(mp_placement_build(&hand, &o, 16, 4, &p, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(p.n_resident_total, 1);
    assert_layer_bits(&p, 1, 0x8);
    mp_placement_free(&p);
}

Test(placement, profile_of_another_model_is_refused)
{
    char path[300];
    snprintf(path, sizeof path, "%s/other.strp", tmpdir);
    const mp_strp_pair pairs[] = {{0, 7}, {2, 1}};
    write_profile(path, 3, 8, 1, pairs, 2); /* 3 layers × 8 experts; the model is 2 × 4 */
    mp_placement_opts o = {.profile = path};
    mp_placement p;
    mp_error e;
    cr_assert_eq(mp_placement_build(&hand, &o, 16, 4, &p, &e), MP_ERR_FORMAT);
    cr_assert(strstr(e.msg, "other.strp") != NULL, "%s", e.msg);
    cr_assert(strstr(e.msg, "3") != NULL && strstr(e.msg, "8") != NULL, "%s", e.msg);
    cr_assert_eq(p.bits, NULL);
    write_text(path, "STRP but not really");
    cr_assert_eq(mp_placement_build(&hand, &o, 16, 4, &p, &e), MP_ERR_FORMAT);
    cr_assert(strstr(e.msg, "other.strp") != NULL, "%s", e.msg);
}

/* ---- `moeplan run` with the flags ---- */

static int moeplan(const char *args, char *out, size_t cap)
{
    return mp_test_moeplan(tmpdir, args, MP_TEST_STDERR, out, cap);
}

Test(placement, run_reports_placement_and_refuses_bad_flags)
{
    const char *root = getenv("MP_SOURCE_ROOT");
    cr_assert_not_null(root);
    char model[512], args[2048], out[8192];
    snprintf(model, sizeof model, "%s/tests/fixtures/hf/qwen3moe-tiny-f32.gguf", root);
    snprintf(args, sizeof args, "run -m '%s' -p hi -n 2 --placement layers:1 --gpu-budget 64MiB "
             "--executor cpu", model);
    cr_assert_eq(moeplan(args, out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, "placement: layers:1: 16/24 experts on the GPU (layers 0: 0/8, 1-2: "
                          "8/8)") != NULL, "%s", out);
    cr_assert(strstr(out, "(executor cpu: all experts ran on the CPU)") != NULL, "%s", out);
    /* without --executor cpu a GPU placement needs a device: refused in one line without one */
    char why[256];
    if (!mp_gpu_available(why, sizeof why)) {
        snprintf(args, sizeof args, "run -m '%s' -p hi -n 2 --placement layers:1", model);
        cr_assert_eq(moeplan(args, out, sizeof out), 1, "%s", out);
        cr_assert(strstr(out, "moeplan run: error: placement 'layers:1' needs the GPU executor, "
                              "but ") != NULL, "%s", out);
        cr_assert_eq(strchr(out, '\n'), strrchr(out, '\n'), "one line: %s", out);
        snprintf(args, sizeof args, "run -m '%s' -p hi -n 2 --executor gpu", model);
        cr_assert_eq(moeplan(args, out, sizeof out), 1, "%s", out);
        cr_assert(strstr(out, "moeplan run: error: --executor gpu: ") != NULL, "%s", out);
    }
    snprintf(args, sizeof args, "run -m '%s' -p hi -n 2 --placement cpu", model);
    cr_assert_eq(moeplan(args, out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, "placement: cpu: 0/24 experts on the GPU") != NULL, "%s", out);
    static const char *usage_bad[] = {"--gpu-budget 12XB", "--gpu-budget -5GiB",
                                      "--placement layers:x", "--placement gpu --profile p.strp",
                                      "--gpu-budget 1GiB --gpu-budget 2GiB", "--executor fast",
                                      "--executor cpu --executor gpu"};
    for (size_t i = 0; i < sizeof usage_bad / sizeof usage_bad[0]; i++) {
        snprintf(args, sizeof args, "run -m '%s' -p hi -n 2 %s", model, usage_bad[i]);
        cr_assert_eq(moeplan(args, out, sizeof out), 2, "%s: %s", usage_bad[i], out);
        cr_assert(strstr(out, "moeplan run: error: ") != NULL, "%s", out);
    }
    snprintf(args, sizeof args, "run -m '%s' -p hi -n 2 --placement gpu --gpu-budget 1KiB "
             "--executor cpu", model);
    cr_assert_eq(moeplan(args, out, sizeof out), 1, "%s", out);
    cr_assert(strstr(out, "smaller than the non-expert weights") != NULL, "%s", out);
    snprintf(args, sizeof args, "run -m '%s' -p hi -n 2 --placement layers:4 --executor cpu", model);
    cr_assert_eq(moeplan(args, out, sizeof out), 1, "%s", out);
    cr_assert(strstr(out, "the model has 3 layers") != NULL, "%s", out);
    char pf[300];
    snprintf(pf, sizeof pf, "%s/pl.txt", tmpdir);
    write_text(pf, "0: 1\n2: 9\n");
    snprintf(args, sizeof args, "run -m '%s' -p hi -n 2 --placement-file '%s' --executor cpu",
             model, pf);
    cr_assert_eq(moeplan(args, out, sizeof out), 1, "%s", out);
    cr_assert(strstr(out, "pl.txt:2: layer 2: expert 9 out of range") != NULL, "%s", out);
    /* --costs is the GPU executor's, but a missing or broken file is refused on the CPU executor
     * too, in one line naming it, rather than ignored */
    char bad[300];
    snprintf(bad, sizeof bad, "%s/not-costs.json", tmpdir);
    write_text(bad, "{\"hello\": 1}\n");
    const char *costs_bad[][2] = {{"no-such-costs.json", "no-such-costs.json: cannot open"},
                                  {bad, "not-costs.json: $.hello: unknown key"}};
    for (size_t i = 0; i < 2; i++) {
        snprintf(args, sizeof args, "run -m '%s' -p hi -n 2 --executor cpu --costs '%s'", model, costs_bad[i][0]);
        cr_assert_eq(moeplan(args, out, sizeof out), 1, "%s", out);
        cr_assert(strstr(out, "moeplan run: error: --costs: ") != NULL, "%s", out);
        cr_assert(strstr(out, costs_bad[i][1]) != NULL, "%s", out);
        cr_assert_eq(strchr(out, '\n'), strrchr(out, '\n'), "one line: %s", out);
    }
    snprintf(args, sizeof args, "run -m '%s' -p hi -n 2 --executor cpu --costs '%s/examples/costs-h200-tiny.json'",
             model, root);
    cr_assert_eq(moeplan(args, out, sizeof out), 0, "a cost file, read and not used: %s", out);
}

Test(placement, collect_records_profile_hash_and_budget)
{
    const char *root = getenv("MP_SOURCE_ROOT");
    cr_assert_not_null(root);
    char model[512], prof[300], prompts[300], trace[300], args[4096], out[8192];
    snprintf(model, sizeof model, "%s/tests/fixtures/hf/qwen3moe-tiny-f32.gguf", root);
    snprintf(prof, sizeof prof, "%s/tiny.strp", tmpdir);
    snprintf(prompts, sizeof prompts, "%s/p.json", tmpdir);
    snprintf(trace, sizeof trace, "%s/t.db", tmpdir);
    const mp_strp_pair pairs[] = {{2, 7}, {0, 1}, {1, 1}};
    write_profile(prof, 3, 8, 2, pairs, 3); /* the tiny model: 3 layers × 8 experts */
    write_text(prompts, "[\"Hello\"]");
    /* a budget too small: refused before the trace exists */
    snprintf(args, sizeof args, "collect -m '%s' --prompts '%s' --trace '%s' --no-progress "
             "--max-tokens 2 --profile '%s' --gpu-budget 100KiB --executor cpu", model, prompts,
             trace, prof);
    cr_assert_eq(moeplan(args, out, sizeof out), 1, "%s", out);
    cr_assert(strstr(out, "moeplan collect: error: --gpu-budget 100.00 KiB is smaller than the "
                          "non-expert weights") != NULL, "%s", out);
    cr_assert_eq(access(trace, F_OK), -1, "a refused run left a trace");
    snprintf(args, sizeof args, "collect -m '%s' --prompts '%s' --trace '%s' --no-progress "
             "--max-tokens 2 --profile '%s' --gpu-budget 64MiB --executor cpu", model, prompts,
             trace, prof);
    cr_assert_eq(moeplan(args, out, sizeof out), 0, "%s", out);
    mp_trace_reader *r;
    mp_error e;
    cr_assert_eq(mp_trace_reader_open(trace, &r, &e), MP_OK, "%s", e.msg);
    const mp_trace_run *run = mp_trace_reader_run(r);
    FILE *f = fopen(prof, "rb");
    uint8_t buf[256];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    mp_sha256 s;
    uint8_t d[32];
    char hex[65];
    mp_sha256_init(&s);
    mp_sha256_update(&s, buf, n);
    cr_assert(mp_sha256_final(&s, d));
    mp_sha256_hex(d, hex);
    cr_assert_not_null(run->profile_sha256);
    cr_assert_str_eq(run->profile_sha256, hex);
    cr_assert_eq(run->budget_bytes, 64 << 20);
    /* 64 MiB has room for all 3 ranked experts: the profile's 2 slots are placed */
    cr_assert(strstr(run->config_json, "2 of 3 ranked experts") != NULL, "%s", run->config_json);
    cr_assert(strstr(run->config_json, "\"executor\":\"cpu (every expert ran on the CPU") != NULL, "%s",
              run->config_json);
    mp_trace_reader_close(r);
}

/* ---- the adaptive tier's flags and budget (runtime/tier.h) ---- */

static mp_status build_tier(const char *spec, uint64_t budget, const char *const *flags, mp_placement *p,
                            mp_error *e)
{
    mp_placement_opts o = {0};
    mp_status st;
    cr_assert(mp_placement_opts_set(&o, "--placement", spec, &st, e) && !st, "%s", e->msg);
    for (int i = 0; flags[i]; i += 2) {
        cr_assert(mp_placement_opts_set(&o, flags[i], flags[i + 1], &st, e), "%s", flags[i]);
        if (st)
            return st;
    }
    o.budget_bytes = budget;
    return mp_placement_build(&hand, &o, 16, 4, p, e);
}

Test(placement, adaptive_tier_slots_and_budget)
{
    mp_placement p;
    mp_error e;
    /* 3 slots over the two layers with host experts (cpu: both): 2 + 1, 100 B each; cost by default */
    const char *three[] = {"--adaptive-slots", "3", NULL};
    cr_assert_eq(build_tier("cpu", 0, three, &p, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(p.tier_policy, MP_TIER_COST);
    cr_assert_eq(p.tier_slots, 3);
    cr_assert_eq(p.tier_cap[0], 2);
    cr_assert_eq(p.tier_cap[1], 1);
    cr_assert_eq(p.tier_bytes, 300);
    cr_assert_eq(p.tier_inflight, 4, "2 × top-k by default");
    mp_placement_free(&p);
    /* layers-last:1: layer 0 whole on the GPU, so every slot goes to layer 1 (at most its 4 experts) */
    const char *many[] = {"--adaptive", "lru", "--adaptive-slots", "9", "--adaptive-inflight", "2", NULL};
    cr_assert_eq(build_tier("layers-last:1", 0, many, &p, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(p.tier_policy, MP_TIER_LRU);
    cr_assert_eq(p.tier_cap[0], 0);
    cr_assert_eq(p.tier_cap[1], 4);
    cr_assert_eq(p.tier_slots, 4);
    cr_assert_eq(p.tier_inflight, 2);
    mp_placement_free(&p);
    /* the tier's room is taken before fill: 500 B, 50 % = 2 slots (200 B), fill gets 300 B: 3 experts */
    const char *half[] = {"--adaptive", "lfu", "--adaptive-slots", "50%", NULL};
    cr_assert_eq(build_tier("fill", HAND_FIXED + 500, half, &p, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(p.n_resident_total, 3);
    cr_assert_eq(p.tier_slots, 2);
    cr_assert_eq(p.gpu_expert_bytes + p.tier_bytes, 500);
    mp_placement_free(&p);
    /* a budget with a policy and no size: 10 % of the room (1000 B: one slot) */
    const char *dflt[] = {"--adaptive", "window-lfu", NULL};
    cr_assert_eq(build_tier("cpu", HAND_FIXED + 1000, dflt, &p, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(p.tier_slots, 1);
    mp_placement_free(&p);
    /* a share of a room that holds fewer than 1 / share experts: one slot (500 B room, 10 % of 5) */
    cr_assert_eq(build_tier("cpu", HAND_FIXED + 500, dflt, &p, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(p.tier_slots, 1);
    mp_placement_free(&p);
    const char *pct[] = {"--adaptive", "lru", "--adaptive-slots", "1%", NULL};
    cr_assert_eq(build_tier("fill", HAND_FIXED + 300, pct, &p, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(p.tier_slots, 1);
    cr_assert_eq(p.n_resident_total, 2, "the slot's room comes off fill's");
    mp_placement_free(&p);
    /* a room that holds no expert: no slot at any share */
    cr_assert_eq(build_tier("cpu", HAND_FIXED + 99, dflt, &p, &e), MP_ERR_LIMIT);
    cr_assert(strstr(e.msg, "holds no expert slot") != NULL, "%s", e.msg);
    /* every expert resident: the tier would serve none, refused rather than dropped */
    const char *two[] = {"--adaptive", "lru", "--adaptive-slots", "2", NULL};
    cr_assert_eq(build_tier("gpu", 0, two, &p, &e), MP_ERR_LIMIT);
    cr_assert(strstr(e.msg, "keeps every expert on the GPU") != NULL, "%s", e.msg);
    cr_assert_null(strchr(e.msg, '\n'), "%s", e.msg);
    /* a full budget refuses, naming the tier */
    const char *four[] = {"--adaptive-slots", "4", NULL};
    cr_assert_eq(build_tier("layers:1", HAND_FIXED + 500, four, &p, &e), MP_ERR_LIMIT);
    cr_assert(strstr(e.msg, "the adaptive tier's 4 slots 400 B") != NULL, "%s", e.msg);
    cr_assert(strstr(e.msg, "lower --adaptive-slots") != NULL, "%s", e.msg);
    /* off: nothing */
    const char *off[] = {"--adaptive", "off", NULL};
    cr_assert_eq(build_tier("cpu", 0, off, &p, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(p.tier_slots, 0);
    cr_assert_null(p.tier_cap);
    mp_placement_free(&p);
}

Test(placement, adaptive_tier_flags_refused_in_one_line)
{
    static const struct {
        const char *flags[7];
        const char *msg;
    } bad[] = {
        {{"--adaptive", "fifo", NULL}, "fifo"},
        {{"--adaptive", "lru", "--adaptive", "lfu", NULL}, "--adaptive given twice"},
        {{"--adaptive-slots", "0", NULL}, "--adaptive-slots '0'"},
        {{"--adaptive-slots", "-3", NULL}, "--adaptive-slots '-3'"},
        {{"--adaptive-slots", "101%", NULL}, "0 < P <= 100"},
        {{"--adaptive-slots", "x%", NULL}, "--adaptive-slots 'x%'"},
        {{"--adaptive-slots", "2", "--adaptive-slots", "3", NULL}, "given twice"},
        {{"--adaptive-inflight", "0", NULL}, "--adaptive-inflight '0'"},
        {{"--adaptive", "off", "--adaptive-slots", "2", NULL}, "--adaptive-slots given with --adaptive off"},
        {{"--adaptive", "lru", NULL}, "expected --adaptive-slots N"},
        {{"--adaptive-slots", "10%", NULL}, "needs --gpu-budget"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mp_placement p;
        mp_error e = {0};
        cr_assert_neq(build_tier("cpu", 0, bad[i].flags, &p, &e), MP_OK, "case %zu", i);
        cr_assert(strstr(e.msg, bad[i].msg) != NULL, "case %zu: %s", i, e.msg);
        cr_assert_null(strchr(e.msg, '\n'), "case %zu: one line: %s", i, e.msg);
    }
}

/* With a tier, a profile's placement gives up its lowest-ranked experts to the tier when the budget
 * has no room left beside it, never those of a layer it holds whole: a profile placing (1,3), (0,0)
 * in rank order under a budget of exactly those two, with 2 slots of tier, moves both into it, best
 * first (layer 1 then layer 0, one slot each). With layer 0 whole (a profile of all four of its
 * experts and (1,3), a budget of five), the tier gets (1,3) alone: 1 slot of the 2 asked. Without a
 * budget the tier is room beside the profile: nothing is carved. */
Test(placement, profile_ranking_fills_the_tier_first)
{
    char path[512];
    snprintf(path, sizeof path, "%s/warm.strp", tmpdir);
    const mp_strp_pair pairs[] = {{1, 3}, {0, 0}, {0, 2}, {1, 1}};
    write_profile(path, 2, 4, 2, pairs, 4);
    mp_placement_opts o = {.profile = path};
    mp_placement p;
    mp_error e;
    mp_status st;
    cr_assert(mp_placement_opts_set(&o, "--adaptive", "lru", &st, &e) && !st, "%s", e.msg);
    cr_assert(mp_placement_opts_set(&o, "--adaptive-slots", "2", &st, &e) && !st, "%s", e.msg);
    o.budget_bytes = HAND_FIXED + 200;
    cr_assert_eq(mp_placement_build(&hand, &o, 16, 4, &p, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(p.n_resident_total, 0);
    cr_assert_eq(p.tier_slots, 2);
    cr_assert_eq(p.n_tier_warm, 2);
    cr_assert(p.tier_warm[0][0] == 1 && p.tier_warm[0][1] == 3);
    cr_assert(p.tier_warm[1][0] == 0 && p.tier_warm[1][1] == 0);
    cr_assert(p.tier_cap[0] == 1 && p.tier_cap[1] == 1);
    cr_assert_eq(p.tier_bytes, 200);
    mp_placement_free(&p);
    char whole[512];
    snprintf(whole, sizeof whole, "%s/whole.strp", tmpdir);
    const mp_strp_pair wp[] = {{0, 0}, {0, 1}, {1, 3}, {0, 2}, {0, 3}};
    write_profile(whole, 2, 4, 5, wp, 5);
    mp_placement_opts ow = {.profile = whole};
    cr_assert(mp_placement_opts_set(&ow, "--adaptive", "lru", &st, &e) && !st, "%s", e.msg);
    cr_assert(mp_placement_opts_set(&ow, "--adaptive-slots", "2", &st, &e) && !st, "%s", e.msg);
    ow.budget_bytes = HAND_FIXED + 500;
    cr_assert_eq(mp_placement_build(&hand, &ow, 16, 4, &p, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(p.n_resident[0], 4, "layer 0 stays whole");
    cr_assert_eq(p.n_resident[1], 0);
    cr_assert_eq(p.tier_slots, 1);
    cr_assert(p.tier_warm[0][0] == 1 && p.tier_warm[0][1] == 3);
    mp_placement_free(&p);
    /* layer 0 whole and nothing else placed, the budget full: no slot, refused in one line */
    char first[512];
    snprintf(first, sizeof first, "%s/layer0-first.strp", tmpdir);
    const mp_strp_pair fp[] = {{0, 0}, {0, 1}, {0, 2}, {0, 3}, {1, 3}};
    write_profile(first, 2, 4, 5, fp, 5);
    mp_placement_opts of = {.profile = first};
    cr_assert(mp_placement_opts_set(&of, "--adaptive", "lru", &st, &e) && !st, "%s", e.msg);
    of.budget_bytes = HAND_FIXED + 400;
    cr_assert_eq(mp_placement_build(&hand, &of, 16, 4, &p, &e), MP_ERR_LIMIT);
    cr_assert(strstr(e.msg, "no slot for the tier") != NULL, "%s", e.msg);
    cr_assert(strstr(e.msg, "1 of 2 layers the placement holds whole") != NULL, "%s", e.msg);
    cr_assert_null(strchr(e.msg, '\n'), "%s", e.msg);
    o.budget_bytes = 0;
    cr_assert_eq(mp_placement_build(&hand, &o, 16, 4, &p, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(p.n_resident_total, 2);
    cr_assert_eq(p.n_tier_warm, 0);
    cr_assert_eq(p.tier_slots, 2);
    cr_assert(p.tier_cap[0] + p.tier_cap[1] == 2);
    mp_placement_free(&p);
    mp_placement_opts plain = {.profile = path};
    cr_assert_eq(mp_placement_build(&hand, &plain, 16, 4, &p, &e), MP_OK, "%s", e.msg);
    cr_assert_null(p.tier_warm);
    mp_placement_free(&p);
}
