// Shared by the persistent per-sample trainers (07_fused.cu, 08_fused_tagged.cu): which block owns
// which rows, the rows' life in shared memory, the grid barrier, and the update of a block's rows.
//
// Ownership: each block owns a run of consecutive rows (neurons: n_in weights and a bias each) of
// every weight layer: block b owns rows [v n / G, (v + 1) n / G) of a layer of n rows, v =
// (b - rot_l) mod G. Runs, so that a block's rows are neighbours in every vector other blocks read
// (fused polls 4 of them as one sector, not 4). The rotation rot_l = 4 l moves which blocks own
// one row more than the others from layer to layer, so no block owns the most rows of every layer:
// Net 8's fullest block holds 217.7 KiB instead of 225.8 with rot_l = the rows of the layers
// before (nnbench/workloads/train/fused.py, rows_per_block). A block keeps its rows' weights and
// velocities in shared memory for the whole launch; shared-memory rows are padded to a multiple
// of 4 floats so the update reads and writes float4.
#pragma once
#include "common/patience.cuh"
#include "mlp/mlp_common.cuh"

#ifndef THREADS
#define THREADS 256
#endif
#ifndef BARRIER
#define BARRIER 0
#endif
#ifndef PREV_W
#define PREV_W 0
#endif
#ifndef OUT_LOCAL
#define OUT_LOCAL 0
#endif
#define MAX_LAYERS 32
#define WARPS (THREADS / 32)

struct Plan {  // per weight layer, for this block
    int n_in, n_out, rows, first, rot, stride, w_glob, o_glob, in_glob, acc_glob, in_acc, px_glob, t_glob, w_loc,
        act_loc, own_loc;
};

__device__ __forceinline__ int pad4(int n) { return (n + 3) & ~3; }

// OUT_LOCAL (09_fused_columns.cu): every block keeps the whole output layer (Net 8: 7 rows of 101
// weights) and computes it, so the output deltas, and from them the deltas of the layer below,
// are known in every block without an exchange. Nets of one weight layer have nothing to gain.
__device__ __forceinline__ bool out_local(int L) { return OUT_LOCAL && L >= 2; }

// Thread 0 fills plan[0..L-1] for this block; plan[L] holds the totals (w_loc: this block's
// weights, act_loc: every layer's staged input, own_loc: its rows of every layer, o_glob: the
// outputs of every layer, t_glob: every transposed layer). Global offsets: w_glob into the weights
// (the seed's layout), o_glob into the outputs, acc_glob into the delta sums (each layer's slice
// padded to 4, so 16-byte aligned), px_glob into per-block partial delta sums (layers l >= 1: G
// slots of pad4(n_in) each), t_glob into the transposed weights (layers l >= 1: n_in rows of
// pad4(n_out)).
__device__ void make_plan(Plan* plan, const int* widths, int L, int G, int b, int* widest) {
    int w_glob = 0, o_glob = 0, acc_glob = 0, px_glob = 0, t_glob = 0, w_loc = 0, act_loc = 0, own_loc = 0;
    *widest = 0;
    for (int l = 0; l < L; ++l) {
        Plan p;
        p.n_in = widths[l];
        p.n_out = widths[l + 1];
        p.rot = (4 * l) % G;
        const int v = ((b - p.rot) % G + G) % G;
        p.first = v * p.n_out / G;
        p.rows = (v + 1) * p.n_out / G - p.first;
        if (out_local(L) && l == L - 1) {  // every block holds the whole output layer
            p.first = 0;
            p.rows = p.n_out;
        }
        p.stride = pad4(p.n_in + 1);  // n_in weights and the bias, padded to 4
        p.w_glob = w_glob;
        p.o_glob = o_glob;
        p.in_glob = l == 0 ? -1 : o_glob - pad4(p.n_in);
        p.in_acc = l == 0 ? -1 : acc_glob - pad4(p.n_in);
        p.acc_glob = acc_glob;
        p.px_glob = l == 0 ? -1 : px_glob;
        p.t_glob = l == 0 ? -1 : t_glob;
        p.w_loc = w_loc;
        p.act_loc = act_loc;
        p.own_loc = own_loc;
        plan[l] = p;
        w_glob += p.n_out * (p.n_in + 1);
        o_glob += pad4(p.n_out);
        acc_glob += pad4(p.n_out);
        if (l > 0) px_glob += G * pad4(p.n_in);
        if (l > 0) t_glob += p.n_in * pad4(p.n_out);
        w_loc += p.rows * p.stride;
        act_loc += p.stride;
        own_loc += p.rows;
        *widest = max(*widest, p.stride);
    }
    plan[L].w_loc = w_loc;
    plan[L].act_loc = act_loc;
    plan[L].own_loc = own_loc;
    plan[L].o_glob = o_glob;
    plan[L].t_glob = t_glob;
}

