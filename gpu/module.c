/* gpu/module.c — what libmoeplan-gpu.so hands the program that loads it (runtime/gpu_module.h):
 * one record, mp_gpu_module, naming the build the module belongs to and giving out its
 * tables by name: the GPU executor (runtime/gpu.h), CUPTI capture (collector/cupti.h) and
 * calibrate's GPU microbenchmarks (simulator/calibrate_impl.h).
 *
 * Everything else the module defines is hidden (it is compiled with -fvisibility=hidden) and named
 * apart from the program's side of each table (runtime/gpu_api.c's mp_gpu_* are mp_gpu_exec_* here,
 * collector/cupti_api.c's mp_cupti_* are mp_cupti_cap_*); what the module takes from the rest of
 * moeplan (the session, the CPU experts, the decision model, the trace's record types) it takes
 * from the program. */
#include <string.h>

#include "base/build_commit.h"
#include "gpu/gpu_impl.h"
#include "gpu/module.h"
#include "mp_config.h"
#include "runtime/gpu.h"
#include "runtime/gpu_module.h"
#include "simulator/calibrate_impl.h"

static const mp_gpu_executor_table executor = {
    .size = sizeof(mp_gpu_executor_table),
    .available = mp_gpu_exec_available,
    .memory_info = mp_gpu_exec_memory_info,
    .new_ = mp_gpu_exec_new,
    .free_ = mp_gpu_exec_free,
    .forward = mp_gpu_exec_forward,
    .get_memory = mp_gpu_exec_get_memory,
    .get_stats = mp_gpu_exec_get_stats,
    .stats_reset = mp_gpu_exec_stats_reset,
    .device_name = mp_gpu_exec_device_name,
    .set_measure = mp_gpu_exec_set_measure,
    .report = mp_gpu_exec_report,
    .host_report = mp_gpu_exec_host_report,
    .set_copy_min_rows = mp_gpu_exec_set_copy_min_rows,
    .copy_min_rows = mp_gpu_exec_copy_min_rows,
    .far_max = mp_gpu_exec_far_max,
    .set_far_plan = mp_gpu_exec_set_far_plan,
    .far_layers = mp_gpu_exec_far_layers,
    .costs_machine = mp_gpu_exec_costs_machine,
    .set_gemm_min_rows = mp_gpu_exec_set_gemm_min_rows,
    .bus_read = mp_gpu_exec_bus_read,
};

#if MP_HAVE_CUPTI
static const mp_cupti_table cupti = {
    .size = sizeof(mp_cupti_table),
    .start = mp_cupti_cap_start,
    .push = mp_cupti_cap_push,
    .pop = mp_cupti_cap_pop,
    .flush = mp_cupti_cap_flush,
    .get_counts = mp_cupti_cap_get_counts,
    .stop = mp_cupti_cap_stop,
};
#endif

static const mp_calib_gpu_table calibrate = {
    .size = sizeof(mp_calib_gpu_table),
    .gpu = mp_calib_gpu,
    .beside_bus = mp_calib_beside_bus,
};

static const void *table(const char *name)
{
    if (!strcmp(name, MP_GPU_TABLE_EXECUTOR))
        return &executor;
#if MP_HAVE_CUPTI
    if (!strcmp(name, MP_GPU_TABLE_CUPTI))
        return &cupti;
#endif
    if (!strcmp(name, MP_GPU_TABLE_CALIBRATE))
        return &calibrate;
    return NULL;
}

__attribute__((visibility("default"))) const mp_gpu_module_info mp_gpu_module = {
    .version = MP_VERSION,
    .commit = MP_BUILD_COMMIT,
    .options = MP_BUILD_OPTIONS,
    .table = table,
};
