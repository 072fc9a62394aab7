/* runtime/knobs_apply.c — the knobs' reach into the kernels (knobs_apply.h). */
#include "runtime/knobs_apply.h"

#include "kernels/quant.h"
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
