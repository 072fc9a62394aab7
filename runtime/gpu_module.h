/* runtime/gpu_module.h — the GPU side of moeplan, loaded at run time.
 *
 * Every piece of moeplan that calls CUDA — the GPU executor (gpu/), CUPTI activity capture
 * (collect --cupti), calibrate's GPU microbenchmarks and the CUDA kernels — is built into one
 * shared module, libmoeplan-gpu.so, that the program loads with dlopen the first time a command
 * asks for the GPU. The moeplan binary itself needs no CUDA library: analyze, simulate, import and
 * the CPU executor run on a machine that has none, and the GPU's absence there is one line
 * ("libcublas.so.13: cannot open shared object file").
 *
 * The module resolves its references to the rest of moeplan against the program that loads it (the
 * program is linked with every project library whole and exports its symbols); what it defines is
 * hidden but for one function per table. A table is a struct of function pointers declared by the
 * module that calls it (runtime/gpu.h's executor, collector/cupti.h, simulator/calibrate_impl.h),
 * whose first member is its own size. A module is used only by the build that made it: the loader
 * refuses one whose version, commit or build options differ from the program's (layouts would
 * differ), and a table whose size differs.
 *
 * Where it is looked for, relative to the running program (/proc/self/exe): DIR/MP_GPU_MODULE_REL
 * (an installed program: PREFIX/bin/moeplan → PREFIX/LIBDIR/moeplan/libmoeplan-gpu.so), then
 * DIR/../gpu/libmoeplan-gpu.so (a build tree: cli/, tests/ and bench/ sit beside gpu/).
 */
#ifndef MP_RUNTIME_GPU_MODULE_H
#define MP_RUNTIME_GPU_MODULE_H

#include <stddef.h>

#define MP_GPU_MODULE_FILE "libmoeplan-gpu.so"

/* What the module says of itself (its one exported record, MP_GPU_MODULE_INFO_SYMBOL: "mp_gpu_module"). */
typedef struct mp_gpu_module_info {
    const char *version; /* MP_VERSION */
    const char *commit;  /* base/build_commit.h at the module's build */
    const char *options; /* MP_BUILD_OPTIONS */
    /* the table called name (MP_GPU_TABLE_*), or NULL when the module has none of that name */
    const void *(*table)(const char *name);
} mp_gpu_module_info;
#define MP_GPU_MODULE_INFO_SYMBOL "mp_gpu_module"

#define MP_GPU_TABLE_EXECUTOR "executor" /* runtime/gpu.h */
#define MP_GPU_TABLE_CUPTI "cupti"       /* collector/cupti.h */
#define MP_GPU_TABLE_CALIBRATE "calibrate" /* simulator/calibrate_impl.h */

/* The table called name from the module, loading the module on the first call (thread-safe; a
 * failed load is not retried). Its first member, a size_t, must equal size. NULL with one line in
 * why when this build has no GPU module, when the module cannot be found or loaded (dlerror's
 * words: a missing CUDA library is named there), when it belongs to another build, or when the
 * table is missing or of another size. */
const void *mp_gpu_module_table(const char *name, size_t size, char *why, size_t why_cap);

#endif