// PREV_W: what sits beside a weight w (in v, V and the columns' second buffer) is not its
// velocity but its value before the last step, p; the velocity is w - p. A copy of the weights
// kept elsewhere (09's columns) can then keep the weights of two steps in two buffers and store
// only the new weight, half the stores. The host starts v as a copy of w (velocity 0) and reads
// it back as it is, so launches chain bit for bit. w - p is the step really applied, w having
// been rounded, where a kept velocity is the step before that rounding: the two recurrences differ
// in that rounding alone (by Sterbenz's lemma w - p is exact wherever p and w are within a
// factor 2).
__device__ __forceinline__ float velocity_of(float w, float beside) { return PREV_W ? __fsub_rn(w, beside) : beside; }

// The block's rows between global memory (the seed's layout) and shared memory (padded rows);
// weights W and velocities V. Padding columns are zero: 0 x anything finite stays 0.
template <bool TO_SHARED>
__device__ __forceinline__ void move_rows(const Plan* plan, int L, int G, float* w, float* v, float* W, float* V) {
    for (int l = 0; l < L; ++l) {
        const Plan p = plan[l];
        for (int i = threadIdx.x; i < p.rows * p.stride; i += THREADS) {
            const int r = p.first + i / p.stride, k = i % p.stride;
            const bool real = k <= p.n_in;
            const int g = p.w_glob + r * (p.n_in + 1) + k;
            if (TO_SHARED) {
                W[p.w_loc + i] = real ? w[g] : 0.0f;
                V[p.w_loc + i] = real ? v[g] : 0.0f;
            } else if (real && (blockIdx.x == 0 || !(out_local(L) && l == L - 1))) {  // one copy back of a shared layer
                w[g] = W[p.w_loc + i];
                v[g] = V[p.w_loc + i];
            }
        }
    }
}

// Whether block c owns any row of layer p (a layer narrower than the grid leaves some blocks out).
__device__ __forceinline__ bool owns_rows(const Plan& p, int c, int G) {
    const int v = ((c - p.rot) % G + G) % G;
    return (v + 1) * p.n_out / G > v * p.n_out / G;
}

__device__ __forceinline__ float4 zero4() { return make_float4(0.0f, 0.0f, 0.0f, 0.0f); }

// z = row . act for a padded row (the bias rides along: act[n_in] = 1), by one warp; every lane
// gets the sum. A lane issues all its loads of a 512-float piece before its first product and
// keeps four independent sums. The plain strided loop cost Net 8's 500-wide forward phases about
// 0.06 us each (docs/RESULTS.md, "ninth step"): the compiler unrolls it by 4 and peels the ragged
// trip (lanes 30 and 31 of a 504-float row take 3 trips, the others 4), so the warp ran both
// paths, each a load followed by a chain of adds.
__device__ __forceinline__ float row_dot(const float* row, const float* act, int stride) {
    const float4* wr = reinterpret_cast<const float4*>(row);
    const float4* a4 = reinterpret_cast<const float4*>(act);
    const int lane = threadIdx.x & 31, n4 = stride / 4;
    float z = 0.0f;
    for (int base = 0; base < n4; base += 128) {
        float4 wv[4], av[4];
#pragma unroll
        for (int g = 0; g < 4; ++g) {
            const int j = base + lane + 32 * g;
            wv[g] = j < n4 ? wr[j] : zero4();
            av[g] = j < n4 ? a4[j] : zero4();
        }
        float s[4];
#pragma unroll
        for (int g = 0; g < 4; ++g)
            s[g] = fmaf(wv[g].w, av[g].w, fmaf(wv[g].z, av[g].z, fmaf(wv[g].y, av[g].y, wv[g].x * av[g].x)));
        z += (s[0] + s[1]) + (s[2] + s[3]);
    }
    return warp_sum(z);
}

