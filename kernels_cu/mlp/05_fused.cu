// MLP step 5: "fused": the whole per-sample training loop in one persistent kernel.
//
// Idea:   the seed's "Super-KCM" tried to run a training step in one launch and failed because
//         __syncthreads() only orders one block. Here the blocks meet at a grid barrier instead,
//         and a launch runs many iterations (forward, deltas, momentum update, every layer)
//         without returning to the host: the step costs barriers, not launches (~5 us each from
//         Python, 4 launches per layer in kcm-mass).
// Source: seed 003 ("Super-KCM"), done right.
// Params: THREADS (threads per block). Launch: a 1-D grid of G blocks, G at most what the device
//         holds at once (the host checks the occupancy and refuses otherwise), dynamic shared
//         memory as the host computes it (fused_smem_floats in nnbench/suites/mlp.py).
//
// Ownership: row r of weight layer l (neuron r, its n_in weights and its bias) belongs to block
// (r + rot_l) mod G, rot_l = the rows of the layers before, so small layers spread over
// different blocks. A block keeps its rows' weights and velocities in shared memory for the
// whole launch. Then:
//   forward, layer l:  each block reads o_(l-1) (all of it, from L2), computes its rows' outputs;
//   backward, layer l: each block has its rows' deltas, updates its rows (W += v, locally) and
//                      adds its rows' share of W_l^T d_l into acc_(l-1) with atomics, using the
//                      weights from before the update, as the math requires.
// Barriers per iteration: 2(L-1) for L weight layers. Forward needs one after every layer but
// the last: the output layer's deltas are needed only by the rows' owners, who go straight on
// to its update. Backward needs one after every layer but the first: layer 1's update reads only
// its own rows and the input sample, and the next sample's layer-1 forward needs only those
// rows too. (Net 8: 28, against 2L + 1 = 31 for a phase per layer and direction plus the
// output deltas.)
//
// The grid barrier (BARRIER selects one of two; both count barriers in numbers that only grow,
// so nothing is ever reset):
//   0  a counter: thread 0 of each block adds 1 with release semantics and polls it with acquire
//      loads until it reaches (barriers passed) x G, as CUTLASS's GenericBarrier does; the G
//      adds to one address are serialized at L2;
//   1  a flag per block: thread 0 stores the barrier's number to its block's flag with release
//      semantics; thread i polls block i's flag with acquire loads. No atomics, G pollers.
// __syncthreads() before the release puts every thread's writes (and atomics) of the phase before
// it; the acquire loads and the __syncthreads() after them put the next phase after the other
// blocks' releases. The wait is split from the arrival, so a block can fetch what the next phase
// needs and does not depend on the barrier while it waits. Data other blocks wrote are read with
// __ldcg (from L2, never a stale L1 line). A wait longer than timeout_ns (a grid that is not
// co-resident, or a fault in another block) sets *status and every block leaves: an error, not
// a hang.
//
// Shared-memory rows are padded to a multiple of 4 floats, so the update reads and writes float4
// and sends its 4 delta sums to L2 as one vector atomic (red.global.add.v4.f32, sm_90).
#include "mlp/mlp_common.cuh"

#ifndef THREADS
#define THREADS 256
#endif
#ifndef BARRIER
#define BARRIER 0
#endif
#define MAX_LAYERS 64
#define WARPS (THREADS / 32)

struct Plan {  // per weight layer, for this block
    int n_in, n_out, rows, first, stride, w_glob, o_glob, in_glob, acc_glob, in_acc, w_loc;
};

__device__ __forceinline__ long long now_ns() {
    long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

struct GridBarrier {
    unsigned* sync;  // BARRIER 0: the counter; 1: one flag per block
    int* status;
    long long timeout_ns;
    unsigned passed;  // barriers this block has arrived at

    __device__ __forceinline__ void arrive() {
        __syncthreads();
        ++passed;
        if (threadIdx.x == 0) {
#if BARRIER == 0
            asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(sync), "r"(1u) : "memory");
#else
            asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(sync + blockIdx.x), "r"(passed) : "memory");
#endif
        }
    }

    // false when the wait timed out or another block gave up: the caller leaves.
    __device__ __forceinline__ bool wait() {
        __shared__ int give_up;
        if (threadIdx.x == 0) give_up = 0;
#if BARRIER == 0
        const unsigned want = passed * gridDim.x;
        const unsigned* watch = sync;
        const bool watcher = threadIdx.x == 0;
#else
        const unsigned want = passed;
        const unsigned* watch = sync + threadIdx.x;
        const bool watcher = threadIdx.x < gridDim.x;  // the host keeps G <= THREADS
#endif
        __syncthreads();
        if (watcher) {
            const long long start = now_ns();
            for (int spin = 0; (int)(load_acquire(watch) - want) < 0; ++spin) {
                if ((spin & 255) == 255 && (*(volatile int*)status != 0 || now_ns() - start > timeout_ns)) {
                    atomicCAS(status, 0, 1);
                    give_up = 1;
                    break;
                }
            }
        }
        __syncthreads();
        return !give_up;
    }
};

