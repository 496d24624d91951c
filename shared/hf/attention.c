/* One attention layer of the in-process engine's forward pass, for every row of the pass at
 * once: decode rows (one token of a sequence) and prefill rows (a token of a prompt piece).
 *
 * A row's keys and values are a list of segments, attended in order: the prompt pieces it
 * shares with other sequences (by reference, never copied) and, last, the segment its own
 * token goes into. A segment holds keys [layers, kv_heads, capacity / 16, head_dim, 16] (in
 * blocks of 16 positions, transposed: the scores of a block are 16 vector lanes, each summing
 * its own position's products in order, over memory read front to back) and values [layers,
 * kv_heads, capacity, head_dim], in the model's dtype (float32 or bfloat16); a block is always
 * read whole.
 * Each layer first writes every row's new key and value into its last segment, then computes
 * every row's attention; so a piece's rows, and a piece and the one after it, share a pass.
 *
 * Batch invariance by construction: a row's numbers depend on its own query and the keys and
 * values it attends to, in a fixed order set by its own length alone, never on its batch
 * mates, the thread count or where it sits. Exact two-pass softmax in float32.
 *
 * Built by `attention.py` with the machine's C compiler on first use; nothing here calls
 * Python or torch.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"

static inline void load(const void *src, int dtype, int64_t at, float *dst, int64_t n) {
    if (dtype == F32) {
        memcpy(dst, (const float *)src + at, (size_t)n * sizeof(float));
    } else {
        const uint16_t *s = (const uint16_t *)src + at;
        for (int64_t i = 0; i < n; i++) dst[i] = from_bf16(s[i]);
    }
}

static inline void store(void *dst, int dtype, int64_t at, const float *src, int64_t n) {
    if (dtype == F32) {
        memcpy((float *)dst + at, src, (size_t)n * sizeof(float));
    } else {
        uint16_t *d = (uint16_t *)dst + at;
        for (int64_t i = 0; i < n; i++) d[i] = to_bf16(src[i]);
    }
}

typedef struct {
    const int64_t *keys, *values, *cap, *len; /* per segment: addresses, capacity, tokens attended */
} Segments;

/* Keys in blocks of 16 positions, each block [d][16]: one block is read front to back. */
static inline int64_t key_at(int64_t layer, int64_t kv_heads, int64_t h, int64_t cap, int64_t t, int64_t d) {
    return (layer * kv_heads + h) * d * cap + (t / LANES) * d * LANES + t % LANES;
}

static inline int64_t value_at(int64_t layer, int64_t kv_heads, int64_t h, int64_t cap, int64_t t, int64_t d) {
    return ((layer * kv_heads + h) * cap + t) * d;
}

/* 16 float lanes (GCC/Clang vector extensions: lane-wise arithmetic, one AVX-512 register or
 * several narrower ones). */
typedef float v16 __attribute__((vector_size(64)));
typedef uint16_t u16x16 __attribute__((vector_size(32)));
typedef uint32_t u32x16 __attribute__((vector_size(64)));

static inline v16 widen16(const void *src, int dtype) {
    v16 out;
    if (dtype == F32) {
        memcpy(&out, src, sizeof out);
    } else {
        u16x16 b;
        memcpy(&b, src, sizeof b);
        const u32x16 bits = __builtin_convertvector(b, u32x16) << 16;
        memcpy(&out, &bits, sizeof out);
    }
    return out;
}

typedef int32_t i32x16 __attribute__((vector_size(64)));

static inline v16 select16(i32x16 mask, v16 a, v16 b) { /* a where mask is all ones, else b */
    i32x16 ai, bi;
    memcpy(&ai, &a, sizeof a);
    memcpy(&bi, &b, sizeof b);
    const i32x16 bits = (ai & mask) | (bi & ~mask);
    v16 out;
    memcpy(&out, &bits, sizeof out);
    return out;
}

/* exp(x) lane by lane for x <= 0: 2^n · e^r with |r| <= ln2/2 and a degree-7 Taylor
 * polynomial (relative error under 2e-7); 0 below -87. */
static inline v16 exp16(v16 x) {
    const v16 zero = {0}, floor = zero - 87.0f;
    const i32x16 below = x < floor;
    const v16 y = select16(below, floor, x);
    const i32x16 whole = __builtin_convertvector(y * 1.44269504088896341f - 0.5f, i32x16); /* rounded */
    const v16 n = __builtin_convertvector(whole, v16);
    const v16 r = y - n * 0.693145751953125f - n * 1.428606765330187045e-06f;
    v16 p = r * (1.0f / 5040.0f) + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const i32x16 scale = (whole + 127) << 23;
    v16 two_n;
    memcpy(&two_n, &scale, sizeof two_n);
    return select16(below, zero, p * two_n);
}

