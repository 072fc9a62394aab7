/* gpu/gpu_host.c — where the GPU executor's cold experts live in host memory.
 *
 * The CPU computes the cold experts' routes, and prefill (and, when asked, decode) copies some of
 * them to the GPU. Both read g->h_slices: each expert's gate, up and down slice. By default those
 * point into a copy of the cold experts in anonymous memory, page-locked with cudaHostRegister,
 * so that expert copies run at the pinned rate (MP_GPU_HOST_EXPERTS, base/knobs.h: pinned, copy
 * or mapping, in g->host_mode).
 *
 * Why a copy and not the model's file mapping page-locked in place (what the executor did until
 * 2026-11-29): cudaHostRegister of a file-backed mapping pins page-cache pages for the long term,
 * and on the H200 machine's kernel (6.18, ext4) that call never returned for a tiny F32 model in
 * /tmp (the same file in tmpfs, and F16/BF16/Q8_0/Q4_K_M files in /tmp, were fine): the main
 * thread ran in the kernel holding the address space's lock (bench/host_register_probe.sh,
 * bench/NOTES-gpu-exec.md run 12). Pinning anonymous memory that the executor owns is the case
 * drivers and kernels are built for; the copy costs one pass over the cold experts at start.
 * The mapping's pages of each copied expert are dropped from the process as soon as it is copied
 * (MADV_DONTNEED on a read-only private file mapping only unmaps them), so the experts are not
 * resident twice, not even during the copy.
 */
#include "mp_config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/arena.h"
#include "gpu/gpu_impl.h"
#include "kernels/quant.h"
#include "runtime/decide.h"
#include "runtime/placement.h"

/* Bytes of the mapping that starts at a in transparent huge pages, from /proc/self/smaps (its
 * AnonHugePages line), or -1 when that cannot be read. Why it is worth saying: the CPU experts
 * stream gigabytes of this copy per token, and with 4 KiB pages the page tables of a 19 GiB copy
 * (38 MB) no longer fit the caches, so every new page costs a page walk to memory. */
static int64_t huge_bytes(const void *a)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[256];
    bool in = false;
    int64_t kb = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
            if (in)
                break; /* the next mapping: the arena's had no such line */
            in = lo == (unsigned long)(uintptr_t)a;
            continue;
        }
        long long v;
        if (in && sscanf(line, "AnonHugePages: %lld kB", &v) == 1) {
            kb = v;
            break;
        }
    }
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

/* Whether p lies in the loader's copy of experts stored one tensor each (m->expert_copy): anonymous
 * memory, whose pages dropped would read back as zeros, not the file's bytes. */
static bool in_expert_copy(const mp_model *m, const void *p)
{
    const char *c = m->expert_copy;
    return c && (const char *)p >= c && (const char *)p < c + m->expert_copy_bytes;
}

/* Unmap the whole pages inside [a, a + n) of the model's mapping (they were copied). */
static void drop_mapped(const void *a, size_t n)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t lo = ((uintptr_t)a + page - 1) & ~(page - 1);
    const uintptr_t hi = ((uintptr_t)a + n) & ~(page - 1);
    if (hi > lo)
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

typedef struct copy_job {
    mp_gpu *g;
    const int64_t (*list)[2]; /* (layer, expert) of each cold expert */
} copy_job;

