/* ternary_format.h — the one packed layout for ternary weights, shared by the
 * C kernels (kernels/cpu) and the CUDA kernels (kernels/cuda).  Plain C99/C11
 * and C++ (nvcc): no intrinsics, no ISA-dependent choices.  The layout on disk
 * and in memory is the same on every machine.
 *
 * Layout "TL2_I64" (2 bits per weight, 64-way interleaved, 256-weight blocks)
 * ------------------------------------------------------------------------
 * A matrix W (rows = output features, cols = input features) is stored row by
 * row.  Each row is cut into blocks of TERN_BLOCK = 256 consecutive columns;
 * block b of a row is TERN_BLOCK_BYTES = 64 bytes.  Within a block:
 *
 *     byte j (0..63), bit field i (bits 2i..2i+1, i = 0..3, bit 0 = LSB)
 *         holds the code of column  b*256 + 64*i + j.
 *
 * Code c encodes the ternary value q = c - 1:  0 -> -1, 1 -> 0, 2 -> +1;
 * 3 is never written (readers treat it as invalid).  This is the same
 * "value + 1" code as HF BitNet and llama.cpp TQ2_0, so native checkpoints
 * repack with a shift and no table.
 *
 * Why this shape:
 *  - AVX-512: one 64-byte load gives 256 codes; (v >> 2i) & 3 yields the 64
 *    codes of columns [64i, 64i+64) in column order as bytes, matching a plain
 *    64-byte load of int8 activations -> vpdpbusd (u8 code x s8 act) with no
 *    shuffle.  Because c = q+1 is unsigned, sum(q*x) = sum(c*x) - sum(x), and
 *    sum(x) per group is computed once per token, shared by all rows.
 *    For f32 activations, vptestmb on a 16-byte slice gives the +1 / -1
 *    masks for 16 consecutive columns directly (code bit 1 set = +1, both
 *    bits clear = -1), used by masked add/sub.
 *  - AVX2: the two 32-byte halves of a block each hold columns j + 64i for
 *    j in one half, so the same shift/and gives 32 contiguous columns.
 *  - CUDA: a thread loading a 32-bit word (bytes 4t..4t+3) gets 16 codes of
 *    columns 4t..4t+3 (+64i) — four 4-column runs, i.e. one dp4a per field
 *    against a 32-bit word of int8 activations; a warp covers 2 blocks with
 *    fully coalesced 128-byte loads.
 *
 * Tails: a row whose length is not a multiple of 256 has a last block padded
 * with code 1 (value 0) for columns >= cols.  Kernels may read the whole
 * block but must not let padded columns contribute: the padded codes are zero
 * weights, and kernels that read activations in whole blocks use a zero-padded
 * copy of x (never read past the end of the caller's x).
 *
 * Row stride: TERN_ROW_BYTES(cols) = ceil(cols/256) * 64 bytes, a multiple of
 * 64, so with a 64-byte aligned base every row starts on a cache line and
 * aligned 64-byte SIMD loads are legal anywhere in a row.  Rows never share a
 * byte, so a row count that is not a multiple of 4/32/128 needs no padding and
 * a kernel working on row r touches only [r*stride, (r+1)*stride).
 *
 * Bits per weight: 2 for the codes (plus padding up to a multiple of 256
 * columns), plus the scales, stored separately (see src/quant/quant.h): one
 * scale per group of the row (tensor / row / 32 / 64 / 128 / 256 columns).
 *
 * Layout "TKV" (ternary KV cache pages: one K or V row of head_dim values of a
 * token and KV head; the rule that fills it: src/kv/kv_ternary.h)
 * ------------------------------------------------------------------------
 *     codes: tern_kv_code_bytes(head_dim) = ceil(head_dim / 4) bytes; value i
 *            in bits 2*(i%4) of byte i/4 (tern_kv_byte_of, tern_kv_shift_of),
 *            the same code c = q + 1 as the weights, padding code 1;
 *     scales: f16, K one per TERN_KV_K_GROUP channels (the last group may be
 *            short), V one per row (tern_kv_scales).
 * Dense in the row (no 64-way lanes): attention reads a row whole, at
 * head_dims of 64 .. 256, so a lane would pad most rows to 256 columns.  A K
 * group owns TERN_KV_K_GROUP / 4 whole bytes.
 */
#ifndef TL_TERNARY_FORMAT_H
#define TL_TERNARY_FORMAT_H

#include <stdint.h>