/* exp(score - max) in place over `n` scores (and up to 15 past them, which are not read
 * again); the reciprocal of their sum (16 lanes, summed by a fixed tree). */
static float softmax_weights(float *sc, int64_t n) {
    float top[LANES], sum[LANES] = {0};
    for (int j = 0; j < LANES; j++) top[j] = -INFINITY;
    int64_t t = 0;
    for (; t + LANES <= n; t += LANES)
        for (int j = 0; j < LANES; j++) top[j] = sc[t + j] > top[j] ? sc[t + j] : top[j];
    for (int j = 0; t + j < n; j++) top[j] = sc[t + j] > top[j] ? sc[t + j] : top[j];
    float m = top[0];
    for (int j = 1; j < LANES; j++) m = top[j] > m ? top[j] : m;
    for (t = 0; t < n; t += LANES) {
        v16 x;
        memcpy(&x, sc + t, sizeof x);
        x = exp16(x - m);
        memcpy(sc + t, &x, sizeof x);
    }
    for (t = 0; t + LANES <= n; t += LANES)
        for (int j = 0; j < LANES; j++) sum[j] += sc[t + j];
    for (int j = 0; t + j < n; j++) sum[j] += sc[t + j];
    for (int w = LANES / 2; w > 0; w /= 2)
        for (int j = 0; j < w; j++) sum[j] += sum[j + w];
    return 1.0f / sum[0];
}

/* Row r's attention for kv head h: its `group` query heads over every position of its
 * segments. Inlined with `group` and `d` constant where they are common, so that the
 * accumulators live in registers; the arithmetic is the same either way. */
static inline __attribute__((always_inline)) void attend_one(
    int64_t layer, int64_t r, int64_t h, int64_t heads, int64_t kv_heads, const int64_t d, const int64_t group,
    int dtype, float scale, const void *q, void *out, Segments seg, int64_t first, int64_t nseg,
    int64_t last_len, float *work, int64_t room) {
    const int64_t end = first + nseg;
    const size_t esize = dtype == F32 ? 4 : 2;
    float *qf = work;               /* [group][d] */
    float *score = qf + group * d;  /* [group][room] */
    for (int64_t g = 0; g < group; g++) {
        load(q, dtype, (r * heads + h * group + g) * d, qf + g * d, d);
        for (int64_t i = 0; i < d; i++) qf[g * d + i] *= scale;
    }
    /* Scores: lane j of query g is position t + j's sum over the head dimension, in order. */
    int64_t total = 0;
    for (int64_t s = first; s < end; s++) {
        const int64_t n = (s == end - 1) ? last_len : seg.len[s], cap = seg.cap[s];
        const char *keys = (const char *)(intptr_t)seg.keys[s];
        for (int64_t t = 0; t < n; t += LANES) { /* a last block's lanes past n are overwritten */
            const char *block = keys + key_at(layer, kv_heads, h, cap, t, d) * esize;
            v16 lanes[group];
            for (int64_t g = 0; g < group; g++) lanes[g] = (v16){0};
            for (int64_t i = 0; i < d; i++) {
                const v16 k = widen16(block + i * LANES * esize, dtype);
                for (int64_t g = 0; g < group; g++) lanes[g] += qf[g * d + i] * k;
            }
            for (int64_t g = 0; g < group; g++) memcpy(score + g * room + total + t, &lanes[g], sizeof(v16));
        }
        total += n;
    }
    float inv_sum[group];
    for (int64_t g = 0; g < group; g++) inv_sum[g] = softmax_weights(score + g * room, total);
    /* Values: each output element sums its positions in order. */
    v16 acc[group][d / LANES];
    for (int64_t g = 0; g < group; g++)
        for (int64_t c = 0; c < d / LANES; c++) acc[g][c] = (v16){0};
    total = 0;
    for (int64_t s = first; s < end; s++) {
        const int64_t n = (s == end - 1) ? last_len : seg.len[s];
        const char *values = (const char *)(intptr_t)seg.values[s] + value_at(layer, kv_heads, h, seg.cap[s], 0, d) * esize;
        for (int64_t t = 0; t < n; t++)
            for (int64_t c = 0; c < d / LANES; c++) {
                const v16 v = widen16(values + (t * d + c * LANES) * esize, dtype);
                for (int64_t g = 0; g < group; g++) acc[g][c] += score[g * room + total + t] * v;
            }
        total += n;
    }
    for (int64_t g = 0; g < group; g++) {
        float o[d];
        for (int64_t c = 0; c < d / LANES; c++) {
            const v16 scaled = acc[g][c] * inv_sum[g];
            memcpy(o + c * LANES, &scaled, sizeof scaled);
        }
        store(out, dtype, (r * heads + h * group + g) * d, o, d);
    }
}