// One weight's momentum step, v = momentum v + (rate d) in, in one fixed rounding (no contraction
// left to the compiler), so that two copies of a weight given the same operands stay equal bit
// for bit (09_fused_columns.cu keeps each weight twice).
__device__ __forceinline__ float velocity(float v, float rate_d, float in, float momentum) {
    return __fmaf_rn(rate_d, in, __fmul_rn(momentum, v));
}

// Columns j..j+3 of row i of a layer's rows: v = momentum v + rate d in, w += v.
__device__ __forceinline__ void update_four(const Plan& p, float* W, float* V, int i, int j, float4 a, float rd,
                                            float momentum) {
    float4* wp = reinterpret_cast<float4*>(W + p.w_loc + i * p.stride + j);
    float4* vp = reinterpret_cast<float4*>(V + p.w_loc + i * p.stride + j);
    const float4 wo = *wp, so = *vp;
    const float4 vn = make_float4(velocity(velocity_of(wo.x, so.x), rd, a.x, momentum),
                                  velocity(velocity_of(wo.y, so.y), rd, a.y, momentum),
                                  velocity(velocity_of(wo.z, so.z), rd, a.z, momentum),
                                  velocity(velocity_of(wo.w, so.w), rd, a.w, momentum));
    *vp = PREV_W ? wo : vn;
    *wp = make_float4(__fadd_rn(wo.x, vn.x), __fadd_rn(wo.y, vn.y), __fadd_rn(wo.z, vn.z), __fadd_rn(wo.w, vn.w));
}

// The momentum update of the block's rows of one layer, v = momentum v + rate d in, w += v, and
// their share of W^T d (with the weights from before the update, as the math requires), columns
// 4 at a time: emit(j, sums of columns j..j+3). The sums are emitted before the columns are
// updated, so other blocks that wait for them need not wait for the update too. The bias column
// n_in is updated too; padding columns are zero and stay zero.
template <typename Emit>
__device__ __forceinline__ void update_rows(const Plan& p, float* W, float* V, const float* in, const float* d_own,
                                            float rate, float momentum, Emit emit) {
    for (int j = 4 * threadIdx.x; j <= p.n_in; j += 4 * THREADS) {
        if (p.rows == 0) break;
        float4 back = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int i = 0; i < p.rows; ++i) {
            const float4 wo = *reinterpret_cast<const float4*>(W + p.w_loc + i * p.stride + j);
            const float d = d_own[i];
            back.x += wo.x * d; back.y += wo.y * d; back.z += wo.z * d; back.w += wo.w * d;
        }
        emit(j, back);
        const float4 a = *reinterpret_cast<const float4*>(in + j);
        for (int i = 0; i < p.rows; ++i) update_four(p, W, V, i, j, a, __fmul_rn(rate, d_own[i]), momentum);
    }
}

// The update alone, when nobody needs W^T d from the rows: (row, 4 columns) items spread over a
// team of threads (me of team), not a column group per thread, so it takes one pass, not rows.
__device__ __forceinline__ void update_rows_flat(const Plan& p, float* W, float* V, const float* in,
                                                 const float* d_own, float rate, float momentum, int me, int team) {
    const int groups = (p.n_in + 4) / 4;  // columns 0..n_in, the bias included
    for (int k = me; k < p.rows * groups; k += team) {
        const int i = k / groups, j = 4 * (k - i * groups);
        update_four(p, W, V, i, j, *reinterpret_cast<const float4*>(in + j), __fmul_rn(rate, d_own[i]), momentum);
    }
}

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

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
// needs and does not depend on the barrier while it waits. A wait longer than timeout_ns (a grid
// that is not co-resident, or a fault in another block) sets *status and every block leaves: an
// error, not a hang.
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
            Patience patience{status, timeout_ns};
            while ((int)(load_acquire(watch) - want) < 0)
                if (!patience.still()) {
                    give_up = 1;
                    break;
                }
        }
        __syncthreads();
        return !give_up;
    }
};

