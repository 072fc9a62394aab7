/* tests/unit/trace_fixture.h — a trace writer the cupti tests share (unit: test_collect_cupti.c,
 * GPU: tests/gpu/test_cupti.c): run source "moeplan" and three MoE nodes blk.0..2.ffn_moe
 * (layers 0..2, 8 experts, top-2, F16 weights). Include after <criterion/criterion.h>. */
#ifndef MP_TESTS_TRACE_FIXTURE_H
#define MP_TESTS_TRACE_FIXTURE_H

#include <stdio.h>

#include "collector/trace.h"

static inline mp_trace_writer *open_three_node_trace(const char *path)
{
    mp_error err;
    mp_trace_writer *w;
    cr_assert_eq(mp_trace_writer_open(path, false, &w, &err), MP_OK, "%s", err.msg);
    mp_trace_run_info info;
    mp_trace_run_info_init(&info);
    info.source = "moeplan";
    cr_assert_eq(mp_trace_set_run(w, &info, &err), MP_OK, "%s", err.msg);
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "blk.%d.ffn_moe", i);
        mp_trace_node nd = {.node_index = i, .node_type = "moe", .node_name = name, .layer = i,
                            .n_experts = 8, .top_k = 2, .expert_bytes = -1,
                            .weight_format = MP_TRACE_W_F16};
        cr_assert_eq(mp_trace_add_node(w, &nd, &err), MP_OK, "%s", err.msg);
    }
    return w;
}

#endif
