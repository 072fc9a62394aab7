/* bench/membw_pcie.cu — does the host have memory bandwidth that its cores leave unused?
 *
 * A hybrid decode step's CPU experts stream host memory with every core. The GPU could read some
 * of the cold experts at the same time, over PCIe: by the copy engine (cudaMemcpyAsync from pinned
 * memory) or by a kernel reading mapped pinned memory directly (zero-copy). That only pays if the
 * memory gives the two readers together more than the cores alone. This probe measures it:
 * T threads stream a large buffer (as mp_membw), and in the same interval the GPU reads a pinned
 * buffer of its own, alone and side by side.
 *
 * Usage: membw_pcie [--gib N=4] [--pinned-gib N=1] [--threads T=all] [--ms M=400] [--reps R=3]
 * Prints one line per mode and repetition: the CPU's GB/s, the GPU's GB/s, their sum. */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/clock.h"
#include "host_reader.h"

/* Each thread reads 16 bytes per step, the grid strides over the whole buffer once. */
__global__ void zero_copy_read(const uint4 *src, size_t n16, unsigned long long *sink)
{
    uint32_t acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n16; i += (size_t)gridDim.x * blockDim.x) {
        const uint4 v = src[i];
        acc += v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) /* never in practice; keeps the loads */
        atomicAdd(sink, 1ull);
}

enum { GPU_NONE, GPU_DMA, GPU_ZC };
static const char *gpu_name[] = {"none", "copy engine", "zero-copy kernel"};

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "membw_pcie: %s: %s\n", #x, cudaGetErrorString(e_));               \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

