/* gpu/module.h — what gpu/'s other files give module.c besides the executor (gpu_impl.h): CUPTI
 * capture (cupti_capture.c) as collector/cupti.h's functions, under their own names so that the program's
 * side (collector/cupti_api.c) and the module's never share one. Calibrate's microbenchmarks keep
 * their name (mp_calib_gpu, simulator/calibrate_impl.h): the program has no function of it. */
#ifndef MP_GPU_MODULE_H
#define MP_GPU_MODULE_H

#include "collector/cupti.h"

mp_status mp_cupti_cap_start(mp_cupti **out, mp_error *err);
mp_status mp_cupti_cap_push(mp_cupti *c, int64_t request_id, int64_t step, int64_t node_index, mp_error *err);
mp_status mp_cupti_cap_pop(mp_cupti *c, mp_error *err);
mp_status mp_cupti_cap_flush(mp_cupti *c, mp_cupti_sink_fn sink, void *sink_user, mp_error *err);
mp_cupti_counts mp_cupti_cap_get_counts(const mp_cupti *c);
mp_status mp_cupti_cap_stop(mp_cupti *c, mp_cupti_counts *final, mp_error *err);

#endif
