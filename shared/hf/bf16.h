/* What the engine's two kernels (`attention.c`, `linear.c`) share: the dtype codes
 * (`kernels.DTYPES`), the vector width, and bfloat16 <-> float32 as torch converts. */
#ifndef SPEX_BF16_H
#define SPEX_BF16_H

#include <stdint.h>
#include <string.h>

enum { F32 = 0, BF16 = 1 };
#define LANES 16

static inline float from_bf16(uint16_t b) {
    const uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t to_bf16(float f) { /* round to nearest even, as torch does */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0; /* NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

#endif
