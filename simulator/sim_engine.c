/* simulator/sim_engine.c — changes of the replay's state (sim_engine.h): residency, admissions and
 * evictions with their weight copies queued on the link, the link shared with activation copies. */
#include "simulator/sim_engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void sim_retire_copies(sim_engine *s, double at_ns)
{
    while (s->fifo_len && s->fifo[s->fifo_head].end_ns + s->shift_ns <= at_ns) {
        const inflight *f = &s->fifo[s->fifo_head];
        if (--s->n_queued[f->cell] == 0)
            s->ready_ns[f->cell] = f->end_ns + s->shift_ns;
        s->fifo_head = (s->fifo_head + 1) % s->fifo_cap;
        s->fifo_len--;
    }
}

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
    sim_set_resident(s, layer, expert);
    s->m->admissions++;
    s->m->h2d_weight_bytes += s->tab->expert_bytes;
    if (s->ideal) {
        s->ready_ns[cell] = s->clock_ns;
        return;
    }
    /* the copy may start only after the deciding invocation, and waits for the link */
    sim_retire_copies(s, s->clock_ns);
    double begin = s->clock_ns > s->link_free_ns ? s->clock_ns : s->link_free_ns;
    double end = begin + s->tab->weight_h2d_ns;
    s->link_free_ns = end;
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
    s->fifo[(s->fifo_head + s->fifo_len++) % s->fifo_cap] = (inflight){(uint32_t)cell, end - s->shift_ns};
    s->ready_ns[cell] = end - s->shift_ns;
    s->n_queued[cell]++;
}

void sim_place(sim_engine *s, uint32_t layer, uint32_t expert)
{
    size_t cell = (size_t)layer * s->E + expert;
    if (s->resident[cell] || s->n_resident[layer] >= s->cap[layer])
        return;
    sim_set_resident(s, layer, expert);
    s->ready_ns[cell] = 0;
}

/* An activation copy of dur_ns lands on the H2D link at at_ns: weight copies still running then
 * are pushed back by its duration (the link is shared; activations go first, the decode waits on
 * them). */
void sim_share_link(sim_engine *s, double at_ns, double dur_ns)
{
    sim_retire_copies(s, at_ns);
    if (!s->fifo_len)
        return;
    s->shift_ns += dur_ns;
    s->link_free_ns += dur_ns;
}
