/* runtime/costs.h — the cost model: measured times of every piece of a hybrid MoE step, loaded
 * from costs.json (schemas/costs.schema.json; written by `moeplan calibrate`).
 *
 * Every measurement is a median with a spread (the interquartile range, p75 - p25), in ns. Costs
 * that depend on a size are curves: points (x, median, spread) with x strictly increasing, read by
 * piecewise-linear interpolation (mp_cost_curve_ns says what happens outside the points).
 *
 * Invariants after mp_costs_load/parse: every number is finite and >= 0; every curve has >= 1
 * point with x >= 1 strictly increasing; there is at least one CPU expert entry, and every expert
 * entry has n_embd, n_ff, expert_bytes >= 1 (CPU entries: threads >= 1).
 *
 * A cost file from a machine without a GPU (`moeplan calibrate` there) may lack the GPU
 * measurements: gpu_expert, h2d, d2h, sync and decode_layers are each either present, or absent
 * and named in $.missing with the reason; never both, never neither. `absent` records which;
 * such a file is valid, and whatever needs a GPU cost asks mp_costs_require_gpu first. host_read
 * is always there. A file written before decode_layers and host_read existed is refused by the loader with
 * a message that says to run `moeplan calibrate` again (its decode costs would be guesses).
 */
#ifndef MP_RUNTIME_COSTS_H
#define MP_RUNTIME_COSTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/knobs.h"
#include "kernels/quant.h"

typedef struct mp_cost_stat {
    double median_ns;
    double spread_ns; /* p75 - p25 */
} mp_cost_stat;

typedef struct mp_cost_curve {
    int n_points;
    double *x;       /* (n_points) strictly increasing, >= 1: rows, or bytes */
    mp_cost_stat *y; /* (n_points) */
} mp_cost_curve;

#define MP_COST_DECODE_MAX_K 32 /* top_k of a decode grid (the GPU executor's MP_GPU_MAX_TOP_K) */

/* One expert FFN (gate, up, down) of a quant type and shape, timed over routed rows. */
typedef struct mp_cost_expert {
    char quant[MP_EXPERT_QUANT_MAX]; /* type name as in GGUF/kernels: "Q4_K", "F16", ... */
    int64_t n_embd;                /* hidden size (rows of activations are n_embd f32) */
    int64_t n_ff;                  /* expert FFN size */
    uint64_t expert_bytes;         /* weights of one expert (what an admission copies) */
    int threads;                   /* CPU entries: threads used; GPU entries: 0 */
    mp_cost_curve by_rows;         /* time of one expert over `rows` routed rows */
    /* Optional (n_points 0 when absent, else >= 2): one invocation of `x` distinct experts with one
     * routed row each, through the runtime's own expert function — the experts of one invocation
     * share its fixed costs and run concurrently, which by_rows alone cannot tell. */
    mp_cost_curve concurrent;
} mp_cost_expert;

/* One point of the decode layer grid: the runtime's one-row layer step with `cold` of its top_k
 * routes on experts outside the GPU pool, `far` units of which (1/far_split of an expert each,
 * runtime/decide.h) the GPU ran reading their weights over the bus, on a layer with far routes on
 * (the gather launched every step) or off (far 0). */
typedef struct mp_cost_decode_point {
    int cold, far;
    bool far_on;
    mp_cost_stat layer;   /* the step's time per layer beyond its non-MoE share (what a layer adds) */
    double cpu_ns;        /* of which the CPU experts' time (mean) */
    double gpu_ns;        /* and the GPU's side from the routing handoff to its partial wait (mean) */
    int passes;           /* the passes its median is of (0: the file does not say) */
} mp_cost_decode_point;

