// MLP step 10: "fused-tiles": step 9's persistent trainer with each weight layer cut into a grid of
// tiles, so every weight is kept once, on chip, and both directions exchange partial sums.
//
// Idea:   step 9 keeps every weight twice, as rows in shared memory (forward) and as columns in L2
//         (backward), and a 500-long backward step of Net 8 moves 24 KB a block through L2 for
//         the columns: 0.72 of its 1.78 us (docs/RESULTS.md, sixth step), which five experiments
//         could not hide. Here layer l's weights are cut into P_l x Q_l tiles (rows R_a, input
//         columns C_c), one a block, and a tile serves both directions from shared memory:
//           forward:  block (a, c) stores y_c[i] = W[i, C_c] . x[C_c] for i in R_a; whoever needs
//                     x'[i] = sigmoid(sum_c y_c[i]) polls the Q_l partials of each i it needs;
//           backward: block (a, c) stores g_a[j] = x_j (1 - x_j) W[R_a, j] . d[R_a] for j in C_c
//                     (the slope applied by the tile, which holds x[C_c], so the row's owner needs
//                     no output it never computed); d_(l-1)[j] = sum_a g_a[j];
//           update:   W[R_a, C_c] needs d[R_a] and x[C_c], both in the block.
//         With P x Q ~ G a block polls about n values a phase either way (Net 8 on 132 blocks:
//         12 x 11 tiles of 42 x 46, 506 and 504 words), as step 9's forward does, but from about
//         11 blocks, not 132, and nothing but those words and its own partials cross L2.
// Cost:   a partial sum instead of a finished value: each value is the sum of Q_l (forward) or
//         P_(l+1) (backward) polled words, added in a fixed order (reproducible bit for bit), and
//         a phase has two shared-memory rounds (sum, then the tile's dot) where step 9 had one.
//         The output layer is cut in rows only (Q = 1) so that its deltas are finished where its
//         outputs are (one phase, as before); its blocks poll Q_(L-2) partials of every input
//         (Net 8: 1100 words, POLL_SPANS loads a thread in flight). The first layer too, as its
//         input comes from the host.
// Source: step 9; the 2-D cut is the usual decomposition of a distributed matrix-vector product
//         (a process grid, as in ScaLAPACK), with the reductions done by the readers.
// Params: THREADS, QUIET, BACKOFF as step 8; POLL_SPANS (16-byte loads a thread has in flight);
//         ROW_LANES (threads that share a row of a tile's dot, or a column of its transposed dot).
// The host chooses each layer's grid (nnbench/suites/fused.py, tile_grid) and passes it after the
// layer widths: widths[L + 1 + 2l] = P_l, widths[L + 2 + 2l] = Q_l. Block b < P_l Q_l holds tile
// (b / Q_l, b mod Q_l) of layer l; the others hold none of it.
//
// Why one buffer of partials per layer and direction is enough (as step 8's outputs): the owner of
// tile (a, c) of layer l rewrites y_l[R_a] at the next iteration only after its backward step l,
// which waited for g from every tile of layer l+1 whose columns meet R_a: exactly the readers of
// y_l[R_a], each of which stored its g after reading them. Likewise g_l[C_c] of layer l+1's tile
// is rewritten only after its next forward read x[C_c], stored by the readers of g_l[C_c] after
// their backward step l read it.
//
// Layouts: out holds y, the forward partial sums, tagged: for layer l, Q_l rows (part c) of
// even(n_out) words from y_glob; acc holds g, the backward ones of layers l >= 1: P_l rows (part a)
// of even(n_in) words from g_glob. Part-major, so a producer's stores are contiguous and a
// reader's poll of a part is 512 contiguous bytes a warp. Shared memory: every tile's weights W
// (rows of `stride` floats: its columns, then the bias if c = Q - 1, padded to 4, zero), then
// their velocities V, every layer's staged input xs (x[C_c], then 1 for the bias, then 0), the
// deltas of every layer's rows, and the values of one poll.
#include "mlp/tagged.cuh"