/* attend_one with the common shapes constant (the head dimension a multiple of 16 always). */
static void attend_item(int64_t layer, int64_t r, int64_t h, int64_t heads, int64_t kv_heads, int64_t d,
                        int dtype, float scale, const void *q, void *out, Segments seg, int64_t first,
                        int64_t nseg, int64_t last_len, float *work, int64_t room) {
    const int64_t group = heads / kv_heads;
#define SHAPE(D, G)                                                                                        \
    if (d == D && group == G) {                                                                            \
        attend_one(layer, r, h, heads, kv_heads, D, G, dtype, scale, q, out, seg, first, nseg, last_len, work, \
                   room);                                                                                  \
        return;                                                                                            \
    }
    SHAPE(64, 1) SHAPE(64, 2) SHAPE(64, 3) SHAPE(64, 4) SHAPE(128, 1) SHAPE(128, 2) SHAPE(128, 4) SHAPE(128, 8)
#undef SHAPE
    attend_one(layer, r, h, heads, kv_heads, d, group, dtype, scale, q, out, seg, first, nseg, last_len, work, room);
}

/* The layer's attention for `rows` rows. q, out: [rows, heads, d]; k_new, v_new: [rows,
 * kv_heads, d], written first at position last_len - 1 of each row's last segment. Entries
 * [first, first + nseg) of the segment table are a row's; its last is attended up to
 * last_len. Returns 0, or -1 when out of memory, the heads do not group (at most 64 query
 * heads per kv head) or the head dimension is not a multiple of 16. */
int spex_attend(int64_t layer, int64_t rows, int64_t heads, int64_t kv_heads, int64_t d, int dtype,
                float scale, const void *q, const void *k_new, const void *v_new, void *out,
                const int64_t *seg_keys, const int64_t *seg_values, const int64_t *seg_cap,
                const int64_t *seg_len, const int64_t *row_first, const int64_t *row_nseg,
                const int64_t *row_last_len, int threads) {
    if (kv_heads <= 0 || heads % kv_heads || heads / kv_heads > 64 || d % LANES) return -1;
    const size_t esize = dtype == F32 ? 4 : 2;
    Segments seg = {seg_keys, seg_values, seg_cap, seg_len};
    int64_t longest = 0;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t s = row_first[r] + row_nseg[r] - 1, t = row_last_len[r] - 1, cap = seg_cap[s];
        char *keys = (char *)(intptr_t)seg_keys[s], *values = (char *)(intptr_t)seg_values[s];
        for (int64_t h = 0; h < kv_heads; h++) {
            const char *k = (const char *)k_new + (r * kv_heads + h) * d * esize;
            for (int64_t i = 0; i < d; i++)
                memcpy(keys + (key_at(layer, kv_heads, h, cap, t, d) + i * LANES) * esize, k + i * esize, esize);
            memcpy(values + value_at(layer, kv_heads, h, cap, t, d) * esize,
                   (const char *)v_new + (r * kv_heads + h) * d * esize, (size_t)d * esize);
        }
        int64_t total = row_last_len[r];
        for (int64_t x = row_first[r]; x < s; x++) total += seg_len[x];
        longest = total > longest ? total : longest;
    }
    const int64_t group = heads / kv_heads;
    int64_t most_segments = 0;
    for (int64_t r = 0; r < rows; r++) most_segments = row_nseg[r] > most_segments ? row_nseg[r] : most_segments;
    const int64_t span = longest + LANES * most_segments; /* each segment's last block may run over */
    int failed = 0;
#pragma omp parallel num_threads(threads > 0 ? threads : 1) if (threads > 1 && rows * kv_heads > 1)
    {
        float *work = malloc((size_t)(group * d + group * span) * sizeof(float));
        if (!work) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t i = 0; i < rows * kv_heads; i++) {
            if (!work) continue;
            const int64_t r = i / kv_heads, h = i % kv_heads;
            attend_item(layer, r, h, heads, kv_heads, d, dtype, scale, q, out, seg, row_first[r], row_nseg[r],
                        row_last_len[r], work, span);
        }
        free(work);
    }
    return failed ? -1 : 0;
}