typedef struct mp_cost_decode {
    int n_points;                  /* 0: absent */
    mp_cost_decode_point *points;  /* unique (cold, far, far_on); far <= min(cold x far_split, far_max) */
    /* the model and run the grid was measured for: a grid is valid only for them */
    char quant[MP_EXPERT_QUANT_MAX];
    int64_t n_embd, n_ff, n_expert;
    int top_k;                     /* 1..32 */
    int far_max;                   /* most far units measured, 0..top_k x far_split (0: far routes not measured) */
    int far_split;                 /* far units per expert, 1..32 / top_k (optional: 1, whole routes) */
    int threads;
    uint64_t expert_bytes;
    /* optional (0 where a file predates them): the experts of each layer the grid's pool held, and
     * the most one-row steps timed per point and pass (from position 1, after a 1-token prompt;
     * calibrate stops a run of slow steps sooner) */
    int64_t pool;
    int steps;
    /* optional (hybrid_step_layers 0 when absent): what a one-row step with at least one hybrid
     * layer pays once, beyond its hybrid layers' own time (the host's side of the step: its wake-up
     * at the first handoff, the route source). The points were measured with every one of
     * hybrid_step_layers layers hybrid, so each holds hybrid_step / hybrid_step_layers of it; calibrate
     * measures it as one hybrid layer beside resident ones (docs/simulator.md, Calibrate). */
    mp_cost_stat hybrid_step;
    int64_t hybrid_step_layers;
} mp_cost_decode;

/* How steady a decode grid's measurements were: over its points of more than one pass (every point
 * where the file does not give its passes) whose layer step takes at least MP_COST_GRID_STEADY_NS,
 * the mean and the largest of spread_ns / median_ns; n the points counted (0: none, mean and max 0).
 * A grid is noisy where at least MP_COST_GRID_STEADY_MIN points count and their mean exceeds
 * MP_COST_GRID_NOISY. On quiet GPU machines the 90 grids with such points among the cost files under
 * bench/results (2026-12-01 to 2026-12-07) spread 1.2-15.2 % on average by this rule. Five grids
 * logged there whose steps take 12-124 us (the demo's tiny model, small shapes of the sweeps) spread
 * 36-136 % over all their points, a few us of the host's scheduling being much of such a step: the
 * floor leaves all but one point of each out, and a mean of fewer than MP_COST_GRID_STEADY_MIN says
 * nothing. gpt-oss-20b's, measured beside other work on an H100 machine's cores (its bench rows' CPU
 * experts then read 23-75 GB/s from one process to the next, 2026-12-07), spread 82 % over its 28
 * points from 100 us, and its far-on points at 4 cold routes ran 707-1982 us in no order of their far
 * units (1/3 of an expert far 1982, 5/3 707, 6/3 874). The decisions made from a noisy grid follow
 * its noise, not the machine. */
#define MP_COST_GRID_NOISY 0.2
#define MP_COST_GRID_STEADY_NS 100e3
#define MP_COST_GRID_STEADY_MIN 4
typedef struct mp_cost_spread {
    int n;
    double mean, max;
} mp_cost_spread;
bool mp_cost_decode_spread(const mp_cost_decode *d, mp_cost_spread *out); /* true: noisy */

/* The machine a calibration measured: its CPU's model name, its online CPUs, its CUDA device's name. */
typedef struct mp_costs_machine {
    char cpu[128];
    int cores;
    char gpu[128];
} mp_costs_machine;

/* The knobs a calibration ran under ($.device.knobs, as calibrate writes them), by this build's table
 * entry (base/knobs.h): set[i] where the file gives entry i a value, value[i] as the environment
 * spells it ("1", "amx"). Names this build does not know (retired knobs) and values that are neither
 * a string nor an integer are not kept. */
typedef struct mp_costs_knobs {
    bool set[MP_KNOBS_MAX];
    char value[MP_KNOBS_MAX][MP_KNOB_TEXT_MAX];
} mp_costs_knobs;

