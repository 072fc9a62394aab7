/* tests/unit/test_cpus.c — how many CPUs a process may use (runtime/cpus.c): the cgroup CPU quota
 * read from file trees laid out as the kernel's cgroup v2 and v1 file systems are (cpu.max;
 * cpu.cfs_quota_us and cpu.cfs_period_us), a parent's quota holding below it, and the affinity
 * mask capping the default thread count, one thread a physical core read from a tree laid out as
 * sysfs's CPU topology; and the last-level cache over the CPUs, read from a tree
 * laid out as sysfs's caches (base/machine.c). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_setaffinity, CPU_COUNT */
#endif
#include <criterion/criterion.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/machine.h"
#include "runtime/cpus.h"

static char root[64];

static void setup(void)
{
    snprintf(root, sizeof root, "/tmp/mp_test_cpus_XXXXXX");
    cr_assert_not_null(mkdtemp(root));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    cr_assert_eq(system(cmd), 0);
}

/* root/rel (its folders made), holding text */
static void put(const char *rel, const char *text)
{
    char path[512], cmd[600];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", path);
    cr_assert_eq(system(cmd), 0);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

TestSuite(cpus, .init = setup, .fini = teardown);

Test(cpus, v2_quota_of_the_cgroup_and_the_least_of_its_ancestors)
{
    put("user.slice/job.scope/cpu.max", "max 100000\n");
    cr_assert_float_eq(mp_cgroup_cpu_quota("0::/user.slice/job.scope\n", root), 0.0, 1e-12, "no quota anywhere");
    put("user.slice/cpu.max", "250000 100000\n");
    cr_assert_float_eq(mp_cgroup_cpu_quota("0::/user.slice/job.scope\n", root), 2.5, 1e-12,
                       "a parent's quota holds below it");
    put("user.slice/job.scope/cpu.max", "50000 100000\n");
    cr_assert_float_eq(mp_cgroup_cpu_quota("0::/user.slice/job.scope\n", root), 0.5, 1e-12, "the least of the two");
    /* a container whose cgroup is the mount's root: /proc/self/cgroup names the host's path, which
     * does not exist under the container's mount; the root's cpu.max is the container's */
    put("cpu.max", "400000 100000\n");
    cr_assert_float_eq(mp_cgroup_cpu_quota("0::/docker/abc123\n", root), 4.0, 1e-12);
}

Test(cpus, v1_quota_under_a_cpu_mount)
{
    const char *self = "12:memory:/docker/x\n4:cpu,cpuacct:/docker/x\n1:name=systemd:/docker/x\n";
    put("cpu,cpuacct/docker/x/cpu.cfs_quota_us", "-1\n");
    put("cpu,cpuacct/docker/x/cpu.cfs_period_us", "100000\n");
    cr_assert_float_eq(mp_cgroup_cpu_quota(self, root), 0.0, 1e-12, "-1: no quota");
    put("cpu,cpuacct/docker/x/cpu.cfs_quota_us", "150000\n");
    cr_assert_float_eq(mp_cgroup_cpu_quota(self, root), 1.5, 1e-12);
    /* a mount named by the controller alone */
    put("cpu/y/cpu.cfs_quota_us", "300000\n");
    put("cpu/y/cpu.cfs_period_us", "100000\n");
    cr_assert_float_eq(mp_cgroup_cpu_quota("3:cpu:/y\n", root), 3.0, 1e-12);
    /* cpuset is not the cpu controller */
    cr_assert_float_eq(mp_cgroup_cpu_quota("5:cpuset:/y\n", root), 0.0, 1e-12);
}

Test(cpus, unreadable_or_foreign_text_is_no_quota)
{
    put("a/cpu.max", "lots 100000\n");
    cr_assert_float_eq(mp_cgroup_cpu_quota("0::/a\n", root), 0.0, 1e-12);
    put("a/cpu.max", "100000 0\n");
    cr_assert_float_eq(mp_cgroup_cpu_quota("0::/a\n", root), 0.0, 1e-12);
    put("a/cpu.max", "inf 100000\n");
    cr_assert_float_eq(mp_cgroup_cpu_quota("0::/a\n", root), 0.0, 1e-12);
    put("a/cpu.max", "nan 100000\n");
    cr_assert_float_eq(mp_cgroup_cpu_quota("0::/a\n", root), 0.0, 1e-12);
    put("a/cpu.max", "");
    cr_assert_float_eq(mp_cgroup_cpu_quota("0::/a\n", root), 0.0, 1e-12);
    static const char *const junk[] = {"", "\n", "0::", "0::relative\n", "garbage", "0:/a", ":::::"};
    for (size_t i = 0; i < sizeof junk / sizeof *junk; i++)
        cr_assert_float_eq(mp_cgroup_cpu_quota(junk[i], root), 0.0, 1e-12, "'%s'", junk[i]);
    cr_assert_float_eq(mp_cgroup_cpu_quota("0::/a\n", "/nonexistent-root"), 0.0, 1e-12);
}

Test(cpus, the_affinity_mask_caps_the_usable_count)
{
    cpu_set_t all;
    cr_assert_eq(sched_getaffinity(0, sizeof all, &all), 0);
    const int usable = mp_cpu_usable();
    cr_assert(usable >= 1 && usable <= CPU_COUNT(&all) && usable <= mp_cpu_count(), "usable %d of %d allowed",
              usable, CPU_COUNT(&all));
    int first = -1;
    for (int c = 0; c < CPU_SETSIZE && first < 0; c++)
        if (CPU_ISSET(c, &all))
            first = c;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    cr_assert_eq(sched_setaffinity(0, sizeof one, &one), 0);
    const int pinned = mp_cpu_usable();
    cr_assert_eq(sched_setaffinity(0, sizeof all, &all), 0);
    cr_assert_eq(pinned, 1, "one allowed CPU, %d usable", pinned);
    cr_assert_geq(mp_cpu_count(), 1);
}

/* cpuN/topology/NAME of a sysfs-like tree under root, holding list */
static void sibling_list(int cpu, const char *name, const char *list)
{
    char rel[128];
    snprintf(rel, sizeof rel, "cpu%d/topology/%s", cpu, name);
    put(rel, list);
}

static void assert_order(const int *got, const int *want, int n)
{
    for (int i = 0; i < n; i++)
        cr_assert_eq(got[i], want[i], "position %d: CPU %d, expected %d", i, got[i], want[i]);
}

/* The default thread count's cores (mp_cpu_cores_of): a CPU's core is the least CPU of its
 * core_cpus_list (thread_siblings_list on older kernels), the CPU itself where neither is readable;
 * the order puts one CPU of each core first, in CPU order, then the second threads, whether a
 * machine numbers siblings next to each other (0-1) or a core count apart (0,4) */
Test(cpus, the_cores_come_one_cpu_each_before_their_second_threads)
{
    for (int c = 0; c < 8; c++) { /* siblings next to each other */
        char list[16];
        snprintf(list, sizeof list, "%d-%d\n", c & ~1, c | 1);
        sibling_list(c, "core_cpus_list", list);
        snprintf(list, sizeof list, "%d,%d\n", c % 4, c % 4 + 4); /* ignored: core_cpus_list wins */
        sibling_list(c, "thread_siblings_list", list);
    }
    const int all[] = {0, 1, 2, 3, 4, 5, 6, 7};
    int order[8];
    cr_assert_eq(mp_cpu_cores_of(root, all, 8, order), 4);
    assert_order(order, (const int[]){0, 2, 4, 6, 1, 3, 5, 7}, 8);
    const int three[] = {0, 1, 2};
    cr_assert_eq(mp_cpu_cores_of(root, three, 3, order), 2);
    assert_order(order, (const int[]){0, 2, 1}, 3);
    const int odd[] = {1, 3, 5};
    cr_assert_eq(mp_cpu_cores_of(root, odd, 3, order), 3, "a core's second thread alone is its core");
    assert_order(order, odd, 3);
    /* an older kernel: thread_siblings_list only, siblings a core count apart */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -f '%s'/cpu*/topology/core_cpus_list", root);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(mp_cpu_cores_of(root, all, 8, order), 4);
    assert_order(order, all, 8);
    const int spread[] = {0, 4, 5, 6};
    cr_assert_eq(mp_cpu_cores_of(root, spread, 4, order), 3);
    assert_order(order, (const int[]){0, 5, 6, 4}, 4);
    /* no topology (a CPU sysfs does not list, a list without a number): each CPU its own core */
    sibling_list(2, "thread_siblings_list", "\n");
    const int bare[] = {9, 2, 7};
    cr_assert_eq(mp_cpu_cores_of(root, bare, 3, order), 3);
    assert_order(order, bare, 3);
    cr_assert_eq(mp_cpu_cores_of(root, all, 0, order), 0);
}

/* This process's default: one thread a core of its affinity mask, within the usable count; one
 * allowed CPU, one thread */
Test(cpus, the_default_threads_are_the_cores_of_the_affinity_mask)
{
    const int usable = mp_cpu_usable(), def = mp_cpu_threads_default();
    int order[1024], cores = 0;
    const int n = mp_cpu_allowed(order, 1024, &cores);
    cr_assert(n >= 1 && cores >= 1 && cores <= n, "%d CPUs, %d cores", n, cores);
    cr_assert_eq(def, cores < usable ? cores : usable, "default %d, %d cores, %d usable", def, cores, usable);
    cpu_set_t all, one;
    cr_assert_eq(sched_getaffinity(0, sizeof all, &all), 0);
    for (int i = 0; i < n; i++)
        cr_assert(CPU_ISSET(order[i], &all), "CPU %d is not in the mask", order[i]);
    CPU_ZERO(&one);
    CPU_SET(order[n - 1], &one);
    cr_assert_eq(sched_setaffinity(0, sizeof one, &one), 0);
    const int pinned = mp_cpu_threads_default();
    cr_assert_eq(sched_setaffinity(0, sizeof all, &all), 0);
    cr_assert_eq(pinned, 1);
}

/* cpuN/cache/indexI of a sysfs-like tree under root */
static void cache(int cpu, int index, const char *type, int level, const char *size, const char *id,
                  const char *shared)
{
    char rel[128], text[32];
    snprintf(rel, sizeof rel, "cpu%d/cache/index%d/type", cpu, index);
    put(rel, type);
    snprintf(rel, sizeof rel, "cpu%d/cache/index%d/level", cpu, index);
    snprintf(text, sizeof text, "%d\n", level);
    put(rel, text);
    snprintf(rel, sizeof rel, "cpu%d/cache/index%d/size", cpu, index);
    put(rel, size);
    if (id) {
        snprintf(rel, sizeof rel, "cpu%d/cache/index%d/id", cpu, index);
        put(rel, id);
    }
    if (shared) {
        snprintf(rel, sizeof rel, "cpu%d/cache/index%d/shared_cpu_list", cpu, index);
        put(rel, shared);
    }
}

/* The last-level cache a process reads through (base/machine.c): the deepest data cache's distinct
 * instances over its CPUs, summed: two L3s of 32 MiB (AMD's CCDs, two sockets) are 64 MiB for CPUs
 * on both and 32 for CPUs on one; an instance shared by CPUs counts once, by its id or else by its
 * CPU list; instruction caches and shallower levels add nothing; no caches listed: 0 */
Test(cpus, the_last_level_cache_sums_its_instances_over_the_cpus)
{
    for (int c = 0; c < 4; c++) {
        char id[8];
        snprintf(id, sizeof id, "%d\n", c);
        cache(c, 0, "Data\n", 1, "48K\n", id, NULL);
        cache(c, 1, "Instruction\n", 1, "32K\n", id, NULL);
        cache(c, 2, "Unified\n", 2, "2048K\n", id, NULL);
        cache(c, 3, "Unified\n", 3, "32768K\n", c < 2 ? "0\n" : "1\n", c < 2 ? "0-1\n" : "2-3\n");
    }
    const int all[] = {0, 1, 2, 3}, first[] = {0, 1}, one_each[] = {1, 2};
    cr_assert_eq(mp_cpu_llc_bytes_of(root, all, 4), (size_t)64 << 20);
    cr_assert_eq(mp_cpu_llc_bytes_of(root, first, 2), (size_t)32 << 20);
    cr_assert_eq(mp_cpu_llc_bytes_of(root, one_each, 2), (size_t)64 << 20);
    cr_assert_eq(mp_cpu_llc_bytes_of(root, all, 0), 0);
    const int none[] = {7};
    cr_assert_eq(mp_cpu_llc_bytes_of(root, none, 1), 0, "a CPU sysfs does not list");
    /* without ids the CPU lists tell the instances apart */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -f '%s'/cpu*/cache/index3/id", root);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(mp_cpu_llc_bytes_of(root, all, 4), (size_t)64 << 20);
    /* a CPU whose deepest cache is its L2 adds nothing beside the others' L3 */
    cache(4, 0, "Data\n", 1, "48K\n", "4\n", NULL);
    cache(4, 2, "Unified\n", 2, "2048K\n", "4\n", NULL);
    const int five[] = {0, 1, 2, 3, 4};
    cr_assert_eq(mp_cpu_llc_bytes_of(root, five, 5), (size_t)64 << 20);
    /* this host: what sysfs or the C library says, never less than one L2 */
    cr_assert_geq(mp_cpu_llc_bytes(), (size_t)64 << 10);
}

/* /proc/stat's aggregate line: the sum of user .. steal and the steal field; a file without it, or
 * with too few fields, gives nothing. */
Test(cpus, the_cpu_times_sum_the_aggregate_line_and_its_steal)
{
    put("stat", "cpu  100 2 30 4000 5 6 7 80 9 10\ncpu0 50 1 15 2000 2 3 3 40 0 0\nintr 1 2 3\n");
    char path[512];
    snprintf(path, sizeof path, "%s/stat", root);
    unsigned long long steal = 0, total = 0;
    cr_assert(mp_cpu_times(path, &steal, &total));
    cr_assert_eq(total, 100 + 2 + 30 + 4000 + 5 + 6 + 7 + 80ull, "guest time is inside user already");
    cr_assert_eq(steal, 80);
    put("stat", "cpu0 50 1 15 2000 2 3 3 40\nintr 1\n");
    cr_assert_not(mp_cpu_times(path, &steal, &total), "no aggregate line");
    put("stat", "cpu  100 2 30 4000\n");
    cr_assert_not(mp_cpu_times(path, &steal, &total), "a kernel without steal");
    snprintf(path, sizeof path, "%s/none", root);
    cr_assert_not(mp_cpu_times(path, &steal, &total));
    unsigned long long s0, t0;
    if (mp_cpu_times(NULL, &s0, &t0)) /* this system's, where it has one: steal within the total */
        cr_assert_leq(s0, t0);
}
