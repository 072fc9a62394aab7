/* runtime/gpu_api.c — the program's side of the GPU executor (gpu.h): each function hands the
 * call to the GPU module's executor table (runtime/gpu_module.h), loaded by the first
 * mp_gpu_available, mp_gpu_memory_info or mp_gpu_new. The functions that take an mp_gpu are
 * reached only after mp_gpu_new succeeded, so the table is there. */
#include "runtime/gpu.h"

#include "runtime/gpu_module.h"

/* The table once found: set by the first lookup that succeeds, read on every call after (the
 * forward pass calls through it at each step, so it is not looked up by name there). */
static const mp_gpu_executor_table *found;

static const mp_gpu_executor_table *table(char *why, size_t why_cap)
{
    const mp_gpu_executor_table *t = __atomic_load_n(&found, __ATOMIC_ACQUIRE);
    if (!t && (t = mp_gpu_module_table(MP_GPU_TABLE_EXECUTOR, sizeof(mp_gpu_executor_table), why, why_cap)))
        __atomic_store_n(&found, t, __ATOMIC_RELEASE);
    return t;
}

/* The table once an mp_gpu exists (mp_gpu_new found it). */
static const mp_gpu_executor_table *loaded(void)
{
    return __atomic_load_n(&found, __ATOMIC_ACQUIRE);
}

int mp_gpu_available(char *why, size_t why_cap)
{
    const mp_gpu_executor_table *t = table(why, why_cap);
    return t ? t->available(why, why_cap) : 0;
}

mp_status mp_gpu_memory_info(uint64_t *free_bytes, uint64_t *total_bytes, mp_error *err)
{
    char why[768];
    const mp_gpu_executor_table *t = table(why, sizeof why);
    return t ? t->memory_info(free_bytes, total_bytes, err) : mp_fail(err, MP_ERR_DEVICE, "GPU executor: %s", why);
}

mp_status mp_gpu_new(mp_session *s, const mp_placement *pl, mp_gpu **out, mp_error *err)
{
    char why[768];
    const mp_gpu_executor_table *t = table(why, sizeof why);
    *out = NULL;
    return t ? t->new_(s, pl, out, err) : mp_fail(err, MP_ERR_DEVICE, "GPU executor: %s", why);
}

void mp_gpu_free(mp_gpu *g)
{
    if (g)
        loaded()->free_(g);
}

mp_status mp_gpu_forward(mp_session *s, const int32_t *tokens, int64_t n, bool all_logits, float *logits,
                         mp_error *err)
{
    return loaded()->forward(s, tokens, n, all_logits, logits, err);
}

void mp_gpu_get_memory(const mp_gpu *g, mp_gpu_memory *out) { loaded()->get_memory(g, out); }
void mp_gpu_get_stats(const mp_gpu *g, mp_gpu_stats *out) { loaded()->get_stats(g, out); }
void mp_gpu_stats_reset(mp_gpu *g) { loaded()->stats_reset(g); }
const char *mp_gpu_device_name(const mp_gpu *g) { return loaded()->device_name(g); }
void mp_gpu_set_measure(mp_gpu *g, bool on) { loaded()->set_measure(g, on); }
void mp_gpu_report(const mp_gpu *g, char *buf, size_t cap) { loaded()->report(g, buf, cap); }
void mp_gpu_host_report(const mp_gpu *g, char *buf, size_t cap) { loaded()->host_report(g, buf, cap); }
void mp_gpu_set_copy_min_rows(mp_gpu *g, int64_t min_rows) { loaded()->set_copy_min_rows(g, min_rows); }
int64_t mp_gpu_copy_min_rows(const mp_gpu *g) { return loaded()->copy_min_rows(g); }
int mp_gpu_far_max(const mp_gpu *g) { return loaded()->far_max(g); }
bool mp_gpu_set_far_plan(mp_gpu *g, const mp_far_layer *layers) { return loaded()->set_far_plan(g, layers); }
const char *mp_gpu_costs_machine(const mp_gpu *g) { return loaded()->costs_machine(g); }
int64_t mp_gpu_far_layers(const mp_gpu *g) { return loaded()->far_layers(g); }
void mp_gpu_set_gemm_min_rows(mp_gpu *g, int64_t min_rows) { loaded()->set_gemm_min_rows(g, min_rows); }
mp_status mp_gpu_bus_read(mp_gpu *g, double seconds, uint64_t *bytes, mp_error *err)
{
    return loaded()->bus_read(g, seconds, bytes, err);
}
