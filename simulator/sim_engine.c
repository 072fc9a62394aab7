/* simulator/sim_engine.c — changes of the replay's state (sim_engine.h): static residency and
 * Belady's free admissions, the adaptive tier's moves carried out as weight copies queued on the
 * link and their landings told to the tier, the link shared with activation copies. */
#include "simulator/sim_engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Mark the copies finished by at_ns done (their end fixed, no later shift moves it); they land
 * (sim_tier_land) at the next point the tier learns of landings. */
static void finish_copies(sim_engine *s, double at_ns)
{
    while (s->fifo_done < s->fifo_len) {
        inflight *f = &s->fifo[(s->fifo_head + s->fifo_done) % s->fifo_cap];
        if (f->end_ns + s->shift_ns > at_ns)
            return;
        f->end_ns += s->shift_ns;
        s->fifo_done++;
    }
}

void sim_tier_land(sim_engine *s, double at_ns)
{
    finish_copies(s, at_ns);
    for (; s->fifo_done; s->fifo_done--, s->fifo_len--) {
        const uint32_t cell = s->fifo[s->fifo_head].cell, l = cell / s->E;
        mp_tier_landed(s->tier, l, (uint32_t)mp_tier_slot_of(s->tier, l, cell % s->E));
        s->fifo_head = (s->fifo_head + 1) % s->fifo_cap;
    }
}

/* The copy of a tier admission into layer l's slot for expert e, at the clock: after the copies
 * queued before it, on the H2D link. */
static void start_copy(sim_engine *s, uint32_t l, uint32_t e)
{
    if (s->fifo_len == s->fifo_cap) {
        uint32_t cap = s->fifo_cap ? 2 * s->fifo_cap : 256;
        inflight *f = malloc(sizeof *f * cap);
        if (!f) {
            s->oom = true;
            return;
        }
        for (uint32_t i = 0; i < s->fifo_len; i++)
            f[i] = s->fifo[(s->fifo_head + i) % s->fifo_cap];
        free(s->fifo);
        s->fifo = f;
        s->fifo_head = 0;
        s->fifo_cap = cap;
    }
    const double begin = s->clock_ns > s->link_free_ns ? s->clock_ns : s->link_free_ns;
    const double end = begin + sim_kind_of(s->tab, l)->weight_h2d_ns;
    s->link_free_ns = end;
    s->fifo[(s->fifo_head + s->fifo_len++) % s->fifo_cap] = (inflight){l * s->E + e, end - s->shift_ns};
}

void sim_tier_after(sim_engine *s, uint32_t l, const uint16_t *used, const uint32_t *rows_of, uint32_t n_used,
                    uint32_t rows)
{
    if (s->n_moves + n_used > s->cap_moves) { /* step_sync keeps a whole step's moves */
        uint32_t cap = s->cap_moves * 2 > s->n_moves + n_used ? s->cap_moves * 2 : s->n_moves + n_used;
        mp_tier_move *m = realloc(s->moves, sizeof *m * cap);
        if (m)
            s->moves = m;
        uint8_t *st = m ? realloc(s->staged, cap) : NULL;
        if (!st) {
            s->oom = true;
            return;
        }
        s->staged = st;
        s->cap_moves = cap;
    }
    const uint64_t refused = mp_tier_stats_of(s->tier)->refused;
    mp_tier_move *moves = s->moves + s->n_moves;
    uint8_t *staged = s->staged + s->n_moves;
    const uint32_t n = mp_tier_after(s->tier, l, used, rows_of, n_used, moves, n_used);
    s->m->tier_refused += mp_tier_stats_of(s->tier)->refused - refused;
    for (uint32_t i = 0; i < n; i++) {
        s->m->admissions++;
        s->m->evictions += moves[i].victim >= 0;
        s->n_resident[l] += moves[i].victim < 0;
        staged[i] = rows > 1 && s->copied[moves[i].expert];
        if (staged[i])
            s->m->tier_promoted++;
        else
            s->m->h2d_weight_bytes += sim_kind_of(s->tab, l)->expert_bytes;
    }
    if (s->step_sync) {
        s->n_moves += n;
        return;
    }
    for (uint32_t i = 0; i < n; i++) /* the copy may start only after the deciding invocation */
        if (staged[i])
            mp_tier_landed(s->tier, l, moves[i].slot);
        else
            start_copy(s, l, moves[i].expert);
}