#ifndef POLL_SPANS
#define POLL_SPANS 1
#endif
#ifndef ROW_LANES
#define ROW_LANES 4
#endif
#if ROW_LANES != 2 && ROW_LANES != 4 && ROW_LANES != 8
#error "ROW_LANES: 2, 4 or 8 (a power of two within a warp)"
#endif
#define ROW_TEAMS (THREADS / ROW_LANES)

struct Tile {  // weight layer l, this block
    int n_in, n_out, P, Q;  // the layer, and its tile grid
    int a, r0, nr;          // this block's tile row (a < 0: no tile): rows [r0, r0 + nr)
    int c, c0, nc, bias;    // its tile column: input columns [c0, c0 + nc), and the bias if bias
    int stride;             // floats a tile row takes in shared memory: pad4(nc + bias)
    int w_glob, y_glob, g_glob;  // the seed's weights; words of y (out) and, l >= 1, of g (acc)
    int w_loc, x_loc, d_loc;     // shared memory: the tile's rows, staged input, deltas
};

__device__ __forceinline__ int even(int n) { return (n + 1) & ~1; }

// Thread 0 fills tiles[0..L-1]; tiles[L] holds the totals (w_loc, x_loc, d_loc).
__device__ void make_tiles(Tile* tiles, const int* widths, int L, int b) {
    int w_glob = 0, y_glob = 0, g_glob = 0, w_loc = 0, x_loc = 0, d_loc = 0;
    for (int l = 0; l < L; ++l) {
        Tile t;
        t.n_in = widths[l];
        t.n_out = widths[l + 1];
        t.P = widths[L + 1 + 2 * l];
        t.Q = widths[L + 2 + 2 * l];
        const bool mine = b < t.P * t.Q;
        t.a = mine ? b / t.Q : -1;
        t.c = mine ? b % t.Q : 0;
        t.r0 = mine ? t.a * t.n_out / t.P : 0;
        t.nr = mine ? (t.a + 1) * t.n_out / t.P - t.r0 : 0;
        t.c0 = mine ? t.c * t.n_in / t.Q : 0;
        t.nc = mine ? (t.c + 1) * t.n_in / t.Q - t.c0 : 0;
        t.bias = mine && t.c == t.Q - 1;
        t.stride = pad4(t.nc + t.bias);
        t.w_glob = w_glob;
        t.y_glob = y_glob;
        t.g_glob = l == 0 ? -1 : g_glob;
        t.w_loc = w_loc;
        t.x_loc = x_loc;
        t.d_loc = d_loc;
        tiles[l] = t;
        w_glob += t.n_out * (t.n_in + 1);
        y_glob += t.Q * even(t.n_out);
        if (l > 0) g_glob += t.P * even(t.n_in);
        w_loc += t.nr * t.stride;
        x_loc += t.stride;
        d_loc += t.nr;
    }
    tiles[L].w_loc = w_loc;
    tiles[L].x_loc = x_loc;
    tiles[L].d_loc = pad4(d_loc);
}

// The block's tiles between global memory (the seed's layout) and shared memory.
template <bool TO_SHARED>
__device__ __forceinline__ void move_tiles(const Tile* tiles, int L, float* w, float* v, float* W, float* V) {
    for (int l = 0; l < L; ++l) {
        const Tile t = tiles[l];
        for (int k = threadIdx.x; k < t.nr * t.stride; k += THREADS) {
            const int i = k / t.stride, j = k - i * t.stride;
            const bool real = j < t.nc || (t.bias && j == t.nc);
            const int g = t.w_glob + (t.r0 + i) * (t.n_in + 1) + (j < t.nc ? t.c0 + j : t.n_in);
            if (TO_SHARED) {
                W[t.w_loc + k] = real ? w[g] : 0.0f;
                V[t.w_loc + k] = real ? v[g] : 0.0f;
            } else if (real) {
                w[g] = W[t.w_loc + k];
                v[g] = V[t.w_loc + k];
            }
        }
    }
}

struct TileMemory {  // the dynamic shared memory, as laid out in the header
    float *W, *V, *xs, *dl, *got;
};

