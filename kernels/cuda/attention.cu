/* attention.cu - causal self-attention as three fused kernels (forward; the backward's
 * dq, and dk with dv) over attention_tile.h, replacing a cuBLAS call per (sequence,
 * head) and a T x T probability matrix per head: the forward keeps only each row's
 * log-sum-exp, the backward recomputes the probabilities from it.
 *
 * A block owns 64 rows of one (sequence, head): query rows (forward, dq) or key rows
 * (dk, dv). Each row is `lanes` consecutive threads, one per chunk of the head's
 * columns (attention_tile.h), holding their chunk of the row and its accumulators in
 * registers; the other side (keys and values, or queries and output gradients)
 * streams through shared memory a tile at a time, every thread reading the same
 * element (a broadcast). The lanes combine their partial dot products with an xor
 * butterfly over their own group (the mask names only them: rows of one warp leave
 * the causal loop at different keys). The head is padded with zeros to the width the
 * kernel is instantiated for (16 .. 256), which adds exact zeros: the CPU replay
 * (attention.c) computes the same bits except expf and logf.
 *
 * Work is causal: a query tile reads keys up to its last row only; grids put the
 * heaviest tiles first (the last query tiles, the first key tiles).
 */
#include <utility>

#include "launch.h"

extern "C" {
#include "attention_tile.h"
#include "kernels_cuda.h"
}

#define BQ 64    /* rows a block owns */

/* Per padded width W: columns per lane, lanes per row, the smem tile's rows (keys or
 * queries; 36 KiB for the pair of tiles at every width) and its strides: a lane's
 * chunk is padded by 4 floats so that the lanes of a row read different banks. */
template <int W> struct shape {
    static constexpr int D = W < 32 ? W : 32;
    static constexpr int LANES = W / D;
    static constexpr int THREADS = BQ * LANES;
    static constexpr int TILE = W <= 64 ? 64 : 4096 / W;
    static constexpr int LDS = D + 4;
    static constexpr int ROW = LANES * LDS;
};

/* The xor butterfly over the `lanes` threads of this thread's row (attention_tile.h's
 * tree); `mask` names exactly them. */
template <int LANES> __device__ __forceinline__ float lanes_sum(float x, unsigned mask)
{
#pragma unroll
    for (int w = 1; w < LANES; w *= 2)
        x = x + __shfl_xor_sync(mask, x, w);
    return x;
}

template <int LANES> __device__ __forceinline__ unsigned lanes_mask()
{
    unsigned first = (threadIdx.x % 32) & ~(unsigned)(LANES - 1);
    return LANES == 32 ? 0xffffffffu : ((1u << LANES) - 1) << first;
}

/* Rows r0 .. r0+TILE of a head (src: the head's column 0 of row 0, rows C3 apart) into
 * a padded smem tile; rows past T and columns past hs are zeros. */
template <int W>
__device__ void load_tile(float *dst, const float *src, int r0, int T, size_t ld, int hs)
{
    using S = shape<W>;
    for (int idx = threadIdx.x; idx < S::TILE * W; idx += S::THREADS) {
        int j = idx / W, c = idx % W, row = r0 + j;
        dst[j * S::ROW + (c / S::D) * S::LDS + c % S::D] =
            row < T && c < hs ? src[(size_t)row * ld + c] : 0.0f;
    }
}

/* This lane's chunk of a head row in registers (zeros past hs or past T). */
template <int D>
__device__ __forceinline__ void load_row(float *dst, const float *src, bool valid, int cols)
{
#pragma unroll
    for (int c = 0; c < D; c++)
        dst[c] = valid && c < cols ? src[c] : 0.0f;
}

template <int D>
__device__ __forceinline__ void store_row(float *dst, const float *src, int cols)
{
#pragma unroll
    for (int c = 0; c < D; c++)
        if (c < cols)
            dst[c] = src[c];
}

/* Where a thread's row lives: the (sequence, head) of blockIdx.x, the row of its tile,
 * its lane; the head's column 0 in qkv's row 0 of the sequence. */
