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

mp_status mp_knobs_check_amx_rows(const char *text, mp_error *err)
{
    char name[32];
    int64_t rows;
    for (int i = 0; mp_knob_list_at(text, i, name, sizeof name, &rows); i++) {
        const int type = mp_type_from_name(name);
        if (type >= 0 && mp_kernels_amx_rows(type, true) > 0)
            continue;
        char with[160] = "";
        size_t at = 0;
        for (int j = 0, t; (t = mp_weight_type_at(j)) >= 0 && at < sizeof with; j++)
            if (mp_kernels_amx_rows(t, true) > 0)
                at += (size_t)snprintf(with + at, sizeof with - at, "%s%s", at ? ", " : "", mp_type_name(t));
        return mp_fail(err, MP_ERR_ARG, "MP_AMX_ROWS=%s: %s %s (the types with one: %s)", text, name,
                       type < 0 ? "is not a weight type" : "has no AMX tile GEMM", at ? with : "none in this build");
    }
    return MP_OK;
}

void mp_knobs_apply_kernels(const mp_knobs *k)
{
    mp_kernels_set_isa_cap(mp_knobs_isa_cap(k));
    mp_kernels_set_prefetch_bytes(k->prefetch_bytes);
    for (int j = 0, t; (t = mp_weight_type_at(j)) >= 0; j++) /* the table's, then the list's */
        mp_kernels_set_amx_rows(t, 0);
    char name[32];
    int64_t rows;
    for (int i = 0; mp_knob_list_at(k->amx_rows, i, name, sizeof name, &rows); i++)
        mp_kernels_set_amx_rows(mp_type_from_name(name), (int)rows); /* checked: mp_knobs_check_amx_rows */
    mp_pool_set_spin_us(k->pool_spin_us);
}

mp_status mp_knobs_start(mp_knobs *k, mp_error *err)
{
    mp_status st = mp_knobs_read_env(k, err);
    if (!st)
        st = mp_knobs_check_amx_rows(k->amx_rows, err);
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
        char dflt[MP_KNOB_TEXT_MAX];
        if (!c.knobs.set[i])
            continue;
        bool taken;
        const mp_knobs before = *k;
        if (mp_knobs_take_calibrated(k, name, c.knobs.value[i], &taken, err) ||
            (taken && mp_knobs_check_amx_rows(k->amx_rows, err))) {
            *k = before;
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
