// MLP step 9: "fused": step 8 with the backward exchange made a broadcast, like the forward's.
//
// Idea:   step 8's backward phases gather W_(l+1)^T d_(l+1) as partial sums: every owner of a row
//         of layer l+1 stores its share of all n_in columns, and the owner of row i of layer l
//         polls and adds one slot per block. On Net 8 those phases wait 1.3-1.7 us each, the
//         forward's 0.6-1.0 (docs/RESULTS.md): 132 senders' scattered slots, each finished only
//         after its sender has read its own 132. Here each block also keeps the *columns* of
//         W_(l+1) that meet its rows of layer l (rows of W_(l+1)^T), so once it has the whole
//         d_(l+1), broadcast as tagged values just as the forward broadcasts o, its deltas are a
//         local dot product, d_l[i] = o_i (1 - o_i) W_(l+1)[:, i] . d_(l+1). The backward becomes
//         the forward's mirror: every phase polls one contiguous vector.
// Cost:   every weight of layers >= 2 is kept and updated twice: the row in its owner's shared
//         memory (forward, and the row update with d_j and the staged input), the column in L2
//         (this file: Net 8's 3.05 M transposed weights and velocities take 24 MB, half of the
//         H100's L2, and do not fit in shared memory beside the rows). Both copies get the same
//         update from the same two floats, v = momentum v + (rate d_j) o_i, w += v, in one fixed
//         rounding (velocity(), fused_common.cuh), so they stay equal bit for bit; a GPU test
//         checks that after training. A warp holds its column in registers, fetched before the
//         phase's wait, so the L2 read is off the critical path; the update is a store.
// Source: step 8; the transposed copy is the usual trade of memory for a reduction.
// Params: as step 8; COL_REGS (a column of up to 32 x COL_REGS weights sits in a warp's
//         registers; longer ones, or more rows than warps, are read in chunks of that size);
//         POLLERS (warps that poll while the others update); L2_KEEP (below).
//
// Why one δ buffer per layer is enough: δ_l of sample s+1 is stored by the owners of layer l
// after their forward of layer l of s+1, which waited for o_(l-1) of s+1 from every owner of layer
// l-1; each of those stored it in its forward of s+1, after its backward of s had read δ_l of s.
// The outputs o_l as in step 8, with "the partial sums of layer l+1" read as "δ_(l+1)".
//
// Layouts: ox as step 8's. acc holds dx, the deltas of every layer, tagged like ox and at the
// same offsets (o_glob), then the transposed weights, then their velocities: for weight layers
// l >= 1, n_in rows of n_out floats each (t_glob). Shared memory: step 8's, with room for one
// layer's gathered deltas instead of the partial sums.
#include "mlp/fused_common.cuh"  // (for WARPS; POLLERS must be set before tagged.cuh)

#ifndef COL_REGS
#define COL_REGS 16
#endif
#ifndef L2_KEEP
#define L2_KEEP 0
#endif
#define CHUNK (32 * COL_REGS)
#ifndef POLLERS
#define POLLERS (WARPS / 2)
#endif
#include "mlp/tagged.cuh"

// The columns' loads and stores go to L2 only (.cg: a block reads back only what it wrote). With
// L2_KEEP > 0 that share of their lines, in percent, is marked evict-last, so that a net whose
// columns outgrow what L2 holds of them keeps that share resident instead of missing on every
// line in turn (the columns are walked in the same order every iteration).
__device__ __forceinline__ unsigned long long column_policy() {
    unsigned long long p = 0;
#if L2_KEEP
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, %1;" : "=l"(p) : "f"(L2_KEEP / 100.0f));
#endif
    return p;
}

__device__ __forceinline__ float load_column(const float* a, unsigned long long policy) {
#if L2_KEEP
    float v;
    asm volatile("ld.global.cg.L2::cache_hint.f32 %0, [%1], %2;" : "=f"(v) : "l"(a), "l"(policy));
    return v;
#else
    return __ldcg(a);
#endif
}

__device__ __forceinline__ void store_column(float* a, float v, unsigned long long policy) {
#if L2_KEEP
    asm volatile("st.global.cg.L2::cache_hint.f32 [%0], %1, %2;" ::"l"(a), "f"(v), "l"(policy) : "memory");
#else
    __stcg(a, v);
#endif
}

// Up to CHUNK weights of a column and their velocities, lane j holding elements j, j + 32, ...
struct Column {
    float w[COL_REGS], v[COL_REGS];

    __device__ __forceinline__ void fetch_w(const float* wt, int n, unsigned long long policy) {
        const int lane = threadIdx.x & 31;
#pragma unroll
        for (int k = 0; k < COL_REGS; ++k) w[k] = lane + 32 * k < n ? load_column(wt + lane + 32 * k, policy) : 0.0f;
    }

