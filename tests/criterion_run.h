/* tests/criterion_run.h — the body of a test executable's own main (one that may skip the whole
 * executable first, exit 77, as tests/gpu/gpu_main.c and tests/unit/test_quant_amx_emul.c do): run
 * every Criterion test as Criterion's default main would. 0 when all passed, 1 otherwise. */
#ifndef MP_TESTS_CRITERION_RUN_H
#define MP_TESTS_CRITERION_RUN_H

#include <criterion/criterion.h>

static inline int mp_criterion_run_all(int argc, char **argv)
{
    struct criterion_test_set *tests = criterion_initialize();
    int ok = 1;
    if (criterion_handle_args(argc, argv, true))
        ok = criterion_run_all_tests(tests);
    criterion_finalize(tests);
    return ok ? 0 : 1;
}

#endif
