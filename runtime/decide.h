/* runtime/decide.h — the decision model: where the routed experts of a MoE layer step run.
 *
 * One module decides and both sides call it: the GPU executor carries out its decisions
 * (gpu/gpu_exec.c, gpu_moe.c) and the simulator charges them (simulator/sim.c, plan.c), so a
 * prediction is made for the choices the runtime will make. Its inputs are measurements of this
 * model on this machine (`moeplan calibrate`'s cost file), never constants tuned on one shape.
 *
 * The paths of a routed expert that is not resident in the GPU pool:
 *   CPU     the host's cores read its weights and compute its rows;
 *   far     (one-row steps) the GPU reads its weights from page-locked host memory over the bus,
 *           beside the cores computing the others: the two readers together draw more of the
 *           host memory's bandwidth than the cores alone;
 *   copied  (steps of several rows) its weights are copied to a staging slot and it runs on the
 *           GPU, when its rows would take the CPU longer than the copy takes.
 *
 * Far routes, per layer. Far work is counted in units of 1/split of an expert (split = 1: whole
 * routes; mp_decide_far_split picks it for the model's shape: a top-2 model with 114 MB experts
 * gives the bus quarters of one, a top-8 one thirds where its rows allow). A one-row step
 * with c of its top_k routes cold may run f units far, 0 <= f <= min(c · split, far_max): the
 * first f / split cold routes in slot order run whole on the GPU, and when f % split > 0 the next
 * one is split: the GPU runs its last FFN rows (f % split of split parts, mp_decide_split_rows)
 * and the CPU its first ones, each adding its partial. The cost file's decode grid has the
 * layer's time for each (c, f) with far routes on (their gather is launched every step, whatever
 * f) and for each c with them off. A layer's decision:
 *   table[c] = the measured f with the least time for c cold routes (ties: fewer far units);
 *   on       = over c ~ Binomial(top_k, cold_share), the expected time with the table is below
 *              the expected time with far routes off.
 * cold_share is the share of the layer's routes that reach experts outside the pool: from the
 * placement's routing counts (a profile's table) when there are any, else (n_expert -
 * n_resident) / n_expert, which is the share under uniform routing (mp_decide_cold_share).
 *
 * The floor: reading `bytes` of expert weights that are not on the GPU takes at least bytes /
 * (host read bandwidth + bus bandwidth), whoever reads them; no predicted layer time is below it.
 */
#ifndef MP_RUNTIME_DECIDE_H
#define MP_RUNTIME_DECIDE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/costs.h"
#include "base/error.h"
#include "runtime/model.h"

#define MP_DECIDE_MAX_K MP_COST_DECODE_MAX_K

/* The decode grid of one model on one machine, by cold routes c and far routes f (ns per layer
 * step; NaN where not measured). */
