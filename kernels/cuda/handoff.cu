// kernels/cuda/handoff.cu — the hybrid decode step's handoffs between the GPU and the host,
// through page-locked host memory that the device reads and writes directly (mapped memory).
//
// A decode step whose hybrid layers hand off this way is one CUDA graph: no copy nodes, no graph
// boundary at each hybrid layer, no event for the host to wait on (gpu/gpu_forward.c).
//   publish: the layer's MoE input rows (and the router's ids and weights) into host memory,
//            then a flag the host spins on: the decode router's launch does it
//            (mp_cuda_router_gemv, moe.cu; mpc_host_signal sets the flag);
//   wait:    one block spins on the host's flag, then adds the host's partial to d_proj (here).
// Ordering: the publisher's threads fence at system scope before one of them sets the flag, so
// the host sees the rows whenever it sees the flag. The host writes its partial before its flag
// (x86 stores are ordered; the runtime stores the flag with release semantics); the waiting thread
// polls with volatile loads (relaxed, system scope), fences, and the block reads the partial with
// ld.global.cv (never from a cache line of an earlier step).
#include "kernels/cuda/common.cuh"

__global__ void wait_add_kernel(float *proj, const float *h_part, int64_t n, int accumulate,
                                const uint32_t *h_flag, uint64_t *h_stamp, uint64_t timeout_ns)
{
    // spinning on the host's flag reads no kernel's output, so it runs before the PDL wait: the
    // kernel is on the GPU and polling while the resident experts before it still run
    __shared__ uint64_t polled, seen;
    if (threadIdx.x == 0) {
        const uint64_t t0 = mpc_globaltimer_ns();
        uint64_t t = t0;
        while (*(volatile const uint32_t *)h_flag != 1) {
            t = mpc_globaltimer_ns();
            if (t - t0 > timeout_ns) // the host never answered: fail the step instead of hanging
                __trap();
        }
        __threadfence_system();
        polled = t0;
        seen = t;
    }
    __syncthreads();
    mpc_pdl_wait(); // PDL (common.cuh)
    mpc_pdl_trigger();
    if (threadIdx.x == 0 && h_stamp) {
        ((volatile uint64_t *)h_stamp)[0] = polled;
        ((volatile uint64_t *)h_stamp)[1] = seen;
    }
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float p = __ldcv(h_part + i);
        proj[i] = accumulate ? proj[i] + p : p;
    }
}

extern "C" int mp_cuda_host_wait_add(float *d_proj, const float *h_part, int64_t n, int accumulate,
                                     const uint32_t *h_flag, uint64_t *h_stamp, double timeout_s, void *stream)
{
    if (n < 0 || !d_proj || !h_part || !h_flag || !(timeout_s > 0))
        return MP_CUDA_EINVAL;
    const uint64_t timeout_ns = timeout_s >= 1e9 ? UINT64_MAX : (uint64_t)(timeout_s * 1e9);
    mpc_launch(wait_add_kernel, dim3(1), dim3(512), 0, (cudaStream_t)stream, d_proj, h_part, n, accumulate,
               h_flag, h_stamp, timeout_ns);
    return mpc_launch_status();
}

// A diagnostic (MP_GPU_STEP_STAMPS, gpu/gpu_forward.c): *h_stamp = the GPU's global timer when
// the kernels before this one on the stream have finished, then a system fence.
__global__ void stamp_kernel(uint64_t *h_stamp)
{
    mpc_pdl_wait(); // PDL (common.cuh)
    mpc_pdl_trigger();
    *(volatile uint64_t *)h_stamp = mpc_globaltimer_ns();
    __threadfence_system();
}

extern "C" int mp_cuda_stamp(uint64_t *h_stamp, void *stream)
{
    if (!h_stamp)
        return MP_CUDA_EINVAL;
    mpc_launch(stamp_kernel, dim3(1), dim3(1), 0, (cudaStream_t)stream, h_stamp);
    return mpc_launch_status();
}