struct where {
    int b, h, hs, lane, i, cols;
    size_t row0, C3;         /* the sequence's first row in qkv and out; qkv's stride */
    const float *head;
    unsigned mask;           /* this row's lanes */
};

template <int W>
__device__ __forceinline__ where locate(int tile, int T, int C, int H, const float *qkv)
{
    using S = shape<W>;
    where p;
    p.b = blockIdx.x / H;
    p.h = blockIdx.x % H;
    p.hs = C / H;
    p.lane = threadIdx.x % S::LANES;
    p.i = tile * BQ + threadIdx.x / S::LANES;
    p.cols = k_attn_lane_cols(p.hs, S::D, p.lane);
    p.row0 = (size_t)p.b * T;
    p.C3 = 3 * (size_t)C;
    p.head = qkv + p.row0 * p.C3 + (size_t)p.h * p.hs;
    p.mask = lanes_mask<S::LANES>();
    return p;
}

/* The keys and values a query tile needs (rows 0 .. its last row), a tile at a time
 * through shared memory; f(k0, ks, vs) runs for each on the threads whose row exists. */
template <int W, class F>
__device__ __forceinline__ void over_kv_tiles(const where &p, int T, int C, int tile, F f)
{
    using S = shape<W>;
    __shared__ __align__(16) float ks[S::TILE * S::ROW], vs[S::TILE * S::ROW];
    const int last = min(T, tile * BQ + BQ) - 1;
    for (int k0 = 0; k0 <= last; k0 += S::TILE) {
        __syncthreads();
        load_tile<W>(ks, p.head + C, k0, T, p.C3, p.hs);
        load_tile<W>(vs, p.head + 2 * C, k0, T, p.C3, p.hs);
        __syncthreads();
        if (p.i < T)
            f(k0, (const float *)ks + p.lane * S::LDS, (const float *)vs + p.lane * S::LDS);
    }
}

template <int D> __device__ __forceinline__ void zero(float *a)
{
#pragma unroll
    for (int c = 0; c < D; c++)
        a[c] = 0.0f;
}

template <int W>
__global__ void __launch_bounds__(shape<W>::THREADS)
fwd_kernel(float *out, float *lse, const float *qkv, int T, int C, int H, float scale)
{
    using S = shape<W>;
    const int tile = gridDim.y - 1 - blockIdx.y;
    const where p = locate<W>(tile, T, C, H, qkv);
    float q[S::D], acc[S::D], m = -INFINITY, l = 0.0f;
    load_row<S::D>(q, p.head + (size_t)p.i * p.C3 + p.lane * S::D, p.i < T, p.cols);
    zero<S::D>(acc);
    over_kv_tiles<W>(p, T, C, tile, [&](int k0, const float *ks, const float *vs) {
        for (int t = 0; t < S::TILE && k0 + t <= p.i; t += K_ATTN_KT) {
            int n = min(K_ATTN_KT, p.i + 1 - (k0 + t));
            float s[K_ATTN_KT];
            k_attn_scores_part(s, q, ks + t * S::ROW, S::ROW, n, S::D);
#pragma unroll
            for (int j = 0; j < K_ATTN_KT; j++)
                s[j] = lanes_sum<S::LANES>(s[j], p.mask);
            float alpha = k_attn_softmax_tile(s, n, scale, &m, &l);
            k_attn_acc_tile(acc, alpha, s, vs + t * S::ROW, S::ROW, n, S::D);
        }
    });
    if (p.i < T) {
        float o[S::D];
        float ls = k_attn_finish(o, acc, S::D, m, l);
        store_row<S::D>(out + (p.row0 + p.i) * C + (size_t)p.h * p.hs + p.lane * S::D, o,
                        p.cols);
        if (p.lane == 0)
            lse[((size_t)p.b * H + p.h) * T + p.i] = ls;
    }
}

