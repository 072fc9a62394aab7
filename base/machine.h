/* base/machine.h — facts of the machine that a run records beside its numbers (traces, cost files,
 * bench rows). */
#ifndef MP_BASE_MACHINE_H
#define MP_BASE_MACHINE_H

#include <stdbool.h>
#include <stddef.h>

/* The CPU's model name as /proc/cpuinfo's first "model name" line gives it ("Intel(R) Xeon(R)
 * Processor"), or "unknown". */
void mp_cpu_model_name(char *out, size_t cap);

/* The first line of a small text file (sysfs, procfs, cgroup files) into buf without its newline;
 * false when it cannot be read or the line is empty. */
bool mp_read_first_line(const char *path, char *buf, size_t cap);

/* The CPUs' time since boot from a /proc/stat (stat_path; NULL: the system's): *total the sum of
 * the aggregate "cpu" line's user .. steal fields, *steal its steal field (what the hypervisor gave
 * other guests while this one's CPUs wanted to run), in clock ticks; false when the file cannot be
 * read or has no such line. Two readings' differences give the share stolen between them. */
bool mp_cpu_times(const char *stat_path, unsigned long long *steal, unsigned long long *total);

/* The last-level cache this process's CPUs read through, in bytes: the distinct instances of the
 * deepest data cache of the CPUs it may run on, summed (a host of several L3s, AMD's per CCD or a
 * second socket's, has them all; sysfs, mp_cpu_llc_bytes_of), or the C library's L3 (else L2) size
 * where that is larger (a VM whose sysfs lists no L3); 0 when neither says. What a buffer must
 * exceed for its reads to come from memory. Read at the first call, the same after it. */
size_t mp_cpu_llc_bytes(void);
/* The same over cpu_dir (/sys/devices/system/cpu's layout: cpuN/cache/indexI/{type,level,size,id or
 * shared_cpu_list}) for the n_cpus CPUs listed: an instance counts once (by its id, else its CPU
 * list); 0 when none of them lists a data cache. */
size_t mp_cpu_llc_bytes_of(const char *cpu_dir, const int *cpus, int n_cpus);

#endif
