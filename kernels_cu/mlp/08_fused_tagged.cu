// MLP step 8: "fused": step 5's persistent trainer with the grid barriers merged into the data.
//
// Idea:   step 5 spends most of Net 8's iteration in its 28 grid barriers: ~1.5 us a phase even
//         on a net with no work (docs/RESULTS.md). A phase there is an arrival (a release, so the
//         block's writes reach L2 first), a poll until the last block has arrived, and only then
//         a fetch of the data. Here every value another block needs is stored together with the
//         number of the iteration that made it, in one 8-byte store (value bits low, tag high),
//         as NCCL's LL protocol does, and the reader polls the data itself until each tag is the
//         one it awaits. A phase is one store and one poll that returns the data: no barrier, no
//         fence, no atomic.
//         The delta sums W^T d, which step 5 adds up with atomics in L2 (so it needs a barrier
//         to know they are complete), become per-block partial sums: block b stores its rows'
//         share of every column in its own slot, and the owner of row c adds the slots of the
//         blocks that own rows of the layer above, in a fixed order (so, unlike step 5's
//         atomics, a run is reproducible).
// Source: NCCL's LL protocol (8-byte stores of data and flag); step 5 for everything else.
// Params: THREADS (threads per block), IN_FLIGHT (tagged loads a thread issues before it waits),
//         BACKOFF (ns a poller sleeps after a miss; 0: none), QUIET (1: no thread starts to poll
//         until the block's work of the phase before is done).
//         Launch: as step 5 (nnbench/suites/fused.py); any G the device holds at once.
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
// A feedforward-only launch (mode 1) has no backward to hold the first layers back, so it keeps
// one grid barrier per sample. A tag newer than the one awaited would mean this argument is
// broken: the reader then stops every block with *status = 2 instead of using the value.
//
// Quiet: a warp that polls issues an instruction every few cycles and takes issue slots from the
// warps on its scheduler, so threads with nothing left to compute in a phase would slow the few
// warps whose rows every other block waits for. With QUIET a __syncthreads() ends each phase's
// work before anyone polls for the next.
//
// Tags: iteration it of a launch carries tag0 + it; the host moves tag0 past every launch, so no
// tag repeats, and tag 0 (what the buffers start as) is never awaited. A value never stored is
// waited for until timeout_ns, then every block leaves (*status = 1): an error, not a hang.
// Layouts (u64 = tag << 32 | float bits): ox, the outputs of every layer, each layer's slice
// padded to 4 (o_glob); px, for weight layers l >= 1, G slots of pad4(n_in) partial sums
// (px_glob). Shared memory: the rows' weights and velocities, every layer's input (staged once a
// sample and kept for the update, so the backward fetches nothing but partial sums), the
// block's outputs and deltas of every layer, and room for the partial sums one backward phase
// gathers (G x rows).
#include "mlp/fused_common.cuh"

#ifndef IN_FLIGHT
#define IN_FLIGHT 4
#endif
#ifndef BACKOFF
#define BACKOFF 0
#endif
#ifndef QUIET
#define QUIET 1
#endif

typedef unsigned long long u64;

__device__ __forceinline__ u64 load_tagged(const u64* p) {
    u64 v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ ulonglong2 load_tagged2(const u64* p) {  // p 16-byte aligned
    ulonglong2 v;
    asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];" : "=l"(v.x), "=l"(v.y) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ u64 tagged(float value, unsigned tag) {
    return (u64)tag << 32 | __float_as_uint(value);
}

__device__ __forceinline__ void store_tagged(u64* p, float value, unsigned tag) {
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(tagged(value, tag)) : "memory");
}

// Four columns' partial sums; p is 32-byte aligned (slots and columns are multiples of 4).
__device__ __forceinline__ void store_tagged4(u64* p, float4 s, unsigned tag) {
    asm volatile("st.relaxed.gpu.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(tagged(s.x, tag)), "l"(tagged(s.y, tag))
                 : "memory");
    asm volatile("st.relaxed.gpu.global.v2.u64 [%0], {%1, %2};" ::"l"(p + 2), "l"(tagged(s.z, tag)),
                 "l"(tagged(s.w, tag))
                 : "memory");
}

struct Span {  // n tagged words at `at` (n = 2: 16-byte aligned, one load); n = 0: nothing to await
    const u64* at;
    int n;
};

__device__ __forceinline__ ulonglong2 load_span(Span s) {
    return s.n == 2 ? load_tagged2(s.at) : make_ulonglong2(load_tagged(s.at), 0);
}

