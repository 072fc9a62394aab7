/* tests/fuzz/fuzz_costs.c — libFuzzer target for the costs.json loader.
 * Property: the loader succeeds (and then every curve, a one-row step's context included, evaluates
 * to a finite, non-negative time at any size, a CPU-only file included; the decode grid, taken for
 * its own shape, settles to points that are NaN or non-negative and never below their loaded
 * value, also rebuilt at factors of at least 1 (mp_decode_costs_scale), and back at 1 is the grid
 * as loaded; the recorded knobs compare with the defaults in a terminated line) or fails with a
 * non-empty one-line message and nothing allocated. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/costs.h"
#include "runtime/decide.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mp_costs c;
    mp_error err;
    if (mp_costs_parse((const char *)data, size, "fuzz", &c, &err) != MP_OK) {
        if (!err.msg[0] || strchr(err.msg, '\n') || c.gpu_expert || c.cpu_expert)
            abort();
        return 0;
    }
    const double xs[] = {0, 0.5, 1, 3, 1000, 1e9};
    /* a CPU-only file (GPU parts listed in $.missing) has no GPU expert and empty copy curves */
    if ((c.n_gpu_expert == 0) != ((c.absent & MP_COST_ABSENT_GPU_EXPERT) != 0) || c.n_cpu_expert < 1)
        abort();
    for (int i = 0; i < 6; i++) {
        double t = (c.n_gpu_expert ? mp_cost_curve_ns(&c.gpu_expert[0].by_rows, xs[i]) : 0) +
                   mp_cost_curve_ns(&c.h2d_pinned, xs[i]) + mp_cost_curve_ns(&c.cpu_expert[0].by_rows, xs[i]) +
                   mp_cost_curve_ns(&c.non_moe, xs[i]) + mp_costs_decode_non_moe_ns(&c, xs[i]);
        if (!(t >= 0) || isnan(t))
            abort();
    }
    const mp_cost_decode *d = &c.decode;
    const mp_decode_shape shape = {d->quant, d->n_embd, d->n_ff, d->n_expert, d->top_k, d->threads, d->expert_bytes};
    static mp_decode_costs dc, loaded; /* large: not on the stack */
    if (d->n_points && mp_decode_costs_from(&c, "fuzz", &shape, &dc, &err) == MP_OK) {
        loaded = dc;
        /* as loaded, then rebuilt at factors of at least 1 (a slower host, a sensitivity run): never
         * below the loaded value, finite where measured; back at 1, the grid as loaded */
        const double ks[][4] = {{1, 1, 1, 1}, {2, 1, 1, 1}, {1, 3, 1, 1}, {1, 1, 3, 1}, {1.5, 1.5, 2, 4}};
        for (int k = 0; k < 5; k++) {
            mp_decode_costs_scale(&dc, ks[k][0], ks[k][1], ks[k][2], ks[k][3]);
            for (int i = 0; i < d->n_points; i++) {
                const mp_cost_decode_point *p = &d->points[i];
                const double t = p->far_on ? dc.on_ns[p->cold][p->far] : dc.off_ns[p->cold];
                const double cpu = p->far_on ? dc.cpu_on_ns[p->cold][p->far] : dc.cpu_off_ns[p->cold];
                if (!(t >= p->layer.median_ns) || !isfinite(t) || (p->cpu_ns >= 0 && !(cpu >= p->cpu_ns)))
                    abort();
            }
        }
        mp_decode_costs_scale(&dc, 1, 1, 1, 1);
        if (memcmp(dc.off_ns, loaded.off_ns, sizeof dc.off_ns) || memcmp(dc.on_ns, loaded.on_ns, sizeof dc.on_ns) ||
            memcmp(dc.cpu_off_ns, loaded.cpu_off_ns, sizeof dc.cpu_off_ns) ||
            memcmp(dc.cpu_on_ns, loaded.cpu_on_ns, sizeof dc.cpu_on_ns) ||
            memcmp(dc.gpu_on_ns, loaded.gpu_on_ns, sizeof dc.gpu_on_ns))
            abort();
    }
    char why[400];
    why[sizeof why - 1] = 'x';
    (void)mp_decide_other_knobs(&c.knobs, NULL, why, sizeof why);
    if (!memchr(why, '\0', sizeof why))
        abort();
    for (int i = 0; i < MP_KNOBS_MAX; i++)
        if (c.knobs.set[i] && !memchr(c.knobs.value[i], '\0', sizeof c.knobs.value[i]))
            abort();
    mp_costs_free(&c);
    return 0;
}
