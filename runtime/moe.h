/* runtime/moe.h — the MoE block: router -> softmax -> top-k -> (renormalize) -> experts -> combine.
 *
 * One call per layer and step from the forward pass. The CPU implementation groups rows by expert
 * so that each expert's weights are streamed once per step, runs experts in parallel over the
 * pool, and accumulates every row's weighted expert outputs in float32 (one rounding at the end,
 * which is the contract the hybrid CPU/GPU path must keep).
 */
#ifndef MP_RUNTIME_MOE_H
#define MP_RUNTIME_MOE_H

#include <stdint.h>

#include "base/error.h"
#include "runtime/hooks.h"
#include "base/knobs.h"
#include "runtime/model.h"
#include "runtime/threadpool.h"

typedef struct mp_moe_scratch mp_moe_scratch;

/* knobs (NULL: the defaults): MP_MOE_PIPE_UNITS and MP_MOE_CPU_PROFILE, taken when the scratch is
 * made. */
mp_moe_scratch *mp_moe_scratch_new(const mp_hparams *hp, int64_t max_rows, int n_threads, const mp_knobs *knobs);
void mp_moe_scratch_free(mp_moe_scratch *s);
/* Calls of up to a few rows (decode) run gate/up and down in one pipelined pool region, larger
 * ones (prefill) in two regions with a barrier between them. Off, this makes every call take the
 * two regions: for the test that both give the same bits and for moe_cpu_stream's A/B. */
void mp_moe_scratch_set_pipelined(mp_moe_scratch *s, bool on);

/* Where a pipelined decode call's time goes (a diagnostic; bench/moe_cpu_stream --profile). Sums
 * over the calls since profiling was turned on; "slot" = one pool thread for one call's region. */
typedef struct mp_moe_cpu_profile {
    int64_t calls;
    int64_t wall_ns;        /* the whole call */
    int64_t pre_ns;         /* the call's start to its region's (conversion, grouping, plans) */
    int64_t region_ns;      /* its pool region, start to return */
    int64_t post_ns;        /* the region's return to the call's (the combine, unless in the region) */
    int64_t first_start_ns; /* region start to the first thread's start */
    int64_t last_start_ns;  /* region start to the last thread's start */
    int64_t gu_done_ns;     /* region start to the last gate/up unit's end */
    int64_t slot_ns;        /* threads x region */
    int64_t late_ns;        /* slots: region start to the thread's start */
    int64_t gate_up_ns;     /* slots: in gate/up units */
    int64_t down_ns;        /* slots: in down units */
    int64_t ready_wait_ns;  /* slots: a down unit waiting for its expert's hidden rows */
    int64_t tail_ns;        /* slots: the thread's end to the region's end */
} mp_moe_cpu_profile;
/* on: start (or restart from zero) profiling this scratch's calls; off: stop. Returns false when
 * out of memory. */
bool mp_moe_scratch_profile(mp_moe_scratch *s, bool on);
/* The sums so far; false (out zeroed) when the scratch is not profiling. */
bool mp_moe_scratch_profile_get(const mp_moe_scratch *s, mp_moe_cpu_profile *out);
/* One line of per-call means (µs) and the thread slots' shares (%), or "no pipelined calls".
 * MP_MOE_CPU_PROFILE=1 profiles every scratch from its creation; the commands that run the model
 * print this line when they end (mp_engine_profile_line: a bench row's CPU side). */
void mp_moe_cpu_profile_format(const mp_moe_cpu_profile *p, char *buf, size_t cap);

/* The router's (or route source's) latest choice in the scratch: (max_rows, top_k) each. */
int32_t *mp_moe_scratch_ids(mp_moe_scratch *s);
float *mp_moe_scratch_weights(mp_moe_scratch *s);

/* Routing only: fill the scratch's ids/weights for n_rows rows of layer il from route_src (checked
 * with mp_moe_check_routes) or from the router over x. */
mp_status mp_moe_route_cpu(const mp_model *m, int64_t il, const float *x, int64_t n_rows,
                           mp_pool *pool, mp_moe_scratch *s, const mp_route_source *route_src,
                           mp_error *err);

/* Refuse routes a route source made up: ids outside [0, n_expert), an id twice in a row,
 * non-finite weights (one line naming layer, row and slot). */
mp_status mp_moe_check_routes(const mp_hparams *hp, int64_t il, int64_t n_rows,
                              const int32_t *ids, const float *weights, mp_error *err);

/* A route the CPU computes in part (a decode step's split far route, runtime/decide.h): expert
 * `expert`'s FFN rows [0, ff_rows) only — gate/up rows below ff_rows and down's first ff_rows
 * columns; the GPU computes the rest. 0 < ff_rows < n_ff, a multiple of the down tensor's block
 * and of its activation block.
 * down_units (NULL: the down slice's rows are read, a segment of each) holds the expert's down
 * laid out by unit: unit u is columns [unit_end[u - 1], unit_end[u]) (unit_end[-1] = 0) of every
 * row, the rows one after another, and the units one after another; ff_rows is one of the n_units
 * ends, each a multiple of the blocks as ff_rows is. Each down row's dot is then the sum, in unit
 * order, of its units' dots: the same products, summed in another order than one dot over the
 * row's segment. */
typedef struct mp_moe_part {
    int32_t expert;
    int64_t ff_rows;
    const void *down_units;
    const int64_t *unit_end;
    int n_units;
} mp_moe_part;

/* Experts only: out (n_rows × n_embd) = Σ over the routes (row, k) whose expert is NOT resident
 * (bit ids[row, k] of resident clear; resident NULL: every route) of
 * weights[row, k] · expert(x[row]), summed in slot order in float32; rows without such a route
 * get zeros. This is the hybrid runtime's CPU partial and the whole block on the CPU path.
 * ids/weights may be the scratch's own arrays. The experts' weights are read from the model's
 * tensors, or, with slices, from slices[t * n_expert + e] (t: 0 gate, 1 up, 2 down; each slice
 * laid out as the tensor's expert e: the GPU executor's host copy). With part (NULL: none), every
 * route to part->expert computed here gives the expert's FFN rows [0, part->ff_rows) only:
 * down[d] = Σ_{j < ff_rows} W_down[d, j] · h[j], so that the GPU's rows [ff_rows, n_ff) add up to
 * the whole expert; a resident part->expert is skipped as any resident expert. The caller checks
 * the part (only asserts here). Expert biases (gpt-oss): gate and up's are added to every row
 * computed; down's only without a resident mask (the CPU executor): with one (a hybrid layer of the
 * GPU executor) the GPU adds every route's down bias itself, whichever side ran the route, so that
 * a route split between the two gets it once. Returns the number of routes computed, a part's
 * among them. */
int64_t mp_moe_experts_cpu(const mp_model *m, int64_t il, const float *x, int64_t n_rows,
                           const int32_t *ids, const float *weights, const uint64_t *resident,
                           const void *const *slices, const mp_moe_part *part, float *out,
                           mp_pool *pool, mp_moe_scratch *s);

/* out (n_rows × n_embd) = MoE(x) for layer il, x already normalized (ffn_norm applied).
 * Routing is reported through hooks (may be NULL) and may be replaced by route_src. */
mp_status mp_moe_forward_cpu(const mp_model *m, int64_t il, const float *x, float *out,
                             int64_t n_rows, mp_pool *pool, mp_moe_scratch *scratch,
                             const mp_hooks *hooks, const mp_route_source *route_src,
                             mp_error *err);

#endif
