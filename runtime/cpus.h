/* runtime/cpus.h — how many CPUs the machine has, and how many this process may use.
 *
 * The machine's count names the machine in a cost file (calibrate's `cpu_logical_cores`, the
 * warnings for a cost file of another machine); the usable count is every command's default
 * thread count. They differ under taskset or numactl, in a container given some of the CPUs
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

/* The CPU quota, in CPUs, of the cgroup that self_cgroup (a copy of /proc/self/cgroup) names,
 * read under root (where the cgroup file systems are mounted, /sys/fs/cgroup): the least of the
 * cgroup's and its ancestors' quota / period (cgroup v2's cpu.max, v1's cpu.cfs_quota_us and
 * cpu.cfs_period_us under a `cpu` or `cpu,cpuacct` mount); 0 when there is none or nothing can be
 * read. */
double mp_cgroup_cpu_quota(const char *self_cgroup, const char *root);

#endif
