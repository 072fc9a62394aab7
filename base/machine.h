/* base/machine.h — facts of the machine that a run records beside its numbers (traces, cost files,
 * bench rows). */
#ifndef MP_BASE_MACHINE_H
#define MP_BASE_MACHINE_H

#include <stddef.h>

/* The CPU's model name as /proc/cpuinfo's first "model name" line gives it ("Intel(R) Xeon(R)
 * Processor"), or "unknown". */
void mp_cpu_model_name(char *out, size_t cap);

/* The largest CPU cache in bytes (the last level: L3 where there is one), as the OS reports it
 * (sysconf, else /sys/devices/system/cpu/cpu0/cache); 0 when neither says. */
size_t mp_cpu_llc_bytes(void);

#endif
