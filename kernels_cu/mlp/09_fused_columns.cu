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
//         checks that after training. A warp holds its column in registers, w and v, fetched
//         before the phase's wait, so the L2 reads are off the critical path; right after its
//         dot and the delta's store it updates the column: 16 KB of stores a block a step on Net 8.
// Source: step 8; the transposed copy is the usual trade of memory for a reduction.
// Params: as step 8; COL_REGS (a column of up to 32 x COL_REGS weights sits in a warp's
//         registers; longer ones, or more rows than warps, are read in chunks of that size);
//         POLLERS (warps that poll while the others update the rows of the step before);
//         PREV_W (fused_common.cuh: the previous weights kept instead of the velocities, so a
//         column update stores 8 KB a block a step on Net 8 instead of 16, into the buffer of the
//         step before; the rows keep them too, so both copies still round alike); OUT_LOCAL
//         (fused_common.cuh: every block holds and computes the whole output layer, 7 rows on
//         Net 8, so its deltas and those of the layer below are known in every block: the two
//         backward exchanges at the top of the net go, 26 phases an iteration on Net 8 instead of
//         28; the fullest block's shared memory grows by about 5 KB); FAST_SIGMOID (tagged.cuh).
//
// The stores are what the backward phases of Net 8 wait on (docs/RESULTS.md, "fourth step"):
// without them a phase overlapping a 500-long column update waited 0.84 us instead of 1.45.
// Hence one 16-byte access a lane (4 memory instructions a column and operand, not 16), v
// fetched with w before the wait rather than after the dot (so the update need not wait for
// it), and the update right after the delta's store, not left to run beside the next poll.
//
// Why one δ buffer per layer is enough: δ_l of sample s+1 is stored by the owners of layer l
// after their forward of layer l of s+1, which waited for o_(l-1) of s+1 from every owner of layer
// l-1; each of those stored it in its forward of s+1, after its backward of s had read δ_l of s.
// The outputs o_l as in step 8, with "the partial sums of layer l+1" read as "δ_(l+1)".
//
// Layouts: ox as step 8's. acc holds dx, the deltas of every layer, tagged like ox and at the
// same offsets (o_glob), then the transposed weights, then their velocities: for weight layers
// l >= 1, n_in rows of pad4(n_out) floats each (t_glob), 16-byte aligned. Shared memory: step
// 8's, with room for one layer's gathered deltas (16-byte aligned) instead of the partial sums.
// This step's defaults (the registry's, each measured: lab/journal/fused.md); fused_common.cuh's and
// tagged.cuh's own fallbacks are the earlier steps'.
#ifndef IN_FLIGHT
#define IN_FLIGHT 1
#endif
#ifndef FAST_SIGMOID
#define FAST_SIGMOID 1
#endif
#ifndef PREV_W
#define PREV_W 1
#endif
#ifndef OUT_LOCAL
#define OUT_LOCAL 1
#endif
#include "mlp/fused_common.cuh"

#ifndef COL_REGS
#define COL_REGS 16
#endif
#if COL_REGS % 4
#error "COL_REGS: a multiple of 4 (a lane holds its share of a column as float4s)"
#endif
#define COL_VECS (COL_REGS / 4)
#define CHUNK (32 * COL_REGS)
#ifndef POLLERS
#define POLLERS (WARPS / 2)
#endif
#include "mlp/tagged.cuh"

// Up to CHUNK weights of a column and their velocities, lane j holding elements 4j..4j+3, then
// 128 + 4j.., so that each fetch and store is one 16-byte access a lane (see "The stores" above).
// Columns are stored padded to a multiple of 4 floats with zeros, which stay zero.
struct Column {
    float4 w[COL_VECS], v[COL_VECS];

    __device__ __forceinline__ static int at(int g) { return 4 * (threadIdx.x & 31) + 128 * g; }

    __device__ __forceinline__ static void fetch(float4* dst, const float* src, int n) {
#pragma unroll
        for (int g = 0; g < COL_VECS; ++g)
            dst[g] = at(g) < n ? __ldcg(reinterpret_cast<const float4*>(src + at(g))) : zero4();
    }

    __device__ __forceinline__ void fetch_w(const float* wt, int n) { fetch(w, wt, n); }
    __device__ __forceinline__ void fetch_v(const float* vt, int n) { fetch(v, vt, n); }