// The `parts` tagged partial sums of values v0 .. v0 + n - 1, part k of value v at buf[k row + v]
// (row even, buf 16-byte aligned), into got[k span + i] (i = v - e0, e0 the even value at or below
// v0, span = the pairs' width) once every tag is `want`, by the whole block: a 16-byte load (a pair
// of values) a thread, pairs of a part row on consecutive threads, so a warp's load is 512
// contiguous bytes. (One warp with a dozen polls in flight waits far longer than eight warps with
// one each: docs/RESULTS.md.) A value outside the range is not awaited. Every load not yet fresh
// is issued again in each round, so a round costs one L2 round trip however many are missing.
// meanwhile(me, team), work that needs none of the values, runs while they come: in the warps
// that poll nothing, where there are any, else in every thread after its first loads are issued.
// Returns span (the caller leaves on a false `ok`: the wait gave up or a newer tag showed up).
template <typename Meanwhile>
__device__ __forceinline__ int await_parts(float* got, const u64* buf, int row, int v0, int n, int parts, unsigned want,
                                           int* status, long long timeout_ns, bool& ok, Meanwhile meanwhile) {
    const int e0 = v0 & ~1, pairs = (v0 + n - e0 + 1) / 2, loads = pairs * parts;
    const int busy = min(THREADS, (loads + 31) / 32 * 32);  // the warps with loads
    ok = true;
    if (busy < THREADS && (int)threadIdx.x >= busy) {
        meanwhile(threadIdx.x - busy, THREADS - busy);
        return 2 * pairs;
    }
    Patience patience{status, timeout_ns};
    bool owed = busy == THREADS;  // this thread's share of meanwhile
    for (int base = threadIdx.x; base < loads; base += POLL_SPANS * THREADS) {
        ulonglong2 w[POLL_SPANS];
        const u64* at[POLL_SPANS];
        bool lo[POLL_SPANS], hi[POLL_SPANS];
#pragma unroll
        for (int k = 0; k < POLL_SPANS; ++k) {
            const int j = base + k * THREADS, part = j / pairs, v = e0 + 2 * (j - part * pairs);
            at[k] = buf + part * row + v;
            lo[k] = j < loads && v >= v0;
            hi[k] = j < loads && v + 1 < v0 + n;
            if (j < loads) w[k] = load_tagged2(at[k]);
        }
        if (owed) meanwhile(threadIdx.x, THREADS);
        owed = false;
        unsigned fresh = 0u;
        for (;;) {
#pragma unroll
            for (int k = 0; k < POLL_SPANS; ++k) {
                if (fresh >> k & 1u) continue;
                const unsigned tx = lo[k] ? (unsigned)(w[k].x >> 32) : want, ty = hi[k] ? (unsigned)(w[k].y >> 32) : want;
                if (tx == want && ty == want) fresh |= 1u << k;
                else if ((int)(tx - want) > 0 || (int)(ty - want) > 0) {
                    atomicCAS(status, 0, 2);
                    ok = false;
                    return 2 * pairs;
                }
            }
            if (fresh == (1u << POLL_SPANS) - 1u) break;
            if (!patience.still()) {
                ok = false;
                return 2 * pairs;
            }
            if (BACKOFF) __nanosleep(BACKOFF);
#pragma unroll
            for (int k = 0; k < POLL_SPANS; ++k)
                if (!(fresh >> k & 1u)) w[k] = load_tagged2(at[k]);
        }
#pragma unroll
        for (int k = 0; k < POLL_SPANS; ++k) {
            const int j = base + k * THREADS, part = j / pairs, i = 2 * (j - part * pairs);
            if (lo[k]) got[part * 2 * pairs + i] = __uint_as_float((unsigned)w[k].x);
            if (hi[k]) got[part * 2 * pairs + i + 1] = __uint_as_float((unsigned)w[k].y);
        }
    }
    if (owed) meanwhile(threadIdx.x, THREADS);
    return 2 * pairs;
}

