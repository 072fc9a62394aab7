/* tests/unit/test_decide.c — the decision model (runtime/decide.h) by hand: far decisions from a
 * decode grid for top-1, top-2 and top-8 shapes, the cold share, the prefill copy rule, the floor,
 * and the grid's checks against the model and the run it is used for. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/quant.h"
#include "runtime/decide.h"
#include "tests/rng.h"

/* A grid for top_k K with every point NaN (its time and its CPU and GPU sides), far routes measured up
 * to far_max. */
static mp_decode_costs empty_grid(int K, int far_max)
{
    mp_decode_costs dc;
    memset(&dc, 0, sizeof dc);
    dc.top_k = K;
    dc.far_max = far_max;
    for (int c = 0; c <= MP_DECIDE_MAX_K; c++) {
        dc.off_ns[c] = dc.cpu_off_ns[c] = NAN;
        for (int f = 0; f <= MP_DECIDE_MAX_K; f++)
            dc.on_ns[c][f] = dc.cpu_on_ns[c][f] = dc.gpu_on_ns[c][f] = NAN;
    }
    return dc;
}

/* A bandwidth-bound host, as the developers' probe saw one (cores 100 bytes/ns alone, 78 beside
 * the bus's readers; bus 45; a gather launch of 10 us): a step's CPU side reads (c - f) experts of
 * B bytes, its GPU side f, and the layer takes the longer of the two plus a 20 us round trip. */
static mp_decode_costs bandwidth_grid(int K, double B)
{
    mp_decode_costs dc = empty_grid(K, K);
    for (int c = 0; c <= K; c++) {
        dc.off_ns[c] = 20000 + c * B / 100.0;
        for (int f = 0; f <= c; f++) {
            const double cpu = (c - f) * B / (f ? 78.0 : 100.0), gpu = 10000 + f * B / 45.0;
            dc.on_ns[c][f] = 20000 + (cpu > gpu ? cpu : gpu);
        }
    }
    return dc;
}

/* top-8 experts of 2.9 MB (Qwen3-30B-A3B Q4_K_M): an all-cold step reads 23 MB in 232 us on the
 * cores alone; three far routes split it best (cores 5 x 2.9 / 78 = 186 us beside the bus's
 * 10 + 3 x 2.9 / 45 = 203 us; two leave the cores 223 us, four the bus 268 us), and the layer turns
 * far routes on. */
Test(decide, top8_small_experts_split_the_reads)
{
    const double B = 2.9e6;
    mp_decode_costs dc = bandwidth_grid(8, B);
    mp_far_layer fl;
    mp_decide_far_layer(&dc, 1.0, &fl); /* every route cold (a whole layer on the CPU) */
    cr_assert(fl.on);
    /* for each c the f with the least max(CPU, GPU) side: check against a direct search */
    for (int c = 0; c <= 8; c++) {
        int best = 0;
        for (int f = 1; f <= c; f++)
            if (dc.on_ns[c][f] < dc.on_ns[c][best])
                best = f;
        cr_assert_eq(fl.table[c], best, "c=%d: table %d, best %d", c, fl.table[c], best);
    }
    cr_assert_eq(fl.table[0], 0);
    cr_assert_eq(fl.table[1], 0, "one cold route: the gather's 10 us + 64 us on the bus lose to 29 us on the cores");
    cr_assert_eq(fl.table[8], 3);
    cr_assert_float_eq(mp_decide_decode_ns(&dc, &fl, 8), dc.on_ns[8][3], 1e-9);
    /* a layer with almost everything resident: cold routes are rare, the gather's launch is paid
     * every step: off */
    mp_decide_far_layer(&dc, 0.02, &fl);
    cr_assert(!fl.on);
    cr_assert_float_eq(mp_decide_decode_ns(&dc, &fl, 1), dc.off_ns[1], 1e-9);
}

/* top-2 experts of 114 MB (Mixtral-8x7B Q4_K_M): the cores read both in 2.28 ms; one far route
 * takes the bus 2.54 ms, longer than the cores' two: far routes never pay, whatever the share. */
Test(decide, top2_large_experts_stay_on_the_cpu)
{
    mp_decode_costs dc = bandwidth_grid(2, 114e6);
    for (double share = 0; share <= 1.0; share += 0.125) {
        mp_far_layer fl;
        mp_decide_far_layer(&dc, share, &fl);
        cr_assert(!fl.on, "share %g: far routes on", share);
        cr_assert_eq(fl.table[2], 0);
    }
    /* a machine whose bus outreads its cores (cores 20 bytes/ns, 18 beside the bus): far pays */
    for (int c = 0; c <= 2; c++) {
        dc.off_ns[c] = 20000 + c * 114e6 / 20.0;
        for (int f = 0; f <= c; f++) {
            const double cpu = (c - f) * 114e6 / 18.0, gpu = 10000 + f * 114e6 / 45.0;
            dc.on_ns[c][f] = 20000 + (cpu > gpu ? cpu : gpu);
        }
    }
    mp_far_layer fl;
    mp_decide_far_layer(&dc, 1.0, &fl);
    cr_assert(fl.on);
    cr_assert_eq(fl.table[1], 1);
    cr_assert_eq(fl.table[2], 2, "both far: 5.10 ms on the bus against 6.35 ms for one each");
}

/* The same top-2 host, with far work in quarter experts (split 4, as calibrate measures a top-2
 * grid): a step's f units give the bus f/4 of an expert, the cores the rest. Whole routes lost
 * (above); a split puts 0.38 of the work on the bus beside the cores and pays. */
static mp_decode_costs split_grid(int K, int split, double B)
{
    mp_decode_costs dc = empty_grid(K, K * split);
    dc.far_split = split;
    for (int c = 0; c <= K; c++) {
        dc.off_ns[c] = 20000 + c * B / 100.0;
        for (int f = 0; f <= c * split; f++) {
            const double gpu_share = (double)f / split;
            const double cpu = (c - gpu_share) * B / (f ? 78.0 : 100.0), gpu = 10000 + gpu_share * B / 45.0;
            dc.on_ns[c][f] = 20000 + (cpu > gpu ? cpu : gpu);
        }
    }
    return dc;
}

Test(decide, top2_large_experts_split_one_with_the_bus)
{
    mp_decode_costs dc = split_grid(2, 4, 114e6);
    mp_far_layer fl;
    mp_decide_far_layer(&dc, 1.0, &fl);
    cr_assert(fl.on, "a split pays on an all-cold layer");
    cr_assert_eq(fl.split, 4);
    /* one cold route: 1/4 on the bus takes 10 + 633 us beside the cores' 1096 us; 2/4, 1277 us on
     * the bus: one quarter is best */
    cr_assert_eq(fl.table[1], 1, "table[1] = %d", fl.table[1]);
    /* two cold routes: 3/4 of an expert on the bus (1910 us) beside 1.25 on the cores (1827 us) */
    cr_assert_eq(fl.table[2], 3, "table[2] = %d", fl.table[2]);
    cr_assert_float_eq(mp_decide_decode_ns(&dc, &fl, 2), dc.on_ns[2][3], 1e-9);
    cr_assert_lt(mp_decide_decode_ns(&dc, &fl, 2), dc.off_ns[2]);
    /* the step's work: 3 units of 4 are one route, split, with 3 parts on the GPU */
    int routes = -1, part = -1;
    mp_decide_far_units(fl.table[2], fl.split, 2, &routes, &part);
    cr_assert_eq(routes, 1);
    cr_assert_eq(part, 3);
    /* the floor holds the grid's points: every point at or above its cold bytes over both readers */
    dc.host_bytes_per_ns = 100;
    dc.bus_bytes_per_ns = 45;
    for (int c = 0; c <= 2; c++)
        for (int f = 0; f <= 4 * c; f++)
            cr_assert_geq(dc.on_ns[c][f], mp_decide_floor_ns(&dc, c * 114e6), "c=%d f=%d", c, f);
}

