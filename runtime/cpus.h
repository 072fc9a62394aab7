/* runtime/cpus.h — how many CPUs the machine has, and how many this process may use.
 *
 * The machine's count names the machine in a cost file (calibrate's `cpu_logical_cores`, the
 * warnings for a cost file of another machine); the usable count caps every command's default
 * thread count (one a physical core: mp_cpu_threads_default). They differ under taskset or numactl, in a container given some of the CPUs
 * (`docker --cpuset-cpus`, a batch scheduler's allocation) or a share of their time (`docker
 * --cpus`, a Kubernetes CPU limit): a pool of one thread per online CPU there has more threads
 * than CPUs, whose polls between regions take the time slices of the threads with work, and under
 * a quota get the whole cgroup throttled. */
#ifndef MP_RUNTIME_CPUS_H
#define MP_RUNTIME_CPUS_H

/* The machine's online CPUs, 1..1024. */
int mp_cpu_count(void);

/* The CPUs this process may run on at once, 1..1024: those of its affinity mask, at most its
 * cgroup's CPU quota rounded down (at least 1). */
int mp_cpu_usable(void);

/* The default thread count: one thread a physical core among the CPUs of the affinity mask, at
 * most mp_cpu_usable(). A core's second hardware thread (SMT) shares its load ports and caches: a
 * decode step reads its experts at the memory's rate, which the first thread of each core already
 * draws, and a pool thread more than the cores only waits on its sibling (the choice llama.cpp
 * makes too: its default is the physical cores). Hosts without SMT: mp_cpu_usable(). */
int mp_cpu_threads_default(void);

/* The CPUs of this process's affinity mask, at most cap of them, into order: the first CPU of each
 * physical core first, then the cores' other hardware threads, each group in CPU order (pinning
 * thread i to order[i] spreads any count of threads over the cores before it doubles one up, however
 * the machine numbers its siblings); their count (0 when unknown), the cores among them into *cores. */
int mp_cpu_allowed(int *order, int cap, int *cores);

/* mp_cpu_allowed's order for the n CPUs in cpus, read under sysfs (the root of the CPU topology
 * files, /sys/devices/system/cpu): a CPU's core is the least CPU of its cpuN/topology/core_cpus_list
 * (thread_siblings_list before Linux 5.7), the CPU itself where neither can be read. Returns the
 * number of cores. */
int mp_cpu_cores_of(const char *sysfs, const int *cpus, int n, int *order);

/* The CPU quota, in CPUs, of the cgroup that self_cgroup (a copy of /proc/self/cgroup) names,
 * read under root (where the cgroup file systems are mounted, /sys/fs/cgroup): the least of the
 * cgroup's and its ancestors' quota / period (cgroup v2's cpu.max, v1's cpu.cfs_quota_us and
 * cpu.cfs_period_us under a `cpu` or `cpu,cpuacct` mount); 0 when there is none or nothing can be
 * read. */
double mp_cgroup_cpu_quota(const char *self_cgroup, const char *root);

#endif
