/* tests/unit/test_llamacpp.c — `moeplan simulate --emit-llamacpp` on the tiny preset: at every
 * budget tests/llamacpp_check.py (its own GGUF reader, Python's regex engine) finds the KV cache,
 * weights and compute buffers of an independent calculation, a command that moves exactly whole
 * blocks' expert tensors and fits the budget, --n-cpu-moe for a prefix; and the command builder
 * alone on hand-made block sets. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "simulator/llamacpp.h"
#include "tests/unit/cli_util.h"

static char dir[256], costs[700];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/mp_test_llamacpp_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(chdir(dir), 0);
    snprintf(costs, sizeof costs, "%s/examples/costs-h200-tiny.json", getenv("MP_SOURCE_ROOT"));
    mp_test_tiny_model(dir, "tiny.gguf");
    mp_test_collect_tiny(dir, "tiny.gguf", "p.json", "[\"Explain mixture of experts\", \"Why is the sky blue\"]",
                         "t.db");
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

/* Runs tests/llamacpp_check.py on r.json (compute: the compute buffers it must find, "" for its
 * own estimate); returns its output (static), failing unless it exits 0. */
static const char *check_compute(int ctx, const char *budgets, const char *compute)
{
    static char out[8192];
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "python3 '%s/tests/llamacpp_check.py' tiny.gguf r.json %d %s %s 2>&1",
             getenv("MP_SOURCE_ROOT"), ctx, budgets, compute);
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f);
    const size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    const int st = pclose(f);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: %s", cmd, out);
    return out;
}

static const char *check(int ctx, const char *budgets)
{
    return check_compute(ctx, budgets, "");
}

TestSuite(llamacpp, .init = setup, .fini = teardown);

Test(llamacpp, commands_at_several_budgets)
{
    static char out[1 << 17];
    char args[2048];
    /* the tiny model under llama.cpp: 645 KiB of weights, 1 MiB of KV cache, 15 MiB of compute
     * buffers, 1.95 MiB of expert tensors per layer; --non-expert-bytes keeps moeplan's own
     * runtime (48 MiB of scratch) out of the way of these budgets */
    const char *budgets = "16777216,18874368,22020096,67108864"; /* 16, 18, 21, 64 MiB */
    snprintf(args, sizeof args, "simulate t.db -m tiny.gguf -c 300 --costs '%s' --non-expert-bytes 8MiB --budget "
             "16MiB,18MiB,21MiB,64MiB --policy plan --emit-llamacpp --json r.json", costs);
    cr_assert_eq(mp_test_moeplan(dir, args, MP_TEST_MERGED, out, sizeof out), 0, "%s", out);
    const char *res = check(300, budgets); /* -c 300: 512 cells after llama.cpp's padding */
    cr_assert_not_null(strstr(res, "budget 16777216: no command"), "%s", res);
    cr_assert_not_null(strstr(res, "budget 18874368: cpu blocks 0,1,2,3 via --n-cpu-moe"), "%s", res);
    cr_assert_not_null(strstr(res, "budget 67108864: cpu blocks none via None"), "%s", res);
    const char *mid = strstr(res, "budget 22020096: cpu blocks ");
    cr_assert_not_null(mid, "%s", res);
    cr_assert(strncmp(mid + 28, "none", 4) && strncmp(mid + 28, "0,1,2,3 ", 8), "some layers on each side: %s", res);
    /* the table says what the command loses and why */
    cr_assert_not_null(strstr(out, "llama.cpp:    llama-server -m 'tiny.gguf' -ngl 99 -c 300 --n-cpu-moe 4\n"), "%s", out);
    cr_assert_not_null(strstr(out, "for the per-expert plan in the same memory"), "%s", out);
    cr_assert_not_null(strstr(out, "per-expert placement needs the STRP profile"), "%s", out);
    cr_assert_not_null(strstr(out, "exceeds the budget 16.00 MiB"), "%s", out);
}

/* --llamacpp-compute-buffer: llama.cpp's compute buffers as llama-server printed them replace
 * the estimate (15 MiB for the tiny model at -c 300): with 2 MiB, 16 MiB holds llama.cpp and
 * every layer's experts on the CPU, where the estimate left no command. */
Test(llamacpp, compute_buffer_given)
{
    static char out[1 << 17];
    char args[2048];
    snprintf(args, sizeof args, "simulate t.db -m tiny.gguf -c 300 --costs '%s' --non-expert-bytes 8MiB --budget "
             "16MiB,64MiB --policy plan --emit-llamacpp --llamacpp-compute-buffer 2MiB --json r.json", costs);
    cr_assert_eq(mp_test_moeplan(dir, args, MP_TEST_MERGED, out, sizeof out), 0, "%s", out);
    const char *res = check_compute(300, "16777216,67108864", "2097152");
    cr_assert_null(strstr(res, "no command"), "%s", res);
    cr_assert_not_null(strstr(res, "budget 16777216: cpu blocks "), "%s", res);
    /* the same size grammar as every size; a usage error without --emit-llamacpp */
    snprintf(args, sizeof args, "simulate t.db -m tiny.gguf --costs '%s' --non-expert-bytes 8MiB --budget 21MiB "
             "--emit-llamacpp --llamacpp-compute-buffer 2MB2", costs);
    cr_assert_eq(mp_test_moeplan(dir, args, MP_TEST_MERGED, out, sizeof out), 2, "%s", out);
    cr_assert_not_null(strstr(out, "--llamacpp-compute-buffer: size '2MB2': unknown unit 'MB2'"), "%s", out);
    snprintf(args, sizeof args, "simulate t.db -m tiny.gguf --costs '%s' --non-expert-bytes 8MiB --budget 21MiB "
             "--llamacpp-compute-buffer 2MiB", costs);
    cr_assert_eq(mp_test_moeplan(dir, args, MP_TEST_MERGED, out, sizeof out), 2, "%s", out);
    cr_assert_not_null(strstr(out, "--llamacpp-compute-buffer applies to --emit-llamacpp"), "%s", out);
}