#define TERN_BLOCK 256       /* columns per block */
#define TERN_BLOCK_BYTES 64  /* bytes per block: 256 codes * 2 bits / 8 */
#define TERN_FIELDS 4        /* 2-bit fields per byte */
#define TERN_LANE 64         /* column distance between the fields of a byte */
#define TERN_ALIGN 64        /* alignment of the packed base and of every row */

#define TERN_CODE_NEG 0u  /* -1 */
#define TERN_CODE_ZERO 1u /*  0 (also the padding code) */
#define TERN_CODE_POS 2u  /* +1 */
/* A byte of four zero codes: 0b01010101, the fill of padded columns. */
#define TERN_BYTE_ZERO 0x55u

#define TERN_KV_K_GROUP 16 /* key channels per f16 scale in a ternary KV row */

#ifdef __cplusplus
static_assert(TERN_KV_K_GROUP % TERN_FIELDS == 0, "a K scale group owns whole code bytes");
static_assert(TERN_BLOCK_BYTES * 8 == TERN_BLOCK * 2, "2 bits per code");
static_assert(TERN_FIELDS * TERN_LANE == TERN_BLOCK, "fields x lane = block");
static_assert(TERN_BLOCK_BYTES % TERN_ALIGN == 0, "rows stay aligned");
#else
_Static_assert(TERN_KV_K_GROUP % TERN_FIELDS == 0, "a K scale group owns whole code bytes");
_Static_assert(TERN_BLOCK_BYTES * 8 == TERN_BLOCK * 2, "2 bits per code");
_Static_assert(TERN_FIELDS * TERN_LANE == TERN_BLOCK, "fields x lane = block");
_Static_assert(TERN_BLOCK_BYTES % TERN_ALIGN == 0, "rows stay aligned");
_Static_assert(TERN_LANE == TERN_BLOCK_BYTES, "byte j of a block = column j of each field");
#endif

#ifdef __CUDACC__
#define TERN_HD __host__ __device__ static inline
#else
#define TERN_HD static inline
#endif

/* Blocks per row and packed bytes per row (the row stride). */
TERN_HD int64_t tern_row_blocks(int64_t cols) { return (cols + TERN_BLOCK - 1) / TERN_BLOCK; }
TERN_HD int64_t tern_row_bytes(int64_t cols) { return tern_row_blocks(cols) * TERN_BLOCK_BYTES; }

/* Where column k of a row lives: byte offset within the row and bit shift. */
TERN_HD int64_t tern_byte_of(int64_t k) {
    return (k / TERN_BLOCK) * TERN_BLOCK_BYTES + (k % TERN_LANE);
}
TERN_HD int tern_shift_of(int64_t k) { return (int)(2 * ((k % TERN_BLOCK) / TERN_LANE)); }

/* Ternary value of column k of a packed row (reference accessor). */
TERN_HD int tern_get(const uint8_t *row, int64_t k) {
    return (int)((row[tern_byte_of(k)] >> tern_shift_of(k)) & 3u) - 1;
}

/* Sets column k of a packed row to q in {-1, 0, 1}; the row must have been
 * filled with TERN_BYTE_ZERO first. */
TERN_HD void tern_set(uint8_t *row, int64_t k, int q) {
    uint8_t *b = row + tern_byte_of(k);
    int s = tern_shift_of(k);
    *b = (uint8_t)((*b & ~(3u << s)) | ((uint32_t)(q + 1) << s));
}

/* Layout TKV: code bytes and f16 scales of one K (is_key) or V row of a ternary KV page. */
TERN_HD int tern_kv_code_bytes(int head_dim) { return (head_dim + TERN_FIELDS - 1) / TERN_FIELDS; }
TERN_HD int tern_kv_scales(int head_dim, int is_key) {
    return is_key ? (head_dim + TERN_KV_K_GROUP - 1) / TERN_KV_K_GROUP : 1;
}
TERN_HD int tern_kv_byte_of(int i) { return i / TERN_FIELDS; }
TERN_HD int tern_kv_shift_of(int i) { return 2 * (i % TERN_FIELDS); }
/* Ternary value of channel i of a TKV row's codes (reference accessor). */
TERN_HD int tern_kv_get(const uint8_t *codes, int i) {
    return (int)((codes[tern_kv_byte_of(i)] >> tern_kv_shift_of(i)) & 3u) - 1;
}
/* Sets channel i to q in {-1, 0, 1}; the codes filled with TERN_BYTE_ZERO first. */
TERN_HD void tern_kv_set(uint8_t *codes, int i, int q) {
    uint8_t *b = codes + tern_kv_byte_of(i);
    const int s = tern_kv_shift_of(i);
    *b = (uint8_t)((*b & ~(3u << s)) | ((uint32_t)(q + 1) << s));
}

#endif
