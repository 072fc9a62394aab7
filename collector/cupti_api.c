/* collector/cupti_api.c — the program's side of CUPTI capture (cupti.h): mp_cupti_start loads the
 * GPU module's CUPTI table (runtime/gpu_module.h) and every later call goes to it. In a build
 * without CUPTI, or where the module cannot be loaded, mp_cupti_start refuses with the reason, so
 * `collect --cupti` fails with one line instead of running without GPU records; no mp_cupti can
 * exist then, and the other functions answer as for a session that saw nothing. */
#include <stdio.h>
#include <string.h>

#include "collector/cupti.h"
#include "mp_config.h"
#include "runtime/gpu_module.h"

static const mp_cupti_table *module_table; /* set by the first mp_cupti_start that loaded it */

mp_status mp_cupti_start(mp_cupti **out, mp_error *err)
{
    *out = NULL;
    if (!MP_HAVE_CUPTI)
        return mp_fail(err, MP_ERR_DEVICE, "CUPTI unavailable: this moeplan was built without CUPTI (%s)",
                       MP_HAVE_CUDA ? "the CUDA toolkit found at build time has no libcupti / cupti.h"
                                    : "no CUDA toolkit was found at build time");
    char why[768];
    const mp_cupti_table *t = mp_gpu_module_table(MP_GPU_TABLE_CUPTI, sizeof(mp_cupti_table), why, sizeof why);
    if (!t)
        return mp_fail(err, MP_ERR_DEVICE, "CUPTI unavailable: %s", why);
    module_table = t;
    return t->start(out, err);
}

mp_status mp_cupti_push(mp_cupti *c, int64_t request_id, int64_t step, int64_t node_index, mp_error *err)
{
    return c ? module_table->push(c, request_id, step, node_index, err)
             : mp_fail(err, MP_ERR_INTERNAL, "CUPTI: no capture started");
}

mp_status mp_cupti_pop(mp_cupti *c, mp_error *err)
{
    return c ? module_table->pop(c, err) : mp_fail(err, MP_ERR_INTERNAL, "CUPTI: no capture started");
}

mp_status mp_cupti_flush(mp_cupti *c, mp_cupti_sink_fn sink, void *sink_user, mp_error *err)
{
    return c ? module_table->flush(c, sink, sink_user, err) : mp_fail(err, MP_ERR_INTERNAL, "CUPTI: no capture started");
}

mp_cupti_counts mp_cupti_get_counts(const mp_cupti *c)
{
    mp_cupti_counts n;
    if (c)
        return module_table->get_counts(c);
    memset(&n, 0, sizeof n);
    return n;
}

mp_status mp_cupti_stop(mp_cupti *c, mp_cupti_counts *final, mp_error *err)
{
    if (c)
        return module_table->stop(c, final, err);
    if (final)
        *final = mp_cupti_get_counts(NULL);
    return MP_OK;
}