typedef struct mp_costs {
    mp_cost_expert *gpu_expert; /* (n_gpu_expert) */
    int n_gpu_expert;
    mp_cost_expert *cpu_expert; /* (n_cpu_expert) */
    int n_cpu_expert;
    mp_cost_curve h2d_pinned, h2d_pageable; /* by bytes: latency at small sizes, bandwidth beyond */
    mp_cost_curve d2h_pinned, d2h_pageable;
    mp_cost_stat sync;      /* one GPU->CPU->GPU round trip of a MoE layer (doorbell + waits) */
    /* optional $.tier_admit: the host's time to enqueue one adaptive tier admission (its copies,
     * event and slot table upload), for tier_admit_bytes of expert; median_ns < 0 when the file
     * has none (written before the tier) */
    mp_cost_stat tier_admit;
    double tier_admit_bytes;
    /* $.decode_layers (MP_COST_ABSENT_DECODE when a file from a machine without a GPU lists it in
     * $.missing): the runtime's one-row (decode) layer steps, the grid the decision model chooses
     * far routes from (runtime/decide.h) */
    mp_cost_decode decode;
    /* $.host_read: the host memory's read bandwidth as the cores stream it (the physical floor of
     * the CPU's expert reads; runtime/decide.h mp_decide_floor_ns) */
    double host_read_gbs, host_read_spread_gbs;
    int host_read_threads;
    /* optional $.host_read.level_gbs: the host's read bandwidth while the decode grid measured the
     * CPU's costs (the median of probes between its passes, level_probes of them), the level the
     * simulator scales them from (`simulate --host-read-gbs`); gbs where the file lacks it (files
     * before 2026-12-03, machines without the grid). At most gbs, the best probe of all. */
    double host_read_level_gbs;
    int host_read_level_probes;
    /* optional $.host_read.probe "window": the rates above are what all threads read in a window
     * (runtime/bench.h mp_bench_host_read_gbs since 2026-12-04); false for older files, whose probe
     * timed each thread's one pass until the slowest finished and read 20-40 % lower on a busy
     * host: their rates do not compare with a probe taken now */
    bool host_read_window;
    /* optional $.host_bus: host memory read by the cores and the bus at once (runtime/bench.h
     * mp_bench_host_bus), the best of the probes calibrate took while its decode grid ran: gbs their
     * sum, cpu_gbs and bus_gbs each reader's share of it. The floor's rate where present
     * (mp_decide_floor_ns); 0 where the file lacks it (older files, no page-locked host copy, no
     * GPU): then the floor takes the cores' and the pinned copy's rates, each alone, summed. */
    double host_bus_gbs, host_bus_cpu_gbs, host_bus_bus_gbs;
    int host_bus_probes;
    mp_cost_curve combine;  /* by rows: merging the CPU partial sums into the GPU output */
    mp_cost_curve non_moe;  /* by rows (tokens in the step): attention, norms, head, router */
    /* optional $.non_moe_context: a one-row step's non-MoE time by the keys of context it attends
     * (attention reads the whole KV cache; a decode step at position p attends p + 1 keys), read
     * through mp_costs_decode_non_moe_ns only. Either the measured curve (non_moe_by_keys: x the mean
     * keys of a run of steps, >= 1, not necessarily whole; y their non-MoE time; >= 2 points), or, in
     * files written before it, one linear term (non_moe_linear: the rows-1 point of non_moe holds at
     * non_moe_keys, and each key beyond costs non_moe_per_key_ns); or neither (n_points 0, false). */
    mp_cost_curve non_moe_by_keys;
    double non_moe_keys, non_moe_per_key_ns;
    bool non_moe_linear;
    unsigned absent;        /* MP_COST_ABSENT_* bits: GPU measurements listed in $.missing */
    /* optional $.device.cpu_kernels: the CPU kernel level calibrate ran (mp_kernels_isa: "avx512",
     * ...); "" when the file does not say */
    char cpu_kernels[16];
    /* optional $.device.cpu, .cpu_logical_cores, .gpu: the machine calibrate measured; each "" / 0
     * when the file does not say or says otherwise than calibrate writes (the member is free-form) */
    mp_costs_machine machine;
    mp_costs_knobs knobs; /* optional $.device.knobs: nothing set where the file does not say */
} mp_costs;

/* A CPU expert curve timed on a noisy host. One call of k + 1 experts does the work of k and one
 * more, so no point of an entry's `concurrent` curve can take much longer than the next. Over every
 * CPU entry of c, the largest ratio of a point's median to the next point's: the entry (*entry) and
 * its points' experts (k_lo, k_hi) and medians. Noisy where the ratio exceeds MP_COST_CURVE_INVERTED.
 * Among the cost files under bench/results (2026-12-01 to 2026-12-07: 137 distinct CPU curves of 2
 * to 9 points) 133 curves' largest ratios were 0.43-1.16; four reached 2.0-6.0, each with a point far
 * off its neighbours (gpt-oss-20b on a host other work shared, 2026-12-07: 2,388 us for one expert,
 * 396 for two, 2,584 for three; qwen3-30b-a3b Q8_0, 2026-12-03: 123, 3,993, 1,658, 280 us for one to
 * four), and such medians price every CPU expert of the decisions built on them (the fixed part of
 * mp_decide_expert_table's line from the curve's first point to its last). */