    // d's padding past n is whatever the room held: left out, not multiplied by the zero weights.
    // One sum per float4, added at the end, so the products do not wait for each other.
    __device__ __forceinline__ float dot(const float* d, int n, float s) const {
        float part[COL_VECS];
#pragma unroll
        for (int g = 0; g < COL_VECS; ++g) {
            const int j = at(g);
            part[g] = 0.0f;
            if (j >= n) continue;
            const float4 e = *reinterpret_cast<const float4*>(d + j);
            float p = w[g].x * e.x;
            if (j + 1 < n) p = fmaf(w[g].y, e.y, p);
            if (j + 2 < n) p = fmaf(w[g].z, e.z, p);
            if (j + 3 < n) p = fmaf(w[g].w, e.w, p);
            part[g] = p;
        }
#pragma unroll
        for (int g = 0; g < COL_VECS; ++g) s += part[g];
        return s;
    }

    // The same update the row's owner gives W[j][i] (update_four): rate d_j, times o_i. The new
    // column goes back where it was fetched from, w to wt and v to vt; with PREV_W (v holds the
    // weights of the step before) only the new weights are stored, over the step before's in vt.
    __device__ __forceinline__ void update(float* wt, float* vt, const float* d, int n, float o, float rate,
                                           float momentum) const {
#pragma unroll
        for (int g = 0; g < COL_VECS; ++g) {
            const int j = at(g);
            if (j >= n) continue;
            const float4 e = *reinterpret_cast<const float4*>(d + j);
            float4 vn, wn;
            step(v[g].x, w[g].x, e.x, true, o, rate, momentum, vn.x, wn.x);
            step(v[g].y, w[g].y, e.y, j + 1 < n, o, rate, momentum, vn.y, wn.y);
            step(v[g].z, w[g].z, e.z, j + 2 < n, o, rate, momentum, vn.z, wn.z);
            step(v[g].w, w[g].w, e.w, j + 3 < n, o, rate, momentum, vn.w, wn.w);
            if (!PREV_W) __stcg(reinterpret_cast<float4*>(vt + j), vn);
            __stcg(reinterpret_cast<float4*>((PREV_W ? vt : wt) + j), wn);
        }
    }

    __device__ __forceinline__ static void step(float v, float w, float d, bool real, float o, float rate,
                                                float momentum, float& v_new, float& w_new) {
        v_new = real ? velocity(velocity_of(w, v), __fmul_rn(rate, d), o, momentum) : 0.0f;
        w_new = real ? __fadd_rn(w, v_new) : 0.0f;
    }
};

// Columns go to the last warps, counted down: the first warps poll (thread i a pair of values),
// the last ones hold the columns and update the rows while the first poll.
__device__ __forceinline__ int column_warp() { return WARPS - 1 - (threadIdx.x >> 5); }

struct Columns {
    const Plan* plan;
    const Staged& sm;
    u64* dx;
    float *wt, *vt, *room;
    int* status;
    long long timeout_ns;
    int L;
    float rate, momentum;
    // pend_rows..pend_top (pend_rows >= 0): the block's rows of those layers wait for their update
    // (staged input, dl), which runs while the next step polls. Changed only where every thread
    // of the block passes.
    int pend_rows, pend_top;
    // PREV_W: bit l says which of wt and vt holds layer l's columns now (the other: the step
    // before's); every thread flips it as it takes the layer's columns, as every thread passes there.
    unsigned flipped;
    bool prefetched;  // OUT_LOCAL: step L-3's columns were fetched during the forward
    Column col;