// Stage a layer's input vector (n floats, another block's writes or the sample) in shared memory,
// then the bias input 1, then zeros to the padded row length (0 x garbage could be NaN).
__device__ __forceinline__ void stage(float* dst, const float* src, int n) {
    const int padded = (n + 4) & ~3;
    for (int j = threadIdx.x; j < padded; j += THREADS) dst[j] = j < n ? __ldcg(src + j) : (j == n ? 1.0f : 0.0f);
}

__device__ __forceinline__ void add_deltas(float* acc, int n, int j, float4 s) {
#if __CUDA_ARCH__ >= 900
    if (j + 3 < n) {  // acc + j is 16-byte aligned: the host pads every layer's slice to 4 floats
        asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(acc + j), "f"(s.x), "f"(s.y), "f"(s.z),
                     "f"(s.w)
                     : "memory");
        return;
    }
#endif
    const float v[4] = {s.x, s.y, s.z, s.w};
    for (int c = 0; c < 4 && j + c < n; ++c) atomicAdd(acc + j + c, v[c]);
}

// mode 0: train `iterations` samples from sample 0, adding each sample's E to err[epoch]; stop
//         early at an epoch whose mean E is at most `tolerance` (*done = iterations run).
// mode 1: feedforward `iterations` samples, writing the output layer to predictions.
extern "C" __global__ void __launch_bounds__(THREADS, 1)
fused_train(const int* __restrict__ widths, int n_widths, const float* __restrict__ x, const float* __restrict__ t,
            int n_samples, int iterations, int mode, float* __restrict__ w, float* __restrict__ v,
            float* __restrict__ out, float* __restrict__ acc, float* __restrict__ err, float tolerance,
            float* __restrict__ predictions, unsigned* sync, int* status, int* done, float rate, float momentum,
            long long timeout_ns) {
    extern __shared__ float4 smem4[];
    __shared__ Plan plan[MAX_LAYERS];
    __shared__ int widest;
    const int L = n_widths - 1, G = gridDim.x, b = blockIdx.x;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    if (threadIdx.x == 0) {
        int w_glob = 0, o_glob = 0, acc_glob = 0, rot = 0, w_loc = 0;
        widest = 0;
        for (int l = 0; l < L; ++l) {
            Plan p;
            p.n_in = widths[l];
            p.n_out = widths[l + 1];
            p.first = ((b - rot % G) % G + G) % G;
            p.rows = p.first < p.n_out ? (p.n_out - p.first + G - 1) / G : 0;
            p.stride = (p.n_in + 4) & ~3;  // n_in weights and the bias, padded to 4
            p.w_glob = w_glob;
            p.o_glob = o_glob;
            p.in_glob = l == 0 ? -1 : o_glob - p.n_in;
            p.in_acc = l == 0 ? -1 : acc_glob - ((p.n_in + 3) & ~3);
            p.acc_glob = acc_glob;
            p.w_loc = w_loc;
            plan[l] = p;
            w_glob += p.n_out * (p.n_in + 1);
            o_glob += p.n_out;
            acc_glob += (p.n_out + 3) & ~3;
            rot += p.n_out;
            w_loc += p.rows * p.stride;
            widest = max(widest, p.stride);
        }
        plan[L].w_loc = w_loc;  // the velocities follow the weights
    }
    __syncthreads();
    float* smem = reinterpret_cast<float*>(smem4);
    const int local = plan[L].w_loc;
    float* W = smem;
    float* V = smem + local;
    float* act = smem + 2 * local;     // the current layer's input and the bias input 1
    float* d_own = act + widest;       // the deltas of this block's rows of the current layer

    for (int l = 0; l < L; ++l) {
        const Plan p = plan[l];
        for (int i = threadIdx.x; i < p.rows * p.stride; i += THREADS) {
            const int r = p.first + (i / p.stride) * G, k = i % p.stride;
            const bool real = k <= p.n_in;
            W[p.w_loc + i] = real ? w[p.w_glob + r * (p.n_in + 1) + k] : 0.0f;
            V[p.w_loc + i] = real ? v[p.w_glob + r * (p.n_in + 1) + k] : 0.0f;
        }
    }
    GridBarrier bar{sync, status, timeout_ns, 0u};
    int it = 0;
    for (; it < iterations; ++it) {
        const int s = it % n_samples;
        if (mode == 0 && s == 0 && it > 0) {  // epoch boundary: every block reads the same sum
            bar.arrive();
            if (!bar.wait()) return;
            if (__fdiv_rn(__ldcg(err + it / n_samples - 1), (float)n_samples) <= tolerance) break;
        }
        // ---- forward
        __syncthreads();  // the last update of the previous sample may still read act and d_own
        for (int l = 0; l < L; ++l) {
            const Plan p = plan[l];
            stage(act, l == 0 ? x + s * p.n_in : out + p.in_glob, p.n_in);
            __syncthreads();
            for (int i = warp; i < p.rows; i += WARPS) {
                const float4* wr = reinterpret_cast<const float4*>(W + p.w_loc + i * p.stride);
                const float4* a4 = reinterpret_cast<const float4*>(act);
                float z = 0.0f;
                for (int j = lane; j < p.stride / 4; j += 32) {  // the bias rides along: act[n_in] = 1
                    const float4 wv = wr[j], av = a4[j];
                    z += wv.x * av.x + wv.y * av.y + wv.z * av.z + wv.w * av.w;
                }
                for (int o = 16; o > 0; o >>= 1) z += __shfl_xor_sync(0xffffffffu, z, o);
                if (lane == 0) {
                    const int r = p.first + i * G;
                    const float o = sigmoid(z);
                    out[p.o_glob + r] = o;
                    if (l == L - 1 && mode == 1) predictions[s * p.n_out + r] = o;
                    if (l == L - 1 && mode == 0) {
                        const float e = t[s * p.n_out + r] - o;
                        d_own[i] = o * (1.0f - o) * e;
                        atomicAdd(err + it / n_samples, 0.5f * e * e);
                    }
                }
            }
            if (l < L - 1) {
                bar.arrive();
                if (!bar.wait()) return;
            }
        }
        if (mode == 1) {  // the next sample's first layer must not overwrite what a block still reads
            bar.arrive();
            if (!bar.wait()) return;
            continue;
        }
        // ---- backward: deltas, updates, and the next layer's delta sums
        for (int l = L - 1; l >= 0; --l) {
            const Plan p = plan[l];
            if (l < L - 1) {  // act was staged while waiting; the delta sums need the barrier
                for (int i = threadIdx.x; i < p.rows; i += THREADS) {
                    const int r = p.first + i * G;
                    const float o = __ldcg(out + p.o_glob + r);
                    d_own[i] = o * (1.0f - o) * __ldcg(acc + p.acc_glob + r);
                    acc[p.acc_glob + r] = 0.0f;  // ready for the next sample: nothing adds to it before
                }
            }
            __syncthreads();
            // columns 4 at a time: the bias column n_in too, padding columns are zero and unused
            for (int j = 4 * threadIdx.x; j <= p.n_in; j += 4 * THREADS) {
                const float4 in = *reinterpret_cast<const float4*>(act + j);
                float4 back = make_float4(0.f, 0.f, 0.f, 0.f);
                for (int i = 0; i < p.rows; ++i) {
                    float4* wp = reinterpret_cast<float4*>(W + p.w_loc + i * p.stride + j);
                    float4* vp = reinterpret_cast<float4*>(V + p.w_loc + i * p.stride + j);
                    const float4 wo = *wp, vo = *vp;
                    const float d = d_own[i], rd = rate * d;
                    back.x += wo.x * d; back.y += wo.y * d; back.z += wo.z * d; back.w += wo.w * d;
                    const float4 vn = make_float4(momentum * vo.x + rd * in.x, momentum * vo.y + rd * in.y,
                                                  momentum * vo.z + rd * in.z, momentum * vo.w + rd * in.w);
                    *vp = vn;
                    *wp = make_float4(wo.x + vn.x, wo.y + vn.y, wo.z + vn.z, wo.w + vn.w);
                }
                if (l > 0 && p.rows > 0) add_deltas(acc + p.in_acc, p.n_in, j, back);
            }
            if (l > 0) {
                bar.arrive();
                const Plan q = plan[l - 1];  // its input does not depend on this barrier: fetch it now
                stage(act, l == 1 ? x + s * q.n_in : out + q.in_glob, q.n_in);
                if (!bar.wait()) return;
            }
        }
    }
    __syncthreads();  // the last layer-1 update may still be running in other threads
    for (int l = 0; l < L; ++l) {  // the weights go back for the host (and the next launch)
        const Plan p = plan[l];
        for (int i = threadIdx.x; i < p.rows * p.stride; i += THREADS) {
            const int r = p.first + (i / p.stride) * G, k = i % p.stride;
            if (k <= p.n_in) {
                w[p.w_glob + r * (p.n_in + 1) + k] = W[p.w_loc + i];
                v[p.w_glob + r * (p.n_in + 1) + k] = V[p.w_loc + i];
            }
        }
    }
    if (b == 0 && threadIdx.x == 0) *done = it;
}
