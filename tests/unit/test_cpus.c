/* tests/unit/test_cpus.c — how many CPUs a process may use (runtime/cpus.c): the cgroup CPU quota
 * read from file trees laid out as the kernel's cgroup v2 and v1 file systems are (cpu.max;
 * cpu.cfs_quota_us and cpu.cfs_period_us), a parent's quota holding below it, and the affinity
 * mask capping the default thread count. */
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
