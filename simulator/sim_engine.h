/* simulator/sim_engine.h — the replay's state, private to the simulator: which experts each layer
 * holds, the weight copies in flight on the link and the clock (sim_engine.c changes it; the
 * replay, sim_replay.c, reads and advances it).
 *
 * Two kinds of residency: the static placement's (resident, fixed for the replay; Belady's cache
 * changes it through sim_internal.h's sim_admit / sim_evict / sim_place, free and instant), and
 * the adaptive tier's slots (runtime/tier.h: the online policies and --adaptive), whose moves the
 * engine carries out as the runtime does, each admission a weight copy on the link, its expert
 * LOADING until the copy has landed.
 *
 * Invariants during a replay: n_resident[l] <= n_experts counts the layer's static residents and
 * its filled tier slots; the in-flight FIFO holds each tier copy from its start until the tier is
 * told it landed: its first fifo_done entries have finished (their end_ns absolute), the rest are
 * queued (end_ns + shift_ns) in link order; a cell has at most one copy in the FIFO (the tier never
 * evicts a LOADING expert); link_free_ns is when the H2D link finishes the queued weight copies;
 * clock_ns only grows. Everything is deterministic: no randomness, no wall clock.
 */
#ifndef MP_SIMULATOR_SIM_ENGINE_H
#define MP_SIMULATOR_SIM_ENGINE_H

#include "runtime/tier.h"
#include "simulator/sim_internal.h"

typedef struct inflight {
    uint32_t cell;   /* layer * n_experts + expert */
    double end_ns;   /* queued: the copy ends at end_ns + shift_ns; finished: when it ended */
} inflight;

struct sim_engine {
    const mp_sim_trace *t;
    const sim_tab *tab;
    /* (n_steps) the trace's measured non-MoE ns per step, already scaled (--non-moe trace), or
     * NULL: the cost file's, tab->non_moe_ns by rows */
    const double *step_non_moe_ns;
    uint32_t L, E;
    uint8_t *resident;    /* (L, E) static residents (the tier's pinned set), or Belady's cache */
    uint32_t *n_resident; /* (L) static residents + filled tier slots (the layer is whole at E) */
    uint16_t *res_list;   /* (L, E) per layer, its static residents first (Belady's victim search) */
    uint32_t *res_pos;    /* (L, E) position of a resident expert in its layer's res_list */
    uint32_t *cap;        /* (L) Belady's cache sizes; static placements: their residents */
    mp_far_layer *far;    /* (L) each layer's far routes (runtime/decide.h), decided once placed */
    /* The adaptive tier, or NULL. Its moves start their copies when the deciding invocation ends
     * (the online policies), or with step_sync when the step ends, and its copies land at the next
     * invocation's start, or with step_sync at the step's end: the runtime applies a step's moves
     * and sees its landed copies only once the step has drained (gpu/gpu_tier.c). */
    mp_tier *tier;
    bool step_sync;
    const uint8_t *no_tier; /* (E) zeros: the tier states of a replay without a tier */
    mp_tier_move *moves;  /* (cap_moves) one invocation's moves, then (step_sync) the step's */
    uint8_t *staged;      /* (cap_moves) the move's expert was staged for its step's prefill copy
                           * (copied): it goes into its slot from staging, no copy on the link */
    uint8_t *copied;      /* (E) the experts the current layer step copies (sim_copy_set), zero
                           * outside the replay of a layer step */
    uint16_t *cold;       /* (E) the current layer step's cold experts */
    int64_t *cold_rows;   /* (E) and their rows */
    double *cold_cpu;     /* (E) and their CPU time (the cost file's) */
    int *cold_order;      /* (E) sim_copy_set's scratch */
    bool *cold_copy;      /* (E) and whether the step copies them */
    uint32_t n_moves, cap_moves;
    double clock_ns, link_free_ns;
    inflight *fifo;       /* ring of tier copies, in link order */
    uint32_t fifo_head, fifo_len, fifo_done, fifo_cap;
    /* Delay added to every copy still queued: an activation copy shifts them all alike, so the
     * shift is kept once here instead of rewriting each entry (O(1) per activation copy). */
    double shift_ns;
    mp_sim_metrics *m;    /* the split being replayed */
    bool oom;
    void (*progress)(void *user, uint64_t decisions); /* mp_sim_config's */
    void *progress_user;
};

/* Mark expert resident in layer's lists (resident, res_list, res_pos): a static placement loaded
 * before the replay starts. */
void sim_set_resident(sim_engine *s, uint32_t layer, uint32_t expert);
/* An activation copy of dur_ns on the link at at_ns: every weight copy still queued behind it
 * moves by dur_ns. */
void sim_share_link(sim_engine *s, double at_ns, double dur_ns);
/* The tier told of every copy finished by at_ns: its expert becomes READY. */
void sim_tier_land(sim_engine *s, double at_ns);
/* After an invocation of layer l in a step of `rows` rows (its distinct experts used, rows_of their
 * rows): the tier's policy decides, and its moves are counted and their copies started (or, with
 * step_sync, kept for the step's end). An admitted expert that the step copies to the GPU (copied:
 * the runtime's staging) needs no copy on the link: it is READY at the step's end (step_sync) or
 * at once. */
void sim_tier_after(sim_engine *s, uint32_t l, const uint16_t *used, const uint32_t *rows_of, uint32_t n_used,
                    uint32_t rows);
/* The step has ended (step_sync): its landed copies and its staged admissions become READY, then
 * its other moves' copies start. */
void sim_tier_step_end(sim_engine *s);

#endif