typedef struct mp_decode_costs {
    int top_k;
    int far_max;                                      /* far units; 0: far routes not measured */
    int far_split;                                    /* far units per expert (1: whole routes) */
    uint64_t expert_bytes;
    double off_ns[MP_DECIDE_MAX_K + 1];               /* [c], far routes off */
    double on_ns[MP_DECIDE_MAX_K + 1][MP_DECIDE_MAX_K + 1]; /* [c][f units], far routes on */
    /* the CPU experts' time within each point (its cpu_ns: overlapped with the GPU's side, part of
     * the level, not added to it); NaN where the grid lacks the point */
    double cpu_off_ns[MP_DECIDE_MAX_K + 1];
    double cpu_on_ns[MP_DECIDE_MAX_K + 1][MP_DECIDE_MAX_K + 1];
    double gpu_on_ns[MP_DECIDE_MAX_K + 1][MP_DECIDE_MAX_K + 1]; /* the GPU's side of a far-on point; NaN: not known */
    /* the points as the cost file gives them, before any scaling or settling (mp_decode_costs_scale
     * rebuilds the tables above from them): layer NaN where the grid has no point, cpu / gpu < 0
     * where the point did not measure that side; measured false for a grid not made by
     * mp_decode_costs_from */
    struct mp_decode_point_ns {
        double layer, cpu, gpu;
    } meas_off[MP_DECIDE_MAX_K + 1], meas_on[MP_DECIDE_MAX_K + 1][MP_DECIDE_MAX_K + 1];
    bool measured;
    double host_bytes_per_ns, bus_bytes_per_ns;       /* the floor's two readers, each alone */
    double meas_bus_bytes_per_ns;                     /* the bus as the points were measured (bus_bytes_per_ns
                                                       * as loaded): mp_decode_costs_scale's bus part */
    double together_bytes_per_ns;                     /* both at once ($.host_bus); 0: not measured */
    double cores_beside_bus_bytes_per_ns, bus_beside_cores_bytes_per_ns; /* its two shares; 0: not measured */
    /* the host's read bandwidth while the grid measured ($.host_read.level_gbs, else gbs), and
     * whether it was probed by window ($.host_read.probe): what a probe now compares with */
    double level_bytes_per_ns;
    bool level_by_window;
    double admit_ns;  /* the host's calls of one adaptive tier admission ($.tier_admit); NaN: not measured */
    mp_costs_machine machine; /* the machine the grid was measured on ("" / 0: not said) */
    mp_costs_knobs knobs;     /* the knobs it ran under (nothing set: not said) */
    double noisy_spread;      /* the grid's mean repetition spread where noisy (mp_cost_decode_spread), else 0 */
} mp_decode_costs;

/* What a grid must have been measured for: the model's experts and the run's CPU threads. */
typedef struct mp_decode_shape {
    const char *quant; /* the expert types as calibrate names them ("Q4_K/Q6_K"); NULL: not checked */
    int64_t n_embd, n_ff, n_expert;
    int top_k;
    int threads;
    uint64_t expert_bytes; /* 0: not checked */
} mp_decode_shape;

/* The grid of cost file c (name for errors) for a model and run of this shape: MP_ERR_ARG naming
 * what differs and saying to calibrate this model, or when the file lists the grid in $.missing
 * (a machine without a GPU). bus bandwidth: the best of the file's pinned host-to-device copies.
 * A grid without points (in-memory cost models; the loader refuses such a file) gives every point
 * NaN: callers charge decode steps by their own model. The points are then settled
 * (mp_decode_costs_settle). */
mp_status mp_decode_costs_from(const mp_costs *c, const char *name, const mp_decode_shape *shape,
                               mp_decode_costs *out, mp_error *err);

/* The grid's tables rebuilt from its measured points (dc->measured; else nothing changes) with the
 * factors a host or a sensitivity applies to each part of a point, then settled
 * (mp_decode_costs_settle): a point's time is the longer of its CPU side and its GPU side plus the
 * rest (the round trip's own cost), so it becomes max(CPU side x k_cpu, GPU side') + rest x k_rest
 * (where it measured one side only: that side scaled, plus the rest), the CPU side k_cpu times what
 * it was. GPU side' is its bus part x k_bus plus the rest of it x k_gpu: the bus part of a far-on
 * point with f far units is their bytes (f / far_split experts) at the bus rate the grid was
 * measured with (meas_bus_bytes_per_ns), at most the side; points without far units have none. A
 * slower CPU side may so outlast a GPU side it was shorter than, as it does on a slower host.
 * mp_decode_costs_from builds with every factor 1; the simulator with its cost factors and the
 * host's and the bus's bandwidth now (mp_decide_host_factor, mp_decide_bus_factor).
 * The executor decides from the grid as loaded: rebuilding it during a run at the CPU factor the
 * run measured, and deciding every layer again, gained nothing the host's drift did not hide on
 * the H200 host (12 alternated pairs, 0.95-1.07x, median 0.99; bench/NOTES-gpu-exec.md, "Far routes
 * that follow the host"). */
void mp_decode_costs_scale(mp_decode_costs *dc, double k_cpu, double k_gpu, double k_bus, double k_rest);

