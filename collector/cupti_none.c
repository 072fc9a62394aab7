/* collector/cupti_none.c — cupti.h in a build without CUPTI (no CUDA toolkit, or a toolkit
 * without libcupti / cupti.h): mp_cupti_start refuses with the reason, so `collect --cupti` fails
 * with one line instead of running without GPU records. No mp_cupti can exist here, so the other
 * functions are unreachable; they answer as for a session that saw nothing.
 */
#include <stddef.h>
#include <string.h>

#include "collector/cupti.h"
#include "mp_config.h"

mp_status mp_cupti_start(mp_cupti **out, mp_error *err)
{
    *out = NULL;
    return mp_fail(err, MP_ERR_DEVICE, "CUPTI unavailable: this moeplan was built without CUPTI (%s)",
                   MP_HAVE_CUDA ? "the CUDA toolkit found at build time has no libcupti / cupti.h"
                                : "no CUDA toolkit was found at build time");
}

mp_status mp_cupti_push(mp_cupti *c, int64_t request_id, int64_t step, int64_t node_index,
                        mp_error *err)
{
    return mp_fail(err, MP_ERR_INTERNAL, "CUPTI unavailable in this build");
}

mp_status mp_cupti_pop(mp_cupti *c, mp_error *err)
{
    return mp_fail(err, MP_ERR_INTERNAL, "CUPTI unavailable in this build");
}

mp_status mp_cupti_flush(mp_cupti *c, mp_cupti_sink_fn sink, void *sink_user, mp_error *err)
{
    return mp_fail(err, MP_ERR_INTERNAL, "CUPTI unavailable in this build");
}

mp_cupti_counts mp_cupti_get_counts(const mp_cupti *c)
{
    mp_cupti_counts n;
    memset(&n, 0, sizeof n);
    return n;
}

mp_status mp_cupti_stop(mp_cupti *c, mp_cupti_counts *final, mp_error *err)
{
    if (final)
        *final = mp_cupti_get_counts(c);
    return MP_OK;
}
