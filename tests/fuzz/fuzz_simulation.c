/* tests/fuzz/fuzz_simulation.c — libFuzzer target for the reader of simulate's JSON that
 * `analyze --simulation` uses (analyzer/simulation.h). Property: it succeeds with a document the
 * report can draw (1..64 budgets in increasing order, every policy that ran with a speed > 0) or
 * fails with a non-empty one-line message and an empty result. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "analyzer/simulation.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static mp_an_simulation s;
    mp_error err;
    if (mp_an_simulation_parse((const char *)data, size, "fuzz", &s, &err) != MP_OK) {
        if (!err.msg[0] || strchr(err.msg, '\n') || s.n_budgets || s.n_policies)
            abort();
        return 0;
    }
    if (s.n_budgets < 1 || s.n_budgets > MP_AN_SIM_MAX_BUDGETS || s.n_policies < 1 ||
        s.n_policies > MP_AN_SIM_MAX_POLICIES)
        abort();
    for (int i = 1; i < s.n_budgets; i++)
        if (!(s.budget_bytes[s.order[i - 1]] < s.budget_bytes[s.order[i]]))
            abort();
    for (int b = 0; b < s.n_budgets; b++)
        for (int p = 0; p < s.n_policies; p++)
            if (s.pt[b][p].ran && !(s.pt[b][p].tok_s > 0 && s.pt[b][p].ms_per_token > 0))
                abort();
    return 0;
}
