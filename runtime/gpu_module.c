/* runtime/gpu_module.c — finding, loading and checking libmoeplan-gpu.so (gpu_module.h). */
#include "runtime/gpu_module.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/build_info.h"
#include "mp_config.h"

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static const mp_gpu_module_info *module; /* NULL: not loaded; load_why says why */
static char load_why[768];

/* The directory of the running program, with its final slash ("/usr/local/bin/"); "" when
 * /proc/self/exe cannot be read. */
static void program_dir(char *out, size_t cap)
{
    char exe[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    out[0] = 0;
    if (n <= 0)
        return;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash && (size_t)(slash - exe + 1) < cap) {
        slash[1] = 0;
        snprintf(out, cap, "%s", exe);
    }
}

/* dlopen the first candidate that exists; a candidate that exists but does not load is the
 * answer (its dlerror says which library it lacks), not a reason to try the next. */
static void *open_module(char *why, size_t why_cap)
{
    char dir[PATH_MAX];
    program_dir(dir, sizeof dir);
    if (!dir[0]) {
        snprintf(why, why_cap, "the GPU module cannot be found: /proc/self/exe is not readable");
        return NULL;
    }
    const char *rel[] = {MP_GPU_MODULE_REL, "../gpu/" MP_GPU_MODULE_FILE};
    char path[2][PATH_MAX + 64];
    for (int i = 0; i < 2; i++) {
        snprintf(path[i], sizeof path[i], "%s%s", rel[i][0] == '/' ? "" : dir, rel[i]);
        if (access(path[i], F_OK) != 0)
            continue;
        void *h = dlopen(path[i], RTLD_NOW | RTLD_LOCAL);
        if (!h)
            snprintf(why, why_cap, "the GPU module did not load: %s", dlerror());
        return h;
    }
    snprintf(why, why_cap, "the GPU module %s is not installed beside moeplan (looked for %s and %s)",
             MP_GPU_MODULE_FILE, path[0], path[1]);
    return NULL;
}

static void load(void)
{
    if (!MP_HAVE_CUDA) {
        snprintf(load_why, sizeof load_why, "this moeplan was built without CUDA (no CUDA toolkit at build time)");
        return;
    }
    void *h = open_module(load_why, sizeof load_why);
    if (!h)
        return;
    const mp_gpu_module_info *info = dlsym(h, MP_GPU_MODULE_INFO_SYMBOL);
    if (!info || !info->table) {
        snprintf(load_why, sizeof load_why, "the GPU module has no %s: not a moeplan GPU module",
                 MP_GPU_MODULE_INFO_SYMBOL);
        dlclose(h);
        return;
    }
    if (strcmp(info->version, MP_VERSION) || strcmp(info->commit, mp_build_commit()) ||
        strcmp(info->options, mp_build_options())) {
        snprintf(load_why, sizeof load_why, "the GPU module belongs to another build (moeplan %s, commit %s, %s; "
                 "this program: %s, %s, %s): install both from one build", info->version, info->commit,
                 info->options, MP_VERSION, mp_build_commit(), mp_build_options());
        dlclose(h);
        return;
    }
    module = info; /* the handle stays open for the program's life */
}

const void *mp_gpu_module_table(const char *name, size_t size, char *why, size_t why_cap)
{
    pthread_once(&load_once, load);
    if (!module) {
        snprintf(why, why_cap, "%s", load_why);
        return NULL;
    }
    const void *t = module->table(name);
    if (!t) {
        snprintf(why, why_cap, "the GPU module has no '%s' table", name);
        return NULL;
    }
    if (*(const size_t *)t != size) {
        snprintf(why, why_cap, "the GPU module's '%s' table has %zu bytes, this program's %zu", name,
                 *(const size_t *)t, size);
        return NULL;
    }
    return t;
}