/* The CPU factor of a host that reads now_gbs where the grid measured at its level
 * (level_bytes_per_ns): level / now_gbs, as the CPU experts' weights stream from host memory;
 * 1 where either is not known (<= 0). simulate --host-read-gbs predicts with it. */
double mp_decide_host_factor(const mp_decode_costs *dc, double now_gbs);

/* The bus factor of a GPU link that moves now_gbs host to device where the grid measured
 * meas_bus_bytes_per_ns (another process's copies on the same link, a narrower slot):
 * meas / now_gbs; 1 where either is not known (<= 0). simulate --bus-gbs predicts with it. */
double mp_decide_bus_factor(const mp_decode_costs *dc, double now_gbs);

/* The floor's readers at the host's and the bus's bandwidth now (each <= 0, or not known in the
 * grid: as measured): host_bytes_per_ns and bus_bytes_per_ns set to them, the bus's share beside
 * the cores scaled with the bus, and the two readers' sum made again from the shares, the cores'
 * scaled with the host (without the shares, 0: the floor then adds the two alone). Before
 * mp_decode_costs_scale, whose settling reads the bus's share. */
void mp_decode_costs_now(mp_decode_costs *dc, double host_gbs, double bus_gbs);

/* The grid's physics after its points are set (mp_decode_costs_from calls it; so does a caller that
 * rescales the points):
 *   - far routes on with none run never beat them off: a far-on point of no far unit measured below
 *     its far-off twin is raised to it;
 *   - the cores beside the bus: at a far-on point of whole far routes (f a multiple of far_split, n =
 *     c - f / far_split >= 1 experts on the CPU) the CPU experts take at least the far-off point of n
 *     cold routes' CPU time t, slowed over the bus's reads: t x (1 + max(0, level / beside - 1) x
 *     min(1, bus_t / t)), with level the host's read bandwidth while the grid measured, beside the cores'
 *     share when the two read at once ($.host_bus.cpu_gbs) and bus_t the far experts' bytes at the
 *     bus's share. The layer's time grows by what the CPU side then exceeds the longer of the two
 *     sides by. A grid point whose repetitions overlapped the two readers little measures less than
 *     what a run, which overlaps them every step, pays (olmoe on the H200, 2026-12-04: the (8 cold,
 *     2 far) point's CPU side 204.8 us, the (6 cold, off) point's 202.0, runs 240-243;
 *     bench/NOTES-simulator.md). Where the two-reader probe is absent nothing changes. */
void mp_decode_costs_settle(mp_decode_costs *dc);

/* What settling did to a grid's far-on points: of the cost file's points `raw`, those whose CPU side
 * the settled costs dc charge more than measured (n), and the one raised most (cold, far, from_ns,
 * to_ns). calibrate says it, so that a user sees which measurements the decisions do not take as
 * they are. */
typedef struct mp_decode_raised {
    int n;
    int cold, far;
    double from_ns, to_ns;
} mp_decode_raised;
void mp_decode_costs_raised(const mp_cost_decode *raw, const mp_decode_costs *dc, mp_decode_raised *out);
/* The same for cost file c's grid settled as loaded (for the grid's own shape); false (out->n 0)
 * where it has no grid or it does not load. For calibrate's and simulate's line about it. */
bool mp_costs_decode_raised(const mp_costs *c, mp_decode_raised *out);

/* The decode costs of cost file c (as mp_costs_load loaded it; name: its path, for messages) for
 * model m run on `threads` CPU threads: its grid checked against the model's first layer's experts
 * and the threads (mp_decode_costs_from). For the commands' --costs. */
mp_status mp_decode_costs_of_model(const mp_costs *c, const char *name, const mp_model *m, int threads,
                                   mp_decode_costs *out, mp_error *err);

/* The share of a layer's routes that reach non-resident experts: cold_routes / all_routes when
 * the placement has routing counts or frequencies (all_routes > 0), else (n_expert - n_resident)
 * / n_expert. */
double mp_decide_cold_share(double cold_routes, double all_routes, int64_t n_resident, int64_t n_expert);

