// MLP step 8: "fused-partials": step 7's persistent trainer with the grid barriers merged into the data.
//
// Idea:   step 7 spends most of Net 8's iteration in its 28 grid barriers: ~1.5 us a phase even
//         on a net with no work (docs/RESULTS.md). A phase there is an arrival (a release, so the
//         block's writes reach L2 first), a poll until the last block has arrived, and only then
//         a fetch of the data. Here every value another block needs is stored together with the
//         number of the iteration that made it, in one 8-byte store (value bits low, tag high),
//         as NCCL's LL protocol does, and the reader polls the data itself until each tag is the
//         one it awaits. A phase is one store and one poll that returns the data: no barrier, no
//         fence, no atomic.
//         The delta sums W^T d, which step 7 adds up with atomics in L2 (so it needs a barrier
//         to know they are complete), become per-block partial sums: block b stores its rows'
//         share of every column in its own slot, and the owner of row c adds the slots of the
//         blocks that own rows of the layer above, in a fixed order (so, unlike step 7's
//         atomics, a run is reproducible).
// Source: NCCL's LL protocol (8-byte stores of data and flag); step 7 for everything else.
// Params: THREADS (threads per block), IN_FLIGHT (tagged loads a thread issues before it waits),
//         QUIET (1: no thread starts to poll until the block's work of the phase before is done).
//         (A poller's sleep or pause after a miss, BACKOFF and PAUSE, measured only slower and was
//         removed: lab/journal/fused.md.)
//         Launch: as step 7 (nnbench/workloads/train/fused.py); any G the device holds at once.
//
// Why one buffer per layer is enough in training: no value is overwritten before every reader
// has read it.
//   The outputs o_l of sample s+1 are stored by layer l's owners after their backward of sample
//   s, which waited for the partial sums of every owner of layer l+1; each of those stored its
//   partials after it had read o_l of sample s (for its forward, and it keeps the copy for its
//   update).
//   The partial sums P_l of sample s+1 are stored by layer l's owners in their backward of s+1,
//   after their forward of layer l of s+1, which waited for o_(l-1) of s+1 from every owner of
//   layer l-1; each of those stored it after it had read P_l of sample s.
// The tags, the wait, QUIET and the training loop are tagged.cuh's; this file is the exchange.
//
// Layouts (u64 = tag << 32 | float bits): ox, the outputs of every layer, each layer's slice
// padded to 4 (o_glob); px, for weight layers l >= 1, G slots of pad4(n_in) partial sums
// (px_glob). Shared memory: the rows' weights and velocities, every layer's input (staged once a
// sample and kept for the update, so the backward fetches nothing but partial sums), the
// block's outputs and deltas of every layer, and room for the partial sums one backward phase
// gathers (G x rows).
// This step's defaults (the registry's): the shared headers' fallbacks serve the later steps.
#ifndef THREADS
#define THREADS 512
#endif
#ifndef IN_FLIGHT
#define IN_FLIGHT 2
#endif
#include "mlp/tagged.cuh"

// Four columns' partial sums; p is 32-byte aligned (slots and columns are multiples of 4).
__device__ __forceinline__ void store_tagged4(u64* p, float4 s, unsigned tag) {
    asm volatile("st.relaxed.gpu.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(tagged(s.x, tag)), "l"(tagged(s.y, tag))
                 : "memory");
    asm volatile("st.relaxed.gpu.global.v2.u64 [%0], {%1, %2};" ::"l"(p + 2), "l"(tagged(s.z, tag)),
                 "l"(tagged(s.w, tag))
                 : "memory");
}

// acc holds px (u64): for weight layers l >= 1, G slots of pad4(n_in) partial sums.
struct PartialSums {
    const Plan* plan;
    const Staged& sm;
    u64* px;
    int* status;
    long long timeout_ns;
    int L;
    float rate, momentum;

    __device__ PartialSums(const Plan* plan, int L, const Staged& sm, float*, float*, float* acc, int* status,
                           long long timeout_ns, float rate, float momentum)
        : plan(plan), sm(sm), px(reinterpret_cast<u64*>(acc)), status(status), timeout_ns(timeout_ns), L(L),
          rate(rate), momentum(momentum) {}

    __device__ bool reports() const { return true; }
    __device__ void before_wait(int) {}

    // Step l: the deltas from the partial sums of layer l+1's owners, then the update of the rows,
    // which stores their own partial sums (of W_l^T d_l, for layer l-1) before the weights change.
    __device__ bool backward(int l, unsigned tag, PhaseTimer& timer) {
        const bool ok = l == L - 1 || deltas(l, tag, timer);
        if (__syncthreads_or(!ok)) return false;
        if (l < L - 1) timer.ready();
        const Plan p = plan[l];
        update_rows(p, sm.W, sm.V, sm.acts + p.act_loc, sm.dl + p.own_loc, rate, momentum, [&](int j, float4 back) {
            if (l > 0 && j < p.n_in) store_tagged4(px + p.px_glob + blockIdx.x * pad4(p.n_in) + j, back, tag);
        });
        return true;
    }

    __device__ void output_delta(const Plan&, int, float, unsigned) {}

    // Every thread awaits its share of the (block, row) partial sums, so the block waits one
    // round trip for them all, and neighbouring threads read one block's neighbouring rows, one
    // sector; then a warp per row adds them in block order.
    __device__ bool deltas(int l, unsigned tag, PhaseTimer& timer) {
        const Plan p = plan[l];
        const Plan q = plan[l + 1];  // its owners sent their shares of W_(l+1)^T d_(l+1)
        const int G = gridDim.x, slot = pad4(q.n_in), lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        float* parts = sm.room;  // (block, row): G x rows
        if (QUIET) __syncthreads();
        timer.waits();
        const bool ok = await_tagged(
            G * p.rows, tag, status, timeout_ns,
            [&](int k) {
                const int c = k / p.rows, i = k - c * p.rows;
                return owns_rows(q, c, G) ? Span{px + q.px_glob + c * slot + p.first + i, 1} : Span{nullptr, 0};
            },
            [&](int k, float part, float) { parts[k] = part; });
        if (__syncthreads_or(!ok)) return false;
        for (int i = warp; i < p.rows; i += WARPS) {
            float sum = 0.0f;
            for (int c = lane; c < G; c += 32) sum += parts[c * p.rows + i];
            sum = warp_sum(sum);
            if (lane == 0) {
                const float o = sm.own[p.own_loc + i];
                sm.dl[p.own_loc + i] = o * (1.0f - o) * sum;
            }
        }
        return true;
    }
};

TAGGED_KERNEL(PartialSums)
