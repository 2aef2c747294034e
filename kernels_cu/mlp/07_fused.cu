// MLP step 7: "fused-barrier": the whole per-sample training loop in one persistent kernel.
//
// Idea:   the seed's "Super-KCM" tried to run a training step in one launch and failed because
//         __syncthreads() only orders one block. Here the blocks meet at a grid barrier instead,
//         and a launch runs many iterations (forward, deltas, momentum update, every layer)
//         without returning to the host: the step costs barriers, not launches (~5 us each from
//         Python, 4 launches per layer in kcm-mass).
// Source: seed 003 ("Super-KCM"), done right.
// Params: THREADS (threads per block), BARRIER. Launch: a 1-D grid of G blocks, G at most what
//         the device holds at once (the host checks the occupancy and refuses otherwise), dynamic
//         shared memory as the host computes it (smem_bytes in nnbench/workloads/train/fused.py).
//
// Ownership (fused_common.cuh): each block owns rows of every layer and keeps their weights and
// velocities in shared memory for the whole launch. Then:
//   forward, layer l:  each block reads o_(l-1) (all of it, from L2), computes its rows' outputs;
//   backward, layer l: each block has its rows' deltas, updates its rows (W += v, locally) and
//                      adds its rows' share of W_l^T d_l into acc_(l-1) with atomics, using the
//                      weights from before the update, as the math requires.
// Barriers per iteration: 2(L-1) for L weight layers. Forward needs one after every layer but
// the last: the output layer's deltas are needed only by the rows' owners, who go straight on
// to its update. Backward needs one after every layer but the first: layer 1's update reads only
// its own rows and the input sample, and the next sample's layer-1 forward needs only those
// rows too. (Net 8: 28, against 2L + 1 = 31 for a phase per layer and direction plus the
// output deltas.) The grid barrier is fused_common.cuh's (BARRIER 0 a counter, 1 flags).
// Data other blocks wrote are read with __ldcg (from L2, never a stale L1 line).
//
// The delta sums go to L2 as one vector atomic per 4 columns (red.global.add.v4.f32, sm_90).
#include "mlp/fused_common.cuh"

// Stage a layer's input vector (n floats, another block's writes or the sample) in shared memory,
// then the bias input 1, then zeros to the padded row length (0 x garbage could be NaN).
__device__ __forceinline__ void stage(float* dst, const float* src, int n) {
    const int padded = (n + 4) & ~3;
    for (int j = threadIdx.x; j < padded; j += THREADS) dst[j] = j < n ? __ldcg(src + j) : (j == n ? 1.0f : 0.0f);
}

__device__ __forceinline__ void add_deltas(float* acc, int n, int j, float4 s) {
#if __CUDA_ARCH__ >= 900
    if (j + 3 < n) {  // acc + j is 16-byte aligned: every layer's slice is padded to 4 floats
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
            long long timeout_ns, unsigned, long long* phase_out) {
    extern __shared__ float4 smem4[];
    __shared__ Plan plan[MAX_LAYERS];
    __shared__ int widest;
    const int L = n_widths - 1;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    float* W = reinterpret_cast<float*>(smem4);
    start_block(plan, widths, L, &widest, w, v, W);
    float* V = W + plan[L].w_loc;
    float* act = V + plan[L].w_loc;    // the current layer's input and the bias input 1
    float* d_own = act + widest;       // the deltas of this block's rows of the current layer

    GridBarrier bar{sync, status, timeout_ns, 0u};
    PhaseTimer timer;
    timer.begin();
    int it = 0;
    for (; it < iterations; ++it) {
        const int s = it % n_samples;
        timer.iteration();
        if (mode == 0 && s == 0 && it > 0) {
            const int go_on = epoch_ends(bar, err, it, n_samples, tolerance);
            if (go_on < 0) return;
            if (go_on == 0) break;
        }
        // ---- forward
        __syncthreads();  // the last update of the previous sample may still read act and d_own
        for (int l = 0; l < L; ++l) {
            const Plan p = plan[l];
            stage(act, l == 0 ? x + s * p.n_in : out + p.in_glob, p.n_in);
            __syncthreads();
            for (int i = warp; i < p.rows; i += WARPS) {
                const float z = row_dot(W + p.w_loc + i * p.stride, act, p.stride);
                if (lane == 0) {
                    const int r = p.first + i;
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
                timer.waits();
                bar.arrive();
                if (!bar.wait()) return;
                timer.ready();
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
                    const int r = p.first + i;
                    const float o = __ldcg(out + p.o_glob + r);
                    d_own[i] = o * (1.0f - o) * __ldcg(acc + p.acc_glob + r);
                    acc[p.acc_glob + r] = 0.0f;  // ready for the next sample: nothing adds to it before
                }
            }
            __syncthreads();
            update_rows(p, W, V, act, d_own, rate, momentum, [&](int j, float4 back) {
                if (l > 0) add_deltas(acc + p.in_acc, p.n_in, j, back);
            });
            if (l > 0) {
                timer.waits();
                bar.arrive();
                const Plan q = plan[l - 1];  // its input does not depend on this barrier: fetch it now
                stage(act, l == 1 ? x + s * q.n_in : out + q.in_glob, q.n_in);
                if (!bar.wait()) return;
                timer.ready();
            }
        }
    }
    finish_block(plan, L, w, v, W, it, done, timer, phase_out);
}