    __device__ __forceinline__ void fetch_v(const float* vt, int n, unsigned long long policy) {
        const int lane = threadIdx.x & 31;
#pragma unroll
        for (int k = 0; k < COL_REGS; ++k) v[k] = lane + 32 * k < n ? load_column(vt + lane + 32 * k, policy) : 0.0f;
    }

    __device__ __forceinline__ float dot(const float* d, int n, float s) const {
        const int lane = threadIdx.x & 31;
#pragma unroll
        for (int k = 0; k < COL_REGS; ++k)
            if (lane + 32 * k < n) s = fmaf(w[k], d[lane + 32 * k], s);
        return s;
    }

    // The same update the row's owner gives W[j][i] (update_rows): rate d_j, times o_i.
    __device__ __forceinline__ void update(float* wt, float* vt, const float* d, int n, float o, float rate,
                                           float momentum, unsigned long long policy) const {
        const int lane = threadIdx.x & 31;
#pragma unroll
        for (int k = 0; k < COL_REGS; ++k) {
            const int j = lane + 32 * k;
            if (j >= n) continue;
            const float vn = velocity(v[k], __fmul_rn(rate, d[j]), o, momentum);
            store_column(vt + j, vn, policy);
            store_column(wt + j, __fadd_rn(w[k], vn), policy);
        }
    }
};

// Columns go to the last warps, counted down: the first warps poll (thread i a pair of values),
// the last ones hold the columns and update while the first poll.
__device__ __forceinline__ int column_warp() { return WARPS - 1 - (threadIdx.x >> 5); }

struct Columns {
    const Plan* plan;
    const Staged& sm;
    u64* dx;
    float *wt, *vt;
    int* status;
    long long timeout_ns;
    int L, d_stride;
    float rate, momentum;
    // Updates left for later, so that they run while other warps poll. The flags are changed only
    // where every thread of the block passes, so all agree on them.
    //   pend_rows >= 0: the block's rows of that layer (staged input, dl);
    //   pend_cols: in the warp of each of the pend_count columns a step computed with, that
    //              column, held in `cur` (w, and v fetched after the dot), with where it goes,
    //              d of the layer above (pend_d, pend_n values) and the row's own output o.
    int pend_rows, pend_count, pend_n;
    bool pend_cols;
    float *pend_w, *pend_v;
    const float* pend_d;
    float pend_o;
    unsigned long long policy;  // the columns' L2 policy
    Column cur, next;

    // The block's columns are copied from the row layout at the start of every launch (the rows
    // stay the record the host reads), each by the thread that will read and write it later.
    __device__ Columns(const Plan* plan, int L, const Staged& sm, float* w, float* v, float* acc, int* status,
                       long long timeout_ns, float rate, float momentum)
        : plan(plan), sm(sm), dx(reinterpret_cast<u64*>(acc)), status(status), timeout_ns(timeout_ns), L(L),
          d_stride(0), rate(rate), momentum(momentum), pend_rows(-1), pend_count(0), pend_cols(false) {
        policy = column_policy();
        wt = reinterpret_cast<float*>(dx + plan[L].o_glob);
        vt = wt + plan[L].t_glob;
        const int lane = threadIdx.x & 31, cw = column_warp();
        for (int l = 1; l < L; ++l) {
            const Plan q = plan[l], p = plan[l - 1];  // W_l's columns = this block's rows of layer l-1
            d_stride = max(d_stride, pad4(q.n_out));
            for (int c = cw; c < p.rows; c += WARPS)
                for (int j = lane; j < q.n_out; j += 32) {
                    const int i = p.first + c, g = q.w_glob + j * (q.n_in + 1) + i;
                    store_column(wt + q.t_glob + i * q.n_out + j, w[g], policy);
                    store_column(vt + q.t_glob + i * q.n_out + j, v[g], policy);
                }
        }
    }

    __device__ void output_delta(const Plan& p, int r, float d, unsigned tag) { store_tagged(dx + p.o_glob + r, d, tag); }

    __device__ void settle_rows(int me, int team) const {
        const Plan p = plan[pend_rows];
        update_rows_flat(p, sm.W, sm.V, sm.acts + p.act_loc, sm.dl + p.own_loc, rate, momentum, me, team);
    }

    __device__ void settle_columns() const {
        if (column_warp() < pend_count) cur.update(pend_w, pend_v, pend_d, pend_n, pend_o, rate, momentum, policy);
    }

