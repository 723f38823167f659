/* Scalar number formats: bf16, f16, fp8 e4m3 (OCP "fn": no inf, max 448),
 * e8m0 (power-of-two scale).  All conversions to the narrow formats round to
 * nearest, ties to even — the rounding torch uses in `.to(dtype)` — so that a
 * scale stored here equals the one the PyTorch references use. */
#ifndef TL_DTYPE_H
#define TL_DTYPE_H

#include <stdint.h>
#include <string.h>

typedef enum {
    DT_F32 = 0,
    DT_F16,
    DT_BF16,
    DT_U8,
    DT_I8,
    DT_I32,
    DT_FP8_E4M3,
    DT_E8M0,
    /* the rest of safetensors' dtypes: read so that a tensor ternlab does not use
     * (an I64 position_ids buffer) does not fail the load; never a weight or scale */
    DT_I64,
    DT_F64,
    DT_BOOL,
    DT_I16,
    DT_U16,
    DT_U32,
    DT_U64,
    DT_F8_E5M2,
    DT_F8_E4M3FNUZ,
    DT_F8_E5M2FNUZ,
    DT_C64,
    /* sub-byte: packed, an element is not a whole number of bytes (dtype_bits) */
    DT_F4,
    DT_F6_E2M3,
    DT_F6_E3M2,
    DT_COUNT
} DType;

const char *dtype_name(DType t);
/* bits of one element (4 for F4, 6 for F6_*); dtype_size: whole bytes of one
 * element, 0 for the sub-byte formats */
unsigned dtype_bits(DType t);
size_t dtype_size(DType t);

static inline float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float bf16_to_f32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

/* Round to nearest even; NaN stays NaN (quiet). */
static inline uint16_t f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float fp8e4m3_to_f32(uint8_t b);
uint8_t f32_to_fp8e4m3(float f);
/* e8m0: an 8-bit biased exponent (bias 127), value 2^(e-127); 0xff = NaN.
 * f32_to_e8m0 rounds log2|f| to nearest, ties to even.  Zero has no e8m0
 * code; callers keep an all-zero group's scale as 0 separately (see quant). */
float e8m0_to_f32(uint8_t e);
uint8_t f32_to_e8m0(float f);

/* f -> nearest value representable in `t` (t in F32, BF16, F16, FP8_E4M3, E8M0),
 * returned as f32.  For E8M0, 0 stays 0 and negative inputs keep their sign. */
float dtype_round(DType t, float f);

void bf16_to_f32_array(const uint16_t *src, float *dst, size_t n);
void f16_to_f32_array(const uint16_t *src, float *dst, size_t n);

#endif
