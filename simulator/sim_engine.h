/* simulator/sim_engine.h — the replay's state, private to the simulator: which experts each layer
 * holds, the weight copies in flight on the link and the clock (sim_engine.c changes it; the
 * replay, sim_replay.c, reads and advances it; online policies change it through sim_internal.h's
 * sim_admit / sim_evict / sim_place).
 *
 * Invariants during a replay: n_resident[l] <= cap[l]; a cell is in the in-flight FIFO only while
 * its copy may still be running; link_free_ns is when the H2D link finishes the queued weight
 * copies; clock_ns only grows. Everything is deterministic: no randomness, no wall clock.
 */
#ifndef MP_SIMULATOR_SIM_ENGINE_H
#define MP_SIMULATOR_SIM_ENGINE_H

#include "simulator/sim_internal.h"

typedef struct inflight {
    uint32_t cell;   /* layer * n_experts + expert */
    double end_ns;   /* unshifted: the copy ends at end_ns + shift_ns */
} inflight;

struct sim_engine {
    const mp_sim_trace *t;
    const sim_tab *tab;
    /* (n_steps) the trace's measured non-MoE ns per step, already scaled (--non-moe trace), or
     * NULL: the cost file's, tab->non_moe_ns by rows */
    const double *step_non_moe_ns;
    uint32_t L, E;
    uint8_t *resident;    /* (L, E) slot held (copy may be in flight) */
    double *ready_ns;     /* (L, E) when the expert's copy finishes; 0 if loaded before start;
                           * unshifted (add shift_ns) while the cell has copies queued */
    uint32_t *n_queued;   /* (L, E) copies of the cell still in the FIFO */
    uint32_t *n_resident; /* (L) */
    uint16_t *res_list;   /* (L, E) per layer, its n_resident resident experts first */
    uint32_t *res_pos;    /* (L, E) position of a resident expert in its layer's res_list */
    uint32_t *cap;        /* (L) */
    mp_far_layer *far;    /* (L) each layer's far routes (runtime/decide.h), decided once placed */
    bool ideal;           /* admissions are free and instant (Belady's bound) */
    double clock_ns, link_free_ns;
    inflight *fifo;       /* ring of in-flight weight copies, in link order */
    uint32_t fifo_head, fifo_len, fifo_cap;
    /* Delay added to every copy still queued: an activation copy shifts them all alike, so the
     * shift is kept once here instead of rewriting each entry (O(1) per activation copy). */
    double shift_ns;
    mp_sim_metrics *m;    /* the split being replayed */
    bool oom;
    void (*progress)(void *user, uint64_t decisions); /* mp_sim_config's */
    void *progress_user;
};

/* When the expert's weights are on the GPU (hot: once per routed expert and invocation). */
static inline double sim_ready_at(const sim_engine *s, size_t cell)
{
    return s->n_queued[cell] ? s->ready_ns[cell] + s->shift_ns : s->ready_ns[cell];
}

/* Mark expert resident in layer's lists (resident, res_list, res_pos); its copy is not charged:
 * a static placement loaded before the replay starts. */
void sim_set_resident(sim_engine *s, uint32_t layer, uint32_t expert);
/* Retire the copies finished by at_ns; a cell's last queued copy fixes its ready time. */
void sim_retire_copies(sim_engine *s, double at_ns);
/* An activation copy of dur_ns on the link at at_ns: every weight copy still queued behind it
 * moves by dur_ns. */
void sim_share_link(sim_engine *s, double at_ns, double dur_ns);

#endif