    // The forward's hooks (tagged_train): whether columns wait for an update, which the threads
    // beyond the first POLLERS warps make while those poll the first layer's outputs.
    __device__ bool pending() const { return pend_cols; }
    __device__ void settled() { pend_cols = false; }

    // The end of a launch: the last columns' update, so they equal the rows the host reads.
    __device__ void flush() {
        if (pend_cols) settle_columns();
        pend_cols = false;
    }

    // Step l. Where the block's rows of layer l fit the column warps and a column fits their
    // registers (Net 8 on 132 blocks: every step), the update of step l+1 runs in the column
    // warps while the others poll for d_(l+1), and this step's update is left to the next: the
    // critical path of a step is the poll and one dot product. Otherwise the whole block polls,
    // then computes and updates, a column chunk at a time.
    __device__ bool backward(int l, unsigned tag, PhaseTimer& timer) {
        if (l == L - 1) {  // the output layer's deltas came with the forward; its rows' update can wait
            pend_rows = l;
            if (l == 0) settle_now();  // (unless it is the only layer)
            return true;
        }
        const Plan p = plan[l], q = plan[l + 1];
        const int n = q.n_out, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, cw = column_warp();
        float* d = sm.room + (l & 1) * d_stride;  // d_(l+1); the other buffer keeps d_(l+2) for settle
        float* wcol = wt + q.t_glob + p.first * n;
        float* vcol = vt + q.t_glob + p.first * n;
        const bool overlap = p.rows <= WARPS - POLLERS && n <= CHUNK;
        if (overlap) {
            if (cw < p.rows) next.fetch_w(wcol + cw * n, n, policy);  // the dot's operand, before the wait
            __syncthreads();  // the step before's deltas are in dl
            timer.waits();
            bool ok = true;
            if (warp < POLLERS) {
                ok = await_vector(d, dx + q.o_glob, n, tag, status, timeout_ns, threadIdx.x, 32 * POLLERS);
            } else {
                if (pend_rows >= 0) settle_rows(threadIdx.x - 32 * POLLERS, THREADS - 32 * POLLERS);
                if (pend_cols) settle_columns();
            }
            if (__syncthreads_or(!ok)) return false;
            timer.ready();
            if (cw < p.rows) {
                float s = next.dot(d, n, 0.0f);
                for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
                const float o = sm.own[p.own_loc + cw], dl = o * (1.0f - o) * s;
                if (lane == 0) {
                    sm.dl[p.own_loc + cw] = dl;
                    if (l > 0) store_tagged(dx + p.o_glob + p.first + cw, dl, tag);
                }
#pragma unroll
                for (int k = 0; k < COL_REGS; ++k) cur.w[k] = next.w[k];
                cur.fetch_v(vcol + cw * n, n, policy);  // needed only by the update, a step later
                pend_w = wcol + cw * n;
                pend_v = vcol + cw * n;
                pend_o = o;
            }
            pend_rows = l;
            pend_cols = true;
            pend_count = p.rows;
            pend_d = d;
            pend_n = n;
            if (l == 0) settle_now();  // the next sample's first layer needs its rows now; the
            return true;               // columns wait for the forward's first poll
        }
        settle_now();
        if (pend_cols) settle_columns();
        pend_cols = false;
        __syncthreads();
        timer.waits();
        const bool ok = await_vector(d, dx + q.o_glob, n, tag, status, timeout_ns);
        if (__syncthreads_or(!ok)) return false;
        timer.ready();
        for (int c = cw; c < p.rows; c += WARPS) {
            float* wc = wcol + c * n;
            float* vc = vcol + c * n;
            float s = 0.0f;
            for (int at = 0; at < n; at += CHUNK) {
                next.fetch_w(wc + at, n - at, policy);
                s = next.dot(d + at, n - at, s);
            }
            for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            const float o = sm.own[p.own_loc + c], dl = o * (1.0f - o) * s;
            if (lane == 0) {
                sm.dl[p.own_loc + c] = dl;
                if (l > 0) store_tagged(dx + p.o_glob + p.first + c, dl, tag);
            }
            for (int at = 0; at < n; at += CHUNK) {
                if (n > CHUNK) next.fetch_w(wc + at, n - at, policy);
                next.fetch_v(vc + at, n - at, policy);
                next.update(wc + at, vc + at, d + at, n - at, o, rate, momentum, policy);
            }
        }
        pend_rows = l;
        settle_now();
        return true;
    }

    // The pending rows' update by the whole block, now (after the deltas are in dl).
    __device__ void settle_now() {
        __syncthreads();
        if (pend_rows >= 0) settle_rows(threadIdx.x, THREADS);
        pend_rows = -1;
    }
};

TAGGED_KERNEL(Columns)