/* One layer's routes by residency, the inputs of mp_decide_cold_share: *all the sum of the
 * layer's routing weights, *cold the sum over experts that resident[e] marks 0. The weights are
 * counts (a trace's or a profile's u64 table) or, with counts NULL, frequencies (a profile's f32
 * table); n_expert entries each, the layer's row. The runtime sums a profile's row here and the
 * simulator the row its policy places from, so both decide from the same share. */
void mp_decide_layer_routes(const uint64_t *counts, const float *freq, const uint8_t *resident, int64_t n_expert,
                            double *cold, double *all);

/* One layer's far routes: on, and the far units f for each count of cold routes, in units of
 * 1/split of an expert (split 0 reads as 1). */
typedef struct mp_far_layer {
    bool on;
    uint8_t split;
    uint8_t table[MP_DECIDE_MAX_K + 1];
} mp_far_layer;

/* The steps at which far work is chosen, two rules:
 *   - a step's cold work moves by at most 1/MP_DECIDE_FAR_RESOLUTION of all its routes: quarter
 *     experts at top-2 (Mixtral's 114 MB experts at 24 / 16 GB: eighths ran 0.94-1.03x quarters,
 *     H200, 2026-12-04, bench/NOTES-gpu-exec.md run 40; twelfths 0.96-1.02x, H100 host,
 *     2026-12-06, "Twelfths for top-2": each side of a split step pays a fixed part, ~280 µs for the
 *     bus's first twelfth against ~180 for each next, that a finer cut does not remove);
 *   - an expert is cut in at least MP_DECIDE_FAR_UNITS_LEAST units: in a step of many cold routes a
 *     unit of one whole route cannot balance the cores and the bus closer than one expert. The 30B
 *     preset (top-8, 768 FFN rows) at layers:24 / 48 with whole routes waited for the GPU's side in
 *     95-100 % of its hybrid layer steps (212 against 184 µs of CPU work at layers:24); in thirds
 *     of an expert the two sides met (198 / 198 µs) and ran 1.022-1.080x the whole-route plan of
 *     the same grid (H100 host, 2026-12-06, two rounds; halves on an H200, 2026-12-04: medians
 *     1.017-1.044 over four rounds; bench/NOTES-gpu-exec.md, "Thirds at top-8"). The grid grows
 *     with its units (126 points against 54 for that model); calibrate gives more passes only to
 *     the points that may be chosen, and took 214 s over it, against 162-324 s for whole routes.
 * Both within the rows the down tensor's blocks allow and the grid's far axis (mp_decide_far_split). */
#define MP_DECIDE_FAR_RESOLUTION 8
#define MP_DECIDE_FAR_UNITS_LEAST 3

/* Far units per expert for a model whose top_k routes a step, whose experts have n_ff FFN rows,
 * split at multiples of granule rows (mp_decide_split_granule): the larger of
 * ceil(MP_DECIDE_FAR_RESOLUTION / top_k) and MP_DECIDE_FAR_UNITS_LEAST, at most n_ff / granule and
 * MP_DECIDE_MAX_K / top_k, at least 1. */
int mp_decide_far_split(int top_k, int64_t n_ff, int64_t granule);

/* The rule's far units per expert (mp_decide_far_split) for the experts a decode grid was measured
 * for: top_k, n_ff and its quant as calibrate names it ("Q4_K/Q6_K": the down tensor's type is the
 * last name); 0 where that type is not known. A grid in coarser units than the rule's (older files,
 * or `calibrate --far-units`) is used as it is; bench, run and simulate say that a calibration now
 * may balance the cores and the bus closer. */
int mp_decide_far_split_of_grid(int top_k, int64_t n_ff, const char *quant);

/* The most far units per expert a grid may count for such a model: n_ff / granule (a unit is at
 * least one granule of rows) and MP_DECIDE_MAX_K / top_k (the grid's far axis), at least 1.
 * `calibrate --far-units` chooses any count up to it. */
int mp_decide_far_split_most(int top_k, int64_t n_ff, int64_t granule);

