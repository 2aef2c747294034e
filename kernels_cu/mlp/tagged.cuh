// Shared by the persistent trainers whose blocks exchange tagged values instead of meeting at grid
// barriers (08_fused_tagged.cu, 09_fused_columns.cu): the tagged loads and stores, the wait for
// them, and the training loop itself. The two steps differ only in the backward exchange, which
// each passes in as an Exchange (see tagged_train).
//
// Tags: each value another block needs is stored with the number of the iteration that made it in
// one 8-byte word (value bits low, tag high), as NCCL's LL protocol does, and the reader polls the
// data itself until each tag is the one it awaits: a phase is one store and one poll that returns
// the data, no barrier, fence or atomic. Iteration it of a launch carries tag0 + it; the host moves
// tag0 past every launch, so no tag repeats, and tag 0 (what the buffers start as) is never
// awaited. A value never stored is waited for until timeout_ns, then every block leaves
// (*status = 1): an error, not a hang. A tag newer than the one awaited means the kernel's
// argument for reusing one buffer per layer is broken: every block stops with *status = 2 instead
// of using the value.
//
// Quiet: a warp that polls issues an instruction every few cycles and takes issue slots from the
// warps on its scheduler, so threads with nothing left to compute in a phase would slow the few
// warps whose rows every other block waits for. With QUIET a __syncthreads() ends each phase's
// work before anyone polls for the next.
#pragma once
#include "common/plant.cuh"
#include "mlp/fused_common.cuh"

#ifndef IN_FLIGHT
#define IN_FLIGHT 4
#endif
#ifndef QUIET
#define QUIET 1
#endif
// FAST_SIGMOID: the forward's sigmoid is sigmoid_approx (mlp_common.cuh), not the correctly
// rounded one, whose refinement sits on every forward phase's critical path (lane 0 of each row,
// between the dot and the tagged store). The error it adds, about 2 ulp, is far inside the weight
// check's; Net 8 0.4-0.9 us faster (docs/RESULTS.md, "ninth step"). Off (0), the forward rounds
// as the other versions do.
#ifndef FAST_SIGMOID
#define FAST_SIGMOID 0
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

struct Span {  // n tagged words at `at` (n = 2: 16-byte aligned, one load); n = 0: nothing to await
    const u64* at;
    int n;
};

__device__ __forceinline__ ulonglong2 load_span(Span s) {
    return s.n == 2 ? load_tagged2(s.at) : make_ulonglong2(load_tagged(s.at), 0);
}

// A thread's share, as member `me` of a team of `team` threads (by default the block), of `count`
// spans of tagged values (me, me + team, ...): span i lies
// at where(i) and its values go to use(i, a, b) (b, and both for an empty span, 0) once every tag
// in it is `want`. IN_FLIGHT loads are issued before the first is waited for, so a thread waits
// about one L2 round trip for them all; spans of two values halve the requests, which matters
// where every block polls every value of a layer. False when the wait gave up or a newer tag
// showed up (the caller leaves).
template <typename Where, typename Use>
__device__ __forceinline__ bool await_tagged(int count, unsigned want, int* status, long long timeout_ns,
                                             Where where, Use use, int me = threadIdx.x, int team = THREADS) {
    Patience patience{status, timeout_ns};
    for (int base = me; base < count; base += IN_FLIGHT * team) {
        Span at[IN_FLIGHT];
        ulonglong2 got[IN_FLIGHT];
#pragma unroll
        for (int k = 0; k < IN_FLIGHT; ++k) {
            const int i = base + k * team;
            at[k] = i < count ? where(i) : Span{nullptr, 0};
            if (at[k].n) got[k] = load_span(at[k]);
        }
#pragma unroll
        for (int k = 0; k < IN_FLIGHT; ++k) {
            const int i = base + k * team;
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
                got[k] = load_span(at[k]);
            }
            use(i, __uint_as_float((unsigned)got[k].x), __uint_as_float((unsigned)got[k].y));
        }
    }
    return true;
}