// This thread's share of `count` spans of tagged values (threadIdx.x, + THREADS, ...): span i lies
// at where(i) and its values go to use(i, a, b) (b, and both for an empty span, 0) once every tag
// in it is `want`. IN_FLIGHT loads are issued before the first is waited for, so a thread waits
// about one L2 round trip for them all; spans of two values halve the requests, which matters in
// the forward, where every block polls every value of the layer. False when the wait gave up or a
// newer tag showed up (the caller leaves).
template <typename Where, typename Use>
__device__ __forceinline__ bool await_tagged(int count, unsigned want, int* status, long long timeout_ns,
                                             Where where, Use use) {
    Patience patience{status, timeout_ns};
    for (int base = threadIdx.x; base < count; base += IN_FLIGHT * THREADS) {
        Span at[IN_FLIGHT];
        ulonglong2 got[IN_FLIGHT];
#pragma unroll
        for (int k = 0; k < IN_FLIGHT; ++k) {
            const int i = base + k * THREADS;
            at[k] = i < count ? where(i) : Span{nullptr, 0};
            if (at[k].n) got[k] = load_span(at[k]);
        }
#pragma unroll
        for (int k = 0; k < IN_FLIGHT; ++k) {
            const int i = base + k * THREADS;
            if (i >= count) continue;
            if (at[k].n == 0) {
                use(i, 0.0f, 0.0f);
                continue;
            }
            for (;;) {
                const unsigned tx = (unsigned)(got[k].x >> 32), ty = at[k].n == 2 ? (unsigned)(got[k].y >> 32) : want;
                if (tx == want && ty == want) break;
                if ((int)(tx - want) > 0 || (int)(ty - want) > 0) {
                    atomicCAS(status, 0, 2);
                    return false;
                }
                if (!patience.still()) return false;
                if (BACKOFF) __nanosleep(BACKOFF);
                got[k] = load_span(at[k]);
            }
            use(i, __uint_as_float((unsigned)got[k].x), __uint_as_float((unsigned)got[k].y));
        }
    }
    return true;
}