Test(decide, far_units_per_expert_follow_top_k_and_the_rows)
{
    cr_assert_eq(mp_decide_far_split(8, 768, 256), 3, "top-8 of 768 rows: thirds");
    cr_assert_eq(mp_decide_far_split(8, 1024, 256), 3, "top-8 of 1024 rows: thirds, not the four blocks");
    cr_assert_eq(mp_decide_far_split(8, 512, 256), 2, "two blocks: halves");
    cr_assert_eq(mp_decide_far_split(32, 768, 256), 1, "the grid's far axis: 32 units a step");
    cr_assert_eq(mp_decide_far_split(16, 768, 32), 2);
    cr_assert_eq(mp_decide_far_split(4, 1536, 256), 3);
    cr_assert_eq(mp_decide_far_split(4, 2880, 32), 3, "gpt-oss: thirds");
    cr_assert_eq(mp_decide_far_split(3, 1536, 256), 3);
    cr_assert_eq(mp_decide_far_split(2, 14336, 256), 4, "Mixtral: quarter experts");
    cr_assert_eq(mp_decide_far_split(1, 14336, 256), 8);
    cr_assert_eq(mp_decide_far_split(2, 512, 256), 2, "no finer than one granule a unit");
    cr_assert_eq(mp_decide_far_split(2, 256, 256), 1, "one granule: cannot split");
    cr_assert_eq(mp_decide_far_split(2, 14336, 0), 1, "unknown granule: whole routes");
    cr_assert_eq(mp_decide_far_split(0, 14336, 256), 1);
    for (int k = 1; k <= MP_DECIDE_MAX_K; k++)
        cr_assert_leq(k * mp_decide_far_split(k, 1 << 20, 1), MP_DECIDE_MAX_K, "top-%d", k);
}

/* The rule for the experts a grid names: the down tensor's type is the last of its quant's names */
Test(decide, far_units_of_a_grid_follow_its_down_type)
{
    cr_assert_eq(mp_decide_far_split_of_grid(8, 768, "Q4_K/Q6_K"), 3, "the 30B preset: thirds");
    cr_assert_eq(mp_decide_far_split_of_grid(2, 14336, "Q4_K/Q6_K"), 4, "Mixtral: quarters");
    cr_assert_eq(mp_decide_far_split_of_grid(8, 768, "Q4_K/Q4_K/Q6_K"), 3);
    cr_assert_eq(mp_decide_far_split_of_grid(8, 512, "Q6_K"), 2, "two blocks of 256: halves");
    cr_assert_eq(mp_decide_far_split_of_grid(8, 512, "Q8_0"), 3, "blocks of 32: the rule's thirds");
    cr_assert_eq(mp_decide_far_split_of_grid(8, 256, "Q4_K/Q6_K"), 1, "one block: whole routes");
    cr_assert_eq(mp_decide_far_split_of_grid(8, 768, "Q4_K/XYZ"), 0, "an unknown down type");
    cr_assert_eq(mp_decide_far_split_of_grid(8, 768, ""), 0);
    cr_assert_eq(mp_decide_far_split_of_grid(8, 768, NULL), 0);
}

/* calibrate --far-units takes any count up to the most: a granule of rows a unit, the grid's axis */
Test(decide, most_far_units_per_expert)
{
    cr_assert_eq(mp_decide_far_split_most(8, 768, 256), 3, "top-8 of 768 rows: thirds at most");
    cr_assert_eq(mp_decide_far_split_most(8, 4096, 256), MP_DECIDE_MAX_K / 8, "the grid's far axis");
    cr_assert_eq(mp_decide_far_split_most(2, 14336, 256), MP_DECIDE_MAX_K / 2);
    cr_assert_eq(mp_decide_far_split_most(2, 256, 256), 1, "one granule: whole routes");
    cr_assert_eq(mp_decide_far_split_most(2, 14336, 0), 1, "unknown granule: whole routes");
    cr_assert_eq(mp_decide_far_split_most(0, 14336, 256), 1);
    for (int k = 1; k <= MP_DECIDE_MAX_K; k++)
        for (int64_t ff = 256; ff <= 16384; ff *= 4) {
            const int most = mp_decide_far_split_most(k, ff, 256);
            cr_assert_leq(mp_decide_far_split(k, ff, 256), most, "the rule within the most: top-%d n_ff %" PRId64, k, ff);
            cr_assert_leq(k * most, MP_DECIDE_MAX_K < k ? k : MP_DECIDE_MAX_K, "top-%d", k);
            cr_assert_leq((int64_t)most * 256, ff < 256 ? 256 : ff, "top-%d n_ff %" PRId64, k, ff);
        }
}

Test(decide, split_rows_are_whole_blocks_on_both_sides)
{
    /* the granule: the down type's block and its activations' block */
    cr_assert_eq(mp_decide_split_granule(MP_TYPE_Q6_K), 256);
    cr_assert_eq(mp_decide_split_granule(MP_TYPE_Q4_K), 256);
    cr_assert_eq(mp_decide_split_granule(MP_TYPE_Q8_0), 32);
    cr_assert_eq(mp_decide_split_granule(MP_TYPE_Q4_0), 32);
    cr_assert_eq(mp_decide_split_granule(MP_TYPE_F32), 1);
    cr_assert_eq(mp_decide_split_granule(-1), 0);
    /* Mixtral's 14336 rows are 56 super-blocks: quarters of 14 */
    cr_assert_eq(mp_decide_split_rows(14336, 256, 4, 1), 14336 - 14 * 256);
    cr_assert_eq(mp_decide_split_rows(14336, 256, 4, 2), 14336 - 28 * 256);
    cr_assert_eq(mp_decide_split_rows(14336, 256, 4, 3), 14336 - 42 * 256);
    /* no split: part 0, part >= split, one unit, fewer than two granules */
    cr_assert_eq(mp_decide_split_rows(14336, 256, 4, 0), 0);
    cr_assert_eq(mp_decide_split_rows(14336, 256, 4, 4), 0);
    cr_assert_eq(mp_decide_split_rows(14336, 256, 1, 0), 0);
    cr_assert_eq(mp_decide_split_rows(256, 256, 4, 1), 0);
    /* two granules: at least one on each side, whatever the part */
    for (int part = 1; part < 4; part++)
        cr_assert_eq(mp_decide_split_rows(512, 256, 4, part), 256, "part %d", part);
    /* every split of random shapes: a multiple of the granule, strictly inside */
    seed_rng();
    for (int i = 0; i < 2000; i++) {
        const int64_t g = (int64_t[]){1, 32, 256}[rnd_u64() % 3];
        const int64_t n_ff = g * (int64_t)(2 + rnd_u64() % 80);
        const int split = 2 + (int)(rnd_u64() % 7), part = 1 + (int)(rnd_u64() % (uint64_t)(split - 1));
        const int64_t r0 = mp_decide_split_rows(n_ff, g, split, part);
        cr_assert(r0 > 0 && r0 < n_ff && r0 % g == 0, "seed %llu: n_ff %lld granule %lld %d/%d: r0 %lld",
                  (unsigned long long)g_seed, (long long)n_ff, (long long)g, part, split, (long long)r0);
        /* more parts for the GPU never leave the CPU more rows */
        if (part > 1)
            cr_assert_leq(r0, mp_decide_split_rows(n_ff, g, split, part - 1));
    }
}