/* The rows at which an expert whose down tensor has type down_type can be split between the CPU and
 * the GPU: a multiple of that type's block and of its activations' block (each side's dot products
 * then cover whole blocks); 0 for an unknown type. */
int64_t mp_decide_split_granule(int down_type);

/* The FFN rows the CPU keeps, [0, r0), of a split route whose GPU part is `part` of `split` units
 * (0 < part < split): r0 = n_ff less part / split of it, rounded to the granule, with at least one
 * granule on each side; 0 (no split: the GPU runs it whole) when part is 0 or n_ff has fewer than
 * two granules. */
int64_t mp_decide_split_rows(int64_t n_ff, int64_t granule, int split, int part);

/* A step's far work, f units of 1/split: the routes the GPU runs (the split one included, at most
 * far_max_routes) and the split one's part (0: none; it is the last of *routes). */
void mp_decide_far_units(int f, int split, int far_max_routes, int *routes, int *part);

/* The decision for a hybrid layer whose routes are cold with probability cold_share (dc NULL, or
 * a grid without far routes: off). */
void mp_decide_far_layer(const mp_decode_costs *dc, double cold_share, mp_far_layer *out);

/* The grid's time of a one-row step with c cold routes on a layer that decided fl; NaN when the
 * grid lacks that point (the caller falls back on its own model). */
double mp_decide_decode_ns(const mp_decode_costs *dc, const mp_far_layer *fl, int c);
/* The CPU experts' time within that step (the point's cpu_ns), NaN where the grid lacks it: what a
 * run's own CPU expert time compares with, route mix for route mix. */
double mp_decide_decode_cpu_ns(const mp_decode_costs *dc, const mp_far_layer *fl, int c);

/* The least time in which host memory yields `bytes` of expert weights to the cores and the bus
 * reading at once: bytes / max(together, host) where the two readers' sum was measured (together
 * > 0: host memory does not give two readers the sum of what each draws alone; on the H200 hosts
 * 135-160 GB/s where the cores alone read 112-155 and the bus 51-55, bench/NOTES-gpu-exec.md run
 * 39), else bytes / (host + bus), each reader's rate alone (bus <= 0:
 * the cores' alone); 0 when the host's rate is not known (<= 0) or there are no bytes. bench's
 * host+bus bound is this too. */
double mp_decide_hostbus_ns(double bytes, double host_bytes_per_ns, double bus_bytes_per_ns,
                            double together_bytes_per_ns);

/* mp_decide_hostbus_ns with the cost file's rates. */
double mp_decide_floor_ns(const mp_decode_costs *dc, double bytes);

/* Whether the host's read bandwidth probed now (now_gbs, by window) has moved more than
 * MP_DECIDE_HOST_MOVED from the level the calibration measured at (level_gbs): the costs, and the
 * far routes and copies decided from them, rest on that level. False where the level is unknown
 * (<= 0) or was probed the older way (!level_by_window: it does not compare). bench warns, and
 * plan's check names it as a miss's cause. */
#define MP_DECIDE_HOST_MOVED 0.10
bool mp_decide_host_moved(double level_gbs, bool level_by_window, double now_gbs);

/* Whether a calibration measured another machine than this one: its CPU model name (cal_cpu), online
 * CPUs (cal_cores) or CUDA device name (cal_gpu) differs from this machine's (cpu, cores, gpu); a fact
 * either side does not know ("", "unknown", "none", 0, NULL) is not compared. The grid's far routes and
 * copies are this machine's best only where it was measured: on the 30B preset, calibrated on the
 * machine, far routes gained 1.08-1.14x at layers:12/36/48, as the grid predicted (H200, 2026-12-04,
 * bench/NOTES-gpu-exec.md run 40); how much the cores lose beside the bus differs between machines.
 * When true, *why (cap bytes) names what differs, the calibration's value then this machine's. */
bool mp_decide_other_machine(const char *cal_cpu, int cal_cores, const char *cal_gpu, const char *cpu, int cores,
                             const char *gpu, char *why, size_t cap);