void sim_tier_step_end(sim_engine *s)
{
    sim_tier_land(s, s->clock_ns);
    for (uint32_t i = 0; i < s->n_moves; i++)
        if (s->staged[i])
            mp_tier_landed(s->tier, s->moves[i].layer, s->moves[i].slot);
        else
            start_copy(s, s->moves[i].layer, s->moves[i].expert);
    s->n_moves = 0;
}

/* An activation copy of dur_ns lands on the H2D link at at_ns: weight copies still running then
 * are pushed back by its duration (the link is shared; activations go first, the decode waits on
 * them). */
void sim_share_link(sim_engine *s, double at_ns, double dur_ns)
{
    finish_copies(s, at_ns);
    if (s->fifo_done == s->fifo_len)
        return;
    s->shift_ns += dur_ns;
    s->link_free_ns += dur_ns;
}

/* ---- static residency, and Belady's cache on it ---- */

bool sim_is_resident(const sim_engine *s, uint32_t layer, uint32_t expert)
{
    return s->resident[(size_t)layer * s->E + expert];
}
const uint8_t *sim_resident_row(const sim_engine *s, uint32_t layer)
{
    return s->resident + (size_t)layer * s->E;
}
const uint16_t *sim_resident_list(const sim_engine *s, uint32_t layer, uint32_t *n)
{
    *n = s->n_resident[layer];
    return s->res_list + (size_t)layer * s->E;
}

/* Residency changes go through these two, which keep res_list/res_pos in step with resident. */
void sim_set_resident(sim_engine *s, uint32_t layer, uint32_t expert)
{
    size_t cell = (size_t)layer * s->E + expert;
    s->resident[cell] = 1;
    s->res_pos[cell] = s->n_resident[layer];
    s->res_list[(size_t)layer * s->E + s->n_resident[layer]++] = (uint16_t)expert;
}
static void clear_resident(sim_engine *s, uint32_t layer, uint32_t expert)
{
    size_t cell = (size_t)layer * s->E + expert;
    uint16_t *list = s->res_list + (size_t)layer * s->E;
    uint32_t pos = s->res_pos[cell], last = --s->n_resident[layer];
    list[pos] = list[last];
    s->res_pos[(size_t)layer * s->E + list[pos]] = pos;
    s->resident[cell] = 0;
}

uint32_t sim_n_resident(const sim_engine *s, uint32_t layer) { return s->n_resident[layer]; }
uint32_t sim_cap(const sim_engine *s, uint32_t layer) { return s->cap[layer]; }

void sim_evict(sim_engine *s, uint32_t layer, uint32_t expert)
{
    size_t cell = (size_t)layer * s->E + expert;
    if (!s->resident[cell])
        return;
    clear_resident(s, layer, expert);
    s->m->evictions++;
}

void sim_admit(sim_engine *s, uint32_t layer, uint32_t expert)
{
    size_t cell = (size_t)layer * s->E + expert;
    if (s->resident[cell] || s->n_resident[layer] >= s->cap[layer])
        return;
    sim_set_resident(s, layer, expert); /* free and instant: a hit from the next invocation on */
    s->m->admissions++;
    s->m->h2d_weight_bytes += sim_kind_of(s->tab, layer)->expert_bytes;
}

void sim_place(sim_engine *s, uint32_t layer, uint32_t expert)
{
    size_t cell = (size_t)layer * s->E + expert;
    if (s->resident[cell] || s->n_resident[layer] >= s->cap[layer])
        return;
    sim_set_resident(s, layer, expert);
}