/* D = dO . O per (row, head), the whole head in order (one thread each). */
__global__ static void rowdot_kernel(float *D, const float *dout, const float *out, int B,
                                     int T, int C, int H)
{
    int hs = C / H;
    K_FOR_EACH(x, (size_t)B * H * T) {
        size_t t = x % T, bh = x / T, b = bh / H, h = bh % H, row = b * T + t;
        D[x] = k_attn_dot_part(dout + row * C + h * hs, out + row * C + h * hs, hs);
    }
}

/* dq for 64 query rows: keys 0..i in order, from tiles of k and v. */
template <int W>
__global__ void __launch_bounds__(shape<W>::THREADS)
dq_kernel(float *dqkv, const float *dout, const float *qkv, const float *lse, const float *D,
          int T, int C, int H, float scale)
{
    using S = shape<W>;
    const int tile = gridDim.y - 1 - blockIdx.y;
    const where p = locate<W>(tile, T, C, H, qkv);
    const bool valid = p.i < T;
    float q[S::D], dO[S::D], acc[S::D], L = 0.0f, Dv = 0.0f;
    load_row<S::D>(q, p.head + (size_t)p.i * p.C3 + p.lane * S::D, valid, p.cols);
    load_row<S::D>(dO, dout + (p.row0 + p.i) * C + (size_t)p.h * p.hs + p.lane * S::D, valid,
                   p.cols);
    zero<S::D>(acc);
    if (valid) {
        L = lse[((size_t)p.b * H + p.h) * T + p.i];
        Dv = D[((size_t)p.b * H + p.h) * T + p.i];
    }
    over_kv_tiles<W>(p, T, C, tile, [&](int k0, const float *ks, const float *vs) {
        for (int jj = 0; jj < S::TILE && k0 + jj <= p.i; jj++) {
            const float *kj = ks + jj * S::ROW, *vj = vs + jj * S::ROW;
            float s = lanes_sum<S::LANES>(k_attn_dot_part(q, kj, S::D), p.mask);
            float dp = lanes_sum<S::LANES>(k_attn_dot_part(dO, vj, S::D), p.mask);
            float pr, ds = k_attn_pair(s, dp, scale, L, Dv, &pr);
            k_attn_axpy(acc, ds, kj, S::D);
        }
    });
    if (valid) {
        float o[S::D];
        k_attn_scale_out(o, acc, scale, S::D);
        store_row<S::D>(dqkv + (p.row0 + p.i) * p.C3 + (size_t)p.h * p.hs + p.lane * S::D, o,
                        p.cols);
    }
}

/* dk and dv for 64 key rows: queries j..T-1 in order, from tiles of q and dO (and
 * their lse and D). */
template <int W>
__global__ void __launch_bounds__(shape<W>::THREADS)
dkv_kernel(float *dqkv, const float *dout, const float *qkv, const float *lse, const float *D,
           int T, int C, int H, float scale)
{
    using S = shape<W>;
    __shared__ __align__(16) float qs[S::TILE * S::ROW], dos[S::TILE * S::ROW];
    __shared__ float Ls[S::TILE], Dsh[S::TILE];
    const int tile = blockIdx.y;
    const where p = locate<W>(tile, T, C, H, qkv);
    const int hs = p.hs, j = p.i;          /* this row is a key */
    const size_t C3 = p.C3;
    const float *head = p.head, *dhead = dout + p.row0 * C + (size_t)p.h * hs;
    const float *Lh = lse + ((size_t)p.b * H + p.h) * T, *Dh = D + ((size_t)p.b * H + p.h) * T;
    bool valid = j < T;
    float k[S::D], v[S::D], ak[S::D], av[S::D];
    load_row<S::D>(k, head + C + (size_t)j * C3 + p.lane * S::D, valid, p.cols);
    load_row<S::D>(v, head + 2 * C + (size_t)j * C3 + p.lane * S::D, valid, p.cols);
    zero<S::D>(ak);
    zero<S::D>(av);
    for (int q0 = tile * BQ; q0 < T; q0 += S::TILE) {
        __syncthreads();
        load_tile<W>(qs, head, q0, T, C3, hs);
        load_tile<W>(dos, dhead, q0, T, (size_t)C, hs);
        for (int x = threadIdx.x; x < S::TILE; x += S::THREADS) {
            Ls[x] = q0 + x < T ? Lh[q0 + x] : 0.0f;
            Dsh[x] = q0 + x < T ? Dh[q0 + x] : 0.0f;
        }
        __syncthreads();
        if (!valid)
            continue;
        for (int ii = 0; ii < S::TILE && q0 + ii < T; ii++) {
            if (q0 + ii < j)
                continue;
            const float *qi = qs + ii * S::ROW + p.lane * S::LDS;
            const float *dOi = dos + ii * S::ROW + p.lane * S::LDS;
            float s = lanes_sum<S::LANES>(k_attn_dot_part(qi, k, S::D), p.mask);
            float dp = lanes_sum<S::LANES>(k_attn_dot_part(dOi, v, S::D), p.mask);
            float pr, ds = k_attn_pair(s, dp, scale, Ls[ii], Dsh[ii], &pr);
            k_attn_axpy(av, pr, dOi, S::D);
            k_attn_axpy(ak, ds, qi, S::D);
        }
    }
    if (valid) {
        float o[S::D];
        float *dst = dqkv + (p.row0 + j) * C3 + (size_t)p.h * hs + p.lane * S::D;
        k_attn_scale_out(o, ak, scale, S::D);
        store_row<S::D>(dst + C, o, p.cols);
        k_attn_scale_out(o, av, 1.0f, S::D);
        store_row<S::D>(dst + 2 * C, o, p.cols);
    }
}

