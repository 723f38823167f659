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
    for (int b = 0; b < 0x7f; b++)
        CHECK_MSG(f32_to_fp8e4m3(fp8e4m3_to_f32((uint8_t)b)) == b, "fp8 0x%02x", b);
}

TEST(dtype_e8m0_rounding) {
    CHECK(dtype_round(DT_E8M0, 0.3f) == 0.25f);   /* log2 0.3 = -1.74 -> -2 */
    CHECK(dtype_round(DT_E8M0, 0.36f) == 0.5f);   /* log2 0.36 = -1.47 -> -1 */
    CHECK(dtype_round(DT_E8M0, 0.0f) == 0.0f);
    CHECK(dtype_round(DT_E8M0, 1.0f) == 1.0f);
    CHECK(dtype_round(DT_E8M0, 0x1p-20f) == 0x1p-20f);
}