#define MP_COST_CURVE_INVERTED 1.5
typedef struct mp_cost_inversion {
    const mp_cost_expert *entry; /* NULL: c has no CPU curve of two points or more */
    double k_lo, k_hi;           /* experts in the two calls */
    double lo_ns, hi_ns;         /* their medians: lo_ns / hi_ns the ratio */
} mp_cost_inversion;
bool mp_cost_cpu_curve_inverted(const mp_costs *c, mp_cost_inversion *out); /* true: noisy */

/* Bits of mp_costs.absent. An absent curve has n_points 0, an absent list n_gpu_expert 0. */
#define MP_COST_ABSENT_GPU_EXPERT 1u
#define MP_COST_ABSENT_H2D 2u
#define MP_COST_ABSENT_D2H 4u
#define MP_COST_ABSENT_SYNC 8u
#define MP_COST_ABSENT_DECODE 16u

mp_status mp_costs_load(const char *path, mp_costs *out, mp_error *err);
/* Parse a JSON text of len bytes; name is used in error messages. */
mp_status mp_costs_parse(const char *text, size_t len, const char *name, mp_costs *out, mp_error *err);
void mp_costs_free(mp_costs *c);

/* MP_OK when c has every GPU measurement; else an MP_ERR_ARG error naming the file (name) and
 * what it lacks, for callers that simulate GPU placements. */
mp_status mp_costs_require_gpu(const mp_costs *c, const char *name, mp_error *err);

/* Median ns at x: 0 for x <= 0 (no work, no cost); the first point's value for 0 < x < x[0]
 * (a fixed latency floor); linear between points; beyond the last point, linear with the last
 * segment's slope (clamped at >= 0), or proportional to x when the curve has one point. */
/* The host level the CPU's costs were measured at: host_read_level_gbs, or host_read_gbs where it is
 * not set (in-memory cost models, older files). */
static inline double mp_costs_host_level_gbs(const mp_costs *c)
{
    return c->host_read_level_gbs > 0 ? c->host_read_level_gbs : c->host_read_gbs;
}

/* The GPU link's host-to-device bandwidth as calibrated, in GB/s (= bytes/ns): the best of the
 * pinned copies (bytes / median ns); 0 where none was measured. */
static inline double mp_costs_bus_gbs(const mp_costs *c)
{
    double best = 0;
    for (int i = 0; i < c->h2d_pinned.n_points; i++)
        if (c->h2d_pinned.y[i].median_ns > 0 && c->h2d_pinned.x[i] / c->h2d_pinned.y[i].median_ns > best)
            best = c->h2d_pinned.x[i] / c->h2d_pinned.y[i].median_ns;
    return best;
}

double mp_cost_curve_ns(const mp_cost_curve *c, double x);


/* The non-MoE time in ns of a one-row step that attends `keys` keys of context: the curve of
 * $.non_moe_context, piecewise-linear, each end extended with its segment's slope (at least 0; the
 * result at least 0); a file with the older linear term: the rows-1 point of non_moe plus
 * per_key_ns x (keys - its keys), at least 0; without either: the rows-1 point whatever the keys.
 * The one reading of the context for every consumer (simulate, plan, calibrate's grid). */
double mp_costs_decode_non_moe_ns(const mp_costs *c, double keys);
/* One phrase naming how mp_costs_decode_non_moe_ns reads c's context, for reports: "curve of N
 * points, K0 .. K1 keys", or the linear term of an older file with what to do about it, or none. */
void mp_costs_context_describe(const mp_costs *c, char *buf, size_t cap);

/* The expert entry for a quant and shape: exact match, else NULL. For CPU entries the one with
 * the given threads, else the one with the most threads below it, else the fewest above. */
const mp_cost_expert *mp_costs_find_gpu(const mp_costs *c, const char *quant, int64_t n_embd, int64_t n_ff);
const mp_cost_expert *mp_costs_find_cpu(const mp_costs *c, const char *quant, int64_t n_embd, int64_t n_ff,
                                        int threads);

#endif
