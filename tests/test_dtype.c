/* Number formats: round-trips and rounding against values worked out by hand
 * from the format definitions (not produced by the code under test). */
#include "test.h"
#include "core/dtype.h"

#include <math.h>

TEST(dtype_bf16_rounding) {
    CHECK(bf16_to_f32(f32_to_bf16(1.0f)) == 1.0f);
    /* 1 + 2^-8 is halfway between 1 and 1+2^-7: ties to even -> 1 */
    CHECK(bf16_to_f32(f32_to_bf16(1.0f + 0x1p-8f)) == 1.0f);
    /* 1 + 3*2^-8 is halfway between 1+2^-7 and 1+2^-6: ties to even -> 1+2^-6 */
    CHECK(bf16_to_f32(f32_to_bf16(1.0f + 3 * 0x1p-8f)) == 1.0f + 0x1p-6f);
    CHECK(bf16_to_f32(f32_to_bf16(-2.5f)) == -2.5f);
    CHECK(isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(dtype_f16_rounding) {
    CHECK(f16_to_f32(f32_to_f16(65504.0f)) == 65504.0f);
    CHECK(isinf(f16_to_f32(f32_to_f16(65520.0f))));
    CHECK(f16_to_f32(f32_to_f16(65519.0f)) == 65504.0f);
    CHECK(f16_to_f32(f32_to_f16(0x1p-24f)) == 0x1p-24f);     /* smallest subnormal */
    CHECK(f16_to_f32(f32_to_f16(0x1p-25f)) == 0.0f);         /* tie -> even (0) */
    CHECK(f16_to_f32(f32_to_f16(3 * 0x1p-25f)) == 0x1p-23f); /* tie -> even (2) */
    CHECK(f16_to_f32(f32_to_f16(1.0f + 0x1p-11f)) == 1.0f);  /* tie -> even */
    CHECK(f16_to_f32(f32_to_f16(0.1f)) == 0.0999755859375f);
    /* NaN stays NaN both ways (numpy: float16(nan) is 0x7e00); inf is not a NaN */
    CHECK(f32_to_f16(NAN) == 0x7e00 && f32_to_f16(-NAN) == 0xfe00);
    CHECK(isnan(f16_to_f32(0x7e01)) && isnan(f16_to_f32(0x7c01)) && isinf(f16_to_f32(0x7c00)));
    for (int h = 0; h < 0x7c00; h++) /* every finite positive half round-trips */
        CHECK_MSG(f32_to_f16(f16_to_f32((uint16_t)h)) == h, "half 0x%04x", h);
}

TEST(dtype_fp8_e4m3_rounding) {
    CHECK(fp8e4m3_to_f32(0x7e) == 448.0f);
    CHECK(isnan(fp8e4m3_to_f32(0x7f)));
    CHECK(fp8e4m3_to_f32(0x01) == 0x1p-9f);
    CHECK(fp8e4m3_to_f32(0x08) == 0x1p-6f);
    CHECK(dtype_round(DT_FP8_E4M3, 0.3f) == 0.3125f);   /* 0.3 = 1.2*2^-2; step 2^-5 */
    CHECK(dtype_round(DT_FP8_E4M3, 0.02f) == 0.01953125f); /* 1.28*2^-6 -> 1.25*2^-6 */
    CHECK(dtype_round(DT_FP8_E4M3, 0.003f) == 0.00390625f); /* subnormal: 1.536*2^-9 -> 2*2^-9 */
    CHECK(dtype_round(DT_FP8_E4M3, 1.0625f) == 1.0f);  /* tie between 1 and 1.125 -> even */
    CHECK(isnan(dtype_round(DT_FP8_E4M3, 1000.0f)));
    /* above 448 the rounding decides (step 32 there): 449 and the tie 464 round to 448,
     * 470 to 480, which e4m3fn does not hold (its code is NaN) */
    CHECK(dtype_round(DT_FP8_E4M3, 449.0f) == 448.0f && dtype_round(DT_FP8_E4M3, 464.0f) == 448.0f);
    CHECK(isnan(dtype_round(DT_FP8_E4M3, 470.0f)));
    for (int b = 0; b < 0x7f; b++)
        CHECK_MSG(f32_to_fp8e4m3(fp8e4m3_to_f32((uint8_t)b)) == b, "fp8 0x%02x", b);
}

TEST(dtype_e8m0_rounding) {
    CHECK(dtype_round(DT_E8M0, 0.3f) == 0.25f);   /* log2 0.3 = -1.74 -> -2 */
    CHECK(dtype_round(DT_E8M0, 0.36f) == 0.5f);   /* log2 0.36 = -1.47 -> -1 */
    CHECK(dtype_round(DT_E8M0, 0.0f) == 0.0f);
    CHECK(dtype_round(DT_E8M0, 1.0f) == 1.0f);
    CHECK(dtype_round(DT_E8M0, 0x1p-20f) == 0x1p-20f);
    /* below the format's smallest power (2^-127) the smallest one, not a wrapped code */
    CHECK(dtype_round(DT_E8M0, 0x1p-130f) == 0x1p-127f && dtype_round(DT_E8M0, 0x1p-127f) == 0x1p-127f);
    CHECK(dtype_round(DT_E8M0, 0x1p127f) == 0x1p127f);
}