Test(decide, far_units_name_whole_routes_and_the_split_one)
{
    int routes, part;
    const int cases[][5] = {
        /* f, split, far_max routes, routes, part */
        {0, 4, 2, 0, 0}, {1, 4, 2, 1, 1}, {4, 4, 2, 1, 0}, {5, 4, 2, 2, 1},
        {8, 4, 2, 2, 0}, {3, 4, 2, 1, 3}, {9, 4, 2, 2, 0}, /* past the stage: whole routes it holds */
        {3, 1, 8, 3, 0}, {3, 0, 8, 3, 0}, {-1, 4, 2, 0, 0}, {2, 4, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mp_decide_far_units(cases[i][0], cases[i][1], cases[i][2], &routes, &part);
        cr_assert_eq(routes, cases[i][3], "case %zu: routes %d", i, routes);
        cr_assert_eq(part, cases[i][4], "case %zu: part %d", i, part);
    }
}

/* top-1: the one cold route is far or not; a grid without far points (far_max 0) never turns them
 * on; nor does a layer whose likely counts lack a point (nothing to compare). */
Test(decide, top1_and_missing_points)
{
    mp_decode_costs dc = empty_grid(1, 1);
    dc.off_ns[0] = 30, dc.off_ns[1] = 100;
    dc.on_ns[0][0] = 32, dc.on_ns[1][0] = 102, dc.on_ns[1][1] = 60;
    mp_far_layer fl;
    mp_decide_far_layer(&dc, 0.5, &fl); /* 0.5 x 32 + 0.5 x 60 = 46 < 65 */
    cr_assert(fl.on);
    cr_assert_eq(fl.table[1], 1);
    mp_decide_far_layer(&dc, 0.01, &fl); /* 0.99 x 32 + 0.01 x 60 = 32.3 > 30.7 */
    cr_assert(!fl.on);
    dc.far_max = 0;
    mp_decide_far_layer(&dc, 1.0, &fl);
    cr_assert(!fl.on);
    dc.far_max = 1;
    dc.on_ns[0][0] = NAN; /* count 0 is likely at share 0.5 and has no far-on point */
    mp_decide_far_layer(&dc, 0.5, &fl);
    cr_assert(!fl.on);
    mp_decide_far_layer(&dc, 1.0, &fl); /* at share 1 count 0 never happens */
    cr_assert(fl.on);
    mp_decide_far_layer(NULL, 1.0, &fl);
    cr_assert(!fl.on);
    cr_assert(isnan(mp_decide_decode_ns(&dc, &fl, 2)), "a count beyond top_k has no time");
}

/* The layer step's time a copy set gives: the CPU's share beside the link's copies. */
static double copy_set_ns(int n, const double *cpu_ns, double copy_ns, const bool *copy)
{
    double rest = 0;
    int k = 0;
    for (int i = 0; i < n; i++) {
        rest += copy[i] ? 0 : cpu_ns[i];
        k += copy[i];
    }
    return rest > k * copy_ns ? rest : k * copy_ns;
}

Test(decide, copies_share_a_layer_between_the_cpu_and_the_link)
{
    int order[128];
    bool copy[128];
    /* before the costs are known: by rows (min_rows 32; none without it); one-row experts never */
    const int64_t r4[] = {1, 31, 32, 40};
    const double zero4[] = {0, 0, 0, 0}, some4[] = {9, 9, 0, 9};
    cr_assert_eq(mp_decide_copies(4, r4, zero4, 0, 32, order, copy), 2);
    cr_assert(!copy[0] && !copy[1] && copy[2] && copy[3]);
    cr_assert_eq(mp_decide_copies(4, r4, some4, 5, 32, order, copy), 2, "one CPU time unknown: by rows");
    cr_assert_eq(mp_decide_copies(4, r4, zero4, 0, 0, order, copy), 0);
    const int64_t r2[] = {1, 1};
    const double big2[] = {1e9, 1e9};
    cr_assert_eq(mp_decide_copies(2, r2, big2, 1, 32, order, copy), 0, "decode routes are never copied");
    /* equal CPU times: the expert of more rows goes first (the planner keeps the same order) */
    const int64_t r2t[] = {2, 5};
    const double c2t[] = {50, 50};
    cr_assert_eq(mp_decide_copies(2, r2t, c2t, 60, 32, order, copy), 1);
    cr_assert(!copy[0] && copy[1]);
    /* the costliest go first: 500 and 300 to the link (200 ns), the CPU keeps 30 */
    const int64_t r4b[] = {2, 9, 3, 6};
    const double c4b[] = {10, 500, 20, 300};
    cr_assert_eq(mp_decide_copies(4, r4b, c4b, 100, 32, order, copy), 2);
    cr_assert(!copy[0] && copy[1] && !copy[2] && copy[3]);
    /* 128 experts of 100 ns on the CPU against 53 on the link: a copy-every-expert rule takes
     * 6,784 ns; the CPU keeps 44 (4,400 ns) beside 84 copies (4,452) */
    int64_t rows[128];
    double cpu[128];
    for (int i = 0; i < 128; i++)
        rows[i] = 32, cpu[i] = 100;
    cr_assert_eq(mp_decide_copies(128, rows, cpu, 53, 32, order, copy), 84);
    cr_assert_float_eq(copy_set_ns(128, cpu, 53, copy), 4452, 1e-9);
    /* a CPU faster than the link still gives it a share: 10 × 40 ns against 53 a copy */
    cr_assert_eq(mp_decide_copies(10, rows, cpu, 250, 32, order, copy), 3, "10 x 100 ns vs 250: 3 copies");
    for (int i = 0; i < 10; i++)
        cpu[i] = 40;
    cr_assert_eq(mp_decide_copies(10, rows, cpu, 53, 32, order, copy), 4);
    cr_assert_float_eq(copy_set_ns(10, cpu, 53, copy), 240, 1e-9);
    /* on fresh random layers the set is as fast as the best of every subset */
    seed_rng();
    for (int iter = 0; iter < 300; iter++) {
        const int n = 1 + (int)(rnd_u64() % 10);
        for (int i = 0; i < n; i++) {
            rows[i] = 1 + (int64_t)(rnd_u64() % 40);
            cpu[i] = 1 + (double)(rnd_u64() % 1000);
        }
        const double copy_ns = 1 + (double)(rnd_u64() % 400);
        const int k = mp_decide_copies(n, rows, cpu, copy_ns, 32, order, copy);
        int counted = 0;
        for (int i = 0; i < n; i++) {
            counted += copy[i];
            cr_assert(!copy[i] || rows[i] >= 2, "seed %llu: a one-row expert copied", (unsigned long long)g_seed);
        }
        cr_assert_eq(k, counted);
        double best = INFINITY;
        for (unsigned mask = 0; mask < 1u << n; mask++) {
            bool sub[10];
            bool ok = true;
            for (int i = 0; i < n; i++) {
                sub[i] = mask >> i & 1;
                ok = ok && (!sub[i] || rows[i] >= 2);
            }
            if (ok) {
                const double t = copy_set_ns(n, cpu, copy_ns, sub);
                best = t < best ? t : best;
            }
        }
        cr_assert_float_eq(copy_set_ns(n, cpu, copy_ns, copy), best, 1e-9, "seed %llu: layer %d: %g against the best %g",
                           (unsigned long long)g_seed, iter, copy_set_ns(n, cpu, copy_ns, copy), best);
    }
}

Test(decide, cold_share_and_floor)
{
    cr_assert_float_eq(mp_decide_cold_share(30, 120, 5, 8), 0.25, 1e-12); /* from the counts */
    cr_assert_float_eq(mp_decide_cold_share(0, 0, 6, 8), 0.25, 1e-12);   /* uniform: 2 of 8 cold */
    cr_assert_float_eq(mp_decide_cold_share(0, 0, 0, 8), 1.0, 1e-12);
    cr_assert_float_eq(mp_decide_cold_share(500, 120, 5, 8), 1.0, 1e-12); /* clamped */
    /* the floor: host 90 + bus 55 bytes/ns; none without the host's bandwidth */
    mp_decode_costs dc = empty_grid(2, 0);
    dc.host_bytes_per_ns = 90, dc.bus_bytes_per_ns = 55;
    cr_assert_float_eq(mp_decide_floor_ns(&dc, 145e6), 1e6, 1e-6);
    cr_assert_float_eq(mp_decide_floor_ns(&dc, 0), 0, 1e-12);
    /* the two readers measured at once: 116 bytes/ns, not 90 + 55 */
    dc.together_bytes_per_ns = 116;
    cr_assert_float_eq(mp_decide_floor_ns(&dc, 116e6), 1e6, 1e-6);
    dc.together_bytes_per_ns = 60; /* below the cores alone: the cores' rate */
    cr_assert_float_eq(mp_decide_floor_ns(&dc, 90e6), 1e6, 1e-6);
    dc.host_bytes_per_ns = 0;
    cr_assert_float_eq(mp_decide_floor_ns(&dc, 145e6), 0, 1e-12);
}

/* The cores beside the bus: a far-on point of whole far routes whose CPU side is below its CPU
 * experts' time alone, slowed over the bus's reads by the two-reader probe's share, is raised to it;
 * the layer's time grows only where the CPU side is then the longer one. A host at 150 bytes/ns
 * alone, the cores 130 beside a bus of 47.5, 4 MB experts: two far experts take the bus 168,421 ns,
 * 0.842 of six CPU experts' 200 us alone, so those take at least 200 x (1 + (150 / 130 - 1) x 0.842)
 * = 225.9 us. */
Test(decide, cores_beside_the_bus_raise_far_points)
{
    const double least_6 = 200000 * (1 + (150.0 / 130 - 1) * (2 * 4e6 / 47.5 / 200000));
    const double least_1 = 100000 * (1 + (150.0 / 130 - 1) * (4e6 / 47.5 / 100000));
    for (int probe = 0; probe < 2; probe++) {
        mp_decode_costs dc = empty_grid(8, 8);
        dc.expert_bytes = 4000000, dc.far_split = 1;
        dc.level_bytes_per_ns = 150;
        if (probe) /* the two-reader probe measured */
            dc.cores_beside_bus_bytes_per_ns = 130, dc.bus_beside_cores_bytes_per_ns = 47.5;
        dc.cpu_off_ns[6] = 200000, dc.cpu_off_ns[1] = 100000;
        /* (8, 2): the CPU side the longer, measured as if alone */
        dc.on_ns[8][2] = 220000, dc.cpu_on_ns[8][2] = 205000, dc.gpu_on_ns[8][2] = 178000;
        /* (2, 1): the GPU side the longer */
        dc.on_ns[2][1] = 320000, dc.cpu_on_ns[2][1] = 90000, dc.gpu_on_ns[2][1] = 300000;
        /* (7, 1): already above what it would be raised to */
        dc.on_ns[7][1] = 250000, dc.cpu_on_ns[7][1] = 230000, dc.gpu_on_ns[7][1] = 100000;
        mp_decode_costs_settle(&dc);
        if (!probe) {
            cr_assert_float_eq(dc.cpu_on_ns[8][2], 205000, 1e-6, "no two-reader probe: the point as measured");
            cr_assert_float_eq(dc.on_ns[8][2], 220000, 1e-6);
            continue;
        }
        cr_assert_float_eq(dc.cpu_on_ns[8][2], least_6, 1e-6, "%f", dc.cpu_on_ns[8][2]);
        cr_assert_float_eq(dc.on_ns[8][2], 220000 + least_6 - 205000, 1e-6, "%f", dc.on_ns[8][2]);
        cr_assert_float_eq(dc.cpu_on_ns[2][1], least_1, 1e-6, "%f", dc.cpu_on_ns[2][1]);
        cr_assert_float_eq(dc.on_ns[2][1], 320000, 1e-6, "the GPU side stays the longer: the layer as measured");
        cr_assert_float_eq(dc.cpu_on_ns[7][1], 230000, 1e-6);
        cr_assert_float_eq(dc.on_ns[7][1], 250000, 1e-6);
    }
    /* far work in halves: a point with a split route (f odd) is left as measured; whole ones are
     * raised, the CPU experts alone counted in whole experts */
    mp_decode_costs dc = empty_grid(2, 4);
    dc.expert_bytes = 100000000, dc.far_split = 2;
    dc.level_bytes_per_ns = 150, dc.cores_beside_bus_bytes_per_ns = 120, dc.bus_beside_cores_bytes_per_ns = 50;
    dc.cpu_off_ns[1] = 800000;
    dc.on_ns[2][1] = 1500000, dc.cpu_on_ns[2][1] = 700000, dc.gpu_on_ns[2][1] = 1000000;
    dc.on_ns[2][2] = 2100000, dc.cpu_on_ns[2][2] = 800000, dc.gpu_on_ns[2][2] = 2000000;
    mp_decode_costs_settle(&dc);
    cr_assert_float_eq(dc.cpu_on_ns[2][1], 700000, 1e-6, "a split route's point is left as measured");
    cr_assert_float_eq(dc.cpu_on_ns[2][2], 800000 * 1.25, 1e-6, "%f", dc.cpu_on_ns[2][2]); /* the bus 2 ms: all of it */
    cr_assert_float_eq(dc.on_ns[2][2], 2100000, 1e-6, "the bus's side stays the longer");
}

/* What settling raised, counted against the file's points: the points whose CPU side it charges more,
 * and the one raised most; none where nothing was raised or the point is far off. */
Test(decide, raised_points_are_counted)
{
    mp_decode_costs dc = empty_grid(8, 8);
    dc.expert_bytes = 4000000, dc.far_split = 1;
    dc.level_bytes_per_ns = 150, dc.cores_beside_bus_bytes_per_ns = 130, dc.bus_beside_cores_bytes_per_ns = 47.5;
    dc.off_ns[6] = 210000, dc.cpu_off_ns[6] = 200000, dc.off_ns[7] = 240000, dc.cpu_off_ns[7] = 230000;
    mp_cost_decode_point pts[] = {
        {.cold = 8, .far = 2, .far_on = true, .layer = {220000, 0}, .cpu_ns = 205000, .gpu_ns = 178000},
        {.cold = 8, .far = 1, .far_on = true, .layer = {250000, 0}, .cpu_ns = 231000, .gpu_ns = 100000},
        {.cold = 7, .far = 1, .far_on = true, .layer = {260000, 0}, .cpu_ns = 240000, .gpu_ns = 100000},
        {.cold = 6, .far = 0, .far_on = false, .layer = {210000, 0}, .cpu_ns = 200000, .gpu_ns = 5000},
    };
    for (size_t i = 0; i < sizeof pts / sizeof pts[0]; i++)
        if (pts[i].far_on) {
            dc.on_ns[pts[i].cold][pts[i].far] = pts[i].layer.median_ns;
            dc.cpu_on_ns[pts[i].cold][pts[i].far] = pts[i].cpu_ns;
            dc.gpu_on_ns[pts[i].cold][pts[i].far] = pts[i].gpu_ns;
        }
    mp_cost_decode raw = {.n_points = 4, .points = pts, .top_k = 8, .far_max = 8, .far_split = 1};
    mp_decode_raised r;
    mp_decode_costs_raised(&raw, &dc, &r);
    cr_assert_eq(r.n, 0, "nothing settled yet: %d raised", r.n);
    mp_decode_costs_settle(&dc);
    mp_decode_costs_raised(&raw, &dc, &r);
    /* (8, 2) from 205 to 225.9 us and (8, 1) from 231 to 230 x 1.056 = 243.0; (7, 1) above its floor
     * (6 alone: 200 x 1.0648 = 213.0) */
    cr_assert_eq(r.n, 2, "%d raised", r.n);
    cr_assert(r.cold == 8 && r.far == 2, "the most raised: (%d, %d)", r.cold, r.far);
    cr_assert_float_eq(r.from_ns, 205000, 1e-6);
    cr_assert_float_eq(r.to_ns, dc.cpu_on_ns[8][2], 1e-6);
}

/* Settling random grids (top_k, split, far_max, times, the two readers' rates, NaN holes): it only
 * raises points, never lowers one; a far-on point's CPU side ends at least its CPU experts' time
 * alone; and settling twice changes nothing. */
Test(decide, settle_only_raises_and_holds)
{
    seed_rng();
    for (int iter = 0; iter < 300; iter++) {
        const int K = 1 + (int)(rnd_u64() % 8), split = 1 + (int)(rnd_u64() % (MP_DECIDE_MAX_K / K < 4 ? MP_DECIDE_MAX_K / K : 4));
        mp_decode_costs dc = empty_grid(K, 1 + (int)(rnd_u64() % (uint64_t)(K * split)));
        dc.far_split = split;
        dc.expert_bytes = 1000000 + rnd_u64() % 200000000;
        dc.level_bytes_per_ns = 50 + rnd_uniform() * 150;
        dc.cores_beside_bus_bytes_per_ns = rnd_u64() % 4 ? dc.level_bytes_per_ns * (0.5 + rnd_uniform() * 0.7) : 0;
        dc.bus_beside_cores_bytes_per_ns = 20 + rnd_uniform() * 40;
        for (int c = 0; c <= MP_DECIDE_MAX_K; c++) {
            const bool hole = rnd_u64() % 8 == 0;
            dc.off_ns[c] = hole ? NAN : 1e4 + rnd_uniform() * 1e7;
            dc.cpu_off_ns[c] = hole ? NAN : c ? dc.off_ns[c] * rnd_uniform() : 0;
            for (int f = 0; f <= MP_DECIDE_MAX_K; f++) {
                const bool h = rnd_u64() % 8 == 0;
                dc.on_ns[c][f] = h ? NAN : 1e4 + rnd_uniform() * 1e7;
                dc.cpu_on_ns[c][f] = h ? NAN : dc.on_ns[c][f] * rnd_uniform();
                dc.gpu_on_ns[c][f] = h || rnd_u64() % 4 == 0 ? NAN : dc.on_ns[c][f] * rnd_uniform();
            }
        }
        const mp_decode_costs before = dc;
        mp_decode_costs_settle(&dc);
        for (int c = 0; c <= K; c++)
            for (int f = 0; f <= MP_DECIDE_MAX_K; f++) {
                cr_assert(!(dc.on_ns[c][f] < before.on_ns[c][f]) && !(dc.cpu_on_ns[c][f] < before.cpu_on_ns[c][f]),
                          "seed %llu, iter %d: point (%d, %d) lowered", (unsigned long long)g_seed, iter, c, f);
                cr_assert_eq(isnan(dc.on_ns[c][f]), isnan(before.on_ns[c][f]), "seed %llu: a hole filled",
                             (unsigned long long)g_seed);
                const int n = c - f / split;
                if (dc.cores_beside_bus_bytes_per_ns > 0 && f > 0 && f % split == 0 && f <= dc.far_max && n >= 1 &&
                    dc.cpu_off_ns[n] > 0 && isfinite(dc.cpu_on_ns[c][f]))
                    cr_assert_geq(dc.cpu_on_ns[c][f], dc.cpu_off_ns[n] * (1 - 1e-12), "seed %llu, iter %d: (%d, %d)",
                                  (unsigned long long)g_seed, iter, c, f);
            }
        mp_decode_costs again = dc;
        mp_decode_costs_settle(&again);
        cr_assert(!memcmp(&again, &dc, sizeof dc), "seed %llu, iter %d: settling twice moved a point",
                  (unsigned long long)g_seed, iter);
    }
}

/* A run's knobs against a calibration's: only knobs that change what calibrate times, only those the
 * file records, each named with the run's value then the calibration's. */
Test(decide, other_knobs_by_the_costs_flag)
{
    mp_costs_knobs cal;
    memset(&cal, 0, sizeof cal);
    char why[400];
    cr_assert(!mp_decide_other_knobs(&cal, NULL, why, sizeof why), "a file that records nothing differs");
    cr_assert_str_eq(why, "");
    const int isa = mp_knob_index("MP_ISA"), graphs = mp_knob_index("MP_GPU_GRAPHS");
    const int hang = mp_knob_index("MP_HANG_DUMP_S"), units = mp_knob_index("MP_MOE_PIPE_UNITS");
    cr_assert(isa >= 0 && graphs >= 0 && hang >= 0 && units >= 0);
    cr_assert(mp_knob_at(isa)->costs && mp_knob_at(graphs)->costs && !mp_knob_at(hang)->costs);
    cal.set[isa] = cal.set[graphs] = cal.set[hang] = cal.set[units] = true;
    snprintf(cal.value[isa], sizeof cal.value[isa], "best");
    snprintf(cal.value[graphs], sizeof cal.value[graphs], "1");
    snprintf(cal.value[hang], sizeof cal.value[hang], "600"); /* not in the costs: never compared */
    snprintf(cal.value[units], sizeof cal.value[units], "8");
    cr_assert(!mp_decide_other_knobs(&cal, NULL, why, sizeof why), "the defaults against the defaults: %s", why);
    mp_knobs now;
    mp_knobs_defaults(&now);
    mp_error err;
    cr_assert_eq(mp_knobs_set(&now, "MP_GPU_GRAPHS", "0", MP_KNOB_ENV, &err), MP_OK);
    cr_assert_eq(mp_knobs_set(&now, "MP_ISA", "avx2", MP_KNOB_ENV, &err), MP_OK);
    cr_assert(mp_decide_other_knobs(&cal, &now, why, sizeof why));
    cr_assert_str_eq(why, "MP_ISA=avx2 here, best in the costs; MP_GPU_GRAPHS=0 here, 1 in the costs");
    char small[20]; /* a short buffer: cut, still terminated, still true */
    cr_assert(mp_decide_other_knobs(&cal, &now, small, sizeof small));
    cr_assert_eq(strlen(small), sizeof small - 1);
    cal.set[isa] = cal.set[graphs] = false; /* a file that does not record them */
    cr_assert(!mp_decide_other_knobs(&cal, &now, why, sizeof why));
}

/* The host moved from the calibration's level: beyond 10 % either way, by the same probe only. */
Test(decide, host_moved_beyond_ten_percent_by_one_probe)
{
    cr_assert(!mp_decide_host_moved(100, true, 109.9));
    cr_assert(!mp_decide_host_moved(100, true, 90.1));
    cr_assert(mp_decide_host_moved(100, true, 110.1));
    cr_assert(mp_decide_host_moved(100, true, 89.9));
    cr_assert(!mp_decide_host_moved(100, false, 150), "the older probe's level does not compare");
    cr_assert(!mp_decide_host_moved(0, true, 150), "no level");
}

/* Another machine: any known fact that differs, named with both values; unknown facts ("", "unknown",
 * "none", 0, NULL) are not compared. */
Test(decide, other_machine_by_known_facts)
{
    char why[400];
    cr_assert(!mp_decide_other_machine("Xeon", 16, "NVIDIA H200", "Xeon", 16, "NVIDIA H200", why, sizeof why));
    cr_assert_str_eq(why, "");
    cr_assert(mp_decide_other_machine("Xeon", 16, "NVIDIA H200", "Xeon", 16, "NVIDIA GeForce RTX 4090", why, sizeof why));
    cr_assert(strstr(why, "GPU NVIDIA H200, this machine's NVIDIA GeForce RTX 4090"), "%s", why);
    cr_assert(mp_decide_other_machine("Xeon", 16, "H200", "EPYC", 32, "H200", why, sizeof why));
    cr_assert(strstr(why, "CPU Xeon, this machine's EPYC") && strstr(why, "16 CPUs online, this machine 32"), "%s", why);
    cr_assert(!mp_decide_other_machine("", 0, "", "EPYC", 32, "H200", why, sizeof why), "a file that says nothing");
    cr_assert(!mp_decide_other_machine("Xeon", 16, "H200", "unknown", 0, NULL, why, sizeof why), "nothing known here");
    /* a small buffer still holds a terminated prefix */
    char small[8];
    cr_assert(mp_decide_other_machine("Xeon", 16, "A", "Xeon", 16, "B", small, sizeof small));
    cr_assert_lt(strlen(small), sizeof small);
    cr_assert(mp_decide_other_machine("Xeon", 16, "A", "Xeon", 16, "B", NULL, 0), "no room to say why: still true");
    cr_assert(!mp_decide_other_machine("Xeon", 16, "none", "Xeon", 16, "B", why, sizeof why), "no GPU then: unknown");
}

/* A layer's routes by residency from counts, from frequencies, and from neither (then the share
 * falls back to the uniform one), on a fresh random row each run. */
Test(decide, layer_routes_from_a_row_and_a_mask)
{
    enum { E = 37 };
    uint64_t counts[E];
    float freq[E];
    uint8_t res[E];
    seed_rng();
    double want_cold = 0, want_all = 0, want_fcold = 0, want_fall = 0;
    int n_res = 0;
    for (int e = 0; e < E; e++) {
        counts[e] = (uint64_t)(rnd_u64() % 1000);
        freq[e] = (float)(rnd_u64() % 1000) / 1000.0f;
        res[e] = rnd_u64() % 3 == 0;
        n_res += res[e];
        want_all += (double)counts[e], want_fall += (double)freq[e];
        if (!res[e])
            want_cold += (double)counts[e], want_fcold += (double)freq[e];
    }
    double cold, all;
    mp_decide_layer_routes(counts, NULL, res, E, &cold, &all);
    cr_assert_float_eq(cold, want_cold, 1e-9, "seed %llu", (unsigned long long)g_seed);
    cr_assert_float_eq(all, want_all, 1e-9, "seed %llu", (unsigned long long)g_seed);
    mp_decide_layer_routes(NULL, freq, res, E, &cold, &all);
    cr_assert_float_eq(cold, want_fcold, 1e-6);
    cr_assert_float_eq(all, want_fall, 1e-6);
    mp_decide_layer_routes(NULL, NULL, res, E, &cold, &all);
    cr_assert(cold == 0 && all == 0);
    cr_assert_float_eq(mp_decide_cold_share(cold, all, n_res, E), (double)(E - n_res) / E, 1e-12);
}

/* A cost file's grid is for one model and one thread count: anything else is refused with what
 * differs and the command that fixes it. */
Test(decide, grid_of_another_model_or_run_is_refused)
{
    static mp_cost_decode_point pts[2] = {{0, 0, false, {1000, 10}, 0, 800, 0}, {1, 1, true, {2000, 10}, 0, 1900, 0}};
    static double xs[2] = {4096, 1048576};
    static mp_cost_stat ys[2] = {{4000, 0}, {24000, 0}};
    mp_costs c;
    memset(&c, 0, sizeof c);
    c.decode = (mp_cost_decode){.n_points = 2, .points = pts, .quant = "Q4_K/Q6_K", .n_embd = 2048, .n_ff = 768,
                                 .n_expert = 128, .top_k = 8, .far_max = 8, .threads = 16, .expert_bytes = 2936832};
    c.host_read_gbs = 90;
    c.h2d_pinned = (mp_cost_curve){2, xs, ys};
    snprintf(c.machine.cpu, sizeof c.machine.cpu, "Xeon");
    snprintf(c.machine.gpu, sizeof c.machine.gpu, "NVIDIA H200");
    c.machine.cores = 16;
    const mp_decode_shape ok = {"Q4_K/Q6_K", 2048, 768, 128, 8, 16, 2936832};
    mp_decode_costs dc;
    mp_error err;
    cr_assert_eq(mp_decode_costs_from(&c, "c.json", &ok, &dc, &err), MP_OK, "%s", err.msg);
    /* the machine it was measured on travels with the grid (the executor compares it with its own) */
    cr_assert_str_eq(dc.machine.cpu, "Xeon");
    cr_assert_str_eq(dc.machine.gpu, "NVIDIA H200");
    cr_assert_eq(dc.machine.cores, 16);
    cr_assert_float_eq(dc.off_ns[0], 1000, 1e-9);
    cr_assert_float_eq(dc.on_ns[1][1], 2000, 1e-9);
    cr_assert(isnan(dc.off_ns[1]) && isnan(dc.on_ns[2][1]));
    cr_assert_float_eq(dc.host_bytes_per_ns, 90, 1e-12);
    cr_assert_float_eq(dc.bus_bytes_per_ns, 1048576.0 / 24000, 1e-9); /* the best pinned copy */
    mp_decode_shape other = ok;
    other.top_k = 2, other.n_embd = 4096, other.n_ff = 14336, other.n_expert = 8;
    cr_assert_eq(mp_decode_costs_from(&c, "c.json", &other, &dc, &err), MP_ERR_ARG);
    cr_assert_not_null(strstr(err.msg, "costs c.json: the decode layer grid was measured for another model (128 "
                                       "experts a layer, this model 8; top-8, this model top-2; experts of 2048x768, "
                                       "this model 4096x14336): run `moeplan calibrate -m MODEL` for this model"),
                       "%s", err.msg);
    /* only what differs is named: the same dimensions and type, other counts and bytes */
    other = ok;
    other.n_expert = 8, other.top_k = 2, other.expert_bytes = 114229248;
    cr_assert_eq(mp_decode_costs_from(&c, "c.json", &other, &dc, &err), MP_ERR_ARG);
    cr_assert_not_null(strstr(err.msg, "(128 experts a layer, this model 8; top-8, this model top-2; 2936832 bytes an "
                                       "expert, this model 114229248)"), "%s", err.msg);
    cr_assert_null(strstr(err.msg, "2048x768"), "%s", err.msg);
    other = ok;
    other.threads = 8;
    cr_assert_eq(mp_decode_costs_from(&c, "c.json", &other, &dc, &err), MP_ERR_ARG);
    cr_assert_not_null(strstr(err.msg, "measured on 16 CPU threads, this run uses 8: run with --threads 16"), "%s",
                       err.msg);
    other = ok;
    other.quant = "Q8_0";
    cr_assert_eq(mp_decode_costs_from(&c, "c.json", &other, &dc, &err), MP_ERR_ARG);
    c.absent = MP_COST_ABSENT_DECODE;
    cr_assert_eq(mp_decode_costs_from(&c, "c.json", &ok, &dc, &err), MP_ERR_ARG);
    cr_assert_not_null(strstr(err.msg, "no decode layer grid (listed in $.missing)"), "%s", err.msg);
    c.absent = 0;
    pts[1].far = 2; /* beyond cold: a hand-built grid the loader would refuse */
    cr_assert_eq(mp_decode_costs_from(&c, "c.json", &ok, &dc, &err), MP_ERR_ARG);
    cr_assert_not_null(strstr(err.msg, "point 1 (cold 1, far 2): out of range"), "%s", err.msg);
    pts[1].far = 1;
}

/* A top-4 grid measured on a host whose cores read 100 bytes/ns (the bus 45, experts of 3 MB): a
 * step's CPU side reads its c - f CPU experts, its GPU side 10 us plus f experts over the bus, and
 * the layer takes the longer plus a 20 us round trip; host_gbs sets the cores' rate, bus_grid's
 * bus_gbs the bus's (and its pinned copy curve says so: one 3 MB copy at that rate). */
static mp_cost_decode_point host_pts[32];
static double h2d_x[1];
static mp_cost_stat h2d_y[1];
static mp_costs bus_grid(double host_gbs, double bus_gbs)
{
    const double B = 3e6;
    int n = 0;
    for (int c = 0; c <= 4; c++) {
        host_pts[n++] = (mp_cost_decode_point){c, 0, false, {20000 + c * B / host_gbs, 0}, c * B / host_gbs, 5000, 0};
        for (int f = 0; f <= c; f++) {
            const double cpu = (c - f) * B / host_gbs, gpu = 10000 + f * B / bus_gbs;
            host_pts[n++] = (mp_cost_decode_point){c, f, true, {20000 + (cpu > gpu ? cpu : gpu), 0}, cpu, gpu, 0};
        }
    }
    mp_costs c;
    memset(&c, 0, sizeof c);
    c.decode = (mp_cost_decode){.n_points = n, .points = host_pts, .quant = "Q4_K", .n_embd = 2048, .n_ff = 768,
                                 .n_expert = 64, .top_k = 4, .far_max = 4, .far_split = 1, .threads = 16,
                                 .expert_bytes = (uint64_t)B};
    c.host_read_gbs = 100; /* the level the grid is said to be measured at, whatever host_gbs */
    h2d_x[0] = B;
    h2d_y[0] = (mp_cost_stat){B / bus_gbs, 0};
    c.h2d_pinned = (mp_cost_curve){1, h2d_x, h2d_y};
    return c;
}

/* Two top-4 grids equal point for point (every table of up to 4 cold routes). */
static void same_grid(const mp_decode_costs *a, const mp_decode_costs *b)
{
    for (int c = 0; c <= 4; c++) {
        cr_assert_float_eq(a->off_ns[c], b->off_ns[c], 1e-6, "off, %d cold", c);
        cr_assert_float_eq(a->cpu_off_ns[c], b->cpu_off_ns[c], 1e-6, "off, %d cold", c);
        for (int f = 0; f <= c; f++) {
            cr_assert_float_eq(a->on_ns[c][f], b->on_ns[c][f], 1e-6, "on, %d cold, %d far", c, f);
            cr_assert_float_eq(a->cpu_on_ns[c][f], b->cpu_on_ns[c][f], 1e-6, "on, %d cold, %d far", c, f);
            cr_assert_float_eq(a->gpu_on_ns[c][f], b->gpu_on_ns[c][f], 1e-6, "on, %d cold, %d far", c, f);
        }
    }
}

static mp_costs host_grid(double host_gbs)
{
    mp_costs c = bus_grid(host_gbs, 45);
    c.h2d_pinned = (mp_cost_curve){0, NULL, NULL}; /* no bus rate said: no bus part */
    return c;
}

/* The grid rebuilt at a bus factor is the grid a link that much slower measures: at factor 2 (a
 * 22.5 GB/s link where the grid had 45) every point equals the one measured at 22.5, and an
 * all-cold layer's best far routes move from 1 (the cores 90 us beside the bus's 76.7) to none (one
 * far route takes the bus 143.3 us where the cores alone take 120), which turns the layer's far
 * routes off. The GPU factor leaves the bus part alone, and the floor's bus follows the link. */
Test(decide, grid_rebuilt_at_a_bus_factor_is_the_slower_links)
{
    const mp_decode_shape shape = {"Q4_K", 2048, 768, 64, 4, 16, 3000000};
    mp_error err;
    mp_costs fast = bus_grid(100, 45);
    mp_decode_costs *dc = malloc(sizeof *dc), *slow = malloc(sizeof *slow);
    cr_assert(dc && slow);
    cr_assert_eq(mp_decode_costs_from(&fast, "fast", &shape, dc, &err), MP_OK, "%s", err.msg);
    cr_assert_float_eq(dc->meas_bus_bytes_per_ns, 45, 1e-9);
    mp_far_layer fl;
    mp_decide_far_layer(dc, 1.0, &fl);
    cr_assert(fl.on);
    cr_assert_eq(fl.table[4], 1);
    cr_assert_float_eq(mp_decide_bus_factor(dc, 22.5), 2, 1e-12);
    cr_assert_float_eq(mp_decide_bus_factor(dc, 0), 1, 1e-12, "the link not known: as measured");
    mp_decode_costs_now(dc, 0, 22.5);
    cr_assert_float_eq(dc->bus_bytes_per_ns, 22.5, 1e-12);
    mp_decode_costs_scale(dc, 1, 1, mp_decide_bus_factor(dc, 22.5), 1);
    mp_costs narrow = bus_grid(100, 22.5);
    cr_assert_eq(mp_decode_costs_from(&narrow, "narrow", &shape, slow, &err), MP_OK, "%s", err.msg);
    same_grid(dc, slow);
    mp_decide_far_layer(dc, 1.0, &fl);
    cr_assert_eq(fl.table[4], 0);
    cr_assert(!fl.on, "no far unit pays on the narrow link: far routes off");
    /* the GPU factor alone: the far units' bus part as measured, the rest of the side doubled */
    mp_decode_costs_scale(dc, 1, 2, 1, 1);
    cr_assert_float_eq(dc->gpu_on_ns[4][2], 2 * 10000 + 2 * 3e6 / 45, 1e-6);
    cr_assert_float_eq(dc->gpu_on_ns[4][0], 2 * 10000, 1e-6, "no far unit: no bus part");
    free(dc);
    free(slow);
}

/* The grid rebuilt at a CPU factor (mp_decode_costs_scale) is the grid a host that much slower
 * measures: at factor 2 every point equals the one measured at 50 bytes/ns, and an all-cold layer's
 * best far routes move from 1 (the cores 90 us beside the bus's 76.7) to 2 (120 beside 143.3, where
 * one leaves the cores 180). Scaling starts from the measured points each time (back at 1: the
 * grid as loaded), and a grid not loaded from a cost file is left alone. */
Test(decide, grid_rebuilt_at_a_cpu_factor_is_the_slower_hosts)
{
    const mp_decode_shape shape = {"Q4_K", 2048, 768, 64, 4, 16, 3000000};
    mp_error err;
    mp_costs quiet = host_grid(100);
    mp_decode_costs *dc = malloc(sizeof *dc), *slow = malloc(sizeof *slow), *as_loaded = malloc(sizeof *as_loaded);
    cr_assert(dc && slow && as_loaded);
    cr_assert_eq(mp_decode_costs_from(&quiet, "quiet", &shape, dc, &err), MP_OK, "%s", err.msg);
    *as_loaded = *dc;
    mp_far_layer fl;
    mp_decide_far_layer(dc, 1.0, &fl);
    cr_assert(fl.on);
    cr_assert_eq(fl.table[4], 1);
    cr_assert_float_eq(mp_decide_host_factor(dc, 50), 2, 1e-12);
    cr_assert_float_eq(mp_decide_host_factor(dc, 0), 1, 1e-12, "the host not known: the grid's level");
    mp_decode_costs_scale(dc, mp_decide_host_factor(dc, 50), 1, 1, 1);
    mp_costs busy = host_grid(50);
    cr_assert_eq(mp_decode_costs_from(&busy, "busy", &shape, slow, &err), MP_OK, "%s", err.msg);
    same_grid(dc, slow);
    mp_decide_far_layer(dc, 1.0, &fl);
    cr_assert(fl.on);
    cr_assert_eq(fl.table[4], 2);
    cr_assert_float_eq(dc->on_ns[4][1], 20000 + 2 * 90000.0, 1e-6);
    mp_decode_costs_scale(dc, 1, 1, 1, 1);
    cr_assert_eq(memcmp(dc, as_loaded, sizeof *dc), 0, "back at factor 1: the grid as loaded");
    /* the other parts' factors: the GPU side and the rest (a sensitivity run's) */
    mp_decode_costs_scale(dc, 1, 2, 2, 3);
    cr_assert_float_eq(dc->on_ns[4][3], (10000 + 3 * 3e6 / 45) * 2 + 20000 * 3, 1e-6, "GPU the longer side");
    cr_assert_float_eq(dc->off_ns[4], 120000 + 20000 * 3, 1e-6, "CPU the longer side");
    mp_decode_costs hand = empty_grid(2, 2);
    hand.off_ns[1] = 7;
    mp_decode_costs_scale(&hand, 2, 2, 2, 2);
    cr_assert_eq(hand.off_ns[1], 7, "no measured points: nothing to rebuild");
    free(dc);
    free(slow);
    free(as_loaded);
}

/* The floor's readers now: the host's and the bus's rates set, the bus's share beside the cores
 * scaled with the link, the sum made again with the cores' share scaled with the host (the cores'
 * share itself stays: the settling reads it beside the grid's level); nothing known, nothing moves. */
Test(decide, floor_readers_follow_the_host_and_the_link)
{
    mp_decode_costs *dc = calloc(1, sizeof *dc);
    cr_assert_not_null(dc);
    dc->level_bytes_per_ns = 100;
    dc->host_bytes_per_ns = 120;
    dc->bus_bytes_per_ns = dc->meas_bus_bytes_per_ns = 50;
    dc->cores_beside_bus_bytes_per_ns = 80;
    dc->bus_beside_cores_bytes_per_ns = 30;
    dc->together_bytes_per_ns = 110;
    mp_decode_costs_now(dc, 0, 0);
    cr_assert_float_eq(dc->together_bytes_per_ns, 110, 1e-12, "nothing said: as measured");
    mp_decode_costs_now(dc, 50, 25);
    cr_assert_float_eq(dc->host_bytes_per_ns, 50, 1e-12);
    cr_assert_float_eq(dc->bus_bytes_per_ns, 25, 1e-12);
    cr_assert_float_eq(dc->bus_beside_cores_bytes_per_ns, 15, 1e-12);
    cr_assert_float_eq(dc->cores_beside_bus_bytes_per_ns, 80, 1e-12);
    cr_assert_float_eq(dc->together_bytes_per_ns, 80 * 0.5 + 15, 1e-12);
    cr_assert_float_eq(mp_decide_floor_ns(dc, 5500), 100, 1e-9, "5500 bytes at 55 bytes/ns");
    dc->cores_beside_bus_bytes_per_ns = dc->bus_beside_cores_bytes_per_ns = 0;
    mp_decode_costs_now(dc, 50, 0);
    cr_assert_eq(dc->together_bytes_per_ns, 0, "no shares: the floor adds the two alone");
    cr_assert_float_eq(mp_decide_floor_ns(dc, 7500), 100, 1e-9, "7500 bytes at 50 + 25 bytes/ns");
    free(dc);
}

/* A point whose sides outlast its layer time (noise: the layer time is the step's mean less the
 * non-MoE curve, the sides are timed apart): 80 us with a CPU side of 110 and a GPU side of 72. At
 * factors of 1 it stays as measured; rebuilt at 1.5 for both sides and 4 for the rest it grows by
 * what its longer side grows (55 us) and by nothing for its rest (below 0), to 135 us, where taking
 * the rest as it came (-30 us x 4) would give 45: less than measured on a slower host. */
Test(decide, a_point_whose_sides_outlast_it_never_shrinks_on_a_slower_host)
{
    static mp_cost_decode_point pts[2] = {{0, 0, false, {20000, 0}, 0, 5000, 0}, {1, 0, false, {80000, 0}, 110000, 72000, 0}};
    mp_costs c;
    memset(&c, 0, sizeof c);
    c.decode = (mp_cost_decode){.n_points = 2, .points = pts, .quant = "Q4_K", .n_embd = 64, .n_ff = 32,
                                 .n_expert = 4, .top_k = 1, .far_max = 0, .threads = 2, .expert_bytes = 1000};
    c.host_read_gbs = 100;
    const mp_decode_shape shape = {"Q4_K", 64, 32, 4, 1, 2, 1000};
    mp_decode_costs *dc = malloc(sizeof *dc);
    cr_assert_not_null(dc);
    mp_error err;
    cr_assert_eq(mp_decode_costs_from(&c, "noisy", &shape, dc, &err), MP_OK, "%s", err.msg);
    cr_assert_float_eq(dc->off_ns[1], 80000, 1e-9);
    mp_decode_costs_scale(dc, 1.5, 1.5, 1.5, 4);
    cr_assert_float_eq(dc->off_ns[1], 80000 + 55000, 1e-6);
    cr_assert_float_eq(dc->cpu_off_ns[1], 165000, 1e-6);
    mp_decode_costs_scale(dc, 0.5, 1, 1, 1); /* a faster host: the GPU side (72 us) is the longer then */
    cr_assert_float_eq(dc->off_ns[1], 80000 - (110000 - 72000), 1e-6);
    free(dc);
}

/* The adaptive tier's prices by hand: a grid of top-2 with 100 ns all resident and 500 ns all cold
 * (far routes off and on alike) saves 200 ns a route; a 1000-byte expert at 10 bytes/ns costs 100
 * ns of host memory plus 50 ns of calls. Without grid points the saving is the expert's bytes at
 * the host's bandwidth; without the calls measured, only the bytes. The swap rule: strictly above. */
Test(decide, tier_prices_and_swap_rule)
{
    mp_decode_costs dc = empty_grid(2, 0);
    dc.expert_bytes = 1000;
    dc.host_bytes_per_ns = 10;
    dc.admit_ns = 50;
    dc.off_ns[0] = 100, dc.off_ns[1] = 300, dc.off_ns[2] = 500;
    double save, copy;
    mp_decide_tier_costs(&dc, &save, &copy);
    cr_assert_float_eq(save, 200, 1e-9);
    cr_assert_float_eq(copy, 150, 1e-9);
    dc.on_ns[2][0] = 400; /* far routes on, none run: cheaper than off here, so it is the least */
    mp_decide_tier_costs(&dc, &save, &copy);
    cr_assert_float_eq(save, 150, 1e-9);
    dc.off_ns[2] = dc.on_ns[2][0] = NAN;
    dc.admit_ns = NAN;
    mp_decide_tier_costs(&dc, &save, &copy);
    cr_assert_float_eq(save, 100, 1e-9);
    cr_assert_float_eq(copy, 100, 1e-9);
    mp_decide_tier_costs(NULL, &save, &copy);
    cr_assert(save == 0 && copy == 0);
    cr_assert(mp_decide_admit(1.51, 100, 150));
    cr_assert(!mp_decide_admit(1.5, 100, 150));
    cr_assert(!mp_decide_admit(10, 0, 0), "an unknown saving admits nothing");
    cr_assert(!mp_decide_admit(-1, 100, 0));
}