// Where an iteration's time goes, phase by phase (built with PHASE_TIMES, read by
// `nnbench profile train -v fused --split phases`, nnbench/workloads/train/phases.py):
// thread 0 of block 0 adds the SM cycles from the start of each phase's wait until the data it
// waits for are there (wait) and from then until the next phase's wait starts (work: its own
// part of the critical path) to sums[2k] and sums[2k + 1], k the phase's number in the iteration.
// The kernel writes the sums, then the cycles and nanoseconds of the whole launch, to phase_out.
struct PhaseTimer {
#ifdef PHASE_TIMES
    long long* sums;  // 2 * 2 * MAX_LAYERS, in shared memory (begin's)
    long long mark, first_cycle, first_ns;
    int k, prev;
    bool on;

    __device__ void begin() {
        __shared__ long long block_sums[4 * MAX_LAYERS];
        sums = block_sums;
        on = blockIdx.x == 0 && threadIdx.x == 0;
        if (on)
            for (int i = 0; i < 4 * MAX_LAYERS; ++i) sums[i] = 0;
        k = 0;
        prev = -1;
        mark = first_cycle = clock64();
        first_ns = now_ns();
    }
    __device__ void iteration() { k = 0; }
    __device__ void waits() {
        if (!on) return;
        const long long t = clock64();
        if (prev >= 0) sums[2 * prev + 1] += t - mark;
        mark = t;
    }
    __device__ void ready() {
        if (!on) return;
        const long long t = clock64();
        sums[2 * k] += t - mark;
        mark = t;
        prev = k++;
    }
    __device__ void end(long long* phase_out) {
        if (!on) return;
        for (int i = 0; i < 4 * MAX_LAYERS; ++i) phase_out[i] = sums[i];
        phase_out[4 * MAX_LAYERS] = clock64() - first_cycle;
        phase_out[4 * MAX_LAYERS + 1] = now_ns() - first_ns;
    }
#else
    __device__ void begin() {}
    __device__ void iteration() {}
    __device__ void waits() {}
    __device__ void ready() {}
    __device__ void end(long long*) {}
#endif
};

// The start of every block of a persistent trainer: thread 0 plans the layers, then the block's
// rows go to shared memory (W, then V, each plan[L].w_loc floats).
__device__ __forceinline__ void start_block(Plan* plan, const int* widths, int L, int* widest, float* w, float* v,
                                            float* W) {
    if (threadIdx.x == 0) make_plan(plan, widths, L, gridDim.x, blockIdx.x, widest);
    __syncthreads();
    move_rows<true>(plan, L, gridDim.x, w, v, W, W + plan[L].w_loc);
}

// An epoch boundary in training: after a grid barrier every block reads the same summed error of
// the epoch just ended, so all stop at the same one. 1: go on; 0: converged, stop; -1: the
// barrier gave up, leave.
__device__ __forceinline__ int epoch_ends(GridBarrier& bar, const float* err, int it, int n_samples, float tolerance) {
    bar.arrive();
    if (!bar.wait()) return -1;
    return __fdiv_rn(__ldcg(err + it / n_samples - 1), (float)n_samples) <= tolerance ? 0 : 1;
}

// The end of every block: its rows go back for the host (and the next launch), block 0 says how
// many iterations ran.
__device__ __forceinline__ void finish_block(const Plan* plan, int L, float* w, float* v, float* W, int it, int* done,
                                             PhaseTimer& timer, long long* phase_out) {
    __syncthreads();  // the last layer-1 update may still be running in other threads
    move_rows<false>(plan, L, gridDim.x, w, v, W, W + plan[L].w_loc);
    if (blockIdx.x == 0 && threadIdx.x == 0) *done = it;
    timer.end(phase_out);
}