/* Calls f with the padded width as a compile-time constant; -EINVAL for a head wider
 * than K_ATTN_HS_MAX. */
template <class F> static int by_width(int hs, F f)
{
    switch (k_attn_width(hs)) {
    case 16: f(std::integral_constant<int, 16>()); break;
    case 32: f(std::integral_constant<int, 32>()); break;
    case 64: f(std::integral_constant<int, 64>()); break;
    case 128: f(std::integral_constant<int, 128>()); break;
    case 256: f(std::integral_constant<int, 256>()); break;
    default: return -EINVAL;
    }
    return k_launched();
}

static bool empty(int B, int T, int C, int H) { return B <= 0 || T <= 0 || C <= 0 || H <= 0; }

extern "C" int k_cuda_attention_fwd(float *out, float *lse, const float *qkv, int B, int T,
                                    int C, int H, void *stream)
{
    if (empty(B, T, C, H))
        return 0;
    cudaStream_t s = (cudaStream_t)stream;
    dim3 grid((unsigned)(B * H), (unsigned)((T + BQ - 1) / BQ));
    float scale = 1.0f / sqrtf((float)(C / H));
    return by_width(C / H, [&](auto w) {
        constexpr int W = decltype(w)::value;
        fwd_kernel<W><<<grid, shape<W>::THREADS, 0, s>>>(out, lse, qkv, T, C, H, scale);
    });
}

extern "C" int k_cuda_attention_bwd(float *dqkv, float *D, const float *dout,
                                    const float *qkv, const float *out, const float *lse,
                                    int B, int T, int C, int H, void *stream)
{
    if (empty(B, T, C, H))
        return 0;
    if (!k_attn_width(C / H))
        return -EINVAL;
    cudaStream_t s = (cudaStream_t)stream;
    size_t rows = (size_t)B * H * T;
    rowdot_kernel<<<k_blocks(rows), K_THREADS, 0, s>>>(D, dout, out, B, T, C, H);
    dim3 grid((unsigned)(B * H), (unsigned)((T + BQ - 1) / BQ));
    float scale = 1.0f / sqrtf((float)(C / H));
    return by_width(C / H, [&](auto w) {
        constexpr int W = decltype(w)::value;
        dq_kernel<W><<<grid, shape<W>::THREADS, 0, s>>>(dqkv, dout, qkv, lse, D, T, C, H,
                                                         scale);
        dkv_kernel<W><<<grid, shape<W>::THREADS, 0, s>>>(dqkv, dout, qkv, lse, D, T, C, H,
                                                          scale);
    });
}
