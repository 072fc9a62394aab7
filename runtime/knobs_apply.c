/* runtime/knobs_apply.c — the knobs' reach into the kernels (knobs_apply.h). */
#include "runtime/knobs_apply.h"

#include <stdio.h>
#include <string.h>

#include "kernels/quant.h"
#include "runtime/costs.h"
#include "runtime/threadpool.h"

_Static_assert(MP_KNOB_PREFETCH_BYTES == MP_PREFETCH_BYTES_DEFAULT &&
                   MP_KNOB_PREFETCH_BYTES_MAX == MP_PREFETCH_BYTES_MAX,
               "MP_PREFETCH_BYTES's default and cap are the kernels' own");

void mp_knobs_apply_kernels(const mp_knobs *k)
{
    mp_kernels_set_isa_cap(mp_knobs_isa_cap(k));
    mp_kernels_set_prefetch_bytes(k->prefetch_bytes);
    mp_pool_set_spin_us(k->pool_spin_us);
}

mp_status mp_knobs_start(mp_knobs *k, mp_error *err)
{
    mp_status st = mp_knobs_read_env(k, err);
    if (!st)
        mp_knobs_apply_kernels(k);
    return st;
}

mp_status mp_knobs_take_costs(mp_knobs *k, const char *flag, const char *path, mp_error *err)
{
    mp_costs c;
    mp_status st = mp_costs_load(path, &c, err);
    if (st)
        return mp_error_prefix(err, "%s", flag);
    for (int i = 0; i < mp_knob_count() && i < MP_KNOBS_MAX; i++) {
        const char *name = mp_knob_at(i)->name;
        char dflt[64];
        if (!c.knobs.set[i])
            continue;
        bool taken;
        if (mp_knobs_take_calibrated(k, name, c.knobs.value[i], &taken, err)) {
            mp_costs_free(&c);
            err->code = MP_ERR_FORMAT;
            return mp_error_prefix(err, "%s %s: $.device.knobs", flag, path);
        }
        if (!taken)
            continue; /* not a tuned knob, or set here: the run keeps its own */
        if (!strcmp(c.knobs.value[i], mp_knob_default_text(i, dflt, sizeof dflt)))
            continue;
        fprintf(stderr, "moeplan: %s=%s, as calibrated in %s (set %s to choose another)\n", name, c.knobs.value[i],
                path, name);
    }
    mp_costs_free(&c);
    mp_knobs_apply_kernels(k);
    return MP_OK;
}

mp_status mp_knobs_of_flags(mp_knobs *k, bool no_simd, const char *costs, mp_error *err)
{
    if (no_simd) {
        mp_status st = mp_knobs_set(k, "MP_ISA", "scalar", MP_KNOB_FLAG, err);
        if (st)
            return st;
        mp_knobs_apply_kernels(k);
    }
    return costs ? mp_knobs_take_costs(k, "--costs", costs, err) : MP_OK;
}