static void copy_task(void *ctx, int64_t task, int thread)
{
    (void)thread;
    const copy_job *j = ctx;
    const mp_gpu *g = j->g;
    const mp_model *m = g->s->m;
    const int64_t il = j->list[task][0], e = j->list[task][1], E = m->hp.n_expert;
    const mp_layer *L = &m->layers[il];
    const mp_tensor *ts[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
    for (int t = 0; t < 3; t++) {
        const size_t n = ts[t]->row_bytes * (size_t)ts[t]->ne[1];
        memcpy((void *)g->h_slices[(il * 3 + t) * E + e], mp_expert_slice(ts[t], e), n);
        if (m->gguf && !in_expert_copy(m, mp_expert_slice(ts[t], e))) /* the copy serves from now on: the */
            drop_mapped(mp_expert_slice(ts[t], e), n);                 /* mapping's pages go as they are copied */
    }
}

mp_status mp_gpu_host_experts(mp_gpu *g, bool copy, mp_error *err)
{
    const mp_model *m = g->s->m;
    const int64_t E = m->hp.n_expert, NL = m->hp.n_layer;
    g->h_slices = calloc((size_t)(NL * 3 * E), sizeof *g->h_slices);
    if (!g->h_slices)
        return mp_fail(err, MP_ERR_NOMEM, "GPU executor: out of memory");
    for (int64_t il = 0; il < NL; il++) {
        const mp_layer *L = &m->layers[il];
        const mp_tensor *ts[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
        for (int t = 0; t < 3; t++)
            for (int64_t e = 0; e < E; e++)
                g->h_slices[(il * 3 + t) * E + e] = mp_expert_slice(ts[t], e);
    }
    g->host_why[0] = 0;
    if (!copy || g->n_hybrid_layers == 0)
        return MP_OK;
    if (g->host_mode == MP_GPU_HOST_MAPPING) {
        snprintf(g->host_why, sizeof g->host_why, "MP_GPU_HOST_EXPERTS=mapping");
        return MP_OK;
    }

    /* the cold experts, and the copy's size */
    int64_t n_cold = 0;
    size_t bytes = 0;
    for (int64_t il = 0; il < NL; il++) {
        const mp_layer *L = &m->layers[il];
        const size_t per = mp_gpu_expert_layout(L, NULL, NULL);
        const int64_t cold = E - g->pl.n_resident[il];
        n_cold += cold;
        bytes += per * (size_t)cold;
    }
    int64_t(*list)[2] = malloc((size_t)n_cold * sizeof *list);
    if (!list)
        return mp_fail(err, MP_ERR_NOMEM, "GPU executor: out of memory");
    size_t map_bytes;
    void *arena = mp_huge_arena(bytes, &map_bytes);
    if (arena == MAP_FAILED) {
        free(list);
        snprintf(g->host_why, sizeof g->host_why, "no host memory for a %.1f GiB copy",
                 (double)bytes / (1024.0 * 1024 * 1024));
        return MP_OK; /* the mapping serves, pageable: slower copies, the same results */
    }
    g->h_arena = arena;
    g->h_arena_bytes = map_bytes;

    /* lay the cold experts out layer by layer, then copy them on the pool */
    char *p = arena;
    int64_t k = 0;
    for (int64_t il = 0; il < NL; il++) {
        size_t off[3];
        const size_t slot = mp_gpu_expert_layout(&m->layers[il], NULL, off);
        for (int64_t e = 0; e < E; e++) {
            if (mp_placement_resident(&g->pl, il, e))
                continue;
            for (int t = 0; t < 3; t++)
                g->h_slices[(il * 3 + t) * E + e] = p + off[t];
            p += slot;
            list[k][0] = il;
            list[k][1] = e;
            k++;
        }
    }
    copy_job j = {g, (const int64_t(*)[2])list};
    mp_pool_run(g->s->pool, n_cold, copy_task, &j);
    free(list);

    g->h_arena_huge = huge_bytes(arena); /* every page is in place: the copy wrote them all */
    if (g->host_mode == MP_GPU_HOST_COPY) {
        snprintf(g->host_why, sizeof g->host_why, "MP_GPU_HOST_EXPERTS=copy");
        return MP_OK;
    }
    /* mapped: the far routes' kernels read it over the bus (mp_gpu_far_setup) */
    const cudaError_t ce = cudaHostRegister(arena, map_bytes, cudaHostRegisterPortable | cudaHostRegisterMapped);
    if (ce != cudaSuccess) {
        cudaGetLastError();
        snprintf(g->host_why, sizeof g->host_why, "page-locking failed: %s", cudaGetErrorString(ce));
        return MP_OK; /* pageable copies: slower, the same results */
    }
    g->host_registered = true;
    return MP_OK;
}

/* MP_GPU_PART_BY_UNIT: the bytes of one expert of layer il laid out in units up to column end */
static size_t units_bytes(const mp_model *m, int64_t il, int64_t end)
{
    return mp_gpu_align(mp_type_row_bytes(m->layers[il].down_exps.type, end) * (size_t)m->hp.n_embd);
}

/* MP_GPU_PART_BY_UNIT: expert e of layer il's down, unit by unit (the rows of each unit's columns
 * one after another), from its slice in the host copy */
static void units_task(void *ctx, int64_t task, int thread)
{
    (void)thread;
    const copy_job *j = ctx;
    const mp_gpu *g = j->g;
    const mp_model *m = g->s->m;
    const int64_t il = j->list[task][0], e = j->list[task][1], E = m->hp.n_expert;
    const mp_tensor *d = &m->layers[il].down_exps;
    const char *src = g->h_slices[(il * 3 + 2) * E + e];
    char *u = (char *)g->h_unit_slices[il * E + e];
    const int64_t *ends = g->h_unit_end + il * (MP_GPU_MAX_TOP_K + 1);
    int64_t c0 = 0;
    for (int k = 0; k < g->h_n_units[il]; c0 = ends[k++]) {
        const size_t rb = mp_type_row_bytes(d->type, ends[k] - c0), off = mp_type_row_bytes(d->type, c0);
        for (int64_t r = 0; r < d->ne[1]; r++, u += rb)
            memcpy(u, src + (size_t)r * d->row_bytes + off, rb);
    }
}

static void units_free(mp_gpu *g)
{
    if (g->h_units)
        munmap(g->h_units, g->h_units_bytes);
    g->h_units = NULL;
    g->h_units_bytes = 0;
    free(g->h_unit_slices);
    free(g->h_unit_end);
    free(g->h_n_units);
    g->h_unit_slices = NULL;
    g->h_unit_end = NULL;
    g->h_n_units = NULL;
}

void mp_gpu_host_units(mp_gpu *g)
{
    const mp_model *m = g->s->m;
    const int64_t NL = m->hp.n_layer, E = m->hp.n_expert, F = m->hp.n_ff_exp;
    enum { W = MP_GPU_MAX_TOP_K + 1 }; /* > the most split points: split <= MP_DECIDE_MAX_K / top_k */
    if (!g->part_by_unit || !g->h_arena)
        return;
    g->units_why[0] = '\0';
    int64_t *ends = calloc((size_t)(NL * W), sizeof *ends);
    int *n = calloc((size_t)NL, sizeof *n);
    if (!ends || !n) {
        free(ends), free(n);
        return;
    }
    /* each far layer's units end at every point its split can cut an expert at (so that the units
     * hold for any far table of that split: calibrate's grid sets one a point), increasing: the
     * CPU keeps fewer rows the larger the GPU's part, so the parts from the largest down give them
     * in order */
    for (int64_t il = 0; il < NL; il++) {
        const int split = g->far[il].on ? g->far[il].split : 0;
        for (int p = (split < W ? split : W) - 1; p >= 1; p--) {
            const int64_t r0 = mp_decide_split_rows(F, mp_decide_split_granule(m->layers[il].down_exps.type), split, p);
            if (r0 > 0 && (n[il] == 0 || r0 > ends[il * W + n[il] - 1]))
                ends[il * W + n[il]++] = r0;
        }
    }
    if (g->h_unit_end && !memcmp(ends, g->h_unit_end, (size_t)(NL * W) * sizeof *ends)) {
        free(ends), free(n); /* the units in place are these */
        return;
    }
    units_free(g);
    g->h_unit_end = ends;
    g->h_n_units = n;
    size_t bytes = 0;
    int64_t n_cold = 0;
    for (int64_t il = 0; il < NL; il++)
        if (n[il]) {
            const int64_t cold = E - g->pl.n_resident[il];
            n_cold += cold;
            bytes += (size_t)cold * units_bytes(m, il, ends[il * W + n[il] - 1]);
        }
    if (!n_cold)
        return;
    /* a second copy only buys speed (split routes' CPU side 1.13-1.6x, bench/NOTES-gpu-exec.md): it
     * must not push the host into swap or the OOM killer, which an anonymous mapping beyond the
     * memory available meets only when its pages are written. Half of what is available leaves the
     * rest to the KV cache, the page cache and what else runs on the host. */
    const double gib = 1024.0 * 1024 * 1024;
    const long long avail = mp_host_mem_available();
    if (avail >= 0 && (long long)bytes > avail / 2) {
        snprintf(g->units_why, sizeof g->units_why, "down by unit needs %.1f GiB, %.1f GiB available",
                 (double)bytes / gib, (double)avail / gib);
        units_free(g);
        return;
    }
    size_t map_bytes;
    void *arena = mp_huge_arena(bytes, &map_bytes);
    int64_t(*list)[2] = malloc((size_t)n_cold * sizeof *list);
    g->h_unit_slices = calloc((size_t)(NL * E), sizeof *g->h_unit_slices);
    if (arena == MAP_FAILED || !list || !g->h_unit_slices) {
        snprintf(g->units_why, sizeof g->units_why, "no host memory for %.1f GiB of down by unit", (double)bytes / gib);
        if (arena != MAP_FAILED)
            munmap(arena, map_bytes);
        free(list);
        units_free(g);
        return;
    }
    g->h_units = arena;
    g->h_units_bytes = map_bytes;
    char *p = arena;
    int64_t k = 0;
    for (int64_t il = 0; il < NL; il++) {
        if (!n[il])
            continue;
        const size_t per = units_bytes(m, il, ends[il * W + n[il] - 1]);
        for (int64_t e = 0; e < E; e++) {
            if (mp_placement_resident(&g->pl, il, e))
                continue;
            g->h_unit_slices[il * E + e] = p;
            p += per;
            list[k][0] = il;
            list[k][1] = e;
            k++;
        }
    }
    copy_job j = {g, (const int64_t(*)[2])list};
    mp_pool_run(g->s->pool, n_cold, units_task, &j);
    free(list);
}

void mp_gpu_host_experts_free(mp_gpu *g)
{
    units_free(g);
    if (g->host_registered && cudaHostUnregister(g->h_arena) != cudaSuccess)
        cudaGetLastError();
    g->host_registered = false;
    if (g->h_arena)
        munmap(g->h_arena, g->h_arena_bytes);
    g->h_arena = NULL;
    g->h_arena_bytes = 0;
    free(g->h_slices);
    g->h_slices = NULL;
}

void mp_gpu_exec_host_report(const mp_gpu *g, char *buf, size_t cap)
{
    char size[32], huge[48] = "";
    mp_format_bytes(g->h_arena_bytes, size, sizeof size);
    if (g->h_arena && g->h_arena_huge >= 0)
        snprintf(huge, sizeof huge, ", %.0f %% in huge pages",
                 100.0 * (double)g->h_arena_huge / (double)g->h_arena_bytes);
    char units[176] = "";
    if (g->h_units) { /* MP_GPU_PART_BY_UNIT */
        char ub[32];
        mp_format_bytes(g->h_units_bytes, ub, sizeof ub);
        snprintf(units, sizeof units, "; down by unit for split routes: %s more", ub);
    } else if (g->units_why[0])
        snprintf(units, sizeof units, "; split routes read down in row segments: %s", g->units_why);
    if (g->n_hybrid_layers == 0)
        snprintf(buf, cap, "no host experts");
    else if (g->h_arena && g->host_registered)
        snprintf(buf, cap, "host experts in a page-locked copy (%s%s%s)", size, huge, units);
    else if (g->h_arena)
        snprintf(buf, cap, "host experts in a pageable copy (%s%s; %s)", size, huge, g->host_why);
    else
        snprintf(buf, cap, "host experts in the model's mapping, pageable%s%s%s", g->host_why[0] ? " (" : "",
                 g->host_why, g->host_why[0] ? ")" : "");
}

/* The link's time per byte for expert copies as they will run: the first cold expert's three
 * slices from host memory (as the executor holds them) into the staging buffer; best of 3. */
void mp_gpu_measure_copy(mp_gpu *g)
{
    const mp_model *m = g->s->m;
    const int64_t E = m->hp.n_expert;
    for (int64_t il = 0; il < m->hp.n_layer; il++) {
        if (g->pl.n_resident[il] == E)
            continue;
        int64_t e = 0;
        while (mp_placement_resident(&g->pl, il, e))
            e++;
        size_t nb[3], off[3];
        mp_gpu_expert_layout(&m->layers[il], nb, off);
        int64_t best = INT64_MAX;
        size_t bytes = 0;
        for (int rep = 0; rep < 3; rep++) {
            const int64_t t0 = mp_gpu_now_ns();
            bytes = 0;
            for (int t = 0; t < 3; t++) {
                if (cudaMemcpyAsync(g->d_stage + off[t], mp_gpu_host_slice(g, il, t, e), nb[t], cudaMemcpyHostToDevice,
                                    g->copy_stream) != cudaSuccess) {
                    cudaGetLastError();
                    return;
                }
                bytes += nb[t];
            }
            if (cudaStreamSynchronize(g->copy_stream) != cudaSuccess) {
                cudaGetLastError();
                return;
            }
            const int64_t dt = mp_gpu_now_ns() - t0;
            best = dt < best ? dt : best;
        }
        g->pcie_ns_per_byte = (double)best / (double)bytes;
        return;
    }
}
