/* The linear layers of the in-process engine's forward pass: y[M][N] = x[M][K] · W[N][K]^T (+ b),
 * for any number of rows M, batch-invariant by construction.
 *
 * W is packed once, at start, into blocks of 16 output features: [N/16][K][16] in float32, or
 * [N/16][K/2][16][2] in bfloat16 (pairs of inputs side by side, as AVX-512 BF16's dot product
 * takes them). A block is read front to back; its 16 outputs are 16 vector lanes, each summing
 * its own products over k in order. So every output y[m][n] is computed by the same sequence
 * of operations whatever M is, which rows it shares a pass with, how the rows are grouped into
 * register tiles and which thread computes it: no GEMM library's shape-dependent choices, and
 * no padding of small batches. At a few rows the weights' one read from memory is the cost
 * (a decode step); from about 8 (bfloat16) rows up, the multiply-adds.
 *
 * Float32 accumulation; the output rounded once to the model's dtype. Built by `kernels.py`.
 */
#include <stdint.h>
#include <string.h>
#ifdef __AVX512BF16__
#include <immintrin.h>
#endif

#include "bf16.h"
/* A register tile holds TILE_SUMS accumulators, rows × 16-output blocks: 8 × 2 for a pass of 5
 * rows or more, 4 × 4 for 3 or 4, 2 × 8 for 1 or 2 (few rows take more blocks at once: more
 * independent sums, and more of the weights' streams in flight). */
#define TILE_SUMS 16
#define MAX_BLOCKS 8

typedef float v16 __attribute__((vector_size(64)));
typedef uint16_t u16x16 __attribute__((vector_size(32)));
typedef uint32_t u32x16 __attribute__((vector_size(64)));

/* The packed layout's size in elements (K rounded up to even in bfloat16). */
int64_t spex_packed_size(int64_t n_out, int64_t k_in, int dtype) {
    const int64_t k = dtype == BF16 ? (k_in + 1) / 2 * 2 : k_in;
    return (n_out + LANES - 1) / LANES * LANES * k;
}

/* W [N][K] (row-major, the model's dtype) into its packed layout; missing outputs and the odd
 * K's partner are zero. */
void spex_pack(const void *w, int64_t n_out, int64_t k_in, int dtype, void *packed) {
    const int64_t blocks = (n_out + LANES - 1) / LANES;
    if (dtype == F32) {
        const float *src = (const float *)w;
        float *dst = (float *)packed;
        for (int64_t b = 0; b < blocks; b++)
            for (int64_t k = 0; k < k_in; k++)
                for (int64_t j = 0; j < LANES; j++) {
                    const int64_t n = b * LANES + j;
                    dst[(b * k_in + k) * LANES + j] = n < n_out ? src[n * k_in + k] : 0.0f;
                }
    } else {
        const uint16_t *src = (const uint16_t *)w;
        uint16_t *dst = (uint16_t *)packed;
        const int64_t pairs = (k_in + 1) / 2;
        for (int64_t b = 0; b < blocks; b++)
            for (int64_t p = 0; p < pairs; p++)
                for (int64_t j = 0; j < LANES; j++)
                    for (int64_t h = 0; h < 2; h++) {
                        const int64_t n = b * LANES + j, k = 2 * p + h;
                        dst[((b * pairs + p) * LANES + j) * 2 + h] =
                            n < n_out && k < k_in ? src[n * k_in + k] : 0;
                    }
    }
}

/* One register tile: rows [m0, m0 + rows) × blocks [b0, b0 + nblocks), accumulated over all of
 * K into acc (lane j of acc[r · nblocks + c] is output (m0 + r, (b0 + c)·16 + j)). */
static inline __attribute__((always_inline)) void tile(const void *x, const void *packed, int64_t k_in,
                                                       int dtype, int64_t m0, int64_t rows, int64_t b0,
                                                       int64_t nblocks, v16 acc[TILE_SUMS]) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < nblocks; c++) acc[r * nblocks + c] = (v16){0};
    if (dtype == F32) {
        const float *xs = (const float *)x;
        const float *w = (const float *)packed;
        for (int64_t k = 0; k < k_in; k++) {
            v16 wk[MAX_BLOCKS];
            for (int64_t c = 0; c < nblocks; c++) memcpy(&wk[c], w + ((b0 + c) * k_in + k) * LANES, sizeof(v16));
            for (int64_t r = 0; r < rows; r++) {
                const float xr = xs[(m0 + r) * k_in + k];
                for (int64_t c = 0; c < nblocks; c++) acc[r * nblocks + c] += xr * wk[c];
            }
        }
        return;
    }
    const uint16_t *xs = (const uint16_t *)x;
    const uint16_t *w = (const uint16_t *)packed;
    const int64_t pairs = (k_in + 1) / 2;