// A whole vector of n tagged values (src 16-byte aligned) into dst, two to a load.
__device__ __forceinline__ bool await_vector(float* dst, const u64* src, int n, unsigned want, int* status,
                                             long long timeout_ns, int me = threadIdx.x, int team = THREADS) {
    return await_tagged(
        (n + 1) / 2, want, status, timeout_ns, [&](int i) { return Span{src + 2 * i, 2 * i + 1 < n ? 2 : 1}; },
        [&](int i, float a, float c) {
            dst[2 * i] = a;
            if (2 * i + 1 < n) dst[2 * i + 1] = c;
        },
        me, team);
}

// What a tagged trainer's shared memory holds, after the rows' weights W and velocities V: every
// layer's input (staged once a sample and kept for the update, so the backward fetches nothing
// but what the exchange needs), the block's outputs and deltas of every layer, then the
// exchange's own room (from `room` on).
struct Staged {
    float *W, *V, *acts, *own, *dl, *room;
};

// The training loop of a tagged trainer; the kernel's arguments are fused_train's (07_fused.cu).
// The forward is the same for every exchange: each block polls the whole o_(l-1) (tagged, in ox)
// and computes its rows' outputs. The backward is the Exchange's:
//   ex.output_delta(p, r, d, tag)  the output layer's delta d of row r, just computed (mode 0);
//   ex.reports()                   whether this block adds the error and writes the predictions
//                                  of the output rows it computed;
//   ex.before_wait(l)              the forward is about to wait for o_(l-1);
//   ex.backward(l, tag, timer)     step l, for l = L-1 down to 0: this block's rows' deltas of
//                                  layer l (but for the output layer, whose are there), and the
//                                  update of its rows of layer l, done by the time step 0
//                                  returns (false: a wait gave up, leave). It calls
//                                  timer.waits() when it starts to wait, timer.ready() when the
//                                  values are there;
// mode 0: train `iterations` samples from sample 0, adding each sample's E to err[epoch]; stop
//         early at an epoch whose mean E is at most `tolerance` (*done = iterations run).
// mode 1: feedforward `iterations` samples, writing the output layer to predictions. It has no
//         backward to hold the first layers back from the next sample, so it keeps one grid
//         barrier per sample.
template <typename Exchange>
__device__ __forceinline__ void tagged_train(const Plan* plan, int L, const Staged& sm, const float* x,
                                             const float* t, int n_samples, int iterations, int mode, u64* ox,
                                             float* err, float tolerance, float* predictions, GridBarrier& bar,
                                             int* status, long long timeout_ns, float rate, float momentum,
                                             unsigned tag0, PhaseTimer& timer, Exchange& ex, int& it) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int l = 0; l < L; ++l) {  // the bias inputs and the padding never change
        const Plan p = plan[l];
        for (int j = p.n_in + threadIdx.x; j < p.stride; j += THREADS) sm.acts[p.act_loc + j] = j == p.n_in ? 1.0f : 0.0f;
    }
    // The next sample's input and targets are fetched an iteration ahead, so no load from global
    // memory sits on the critical path: thread j holds input j, lane 0 of warp i the target of
    // output row i (where they fit; else they are loaded when needed).
    const Plan& first = plan[0];
    const Plan& last = plan[L - 1];
    const bool x_ahead = first.n_in <= THREADS, t_ahead = last.rows <= WARPS;
    float x_next = x_ahead && threadIdx.x < first.n_in ? __ldg(x + threadIdx.x) : 0.0f;
    float t_next = t_ahead && lane == 0 && warp < last.rows ? __ldg(t + last.first + warp) : 0.0f;
    for (it = 0; it < iterations; ++it) {
        const int s = it % n_samples;
        timer.iteration();
        plant_slowdown();  // nothing unless a gate test plants it (common/plant.cuh)
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
            float* in = sm.acts + p.act_loc;
            bool ok = true;
            if (l == 0 && x_ahead) {
                if (threadIdx.x < p.n_in) in[threadIdx.x] = x_next;
            } else if (l == 0) {
                for (int j = threadIdx.x; j < p.n_in; j += THREADS) in[j] = __ldg(x + s * p.n_in + j);
            } else {
                if (QUIET) __syncthreads();  // see "Quiet" above
                ex.before_wait(l);
                timer.waits();
                ok = await_vector(in, ox + p.in_glob, p.n_in, tag, status, timeout_ns);
            }
            if (__syncthreads_or(!ok)) return;
            if (l > 0) timer.ready();
            for (int i = warp; i < p.rows; i += WARPS) {
                const float z = row_dot(sm.W + p.w_loc + i * p.stride, in, p.stride);
                if (lane == 0) {
                    const int r = p.first + i;
                    const float o = FAST_SIGMOID ? sigmoid_approx(z) : sigmoid(z);
                    sm.own[p.own_loc + i] = o;
                    if (l < L - 1) {
                        store_tagged(ox + p.o_glob + r, o, tag);
                    } else if (mode == 1) {
                        if (ex.reports()) predictions[s * p.n_out + r] = o;
                    } else {
                        const float e = (t_ahead ? t_next : t[s * p.n_out + r]) - o;
                        const float d = o * (1.0f - o) * e;
                        sm.dl[p.own_loc + i] = d;
                        ex.output_delta(p, r, d, tag);
                        if (ex.reports()) atomicAdd(err + it / n_samples, 0.5f * e * e);
                    }
                }
            }
        }
        const int s_next = (it + 1) % n_samples;
        if (x_ahead && threadIdx.x < first.n_in) x_next = __ldg(x + s_next * first.n_in + threadIdx.x);
        if (t_ahead && lane == 0 && warp < last.rows) t_next = __ldg(t + s_next * last.n_out + last.first + warp);
        if (mode == 1) {
            bar.arrive();
            if (!bar.wait()) return;
            continue;
        }
        // ---- backward: the exchange's
        for (int l = L - 1; l >= 0; --l)
            if (!ex.backward(l, tag, timer)) return;
    }
}