    // The block's columns are copied from the row layout at the start of every launch (the rows
    // stay the record the host reads), each by the thread that will read and write it later.
    // OUT_LOCAL: the output layer needs no columns (every block holds its rows).
    __device__ Columns(const Plan* plan, int L, const Staged& sm, float* w, float* v, float* acc, int* status,
                       long long timeout_ns, float rate, float momentum)
        : plan(plan), sm(sm), dx(reinterpret_cast<u64*>(acc)), status(status), timeout_ns(timeout_ns), L(L),
          rate(rate), momentum(momentum), pend_rows(-1), pend_top(-1), flipped(0u), prefetched(false) {
        wt = reinterpret_cast<float*>(dx + plan[L].o_glob);
        vt = wt + plan[L].t_glob;
        // 16-byte aligned for float4 reads, by pointer arithmetic on sm.room: through an integer
        // cast the compiler no longer knew it was shared memory, and read and wrote it with
        // generic loads and stores (Net 8 0.1 us slower, docs/RESULTS.md, "tenth step").
        const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(sm.room));
        room = sm.room + ((16u - (a & 15u)) & 15u) / 4u;
        const int lane = threadIdx.x & 31, cw = column_warp();
        for (int l = 1; l < (out_local(L) ? L - 1 : L); ++l) {
            const Plan q = plan[l], p = plan[l - 1];  // W_l's columns = this block's rows of layer l-1
            const int n4 = pad4(q.n_out);
            for (int c = cw; c < p.rows; c += WARPS)
                for (int j = lane; j < n4; j += 32) {
                    const int i = p.first + c, g = q.w_glob + j * (q.n_in + 1) + i;
                    __stcg(wt + q.t_glob + i * n4 + j, j < q.n_out ? w[g] : 0.0f);
                    __stcg(vt + q.t_glob + i * n4 + j, j < q.n_out ? v[g] : 0.0f);
                }
        }
    }

    __device__ void output_delta(const Plan& p, int r, float d, unsigned tag) {
        if (!out_local(L)) store_tagged(dx + p.o_glob + r, d, tag);
    }

    // OUT_LOCAL: every block computes the whole output layer; one adds the error and writes the
    // predictions.
    __device__ bool reports() const { return !out_local(L) || blockIdx.x == 0; }

    // The delta of this block's row c of layer l (plan p), o (1 - o) W_(l+1)[:, row] . d_(l+1), from
    // each lane's share s of the dot: kept in dl and, but for layer 0 (whose deltas nobody awaits),
    // broadcast. Returns o. By one warp.
    __device__ float own_delta(const Plan& p, int l, int c, float s, unsigned tag) {
        s = warp_sum(s);
        const float o = sm.own[p.own_loc + c], dl = o * (1.0f - o) * s;
        if ((threadIdx.x & 31) == 0) {
            sm.dl[p.own_loc + c] = dl;
            if (l > 0) store_tagged(dx + p.o_glob + p.first + c, dl, tag);
        }
        return o;
    }

    __device__ void pend(int lo, int hi) {
        pend_rows = lo;
        pend_top = hi;
    }

    __device__ void settle_rows(int me, int team) const {
        for (int l = pend_rows; l <= pend_top; ++l) {
            const Plan p = plan[l];
            update_rows_flat(p, sm.W, sm.V, sm.acts + p.act_loc, sm.dl + p.own_loc, rate, momentum, me, team);
        }
    }

    // Where step l's columns (of W_(l+1), this block's rows of layer l) are now: w and, beside them,
    // the velocities or the weights of the step before.
    __device__ void columns_of(int l, float*& wcol, float*& vcol) const {
        const Plan p = plan[l], q = plan[l + 1];
        const int n4 = pad4(q.n_out);
        const bool flip = PREV_W && (flipped >> l & 1u);
        wcol = (flip ? vt : wt) + q.t_glob + p.first * n4;
        vcol = (flip ? wt : vt) + q.t_glob + p.first * n4;
    }

    // Whether step l can hold its columns in the column warps' registers and overlap the poll.
    __device__ bool overlaps(int l) const {
        return plan[l].rows <= WARPS - POLLERS && plan[l + 1].n_out <= CHUNK;
    }

    // OUT_LOCAL: step L-3 polls nothing (its d_(L-2) is computed locally), so nothing would hide
    // the fetch of its columns; it is issued here, while the forward waits for the output layer's
    // input, by the column warps (the poll of a 100-wide input needs only the first two warps).
    __device__ void before_wait(int l) {
        if (!out_local(L) || l != L - 1 || L < 3 || !overlaps(L - 3)) return;
        const int cw = column_warp(), n = plan[L - 2].n_out, n4 = pad4(n);
        if (cw < plan[L - 3].rows) {
            float *wcol, *vcol;
            columns_of(L - 3, wcol, vcol);
            col.fetch_w(wcol + cw * n4, n);
            col.fetch_v(vcol + cw * n4, n);
        }
        prefetched = true;
    }

    // OUT_LOCAL, step L-2: the whole d_(L-2) = o (1 - o) W_(L-1)^T d_(L-1) in every block, from the
    // output layer's rows (before their update, as the math requires) and deltas, into room, where
    // step L-3 reads it as if it had been polled; this block's rows of layer L-2 keep theirs in dl.
    // The summation order is not the column warps' (fmaf over the 7 outputs in order), so the
    // result differs from OUT_LOCAL=0 in the last bits, not from the float64 reference.
    __device__ void local_deltas(int l) {
        const Plan p = plan[l], q = plan[l + 1];
        __syncthreads();  // the output layer's deltas are in dl
        const float* o_in = sm.acts + q.act_loc;
        for (int j = threadIdx.x; j < q.n_in; j += THREADS) {
            // k in pieces of 8, unrolled, so each piece's shared loads go out before its first
            // fmaf; the sum keeps the order of k.
            float s = 0.0f;
            for (int k0 = 0; k0 < q.rows; k0 += 8) {
#pragma unroll
                for (int k = k0; k < k0 + 8; ++k)
                    if (k < q.rows) s = fmaf(sm.W[q.w_loc + k * q.stride + j], sm.dl[q.own_loc + k], s);
            }
            const float o = o_in[j], d = o * (1.0f - o) * s;
            room[j] = d;
            if (j >= p.first && j < p.first + p.rows) sm.dl[p.own_loc + j - p.first] = d;
        }
        pend(l, L - 1);
        if (l == 0) settle_now();
    }

    // Step l. Where the block's rows of layer l fit the column warps and a column fits their
    // registers (Net 8 on 132 blocks: every step), each column warp fetches its column, w and v,
    // before the wait, the rows' update of step l+1 runs in the column warps while the others
    // poll for d_(l+1), and after its dot and the delta's store a column warp updates its column
    // at once (its stores are the only thing left of the step). Otherwise the whole block polls,
    // then computes and updates, a column chunk at a time. With OUT_LOCAL, step L-2 is local and
    // step L-3 polls nothing: its pollers update the rows of the two layers above instead.
    __device__ bool backward(int l, unsigned tag, PhaseTimer& timer) {
        if (l == L - 1) {  // the output layer's deltas came with the forward; its rows' update can wait
            pend(l, l);
            if (l == 0) settle_now();  // (unless it is the only layer)
            return true;
        }
        if (out_local(L) && l == L - 2) {
            local_deltas(l);
            return true;
        }
        const bool local = out_local(L) && l == L - 3;  // d_(l+1) is in room already
        const Plan p = plan[l], q = plan[l + 1];
        const int n = q.n_out, n4 = pad4(n), warp = threadIdx.x >> 5, cw = column_warp();
        float* d = room;  // d_(l+1): the step before has read its own by the first __syncthreads below
        float *wcol, *vcol;
        columns_of(l, wcol, vcol);
        if (PREV_W) flipped ^= 1u << l;
        if (overlaps(l)) {
            if (cw < p.rows && !prefetched) {  // the dot's and the update's operands, before the wait
                col.fetch_w(wcol + cw * n4, n);
                col.fetch_v(vcol + cw * n4, n);
            }
            prefetched = false;
            __syncthreads();  // the step before's deltas are in dl
            if (local) {
                if (warp < POLLERS && pend_rows >= 0) settle_rows(threadIdx.x, 32 * POLLERS);
            } else {
                timer.waits();
                bool ok = true;
                if (warp < POLLERS)
                    ok = await_vector(d, dx + q.o_glob, n, tag, status, timeout_ns, threadIdx.x, 32 * POLLERS);
                else if (pend_rows >= 0)
                    settle_rows(threadIdx.x - 32 * POLLERS, THREADS - 32 * POLLERS);
                if (__syncthreads_or(!ok)) return false;
                timer.ready();
            }
            if (cw < p.rows) {
                const float o = own_delta(p, l, cw, col.dot(d, n, 0.0f), tag);
                col.update(wcol + cw * n4, vcol + cw * n4, d, n, o, rate, momentum);
            }
            pend(l, l);
            if (l == 0) settle_now();  // the next sample's first layer needs its rows now
            return true;
        }
        settle_now();
        __syncthreads();
        if (!local) {
            timer.waits();
            const bool ok = await_vector(d, dx + q.o_glob, n, tag, status, timeout_ns);
            if (__syncthreads_or(!ok)) return false;
            timer.ready();
        }
        for (int c = cw; c < p.rows; c += WARPS) {
            float* wc = wcol + c * n4;
            float* vc = vcol + c * n4;
            float s = 0.0f;
            for (int at = 0; at < n; at += CHUNK) {
                col.fetch_w(wc + at, n - at);
                s = col.dot(d + at, n - at, s);
            }
            const float o = own_delta(p, l, c, s, tag);
            for (int at = 0; at < n; at += CHUNK) {
                if (n > CHUNK) col.fetch_w(wc + at, n - at);
                col.fetch_v(vc + at, n - at);
                col.update(wc + at, vc + at, d + at, n - at, o, rate, momentum);
            }
        }
        pend(l, l);
        settle_now();
        return true;
    }

    // The pending rows' update by the whole block, now (after the deltas are in dl).
    __device__ void settle_now() {
        __syncthreads();
        if (pend_rows >= 0) settle_rows(threadIdx.x, THREADS);
        pend(-1, -1);
    }
};

TAGGED_KERNEL(Columns)