#ifdef __AVX512BF16__
    if (k_in % 2 == 0) { /* a dot product of bfloat16 pairs, accumulated in float32 */
        __m512 a[TILE_SUMS];
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < nblocks; c++) a[r * nblocks + c] = _mm512_setzero_ps();
        for (int64_t p = 0; p < pairs; p++) {
            __m512i wk[MAX_BLOCKS];
            for (int64_t c = 0; c < nblocks; c++)
                wk[c] = _mm512_loadu_si512((const void *)(w + ((b0 + c) * pairs + p) * LANES * 2));
            for (int64_t r = 0; r < rows; r++) {
                int32_t pair;
                memcpy(&pair, xs + (m0 + r) * k_in + 2 * p, sizeof pair);
                const __m512i xr = _mm512_set1_epi32(pair);
                for (int64_t c = 0; c < nblocks; c++)
                    a[r * nblocks + c] = _mm512_dpbf16_ps(a[r * nblocks + c], (__m512bh)xr, (__m512bh)wk[c]);
            }
        }
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < nblocks; c++) memcpy(&acc[r * nblocks + c], &a[r * nblocks + c], sizeof(v16));
        return;
    }
#endif
    /* Elsewhere: each pair's two products in order, widened to float32. */
    for (int64_t p = 0; p < pairs; p++) {
        v16 lo[MAX_BLOCKS], hi[MAX_BLOCKS];
        for (int64_t c = 0; c < nblocks; c++) {
            const uint16_t *src = w + ((b0 + c) * pairs + p) * LANES * 2;
            u32x16 bits;
            memcpy(&bits, src, sizeof bits);
            const u32x16 low = bits << 16, high = bits & 0xffff0000u;
            memcpy(&lo[c], &low, sizeof(v16));
            memcpy(&hi[c], &high, sizeof(v16));
        }
        for (int64_t r = 0; r < rows; r++) {
            const int64_t at = (m0 + r) * k_in + 2 * p;
            const float x0 = from_bf16(xs[at]), x1 = 2 * p + 1 < k_in ? from_bf16(xs[at + 1]) : 0.0f;
            for (int64_t c = 0; c < nblocks; c++) acc[r * nblocks + c] += x0 * lo[c] + x1 * hi[c];
        }
    }
}

/* A whole tile (`tile_rows` × TILE_SUMS / `tile_rows` blocks, `rows` of its rows used), its loops
 * unrolled for each shape so that the accumulators stay in registers; the arithmetic is the
 * same as `tile`'s. */
static __attribute__((noinline)) void whole_tile(const void *x, const void *packed, int64_t k_in, int dtype,
                                                 int64_t m0, int64_t tile_rows, int64_t rows, int64_t b0,
                                                 v16 acc[TILE_SUMS]) {
    switch (tile_rows * 16 + rows) {
#define SHAPE(TR, R)                                                     \
    case TR * 16 + R:                                                    \
        tile(x, packed, k_in, dtype, m0, R, b0, TILE_SUMS / TR, acc); \
        return;
        SHAPE(2, 1) SHAPE(2, 2) SHAPE(4, 3) SHAPE(4, 4) /* 4-row tiles: passes of 3 or 4 rows */
        SHAPE(8, 1) SHAPE(8, 2) SHAPE(8, 3) SHAPE(8, 4) SHAPE(8, 5) SHAPE(8, 6) SHAPE(8, 7) SHAPE(8, 8)
#undef SHAPE
    default: /* not a shape `spex_linear` makes: the same arithmetic, not unrolled */
        tile(x, packed, k_in, dtype, m0, rows, b0, TILE_SUMS / tile_rows, acc);
    }
}

/* y[M][N] = x[M][K] · W^T (+ bias, float32 or the model's dtype as `bias_dtype`, NULL for none),
 * x and y in the model's dtype. Outputs are split between threads by blocks of 16. */
void spex_linear(int64_t rows, int64_t n_out, int64_t k_in, int dtype, const void *x, const void *packed,
                 const void *bias, void *y, int threads) {
    const int64_t blocks = (n_out + LANES - 1) / LANES;
    const int64_t tile_rows = rows <= 2 ? 2 : rows <= 4 ? 4 : 8, tile_blocks = TILE_SUMS / tile_rows;
    const int64_t tiles = (blocks + tile_blocks - 1) / tile_blocks;
#pragma omp parallel for schedule(static) num_threads(threads > 0 ? threads : 1) if (threads > 1 && tiles > 1)
    for (int64_t t = 0; t < tiles; t++) {
        const int64_t b0 = t * tile_blocks;
        const int64_t nblocks = blocks - b0 < tile_blocks ? blocks - b0 : tile_blocks;
        for (int64_t m0 = 0; m0 < rows; m0 += tile_rows) {
            const int64_t mr = rows - m0 < tile_rows ? rows - m0 : tile_rows;
            v16 acc[TILE_SUMS];
            if (nblocks == tile_blocks)
                whole_tile(x, packed, k_in, dtype, m0, tile_rows, mr, b0, acc);
            else
                tile(x, packed, k_in, dtype, m0, mr, b0, nblocks, acc);
            for (int64_t r = 0; r < mr; r++)
                for (int64_t c = 0; c < nblocks; c++) {
                    float out[LANES];
                    memcpy(out, &acc[r * nblocks + c], sizeof out);
                    for (int64_t j = 0; j < LANES; j++) {
                        const int64_t n = (b0 + c) * LANES + j;
                        if (n >= n_out) break;
                        float v = out[j];
                        if (bias) v += dtype == F32 ? ((const float *)bias)[n] : from_bf16(((const uint16_t *)bias)[n]);
                        if (dtype == F32)
                            ((float *)y)[(m0 + r) * n_out + n] = v;
                        else
                            ((uint16_t *)y)[(m0 + r) * n_out + n] = to_bf16(v);
                    }
                }
        }
    }
}