/* Whether a run's knobs (now; NULL: every one at its default) differ from those a calibration ran
 * under (cal) in a knob that changes what calibrate times (base/knobs.h, mp_knob_def.costs); a knob
 * the cost file does not record is not compared. When true, *why (cap bytes) names each, the run's
 * value then the calibration's: "MP_GPU_GRAPHS=0 here, 1 in the costs". The grid's levels, and the
 * far routes decided from them, were measured with the calibration's values. */
bool mp_decide_other_knobs(const mp_costs_knobs *cal, const mp_knobs *now, char *why, size_t cap);

/* Whether a step of n_rows rows may copy cold experts to the GPU: not a one-row (decode) step,
 * whose graph replays a fixed set of launches and whose cold routes run on the CPU or far. The
 * executor, the replay and the planner ask this one rule. */
static inline bool mp_decide_step_copies(int64_t n_rows)
{
    return n_rows >= 2;
}

/* Steps of several rows (mp_decide_step_copies): which of a layer step's n cold experts to copy to
 * the GPU (copy[i]); the count is returned. Cold expert i has rows[i] routed rows and takes
 * cpu_ns[i] on the CPU; each copy takes copy_ns on the link. The CPU and the link work side by side
 * (a copied expert's GPU compute runs while the next copy streams), so the copies go to the experts
 * that cost the CPU most, as many as make the layer's max(CPU time of the rest, copies × copy_ns)
 * least (the fewer on a tie): when the CPU is slower per expert it keeps a share instead of idling,
 * and when it is faster the link still takes a share. Before the costs are known (copy_ns <= 0, or an expert's
 * cpu_ns <= 0): the experts with rows >= min_rows (min_rows <= 0: none). An expert of one row is
 * never copied (decode steps run their cold routes on the CPU or far). order: scratch of n ints. */
int mp_decide_copies(int n, const int64_t *rows, const double *cpu_ns, double copy_ns, int64_t min_rows, int *order,
                     bool *copy);

/* The order in which copy candidates are taken: whether cold expert a (cpu_a of CPU time, rows_a
 * rows) goes before b: more CPU time first; on equal times more rows first (a tie then copies the
 * same GPU work in the runtime and in the planner, which keeps its candidates in this order). */
bool mp_decide_copy_first(double cpu_a, int64_t rows_a, double cpu_b, int64_t rows_b);

/* mp_decide_copies' count, also for callers that keep the candidates sorted themselves (the
 * planner adds one cold expert at a time): nc candidates' CPU times, most first, cpu_ns[order[k]]
 * (order NULL: cpu_ns[k]); total_ns the CPU time of every cold expert (candidates and one-row
 * ones); copy_ns > 0. Returns the k whose copies make max(total_ns - the k first, k × copy_ns)
 * least (the fewer on a tie). */
int mp_decide_copy_count(int nc, const double *cpu_ns, const int *order, double total_ns, double copy_ns);

/* An expert entry's cost in one invocation of the expert function (the CPU's or the GPU's) as
 * fixed + the sum of its experts' marginal costs by rows: the model by which the planner, the
 * replay and the GPU executor's prefill copies price a step's experts. With a `concurrent` curve (k
 * distinct one-row experts in one call), the line through its first and last points gives the
 * fixed part (its value at 0 experts) and the cost of one more one-row expert (its slope); an expert
 * of r rows adds that slope plus by_rows(r) - by_rows(1). So k one-row experts cost what the runtime
 * measured for k, and one expert of r rows costs by_rows(r) up to the difference of the two
 * one-expert measurements. Without the curve: fixed 0, marginal = by_rows (experts one after
 * another, the model of cost files that predate it). Tabulated times k for 0..max_rows rows: ns[r]
 * (ns[0] = 0) and *fixed_ns. */
void mp_decide_expert_table(const mp_cost_expert *e, double k, uint32_t max_rows, double *fixed_ns, double *ns);