Test(llamacpp, needs_the_model)
{
    static char out[1 << 12];
    char args[2048];
    snprintf(args, sizeof args, "simulate t.db --costs '%s' --non-expert-bytes 8MiB --budget 21MiB --emit-llamacpp",
             costs);
    cr_assert_eq(mp_test_moeplan(dir, args, MP_TEST_MERGED, out, sizeof out), 2, "%s", out);
    cr_assert_not_null(strstr(out, "moeplan simulate: error: --emit-llamacpp needs -m MODEL"), "%s", out);
    cr_assert_null(strchr(strchr(out, '\n') + 1, '\n'), "one line: %s", out);
}

Test(llamacpp, command_builder, .init = NULL, .fini = NULL)
{
    uint64_t bytes[5] = {0, 10, 10, 10, 10}; /* block 0 dense, 1..4 MoE */
    mp_llamacpp_gpu x = {.n_blocks = 5, .expert_bytes = bytes};
    char buf[512];
    const bool prefix[5] = {false, true, true, false, false}, gaps[5] = {true, true, false, true, false},
               none[5] = {0}, last[5] = {false, false, false, false, true};
    cr_assert(mp_llamacpp_command("m.gguf", 4096, &x, prefix, buf, sizeof buf));
    cr_assert_str_eq(buf, "llama-server -m 'm.gguf' -ngl 99 -c 4096 --n-cpu-moe 3"); /* blocks 0..2 */
    cr_assert(mp_llamacpp_command("m.gguf", 4096, &x, gaps, buf, sizeof buf)); /* the dense block's flag is moot */
    cr_assert_str_eq(buf, "llama-server -m 'm.gguf' -ngl 99 -c 4096 -ot "
                          "'blk\\.(1|3)\\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU'");
    cr_assert(mp_llamacpp_command("it's.gguf", 8, &x, none, buf, sizeof buf));
    cr_assert_str_eq(buf, "llama-server -m 'it'\\''s.gguf' -ngl 99 -c 8");
    cr_assert(mp_llamacpp_command("m.gguf", 8, &x, last, buf, sizeof buf));
    cr_assert_str_eq(buf, "llama-server -m 'm.gguf' -ngl 99 -c 8 -ot 'blk\\.(4)\\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU'");
    cr_assert_not(mp_llamacpp_command("m.gguf", 8, &x, last, buf, 20), "a short buffer is refused");
    uint32_t block;
    cr_assert(mp_llamacpp_expert_tensor("blk.12.ffn_gate_up_exps.weight", 30, &block) && block == 12);
    cr_assert(mp_llamacpp_expert_tensor("blk.3.ffn_down_chexps.weight", 28, &block) && block == 3);
    cr_assert_not(mp_llamacpp_expert_tensor("blk.3.ffn_down_shexp.weight", 27, &block));
    /* a file that stores each expert as its own tensor: blk.N.<kind>.E.weight */
    cr_assert(mp_llamacpp_expert_tensor("blk.7.ffn_up.12.weight", 22, &block) && block == 7);
    cr_assert(mp_llamacpp_expert_tensor("blk.0.ffn_down.0.weight", 23, &block) && block == 0);
    cr_assert_not(mp_llamacpp_expert_tensor("blk.0.ffn_down.weight", 21, &block), "a dense FFN");
    cr_assert_not(mp_llamacpp_expert_tensor("blk.0.ffn_down..weight", 22, &block));
    cr_assert_not(mp_llamacpp_expert_tensor("blk.0.ffn_gate_inp.weight", 25, &block), "the router");
    cr_assert_not(mp_llamacpp_expert_tensor("blk.0.ffn_up.3", 14, &block), "nothing after the expert");
    cr_assert_not(mp_llamacpp_expert_tensor("blk.3.ffn_gate_inp.weight", 25, &block));
}

Test(llamacpp, compute_bytes_given_replace_the_estimate, .init = NULL, .fini = NULL)
{
    mp_llamacpp_gpu x = {.weights_bytes = 100, .kv_bytes = 20, .compute_bytes = 500, .fixed_bytes = 620};
    mp_llamacpp_gpu_set_compute_bytes(&x, 7);
    cr_assert(x.compute_given);
    cr_assert_eq(x.compute_bytes, 7);
    cr_assert_eq(x.fixed_bytes, 127, "the fixed part follows");
}