__device__ __forceinline__ float team_sum(float s) {  // over the ROW_LANES threads of a team
#pragma unroll
    for (int o = 1; o < ROW_LANES; o <<= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

// The n values' sums of their parts (got[k span + skip + i], as await_parts left them) into
// f(i, sum) in the team's first thread: a team a value, each thread adding every ROW_LANES-th
// part, so the loads go out together and the chain of dependent adds is parts / ROW_LANES long (in
// a fixed order: reproducible).
template <typename F>
__device__ __forceinline__ void sum_parts(const float* got, int span, int skip, int n, int parts, F f) {
    const int part = threadIdx.x % ROW_LANES;
    for (int base = 0; base < n; base += ROW_TEAMS) {
        const int i = base + threadIdx.x / ROW_LANES;
        float s = 0.0f;
        if (i < n)
#pragma unroll 4
            for (int k = part; k < parts; k += ROW_LANES) s += got[k * span + skip + i];
        s = team_sum(s);
        if (part == 0 && i < n) f(i, s);
    }
}

// y[i] = W[i, :] . xs for the tile's rows, a team of ROW_LANES threads a row, each taking every
// ROW_LANES-th float4 (so a team reads a row's consecutive 16-byte pieces): emit(i, y[i]).
template <typename Emit>
__device__ __forceinline__ void tile_dot(const Tile& t, const TileMemory& sm, Emit emit) {
    const float4* x4 = reinterpret_cast<const float4*>(sm.xs + t.x_loc);
    const int part = threadIdx.x % ROW_LANES, m4 = t.stride / 4;
    for (int base = 0; base < t.nr; base += ROW_TEAMS) {
        const int i = base + threadIdx.x / ROW_LANES;
        float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);  // four chains of adds, not one
        if (i < t.nr) {
            const float4* w4 = reinterpret_cast<const float4*>(sm.W + t.w_loc + i * t.stride);
#pragma unroll 4
            for (int m = part; m < m4; m += ROW_LANES) {
                const float4 w = w4[m], x = x4[m];
                a.x = fmaf(w.x, x.x, a.x);
                a.y = fmaf(w.y, x.y, a.y);
                a.z = fmaf(w.z, x.z, a.z);
                a.w = fmaf(w.w, x.w, a.w);
            }
        }
        const float s = team_sum((a.x + a.y) + (a.z + a.w));
        if (part == 0 && i < t.nr) emit(i, s);
    }
}

// g[j] = x_j (1 - x_j) W[:, j] . d for the tile's columns (the weights before this step's update,
// as the math requires), a team a column, each taking every ROW_LANES-th row: emit(j, g[j]).
template <typename Emit>
__device__ __forceinline__ void tile_dot_t(const Tile& t, const TileMemory& sm, Emit emit) {
    const float* d = sm.dl + t.d_loc;
    const int part = threadIdx.x % ROW_LANES;
    for (int base = 0; base < t.nc; base += ROW_TEAMS) {
        const int j = base + threadIdx.x / ROW_LANES;
        float s0 = 0.0f, s1 = 0.0f;  // two chains of adds, not one
        if (j < t.nc) {
            const float* col = sm.W + t.w_loc + j;
            int i = part;
#pragma unroll 2
            for (; i + ROW_LANES < t.nr; i += 2 * ROW_LANES) {
                s0 = fmaf(col[i * t.stride], d[i], s0);
                s1 = fmaf(col[(i + ROW_LANES) * t.stride], d[i + ROW_LANES], s1);
            }
            if (i < t.nr) s0 = fmaf(col[i * t.stride], d[i], s0);
        }
        const float s = team_sum(s0 + s1);
        if (part == 0 && j < t.nc) {
            const float x = sm.xs[t.x_loc + j];
            emit(j, x * (1.0f - x) * s);
        }
    }
}

// The momentum update of the tile, v = momentum v + rate d_i x_j, w += v, float4 items spread over
// the block (the bias column's input is 1; padding columns are 0 and stay 0).
__device__ __forceinline__ void update_tile(const Tile& t, const TileMemory& sm, float rate, float momentum,
                                            int me = threadIdx.x, int team = THREADS) {
    const int m4 = t.stride / 4;
    const float* d = sm.dl + t.d_loc;
    for (int k = me; k < t.nr * m4; k += team) {
        const int i = k / m4, j = 4 * (k - i * m4);
        update_four(t, sm.W, sm.V, i, j, *reinterpret_cast<const float4*>(sm.xs + t.x_loc + j),
                    __fmul_rn(rate, d[i]), momentum);
    }
}

// The training loop (the arguments and modes are tagged_train's, tagged.cuh).
__device__ __forceinline__ void tile_train(const Tile* tiles, int L, const TileMemory& sm, const float* x,
                                           const float* t, int n_samples, int iterations, int mode, u64* y, u64* g,
                                           float* err, float tolerance, float* predictions, GridBarrier& bar,
                                           int* status, long long timeout_ns, float rate, float momentum,
                                           unsigned tag0, PhaseTimer& timer, int& it) {
    for (int l = 0; l < L; ++l) {  // the bias input and the padding never change
        const Tile q = tiles[l];
        for (int j = q.nc + threadIdx.x; j < q.stride; j += THREADS) sm.xs[q.x_loc + j] = j == q.nc && q.bias ? 1.0f : 0.0f;
    }
    // The next sample's input and targets are fetched an iteration ahead, so no load from global
    // memory sits on the critical path: thread j holds input c0 + j of the first tile, the first
    // thread of row i's team the target of output row i (where they fit; else loaded when needed).
    const Tile& first = tiles[0];
    const Tile& last = tiles[L - 1];
    const bool x_ahead = first.nc <= THREADS, t_ahead = last.nr <= ROW_TEAMS;
    const int team = threadIdx.x / ROW_LANES;
    const bool holds_t = t_ahead && threadIdx.x % ROW_LANES == 0 && team < last.nr;
    float x_next = x_ahead && threadIdx.x < first.nc ? __ldg(x + first.c0 + threadIdx.x) : 0.0f;
    float t_next = holds_t ? __ldg(t + last.r0 + team) : 0.0f;
    for (it = 0; it < iterations; ++it) {
        const int s = it % n_samples;
        timer.iteration();
        const unsigned tag = tag0 + it;
        if (mode == 0 && s == 0 && it > 0) {
            const int go_on = epoch_ends(bar, err, it, n_samples, tolerance);
            if (go_on < 0) return;
            if (go_on == 0) break;
        }
        // ---- forward
        __syncthreads();  // the last update of the previous sample may still read layer 0's input
        for (int l = 0; l < L; ++l) {
            const Tile q = tiles[l];
            if (q.a < 0) continue;
            float* xs = sm.xs + q.x_loc;
            if (l == 0 && x_ahead) {
                if (threadIdx.x < q.nc) xs[threadIdx.x] = x_next;
            } else if (l == 0) {
                for (int j = threadIdx.x; j < q.nc; j += THREADS) xs[j] = __ldg(x + s * q.n_in + q.c0 + j);
            } else {
                const Tile p = tiles[l - 1];
                if (QUIET) __syncthreads();  // see "Quiet" in tagged.cuh
                timer.waits();
                bool ok;
                const int span = await_parts(sm.got, y + p.y_glob, even(p.n_out), q.c0, q.nc, p.Q, tag, status,
                                             timeout_ns, ok, [](int, int) {});
                if (__syncthreads_or(!ok)) return;
                timer.ready();
                sum_parts(sm.got, span, q.c0 & 1, q.nc, p.Q, [&](int j, float z) { xs[j] = sigmoid(z); });
            }
            __syncthreads();
            if (l < L - 1) {
                tile_dot(q, sm, [&](int i, float z) { store_tagged(y + q.y_glob + q.c * even(q.n_out) + q.r0 + i, z, tag); });
            } else {  // the output layer: Q = 1, so the sums are whole
                tile_dot(q, sm, [&](int i, float z) {
                    const int r = q.r0 + i;
                    const float o = sigmoid(z);
                    if (mode == 1) {
                        predictions[s * q.n_out + r] = o;
                        return;
                    }
                    const float e = (holds_t ? t_next : t[s * q.n_out + r]) - o;
                    sm.dl[q.d_loc + i] = o * (1.0f - o) * e;
                    atomicAdd(err + it / n_samples, 0.5f * e * e);
                });
            }
        }
        const int s_next = (it + 1) % n_samples;
        if (x_ahead && threadIdx.x < first.nc) x_next = __ldg(x + s_next * first.n_in + first.c0 + threadIdx.x);
        if (holds_t) t_next = __ldg(t + s_next * last.n_out + last.r0 + team);
        if (mode == 1) {
            bar.arrive();
            if (!bar.wait()) return;
            continue;
        }
        // ---- backward: step l has the deltas of layer l's rows (polled, but for the output
        // layer's), stores the tile's g for layer l - 1, and leaves its update to run while the
        // next step polls (pending), but for layer 0's, which the next sample needs at once.
        int pending = -1;
        for (int l = L - 1; l >= 0; --l) {
            const Tile q = tiles[l];
            __syncthreads();  // the step before's transposed dot has read the tile that `pending` updates
            if (l < L - 1 && q.a >= 0) {
                const Tile n = tiles[l + 1];
                timer.waits();
                bool ok;
                const int span = await_parts(sm.got, g + n.g_glob, even(n.n_in), q.r0, q.nr, n.P, tag, status,
                                             timeout_ns, ok, [&](int me, int team) {
                                                 if (pending >= 0) update_tile(tiles[pending], sm, rate, momentum, me, team);
                                             });
                if (__syncthreads_or(!ok)) return;
                timer.ready();
                sum_parts(sm.got, span, q.r0 & 1, q.nr, n.P, [&](int i, float d) { sm.dl[q.d_loc + i] = d; });
                __syncthreads();
            } else if (l < L - 1 && pending >= 0) {
                update_tile(tiles[pending], sm, rate, momentum);
            }
            pending = q.a >= 0 ? l : -1;
            if (l > 0 && q.a >= 0)
                tile_dot_t(q, sm, [&](int j, float v) { store_tagged(g + q.g_glob + q.a * even(q.n_in) + q.c0 + j, v, tag); });
        }
        __syncthreads();
        if (pending >= 0) update_tile(tiles[pending], sm, rate, momentum);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    fused_train(const int* __restrict__ widths, int n_widths, const float* __restrict__ x,
                const float* __restrict__ t, int n_samples, int iterations, int mode, float* __restrict__ w,
                float* __restrict__ v, float* out, float* acc, float* __restrict__ err, float tolerance,
                float* __restrict__ predictions, unsigned* sync, int* status, int* done, float rate,
                float momentum, long long timeout_ns, unsigned tag0, long long* phase_out) {
    extern __shared__ float4 smem4[];
    __shared__ Tile tiles[MAX_LAYERS + 1];
    const int L = n_widths - 1;
    if (threadIdx.x == 0) make_tiles(tiles, widths, L, blockIdx.x);
    __syncthreads();
    TileMemory sm;
    sm.W = reinterpret_cast<float*>(smem4);
    sm.V = sm.W + tiles[L].w_loc;
    sm.xs = sm.V + tiles[L].w_loc;
    sm.dl = sm.xs + tiles[L].x_loc;
    sm.got = sm.dl + tiles[L].d_loc;
    move_tiles<true>(tiles, L, w, v, sm.W, sm.V);
    GridBarrier bar{sync, status, timeout_ns, 0u};
    PhaseTimer timer;
    timer.begin();
    int it = 0;
    tile_train(tiles, L, sm, x, t, n_samples, iterations, mode, reinterpret_cast<u64*>(out),
               reinterpret_cast<u64*>(acc), err, tolerance, predictions, bar, status, timeout_ns, rate, momentum, tag0,
               timer, it);
    if (*(volatile int*)status != 0) return;
    __syncthreads();  // the last layer-0 update may still be running in other threads
    move_tiles<false>(tiles, L, w, v, sm.W, sm.V);
    if (blockIdx.x == 0 && threadIdx.x == 0) *done = it;
    timer.end(phase_out);
}