int main(int argc, char **argv)
{
    double gib = 4, pinned_gib = 1;
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN), ms = 400, reps = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--gib") && i + 1 < argc)
            gib = atof(argv[++i]);
        else if (!strcmp(argv[i], "--pinned-gib") && i + 1 < argc)
            pinned_gib = atof(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ms") && i + 1 < argc)
            ms = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: membw_pcie [--gib N] [--pinned-gib N] [--threads T] [--ms M] [--reps R]\n");
            return 2;
        }
    }
    if (gib < 0.0625 || pinned_gib < 0.0625 || threads < 0 || threads > 1024 || ms < 10 || reps < 1) {
        fprintf(stderr, "membw_pcie: --gib and --pinned-gib >= 0.0625, --threads 0..1024, --ms >= 10, --reps >= 1\n");
        return 2;
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        fprintf(stderr, "membw_pcie: no CUDA device\n");
        return 1;
    }
    const size_t bytes = (size_t)(gib * 1073741824.0) & ~(size_t)(MP_READER_CHUNK - 1);
    const size_t pbytes = (size_t)(pinned_gib * 1073741824.0) & ~(size_t)(MP_READER_CHUNK - 1);
    uint64_t *buf = (uint64_t *)aligned_alloc(1 << 21, bytes);
    if (!buf) {
        fprintf(stderr, "membw_pcie: cannot allocate %zu bytes\n", bytes);
        return 1;
    }
    madvise(buf, bytes, MADV_HUGEPAGE);
    memset(buf, 1, bytes);
    void *pinned = NULL, *dst = NULL;
    unsigned long long *sink = NULL;
    CK(cudaHostAlloc(&pinned, pbytes, cudaHostAllocMapped));
    memset(pinned, 3, pbytes);
    const size_t dma_chunk = 64u << 20;
    CK(cudaMalloc(&dst, dma_chunk));
    CK(cudaMalloc(&sink, sizeof *sink));
    void *pinned_dev = NULL;
    CK(cudaHostGetDevicePointer(&pinned_dev, pinned, 0));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    /* warm both GPU paths */
    CK(cudaMemcpyAsync(dst, pinned, dma_chunk, cudaMemcpyHostToDevice, st));
    zero_copy_read<<<sms * 4, 512, 0, st>>>((const uint4 *)pinned_dev, pbytes / 16, sink);
    CK(cudaStreamSynchronize(st));

    printf("membw_pcie: %d CPU threads over %.2f GiB, GPU over %.2f GiB pinned, %d ms per mode\n", threads,
           (double)bytes / 1073741824.0, (double)pbytes / 1073741824.0, ms);
    printf("| rep | CPU threads | GPU reader | CPU GB/s | GPU GB/s | sum GB/s |\n| ---: | ---: | --- | ---: | ---: | ---: |\n");
    pthread_t *tid = (pthread_t *)calloc((size_t)(threads > 0 ? threads : 1), sizeof *tid);
    mp_host_reader *rd = (mp_host_reader *)calloc((size_t)(threads > 0 ? threads : 1), sizeof *rd);
    const size_t share = threads > 0 ? bytes / 8 / (size_t)threads & ~(size_t)(MP_READER_CHUNK / 8 - 1) : 0;
    for (int rep = 0; rep < reps; rep++) {
        for (int use_cpu = 1; use_cpu >= 0; use_cpu--) {
            for (int gpu = GPU_NONE; gpu <= GPU_ZC; gpu++) {
                if (!use_cpu && gpu == GPU_NONE)
                    continue;
                const int T = use_cpu ? threads : 0;
                if (use_cpu && T == 0)
                    continue;
                volatile int run = 1;
                for (int t = 0; t < T; t++) {
                    rd[t] = (mp_host_reader){buf + share * (size_t)t, share, &run, -1, 0, 0};
                    if (pthread_create(&tid[t], NULL, mp_host_reader_loop, &rd[t])) {
                        fprintf(stderr, "membw_pcie: cannot start thread %d\n", t);
                        return 1;
                    }
                }
                usleep(20000); /* the readers up to speed */
                uint64_t c0 = 0;
                for (int t = 0; t < T; t++)
                    c0 += __atomic_load_n(&rd[t].bytes, __ATOMIC_RELAXED);
                const double t0 = mp_now_s();
                uint64_t gbytes = 0;
                if (gpu != GPU_NONE) {
                    /* issue GPU reads in slices until the window is spent, then drain */
                    size_t off = 0;
                    while (mp_now_s() - t0 < ms * 1e-3) {
                        for (int k = 0; k < 4; k++) {
                            if (gpu == GPU_DMA) {
                                CK(cudaMemcpyAsync(dst, (char *)pinned + off, dma_chunk, cudaMemcpyHostToDevice, st));
                                off = off + 2 * dma_chunk <= pbytes ? off + dma_chunk : 0;
                                gbytes += dma_chunk;
                            } else {
                                zero_copy_read<<<sms * 4, 512, 0, st>>>((const uint4 *)pinned_dev, pbytes / 16, sink);
                                gbytes += pbytes;
                            }
                        }
                        CK(cudaStreamSynchronize(st));
                    }
                    CK(cudaGetLastError());
                } else {
                    usleep((useconds_t)ms * 1000);
                }
                const double dt = mp_now_s() - t0;
                uint64_t c1 = 0;
                for (int t = 0; t < T; t++)
                    c1 += __atomic_load_n(&rd[t].bytes, __ATOMIC_RELAXED);
                __atomic_store_n(&run, 0, __ATOMIC_RELEASE);
                uint64_t sum = 0;
                for (int t = 0; t < T; t++) {
                    pthread_join(tid[t], NULL);
                    sum += rd[t].sum;
                }
                const double cpu = (double)(c1 - c0) / dt / 1e9, g = (double)gbytes / dt / 1e9;
                printf("| %d | %d | %s | %.1f | %.1f | %.1f |%s\n", rep, T, gpu_name[gpu], cpu, g, cpu + g,
                       sum == 42 ? " " : "");
                fflush(stdout);
            }
        }
    }
    free(tid);
    free(rd);
    free(buf);
    return 0;
}