// mode 0: train `iterations` samples from sample 0, adding each sample's E to err[epoch]; stop
//         early at an epoch whose mean E is at most `tolerance` (*done = iterations run).
// mode 1: feedforward `iterations` samples, writing the output layer to predictions.
// out and acc hold ox and px (u64) here; the signature is step 5's.
extern "C" __global__ void __launch_bounds__(THREADS, 1)
fused_train(const int* __restrict__ widths, int n_widths, const float* __restrict__ x, const float* __restrict__ t,
            int n_samples, int iterations, int mode, float* __restrict__ w, float* __restrict__ v, float* out,
            float* acc, float* __restrict__ err, float tolerance, float* __restrict__ predictions, unsigned* sync,
            int* status, int* done, float rate, float momentum, long long timeout_ns, unsigned tag0, long long* phase_out) {
    u64* ox = reinterpret_cast<u64*>(out);
    u64* px = reinterpret_cast<u64*>(acc);
    extern __shared__ float4 smem4[];
    __shared__ Plan plan[MAX_LAYERS];
    __shared__ int widest;
    const int L = n_widths - 1, G = gridDim.x, b = blockIdx.x;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    float* W = reinterpret_cast<float*>(smem4);
    start_block(plan, widths, L, &widest, w, v, W);
    float* V = W + plan[L].w_loc;
    float* acts = V + plan[L].w_loc;     // every layer's input, then the bias input 1 and zeros
    float* own = acts + plan[L].act_loc;  // this block's outputs of every layer
    float* dl = own + plan[L].own_loc;    // and their deltas
    float* parts = dl + plan[L].own_loc;  // the partial sums a backward phase gathers, (row, block)
    for (int l = 0; l < L; ++l) {        // the bias inputs and the padding never change
        const Plan p = plan[l];
        for (int j = p.n_in + threadIdx.x; j < p.stride; j += THREADS) acts[p.act_loc + j] = j == p.n_in ? 1.0f : 0.0f;
    }
    GridBarrier bar{sync, status, timeout_ns, 0u};
    PhaseTimer timer;
    timer.begin();
    // The next sample's input and targets are fetched an iteration ahead, so no load from global
    // memory sits on the critical path: thread j holds input j, lane 0 of warp i the target of
    // output row i (where they fit; else they are loaded when needed).
    const Plan& first = plan[0];
    const Plan& last = plan[L - 1];
    const bool x_ahead = first.n_in <= THREADS, t_ahead = last.rows <= WARPS;
    float x_next = x_ahead && threadIdx.x < first.n_in ? __ldg(x + threadIdx.x) : 0.0f;
    float t_next = t_ahead && lane == 0 && warp < last.rows ? __ldg(t + last.first + warp) : 0.0f;
    int it = 0;
    for (; it < iterations; ++it) {
        const int s = it % n_samples;
        timer.iteration();
        const unsigned tag = tag0 + it;
        if (mode == 0 && s == 0 && it > 0) {
            const int go_on = epoch_ends(bar, err, it, n_samples, tolerance);
            if (go_on < 0) return;
            if (go_on == 0) break;
        }
        // ---- forward
        __syncthreads();  // the last update of the previous sample may still read layer 1's input
        for (int l = 0; l < L; ++l) {
            const Plan p = plan[l];
            float* in = acts + p.act_loc;
            bool ok = true;
            if (l == 0 && x_ahead) {
                if (threadIdx.x < p.n_in) in[threadIdx.x] = x_next;
            } else if (l == 0) {
                for (int j = threadIdx.x; j < p.n_in; j += THREADS) in[j] = __ldg(x + s * p.n_in + j);
            } else {
                if (QUIET) __syncthreads();  // see "Quiet" above
                timer.waits();
                ok = await_tagged(
                    (p.n_in + 1) / 2, tag, status, timeout_ns,
                    [&](int i) { return Span{ox + p.in_glob + 2 * i, 2 * i + 1 < p.n_in ? 2 : 1}; },
                    [&](int i, float a, float c) {
                        in[2 * i] = a;
                        if (2 * i + 1 < p.n_in) in[2 * i + 1] = c;
                    });
            }
            if (__syncthreads_or(!ok)) return;
            if (l > 0) timer.ready();
            for (int i = warp; i < p.rows; i += WARPS) {
                const float z = row_dot(W + p.w_loc + i * p.stride, in, p.stride);
                if (lane == 0) {
                    const int r = p.first + i;
                    const float o = sigmoid(z);
                    own[p.own_loc + i] = o;
                    if (l < L - 1) {
                        store_tagged(ox + p.o_glob + r, o, tag);
                    } else if (mode == 1) {
                        predictions[s * p.n_out + r] = o;
                    } else {
                        const float e = (t_ahead ? t_next : t[s * p.n_out + r]) - o;
                        dl[p.own_loc + i] = o * (1.0f - o) * e;
                        atomicAdd(err + it / n_samples, 0.5f * e * e);
                    }
                }
            }
        }
        const int s_next = (it + 1) % n_samples;
        if (x_ahead && threadIdx.x < first.n_in) x_next = __ldg(x + s_next * first.n_in + threadIdx.x);
        if (t_ahead && lane == 0 && warp < last.rows) t_next = __ldg(t + s_next * last.n_out + last.first + warp);
        if (mode == 1) {  // nothing else holds the first layers back from the next sample
            bar.arrive();
            if (!bar.wait()) return;
            continue;
        }
        // ---- backward: deltas from the partial sums, updates, and this layer's partial sums
        for (int l = L - 1; l >= 0; --l) {
            const Plan p = plan[l];
            bool ok = true;
            if (l < L - 1) {
                if (QUIET) __syncthreads();
                // every thread awaits its share of the (block, row) partial sums, so the block
                // waits one round trip for them all, and neighbouring threads read one block's
                // neighbouring rows, one sector; then a warp per row adds them in block order
                timer.waits();
                const Plan q = plan[l + 1];  // its owners sent their shares of W_(l+1)^T d_(l+1)
                const int slot = pad4(q.n_in);
                ok = await_tagged(
                    G * p.rows, tag, status, timeout_ns,
                    [&](int k) {
                        const int c = k / p.rows, i = k - c * p.rows;
                        return owns_rows(q, c, G) ? Span{px + q.px_glob + c * slot + p.first + i, 1} : Span{nullptr, 0};
                    },
                    [&](int k, float part, float) { parts[k] = part; });
                if (__syncthreads_or(!ok)) return;
                for (int i = warp; i < p.rows; i += WARPS) {
                    float sum = 0.0f;
                    for (int c = lane; c < G; c += 32) sum += parts[c * p.rows + i];
                    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
                    if (lane == 0) {
                        const float o = own[p.own_loc + i];
                        dl[p.own_loc + i] = o * (1.0f - o) * sum;
                    }
                }
            }
            if (__syncthreads_or(!ok)) return;
            if (l < L - 1) timer.ready();
            update_rows(p, W, V, acts + p.act_loc, dl + p.own_loc, rate, momentum, [&](int j, float4 back) {
                if (l > 0 && j < p.n_in) store_tagged4(px + p.px_glob + b * pad4(p.n_in) + j, back, tag);
            });
        }
    }
    finish_block(plan, L, w, v, W, it, done, timer, phase_out);
}