// The kernel around tagged_train: the signature is fused_train's (07_fused.cu), with out holding
// ox (u64) and acc whatever the exchange keeps in L2. Exchange(plan, L, sm, w, v, acc, status,
// timeout_ns, rate, momentum) builds the exchange once the block's rows are in shared memory.
#define TAGGED_KERNEL(Exchange)                                                                                  \
    extern "C" __global__ void __launch_bounds__(THREADS, 1) fused_train(                                            \
        const int* __restrict__ widths, int n_widths, const float* __restrict__ x, const float* __restrict__ t,        \
        int n_samples, int iterations, int mode, float* __restrict__ w, float* __restrict__ v, float* out,            \
        float* acc, float* __restrict__ err, float tolerance, float* __restrict__ predictions, unsigned* sync,        \
        int* status, int* done, float rate, float momentum, long long timeout_ns, unsigned tag0,                     \
        long long* phase_out) {                                                                                       \
        extern __shared__ float4 smem4[];                                                                             \
        __shared__ Plan plan[MAX_LAYERS];                                                                             \
        __shared__ int widest;                                                                                        \
        const int L = n_widths - 1;                                                                                   \
        float* W = reinterpret_cast<float*>(smem4);                                                                   \
        start_block(plan, widths, L, &widest, w, v, W);                                                               \
        Staged sm;                                                                                                    \
        sm.W = W;                                                                                                     \
        sm.V = W + plan[L].w_loc;                                                                                     \
        sm.acts = sm.V + plan[L].w_loc;                                                                               \
        sm.own = sm.acts + plan[L].act_loc;                                                                           \
        sm.dl = sm.own + plan[L].own_loc;                                                                             \
        sm.room = sm.dl + plan[L].own_loc;                                                                            \
        Exchange ex(plan, L, sm, w, v, acc, status, timeout_ns, rate, momentum);                                         \
        GridBarrier bar{sync, status, timeout_ns, 0u};                                                                \
        PhaseTimer timer;                                                                                             \
        timer.begin();                                                                                                \
        int it = 0;                                                                                                   \
        tagged_train(plan, L, sm, x, t, n_samples, iterations, mode, reinterpret_cast<u64*>(out), err, tolerance,     \
                     predictions, bar, status, timeout_ns, rate, momentum, tag0, timer, ex, it);                      \
        if (*(volatile int*)status != 0) return;                                                                      \
        finish_block(plan, L, w, v, W, it, done, timer, phase_out);                                                   \
    }