/* The factor on CPU entry cpu's table that makes the decode grid's all-cold step (top_k one-row CPU
 * experts, far routes off), as the runtime measured it, what the table predicts for that step (the
 * microbenchmark times the experts alone, the runtime beside the GPU's step). `share`: the part of
 * the grid's cold time a layer of these experts takes (its expert bytes over the model's mean; 1 for
 * a model of one kind of expert). 1 where the grid has no such point or ran other threads. */
double mp_decide_cpu_anchor(const mp_costs *c, const mp_cost_expert *cpu, double share);
/* That share for a layer of experts of expert_bytes on a model whose layers' experts are
 * mean_bytes on average (the cores and the bus read every layer's experts; the grid measured them
 * all at once): expert_bytes / mean_bytes, 1 where mean_bytes is not known (<= 0). */
static inline double mp_decide_grid_share(uint64_t expert_bytes, double mean_bytes)
{
    return mean_bytes > 0 ? (double)expert_bytes / mean_bytes : 1.0;
}

/* The CPU's time for one cold expert of r routed rows in each layer of model m, as the planner
 * prices it: cost file c's CPU entry for the layer's expert type and shape on `threads` threads
 * (mp_costs_find_cpu), tabulated (mp_decide_expert_table) times its anchor
 * (mp_decide_cpu_anchor, the layer's expert bytes over the layers' mean as its share). *out:
 * n_layer rows of max_rows + 1 (layer-major), [0] the invocation's fixed part, [r] an expert of r
 * rows; allocated, the caller frees it. *rows_measured: the fewest rows any of those entries was
 * measured up to (their curves' last point; past it they go on along their last segment).
 * MP_ERR_ARG naming the layer and its experts where c has no CPU entry for them (name: the file,
 * for the message). */
mp_status mp_decide_cpu_rows_ns(const mp_costs *c, const char *name, const mp_model *m, int threads, uint32_t max_rows,
                                double **out, double *rows_measured, mp_error *err);

/* The rows a CPU expert entry must be measured up to for its curve to price a prompt's steps (the
 * prefill copies' choice: the GPU executor keeps its own measured rule below it). Measured only at
 * decode's rows, an expert's time is its weights' read and the last segment leaves out the
 * arithmetic: the Mixtral preset's expert on a development VM's two threads took 6.97 / 5.87 ms at 1 /
 * 2 rows (a flat line past them) and 35.5 ms at 64 (2026-12-07); calibrate's --quick grid reaches
 * 16, where the kernels are past their first tiles and the time grows with the rows. */
#define MP_DECIDE_PREFILL_ROWS_MIN 16

/* The adaptive tier's prices (runtime/tier.h, policy cost), from the decode grid:
 *   route_saving_ns  what one route saves when its expert has a slot: the grid's least time for a
 *                    step of top_k cold routes less its time for none, per route (far routes on or
 *                    off, whichever the grid says is faster); without those points, expert_bytes
 *                    read by the cores at the host's bandwidth;
 *   copy_cost_ns     what one admission costs the steps it overlaps: its bytes at the host's read
 *                    bandwidth, plus the host's calls that enqueue it (admit_ns, calibrate's
 *                    $.tier_admit: flame's 127 KB experts cost more in calls than in bytes). The
 *                    copy engine reads host memory beside the cores, and in a step with cold routes
 *                    the cores are bound by that memory: each byte the bus takes is one the cores
 *                    wait for. An upper bound when the copy overlaps idle host memory.
 * Both 0 when the grid has neither points nor the host's bandwidth. */
void mp_decide_tier_costs(const mp_decode_costs *dc, double *route_saving_ns, double *copy_cost_ns);

/* The cost policy's swap rule: admit a candidate whose score (routes expected over the score's
 * memory) exceeds the victim's by score_gain when the routes it saves pay for its copy:
 * score_gain × route_saving_ns > copy_cost_ns. Nothing is admitted while the saving is unknown (<= 0). */
bool mp_decide_admit(double score_gain, double route_saving_ns, double copy_cost_ns);

#endif
