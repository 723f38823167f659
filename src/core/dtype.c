#include "dtype.h"

#include <math.h>

const char *dtype_name(DType t) {
    static const char *names[DT_COUNT] = {
        "F32", "F16", "BF16", "U8",  "I8",  "I32", "F8_E4M3", "E8M0",        "I64",         "F64",
        "BOOL", "I16", "U16", "U32", "U64", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "C64", "F4",
        "F6_E2M3", "F6_E3M2"};
    return (unsigned)t < DT_COUNT ? names[t] : "?";
}

unsigned dtype_bits(DType t) {
    switch (t) {
    case DT_I64: case DT_F64: case DT_U64: case DT_C64: return 64;
    case DT_F32: case DT_I32: case DT_U32: return 32;
    case DT_F16: case DT_BF16: case DT_I16: case DT_U16: return 16;
    case DT_F4: return 4;
    case DT_F6_E2M3: case DT_F6_E3M2: return 6;
    default: return 8;
    }
}

size_t dtype_size(DType t) { return dtype_bits(t) % 8 ? 0 : dtype_bits(t) / 8; }

float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in f32 */
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (man << 13));
    return f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u;       /* NaN */
    if (a >= 0x477ff000u) return sign | 0x7c00u;      /* rounds to >= 65520: inf */
    if (a < 0x38800000u) {                            /* below 2^-14: subnormal half */
        /* value / 2^-24 rounded to nearest even gives the subnormal mantissa;
         * the scaling by a power of two is exact and rintf rounds half to even. */
        float m = rintf(f32_from_bits(a) * 0x1p24f);
        return sign | (uint16_t)m;
    }
    /* normal: drop 13 mantissa bits with round-to-nearest-even */
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    return sign | (uint16_t)((r >> 13) - (112u << 10));
}

float fp8e4m3_to_f32(uint8_t b) {
    int sign = b & 0x80;
    int exp = (b >> 3) & 0xf, man = b & 7;
    float v;
    if (exp == 0xf && man == 7) return NAN;
    if (exp == 0) v = (float)man * 0x1p-9f;
    else v = ldexpf(1.0f + (float)man / 8.0f, exp - 7);
    return sign ? -v : v;
}

uint8_t f32_to_fp8e4m3(float f) {
    if (isnan(f)) return 0x7f;
    uint8_t sign = signbit(f) ? 0x80 : 0;
    float a = fabsf(f);
    if (a < 0x1p-6f) {
        /* subnormal range (step 2^-9); 2^-6 itself is the smallest normal */
        float m = rintf(a * 0x1p9f);
        if (m >= 8.0f) return sign | 0x08;
        return sign | (uint8_t)m;
    }
    int e;
    frexpf(a, &e);              /* a = fr * 2^e, fr in [0.5,1) -> unbiased exp e-1 */
    int ue = e - 1;
    float step = ldexpf(1.0f, ue - 3);
    float q = rintf(a / step) * step; /* exact: a/step is a scaling by 2^k */
    if (q > 448.0f) return sign | 0x7f; /* torch's float8_e4m3fn: overflow is NaN */
    frexpf(q, &e);
    ue = e - 1;
    int man = (int)(ldexpf(q, -ue) * 8.0f) - 8;
    return sign | (uint8_t)(((ue + 7) << 3) | man);
}

float e8m0_to_f32(uint8_t e) {
    if (e == 0xff) return NAN;
    return ldexpf(1.0f, (int)e - 127);
}

uint8_t f32_to_e8m0(float f) {
    float a = fabsf(f);
    if (!(a > 0.0f) || isinf(a)) return 0xff;
    float l = rintf(log2f(a));
    if (l < -127.0f) l = -127.0f;
    if (l > 127.0f) return 0xff;
    return (uint8_t)((int)l + 127);
}

float dtype_round(DType t, float f) {
    switch (t) {
    case DT_F32: return f;
    case DT_BF16: return bf16_to_f32(f32_to_bf16(f));
    case DT_F16: return f16_to_f32(f32_to_f16(f));
    case DT_FP8_E4M3: return fp8e4m3_to_f32(f32_to_fp8e4m3(f));
    case DT_E8M0:
        if (f == 0.0f) return 0.0f;
        return copysignf(e8m0_to_f32(f32_to_e8m0(f)), f);
    default: return NAN;
    }
}

void bf16_to_f32_array(const uint16_t *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = bf16_to_f32(src[i]);
}

void f16_to_f32_array(const uint16_t *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = f16_to_f32(src[i]);
}
