/* tests/fuzz/fuzz_costs.c — libFuzzer target for the costs.json loader.
 * Property: the loader succeeds (and then every curve, a one-row step's context included, evaluates
 * to a finite, non-negative time at any size, a CPU-only file included) or fails with a non-empty one-line message and nothing allocated. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/costs.h"

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
    mp_costs_free(&c);
    return 0;
}
