/* The loader refuses bad input with a clear message (library and CLI). */
#include "test.h"
#include "fixtures.h"
#include "core/dtype.h"
#include "core/err.h"
#include "core/mem.h"
#include "load/config.h"
#include "load/safetensors.h"
#include "load/tokens.h"
#include "quant/quant.h"
#include "runtime/linear.h"
#include "runtime/model.h"
#include "runtime/report.h"
#include "ternary_format.h"

#include <cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Writes a safetensors file: 8-byte length, header text, then `data_len` bytes. */
static void write_st(const char *path, const char *header, size_t data_len) {
    FILE *f = fopen(path, "wb");
    uint64_t n = strlen(header);
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)(n >> (8 * i));
    fwrite(len, 1, 8, f);
    fwrite(header, 1, n, f);
    for (size_t i = 0; i < data_len; i++) fputc((int)(i & 0xff), f);
    fclose(f);
}

static void expect_st_error(const char *header, size_t data_len, const char *needle) {
    char path[600];
    snprintf(path, sizeof path, "%s/bad.safetensors", test_tmpdir());
    write_st(path, header, data_len);
    SafeTensors st;
    int rc = st_open_file(path, &st);
    CHECK_MSG(rc != 0, "accepted: %s", header);
    if (rc == 0) st_close(&st);
    else {
        CHECK_MSG(strstr(err_msg(), needle) != NULL, "message '%s' lacks '%s'", err_msg(), needle);
        CHECK_MSG(strstr(err_msg(), "bad.safetensors") != NULL, "message '%s' lacks the file name",
                  err_msg());
    }
}

TEST(loader_safetensors_good_file) {
    char path[600];
    snprintf(path, sizeof path, "%s/ok.safetensors", test_tmpdir());
    write_st(path,
             "{\"__metadata__\":{\"format\":\"pt\"},"
             "\"b\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[8,20]},"
             "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"e\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[20,20]}}",
             20);
    SafeTensors st;
    REQUIRE(st_open_file(path, &st) == 0);
    CHECK(st.n_tensors == 3);
    const StTensor *b = st_find(&st, "b");
    REQUIRE(b);
    CHECK(b->dtype == DT_BF16 && b->ndim == 2 && b->shape[0] == 2 && b->shape[1] == 3);
    CHECK(b->nbytes == 12 && b->numel == 6);
    /* data points into the mapping: header is 8 + len bytes, b starts at data offset 8 */
    CHECK(((const uint8_t *)b->data)[0] == 8);
    CHECK(st_find(&st, "zz") == NULL);
    st_close(&st);
}

TEST(loader_safetensors_refuses_bad_headers) {
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8,
                    "well-formed JSON");
    expect_st_error("{\"a\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
                    "unknown dtype 'Q4'");
    /* a tensor named twice (which one a reader takes is up to it), data after the header */
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                    "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "'a' appears twice");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} x", 8,
                    "data after the JSON");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
                    "need 12 bytes but data_offsets span 8");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4,
                    "beyond the data section");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                    "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
                    "overlap");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8,
                    "non-negative");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,10]}}", 10,
                    "non-negative");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8,
                    "data_offsets");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "data_offsets");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
                    "\"data_offsets\":[0,8]}}", 8, "overflow");
}

/* Every dtype of the format (safetensors' Dtype enum: 22, the sub-byte F4 and
 * F6_* packed) is read with the byte length the format gives it, and named back
 * as the format names it; a packed tensor whose bits do not fill whole bytes
 * is refused, as the format's reader refuses it. */
TEST(loader_safetensors_reads_every_dtype_of_the_format) {
    static const struct {
        const char *name;
        unsigned bits;
    } fmt[] = {{"BOOL", 8},     {"F4", 4},       {"F6_E2M3", 6},     {"F6_E3M2", 6},
               {"U8", 8},       {"I8", 8},       {"F8_E5M2", 8},     {"F8_E4M3", 8},
               {"F8_E8M0", 8},  {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8}, {"I16", 16},
               {"U16", 16},     {"F16", 16},     {"BF16", 16},       {"I32", 32},
               {"U32", 32},     {"F32", 32},     {"C64", 64},        {"F64", 64},
               {"I64", 64},     {"U64", 64}};
    char path[600], header[300];
    snprintf(path, sizeof path, "%s/dt.safetensors", test_tmpdir());
    for (size_t i = 0; i < sizeof fmt / sizeof fmt[0]; i++) {
        const size_t nb = 12 * fmt[i].bits / 8; /* shape [3, 4]: whole bytes for every dtype */
        snprintf(header, sizeof header,
                 "{\"t\":{\"dtype\":\"%s\",\"shape\":[3,4],\"data_offsets\":[0,%zu]}}", fmt[i].name, nb);
        write_st(path, header, nb);
        SafeTensors st;
        int rc = st_open_file(path, &st);
        CHECK_MSG(rc == 0, "%s: %s", fmt[i].name, err_msg());
        if (rc != 0) continue;
        const StTensor *t = st_find(&st, "t");
        CHECK_MSG(t && t->nbytes == nb && t->numel == 12 && st_dtype_name(t->dtype) &&
                      strcmp(st_dtype_name(t->dtype), fmt[i].name) == 0,
                  "%s", fmt[i].name);
        st_close(&st);
        /* a byte more or less than the format's length is refused */
        snprintf(header, sizeof header,
                 "{\"t\":{\"dtype\":\"%s\",\"shape\":[3,4],\"data_offsets\":[0,%zu]}}", fmt[i].name, nb + 1);
        expect_st_error(header, nb + 1, "data_offsets span");
    }
    expect_st_error("{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2,
                    "3 elements of F4 (4 bits each) do not fill whole bytes");
    expect_st_error("{\"a\":{\"dtype\":\"F6_E3M2\",\"shape\":[2,3],\"data_offsets\":[0,5]}}", 5,
                    "6 elements of F6_E3M2 (6 bits each) do not fill whole bytes");
    expect_st_error("{\"a\":{\"dtype\":\"F4\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4,
                    "F4 need 2 bytes but data_offsets span 4");
    expect_st_error("{\"a\":{\"dtype\":\"F6_E2M3\",\"shape\":[4294967296,1073741824],"
                    "\"data_offsets\":[0,8]}}", 8, "overflow");
}

TEST(loader_safetensors_truncated_and_bad_length) {
    char path[600];
    snprintf(path, sizeof path, "%s/t.safetensors", test_tmpdir());
    FILE *f = fopen(path, "wb");
    fwrite("\x10\x00\x00", 1, 3, f);
    fclose(f);
    SafeTensors st;
    CHECK(st_open_file(path, &st) != 0 && strstr(err_msg(), "truncated"));
    /* header length far beyond the file */
    f = fopen(path, "wb");
    fwrite("\xff\xff\x00\x00\x00\x00\x00\x00{}", 1, 10, f);
    fclose(f);
    CHECK(st_open_file(path, &st) != 0 && strstr(err_msg(), "beyond the end of the file"));
    /* a header length 1..8 bytes past the file's end (a bound off by the 8 length bytes) */
    for (int k = 1; k <= 8; k++) {
        const char *h = "{}  ";
        const uint64_t hl = 4 + (uint64_t)k;
        unsigned char len[8];
        for (int i = 0; i < 8; i++) len[i] = (unsigned char)(hl >> (8 * i));
        f = fopen(path, "wb");
        fwrite(len, 1, 8, f);
        fwrite(h, 1, 4, f);
        fclose(f);
        CHECK_MSG(st_open_file(path, &st) != 0 && strstr(err_msg(), "beyond the end of the file"), "k %d: %s", k,
                  err_msg());
    }
    /* the real checkpoint cut in half */
    char *buf;
    size_t n;
    REQUIRE(file_read_all(test_path("data/llama-tiny/model.safetensors"), &buf, &n) == 0);
    f = fopen(path, "wb");
    fwrite(buf, 1, n / 2, f);
    fclose(f);
    free(buf);
    CHECK(st_open_file(path, &st) != 0 && strstr(err_msg(), "beyond the data section"));
    CHECK(st_open_file("/nonexistent/x.safetensors", &st) != 0 && strstr(err_msg(), "cannot open"));
}

static const char *good_config =
    "{\"model_type\":\"llama\",\"hidden_size\":256,\"num_hidden_layers\":4,"
    "\"num_attention_heads\":8,\"num_key_value_heads\":4,\"intermediate_size\":768,"
    "\"vocab_size\":2048,\"rms_norm_eps\":1e-5,\"rope_theta\":10000.0,\"hidden_act\":\"silu\","
    "\"tie_word_embeddings\":false}";

TEST(loader_config_fields) {
    ModelConfig c;
    REQUIRE(config_parse(good_config, "c.json", &c) == 0);
    CHECK(c.hidden == 256 && c.head_dim == 32 && c.n_kv_heads == 4 && c.rope_theta == 10000.0);
    CHECK(c.tie == TIE_FALSE && c.act == ACT_SILU && c.arch == ARCH_LLAMA);
    REQUIRE(config_load(test_path("data/llama-tiny"), &c) == 0);
    CHECK(c.rope_theta == 10000.0 && c.head_dim == 32); /* from rope_parameters */
    REQUIRE(config_load(test_path("data/bitnet-tiny"), &c) == 0);
    CHECK(c.arch == ARCH_BITNET && c.rope_theta == 500000.0 && c.act == ACT_RELU2 &&
          c.bitnet_scale == BITNET_BITLINEAR);
}

/* Replaces the first occurrence of `from` in the good config with `to`. */
static void expect_config_error(const char *from, const char *to, const char *needle) {
    char buf[2048];
    const char *p = strstr(good_config, from);
    REQUIRE(p);
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(p - good_config), good_config, to, p + strlen(from));
    ModelConfig c;
    CHECK_MSG(config_parse(buf, "c.json", &c) != 0, "accepted: %s", buf);
    CHECK_MSG(strstr(err_msg(), needle) != NULL, "message '%s' lacks '%s'", err_msg(), needle);
}

TEST(loader_config_refuses_missing_or_contradictory) {
    expect_config_error("\"hidden_size\":256,", "", "missing field 'hidden_size'");
    expect_config_error("\"rms_norm_eps\":1e-5,", "", "missing field 'rms_norm_eps'");
    expect_config_error("\"rope_theta\":10000.0,", "", "rope_theta");
    expect_config_error("\"rope_theta\":10000.0,",
                        "\"rope_theta\":10000.0,\"rope_parameters\":{\"rope_theta\":500000.0},",
                        "contradicts");
    expect_config_error("\"num_key_value_heads\":4", "\"num_key_value_heads\":3", "not a multiple");
    expect_config_error("\"hidden_act\":\"silu\"", "\"hidden_act\":\"gelu\"", "not supported");
    expect_config_error("\"model_type\":\"llama\"", "\"model_type\":\"gpt2\"", "not supported");
    expect_config_error("\"vocab_size\":2048", "\"vocab_size\":-1", "positive integer");
    expect_config_error("\"model_type\":\"llama\"", "\"model_type\":\"bitnet\"", "linear_class");
    ModelConfig c;
    CHECK(config_parse("{\"model_type\":", "c.json", &c) != 0 && strstr(err_msg(), "well-formed"));
    /* a key twice (cJSON took the first, transformers the last: it had run with the
     * other rms_norm_eps, exit 0) and data after the object: refused */
    expect_config_error("\"model_type\":\"llama\",", "\"model_type\":\"llama\",\"rms_norm_eps\":0.1,",
                        "'rms_norm_eps' appears twice");
    expect_config_error("\"tie_word_embeddings\":false", "\"tie_word_embeddings\":false,"
                        "\"rope_scaling\":{\"factor\":2.0,\"factor\":4.0}", "'factor' appears twice");
    expect_config_error("\"model_type\":\"llama\"", "\"model_type\":\"llama\"}{\"x\":1", "data after the JSON");
}

TEST(loader_config_refuses_linear_biases) {
    expect_config_error("\"tie_word_embeddings\":false", "\"tie_word_embeddings\":false,"
                        "\"attention_bias\":true", "attention_bias is true");
    expect_config_error("\"tie_word_embeddings\":false", "\"tie_word_embeddings\":false,"
                        "\"mlp_bias\":true", "mlp_bias is true");
    expect_config_error("\"tie_word_embeddings\":false", "\"tie_word_embeddings\":false,"
                        "\"mlp_bias\":1", "true or false");
    char buf[2048];
    snprintf(buf, sizeof buf, "%.*s,\"attention_bias\":false,\"mlp_bias\":false}",
             (int)strlen(good_config) - 1, good_config);
    ModelConfig c;
    CHECK_MSG(config_parse(buf, "c.json", &c) == 0, "%s", err_msg()); /* false is the plain llama */
}

/* The good config with `extra` (",..." members) added before its closing brace. */
static int parse_with(const char *extra, ModelConfig *c) {
    char buf[2048];
    snprintf(buf, sizeof buf, "%.*s%s}", (int)strlen(good_config) - 1, good_config, extra);
    return config_parse(buf, "c.json", c);
}

/* RoPE scaling: transformers' linear and llama3 rope types, in rope_parameters
 * (transformers 5) or rope_scaling (4.x; beside a top-level rope_theta), by
 * rope_type or the legacy key type (both differing refused); both objects
 * naming the same scaling agree, different ones are refused, as is
 * rope_scaling beside rope_parameters' own theta; a llama3 without one of its four
 * parameters, or with an empty band, is refused by name (each had either been
 * refused as a whole — "rope_scaling is not supported" — or, with a GGUF's
 * rope_freqs.weight, refused too). */
TEST(loader_config_rope_scaling) {
    ModelConfig c;
    static const char l3[] = "{\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":1.0,"
                             "\"high_freq_factor\":4.0,\"original_max_position_embeddings\":8192}";
    char ex[512];
    snprintf(ex, sizeof ex, ",\"rope_scaling\":%s", l3);
    CHECK_MSG(parse_with(ex, &c) == 0 && c.rope_kind == ROPE_LLAMA3 && c.rope_factor == 8.0 && c.rope_low == 1.0 &&
                  c.rope_high == 4.0 && c.rope_orig_ctx == 8192 && c.rope_theta == 10000.0,
              "%s", err_msg());
    CHECK_MSG(parse_with(",\"rope_parameters\":{\"rope_theta\":10000.0,\"type\":\"linear\",\"factor\":4.0}", &c) == 0 &&
                  c.rope_kind == ROPE_LINEAR && c.rope_factor == 4.0,
              "%s", err_msg());
    CHECK(parse_with("", &c) == 0 && c.rope_kind == ROPE_DEFAULT && rope_attention_factor(&c) == 1.0f);
    /* llama3 / yarn without original_max_position_embeddings: max_position_embeddings,
     * LlamaConfig's 2048 where that is absent too (transformers' standardize_rope_params) */
    CHECK_MSG(parse_with(",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":1.0,"
                         "\"high_freq_factor\":4.0}", &c) == 0 && c.rope_orig_ctx == 2048,
              "%s", err_msg());
    CHECK_MSG(parse_with(",\"max_position_embeddings\":4096,\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":2.0}", &c) ==
                      0 && c.rope_orig_ctx == 4096,
              "%s", err_msg());
    /* a top-level one over the object's (standardize_rope_params, run again as transformers
     * computes the frequencies, takes it); null refused (transformers' computation fails on it) */
    CHECK_MSG(parse_with(",\"original_max_position_embeddings\":1024,\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":2.0,"
                         "\"original_max_position_embeddings\":256}", &c) == 0 && c.rope_orig_ctx == 1024,
              "%s", err_msg());
    CHECK_MSG(parse_with(",\"original_max_position_embeddings\":1024,\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,"
                         "\"low_freq_factor\":1.0,\"high_freq_factor\":4.0}", &c) == 0 && c.rope_orig_ctx == 1024,
              "%s", err_msg());
    /* (not dynamic's, which is max_position_embeddings) */
    CHECK_MSG(parse_with(",\"original_max_position_embeddings\":1024,\"rope_scaling\":{\"type\":\"dynamic\",\"factor\":2.0}", &c) ==
                      0 && c.rope_orig_ctx == 2048,
              "%s", err_msg());
    /* partial_rotary_factor: ignored by the default frequencies; under a scaled type it must leave
     * int(head_dim x it) = head_dim (32 x 1.001 = 32.03) */
    CHECK_MSG(parse_with(",\"partial_rotary_factor\":0.5", &c) == 0 && c.rope_kind == ROPE_DEFAULT, "%s", err_msg());
    CHECK_MSG(parse_with(",\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":2.0,\"partial_rotary_factor\":1.001}", &c) == 0,
              "%s", err_msg());
    /* yarn (head_dim 32, theta 1e4, original 256), by hand: correction dims at 32 and 1
     * rotations 32 ln(256 / 64 pi) / (2 ln 1e4) = 0.4196 and 32 ln(256 / 2 pi) / (2 ln 1e4)
     * = 6.440, floored / ceiled to 0 .. 7; attention factor 0.1 ln 4 + 1 */
    CHECK_MSG(parse_with(",\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4.0,\"original_max_position_embeddings\":256,"
                         "\"finetuned\":true}", &c) == 0 && c.rope_kind == ROPE_YARN && c.rope_factor == 4.0 &&
                  c.rope_orig_ctx == 256 && c.rope_low == 0 && c.rope_high == 7 &&
                  fabs(c.rope_attn - 1.1386294361119891) < 1e-15 && rope_attention_factor(&c) == (float)c.rope_attn,
              "%s: %g .. %g, %.17g", err_msg(), c.rope_low, c.rope_high, c.rope_attn);
    /* betas 16 / 2 untruncated: 32 ln(256 / 32 pi) / 18.4207 = 1.6238, 32 ln(256 / 4 pi) /
     * 18.4207 = 5.2361; attention (0.1 ln 4 + 1) / (0.05 ln 4 + 1) = 1.0648216 */
    CHECK_MSG(parse_with(",\"rope_parameters\":{\"rope_theta\":10000.0,\"rope_type\":\"yarn\",\"factor\":4.0,"
                         "\"original_max_position_embeddings\":256,\"beta_fast\":16,\"beta_slow\":2,\"mscale\":1,"
                         "\"mscale_all_dim\":0.5,\"truncate\":false}", &c) == 0 &&
                  fabs(c.rope_low - 1.6238) < 1e-3 && fabs(c.rope_high - 5.2361) < 1e-3 &&
                  fabs(c.rope_attn - 1.0648216254) < 1e-9,
              "%s: %.6g .. %.6g, %.12g", err_msg(), c.rope_low, c.rope_high, c.rope_attn);
    /* an attention factor given is taken as it is; beta 0 is the default (Python's `or`) */
    CHECK_MSG(parse_with(",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4.0,\"original_max_position_embeddings\":256,"
                         "\"attention_factor\":1.5,\"beta_fast\":0,\"mscale\":1}", &c) == 0 && c.rope_attn == 1.5 &&
                  c.rope_low == 0 && c.rope_high == 7,
              "%s", err_msg());
    /* factor null: max_position_embeddings (2048 absent) over the original length, 4 here */
    CHECK_MSG(parse_with(",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":null,\"original_max_position_embeddings\":512}",
                         &c) == 0 && c.rope_factor == 4.0 && fabs(c.rope_attn - 1.1386294361119891) < 1e-15,
              "%s: factor %g", err_msg(), c.rope_factor);
    CHECK_MSG(parse_with(",\"partial_rotary_factor\":1.0", &c) == 0, "%s", err_msg());
    /* dynamic: factor, the limit max_position_embeddings (2048 absent); theta x 1^(32 / 30) */
    CHECK_MSG(parse_with(",\"rope_scaling\":{\"type\":\"dynamic\",\"factor\":2.0}", &c) == 0 &&
                  c.rope_kind == ROPE_DYNAMIC && c.rope_factor == 2.0 && c.rope_orig_ctx == 2048 &&
                  rope_base(&c) == 10000.0 && rope_positions_check(&c, 2047) == 0 &&
                  rope_positions_check(&c, 2048) == -1,
              "%s", err_msg());
    /* longrope (head_dim 32: 16 factors each): the short ones as float32; the attention factor
     * given, else from factor, else from max_position_embeddings / original (2048 / 512 = 4:
     * sqrt(1 + ln 4 / ln 512) = sqrt(11 / 9)); 1 at factor <= 1; the original length top level
     * over the object's; positions from it on refused; bit for bit in double */
    char lr[1024], sf[200] = "", lf[200] = "";
    for (int i = 0; i < 16; i++) {
        snprintf(sf + strlen(sf), sizeof sf - strlen(sf), "%s%g", i ? "," : "", 1.0 + 0.1 * i);
        snprintf(lf + strlen(lf), sizeof lf - strlen(lf), "%s%d", i ? "," : "", 2 + i);
    }
    static const struct {
        const char *extra, *top;
        double att, factor;
        int orig;
    } lrc[] = {
        {"", "", 1.1055415967851334, 4, 512},
        {",\"factor\":8", "", 1.1547005383792515, 8, 512},
        {",\"factor\":0.5", "", 1.0, 0.5, 512},
        {",\"factor\":8,\"attention_factor\":1.25", "", 1.25, 8, 512},
        {"", ",\"original_max_position_embeddings\":1024", 1.0488088481701516, 2, 1024},
        /* irregular values (transformers' _compute_longrope_parameters' own results), where
         * another order of the formula's operations parts from it */
        {",\"factor\":7.77", ",\"original_max_position_embeddings\":3000", 1.1207497244036848, 7.77, 3000},
        {",\"factor\":6", ",\"original_max_position_embeddings\":1000", 1.1222226829501716, 6, 1000},
        {"", ",\"max_position_embeddings\":7777,\"original_max_position_embeddings\":3001", 1.0577941772631076,
         7777.0 / 3001, 3001},
    };
    for (size_t i = 0; i < sizeof lrc / sizeof lrc[0]; i++) {
        snprintf(lr, sizeof lr, "%s,\"rope_scaling\":{\"type\":\"longrope\",\"original_max_position_embeddings\":512,"
                 "\"short_factor\":[%s],\"long_factor\":[%s]%s}", lrc[i].top, sf, lf, lrc[i].extra);
        const int rc = parse_with(lr, &c);
        CHECK_MSG(rc == 0 && c.rope_kind == ROPE_LONGROPE && c.rope_orig_ctx == lrc[i].orig &&
                      c.rope_factor == lrc[i].factor && c.rope_attn == lrc[i].att &&
                      rope_attention_factor(&c) == (float)lrc[i].att && c.rope_ff[0] == 1.0f &&
                      c.rope_ff[15] == (float)2.5 && c.rope_ff[7] == (float)1.7 &&
                      rope_positions_check(&c, lrc[i].orig - 1) == 0 && rope_positions_check(&c, lrc[i].orig) == -1,
                  "case %zu: %s: orig %d, factor %g, attention %.17g", i, err_msg(), c.rope_orig_ctx, c.rope_factor,
                  c.rope_attn);
    }
    /* the frequencies: 1 / (short factor x theta^(2i/d)) in float32 */
    float inv[16];
    rope_inv_freq(&c, inv);
    for (int i = 0; i < 16; i++) {
        const float d = (float)(1.0 + 0.1 * i) * powf(10000.0f, (float)(2 * i) / 32.0f);
        CHECK_MSG(inv[i] == 1.0f / d, "frequency %d: %.9g against %.9g", i, (double)inv[i], (double)(1.0f / d));
    }
    /* the original length 1 with a factor above 1: transformers' ln 1 division, refused */
    snprintf(lr, sizeof lr, ",\"rope_scaling\":{\"type\":\"longrope\",\"original_max_position_embeddings\":1,"
             "\"short_factor\":[%s],\"long_factor\":[%s],\"factor\":2}", sf, lf);
    CHECK_MSG(parse_with(lr, &c) != 0 && strstr(err_msg(), "longrope with original_max_position_embeddings 1"), "%s",
              err_msg());
    snprintf(lr, sizeof lr, ",\"rope_scaling\":{\"type\":\"longrope\",\"original_max_position_embeddings\":1,"
             "\"short_factor\":[%s],\"long_factor\":[%s],\"factor\":2,\"attention_factor\":1.5}", sf, lf);
    CHECK_MSG(parse_with(lr, &c) == 0 && c.rope_attn == 1.5, "%s", err_msg());
    /* a rope_theta in rope_scaling alone, or equal to the top level's, is the theta */
    expect_config_error("\"rope_theta\":10000.0", "\"rope_scaling\":{\"type\":\"linear\",\"factor\":2,\"rope_theta\":-1}",
                        "field 'rope_scaling.rope_theta' must be a positive number");
    for (int t = 0; t < 2; t++) {
        snprintf(lr, sizeof lr, ",\"rope_scaling\":{\"type\":\"linear\",\"factor\":2,\"rope_theta\":%s}",
                 t ? "10000" : "10000.0");
        CHECK_MSG(parse_with(lr, &c) == 0 && c.rope_theta == 10000.0, "%s", err_msg());
    }
    {
        char buf[2048];
        const char *th = strstr(good_config, "\"rope_theta\":10000.0");
        REQUIRE(th);
        snprintf(buf, sizeof buf, "%.*s\"rope_scaling\":{\"type\":\"linear\",\"factor\":2,\"rope_theta\":500000}%s",
                 (int)(th - good_config), good_config, th + strlen("\"rope_theta\":10000.0"));
        CHECK_MSG(config_parse(buf, "c.json", &c) == 0 && c.rope_theta == 500000.0 && c.rope_kind == ROPE_LINEAR,
                  "%s", err_msg());
    }
    expect_config_error("\"hidden_size\":256", "\"hidden_size\":16,\"rope_scaling\":{\"type\":\"dynamic\",\"factor\":2}",
                        "dynamic RoPE scaling with head_dim 2");
    expect_config_error("\"rope_theta\":10000.0", "\"rope_theta\":10000.0,\"rope_scaling\":{\"type\":\"dynamic\"}",
                        "missing field 'rope_scaling.factor'");
    expect_config_error("\"rope_theta\":10000.0", "\"rope_theta\":1.0,\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4.0}",
                        "yarn with rope_theta 1");
    /* the same scaling in both: one; another in each: refused */
    snprintf(ex, sizeof ex, ",\"rope_scaling\":%s,\"rope_parameters\":%s", l3, l3);
    CHECK_MSG(parse_with(ex, &c) == 0 && c.rope_kind == ROPE_LLAMA3, "%s", err_msg());
    static const struct {
        const char *extra, *want;
    } bad[] = {
        {",\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":2.0},\"rope_parameters\":{\"rope_type\":\"linear\","
         "\"factor\":4.0}", "rope_parameters and rope_scaling describe different RoPE scalings"},
        {",\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":2.0},\"rope_parameters\":{\"rope_type\":\"default\"}",
         "describe different RoPE scalings"},
        {",\"rope_scaling\":{\"rope_type\":\"yarn\",\"original_max_position_embeddings\":256}",
         "missing field 'rope_scaling.factor'"},
        {",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4.0,\"attention_factor\":0}",
         "'rope_scaling.attention_factor' 0 must be positive"},
        {",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4.0,\"beta_fast\":-1}",
         "'rope_scaling.beta_fast' -1 must be positive"},
        {",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4.0,\"truncate\":\"yes\"}",
         "'rope_scaling.truncate' must be true or false"},
        /* mscale over mscale_all_dim: 1.139 / (1 - ln 4) < 0 */
        {",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4.0,\"mscale\":1,\"mscale_all_dim\":-10}",
         "yarn's attention factor -2.9"},
        {",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4.0,\"mscale\":\"1\"}",
         "'rope_scaling.mscale' must be a number"},
        {",\"partial_rotary_factor\":0.5,\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":2.0}",
         "partial_rotary_factor 0.5 rotates 16 of head_dim 32 dims under a scaled RoPE"},
        {",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":2.0,\"partial_rotary_factor\":0.99}",
         "partial_rotary_factor 0.99 rotates 31 of head_dim 32"},
        {",\"partial_rotary_factor\":\"half\"", "partial_rotary_factor must be a positive number"},
        {",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":2.0,\"original_max_position_embeddings\":null}",
         "rope_scaling.original_max_position_embeddings must be a positive integer"},
        {",\"original_max_position_embeddings\":null,\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":2.0}",
         ": original_max_position_embeddings must be a positive integer"},
        /* the same type, another optional key */
        {",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4.0},\"rope_parameters\":{\"rope_type\":\"yarn\","
         "\"factor\":4.0,\"truncate\":false}", "describe different RoPE scalings"},
        {",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,\"high_freq_factor\":4.0,"
         "\"original_max_position_embeddings\":8192}", "missing field 'rope_scaling.low_freq_factor'"},
        {",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":4.0,\"high_freq_factor\":4.0,"
         "\"original_max_position_embeddings\":8192}", "high_freq_factor 4 must be above low_freq_factor 4"},
        {",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
         "\"original_max_position_embeddings\":8192.5}", "original_max_position_embeddings must be a positive integer"},
        {",\"rope_scaling\":{\"rope_type\":\"linear\"}", "missing field 'rope_scaling.factor'"},
        {",\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":0}", "'rope_scaling.factor' must be a positive number"},
        {",\"rope_scaling\":{\"factor\":2.0}", "rope_scaling names no rope type"},
        {",\"rope_scaling\":3", "rope_scaling must be an object or null"},
        {",\"rope_parameters\":{\"rope_theta\":10000.0,\"rope_type\":7}", "the rope type in rope_parameters must be a string"},
        /* another original length alone is another scaling */
        {",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
         "\"original_max_position_embeddings\":4096},\"rope_parameters\":{\"rope_type\":\"llama3\",\"factor\":8.0,"
         "\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,\"original_max_position_embeddings\":8192}",
         "describe different RoPE scalings"},
        /* transformers 4 read type over rope_type, 5 the other way round */
        {",\"rope_scaling\":{\"rope_type\":\"linear\",\"type\":\"default\",\"factor\":2.0}",
         "rope_scaling names two rope types"},
        /* transformers 5 replaces rope_parameters (and its theta) with rope_scaling */
        {",\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":2.0},\"rope_parameters\":{\"rope_theta\":10000.0}",
         "rope_scaling beside rope_parameters.rope_theta"},
        {",\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":1e-40}", "'rope_scaling.factor' 1e-40 is outside"},
        /* longrope: both lists, head_dim / 2 numbers each, each positive */
        {",\"rope_scaling\":{\"rope_type\":\"longrope\",\"long_factor\":[1]}", "missing field 'rope_scaling.short_factor'"},
        {",\"rope_scaling\":{\"rope_type\":\"longrope\",\"short_factor\":[1]}", "missing field 'rope_scaling.long_factor'"},
        {",\"rope_scaling\":{\"rope_type\":\"longrope\",\"short_factor\":[1],\"long_factor\":[1]}",
         "short_factor and long_factor must hold head_dim / 2 = 16 numbers each (1 and 1 given)"},
        {",\"rope_scaling\":{\"rope_type\":\"longrope\",\"short_factor\":1,\"long_factor\":[1]}",
         "'rope_scaling.short_factor' must be a list of numbers"},
        {",\"rope_scaling\":{\"rope_type\":\"longrope\",\"short_factor\":[1,0],\"long_factor\":[1]}",
         "'rope_scaling.short_factor' entry 1 must be a number within [1e-30, 1e30]"},
        {",\"rope_scaling\":{\"rope_type\":\"longrope\",\"short_factor\":[1],\"long_factor\":[\"2\"]}",
         "'rope_scaling.long_factor' entry 0 must be a number"},
        {",\"rope_scaling\":{\"rope_type\":\"longrope\",\"short_factor\":[1],\"long_factor\":[1],\"attention_factor\":0}",
         "'rope_scaling.attention_factor' 0 must be positive"},
        {",\"rope_scaling\":{\"rope_type\":\"longrope\",\"short_factor\":[1],\"long_factor\":[1],\"factor\":-2}",
         "'rope_scaling.factor' -2 must be positive"},
        /* a rope_theta in rope_scaling: the object's (transformers 5) against the top level's (4.x) */
        {",\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":2.0,\"rope_theta\":500000.0}",
         "rope_theta 10000 at the top level contradicts rope_scaling.rope_theta 500000"},
        {",\"max_position_embeddings\":null", "'max_position_embeddings' must be a positive integer (null given)"},
        {",\"rope_scaling\":{\"rope_type\":\"longrope\",\"short_factor\":[1],\"long_factor\":[1]},"
         "\"rope_parameters\":{\"rope_type\":\"longrope\",\"short_factor\":[2],\"long_factor\":[1]}",
         "describe different RoPE scalings"},
        {",\"rope_scaling\":{\"rope_type\":\"longrope\",\"short_factor\":[1],\"long_factor\":[1,1]},"
         "\"rope_parameters\":{\"rope_type\":\"longrope\",\"short_factor\":[1],\"long_factor\":[1]}",
         "describe different RoPE scalings"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_MSG(parse_with(bad[i].extra, &c) != 0, "accepted: %s", bad[i].extra);
        CHECK_MSG(strstr(err_msg(), bad[i].want), "%s: message '%s' lacks '%s'", bad[i].extra, err_msg(), bad[i].want);
    }
}

/* What transformers reads that a Llama or BitNet config may leave out or
 * spell another way: num_key_value_heads absent (LlamaConfig: the attention
 * heads; it had been refused), rope_parameters' legacy "type" key (a linear
 * scaling under it had run unscaled; a rope type without support is refused
 * by name), quantization_config (bitnet on a llama
 * model, Falcon3-*-1.58bit's form, without linear_class: BitNetQuantConfig's
 * default bitlinear; other methods refused, not loaded as a plain model;
 * modules_to_not_convert naming a layer linear refused, a quantization_mode
 * other than offline / online refused), and an escaped NUL
 * in a string (cJSON's C string ended there: "a\u0000b" was read as "a"). */
TEST(loader_config_transformers_defaults) {
    char buf[2048];
    ModelConfig c;
    const char *p = strstr(good_config, ",\"num_key_value_heads\":4");
    REQUIRE(p);
    snprintf(buf, sizeof buf, "%.*s%s", (int)(p - good_config), good_config, p + strlen(",\"num_key_value_heads\":4"));
    CHECK_MSG(config_parse(buf, "c.json", &c) == 0 && c.n_kv_heads == 8 && c.n_heads == 8, "%s", err_msg());
    expect_config_error("\"tie_word_embeddings\":false", "\"tie_word_embeddings\":false,"
                        "\"rope_parameters\":{\"rope_theta\":10000.0,\"type\":\"proportional\",\"factor\":2.0}",
                        "the rope type 'proportional' in rope_parameters is not supported");
    expect_config_error("\"tie_word_embeddings\":false", "\"tie_word_embeddings\":false,"
                        "\"rope_scaling\":{\"type\":\"su\",\"factor\":2.0}",
                        "the rope type 'su' in rope_scaling is not supported");
    snprintf(buf, sizeof buf, "%.*s,\"rope_parameters\":{\"rope_theta\":10000.0,\"type\":\"default\"}}",
             (int)strlen(good_config) - 1, good_config);
    CHECK_MSG(config_parse(buf, "c.json", &c) == 0, "%s", err_msg());
    expect_config_error("\"tie_word_embeddings\":false", "\"tie_word_embeddings\":false,"
                        "\"quantization_config\":{\"quant_method\":\"gptq\",\"bits\":4}",
                        "quant_method 'gptq' is not supported");
    expect_config_error("\"tie_word_embeddings\":false", "\"tie_word_embeddings\":false,"
                        "\"quantization_config\":{\"bits\":4}", "quant_method missing is not supported");
    expect_config_error("\"tie_word_embeddings\":false", "\"tie_word_embeddings\":false,"
                        "\"quantization_config\":[1]", "must be an object");
    /* a quantization_mode BitNetQuantConfig does not know (it raises; it had loaded as offline) */
    expect_config_error("\"tie_word_embeddings\":false", "\"tie_word_embeddings\":false,"
                        "\"quantization_config\":{\"quant_method\":\"bitnet\",\"quantization_mode\":\"bogus\"}",
                        "quantization_mode 'bogus' is not supported");
    snprintf(buf, sizeof buf, "%.*s,\"quantization_config\":{\"quant_method\":\"bitnet\","
             "\"modules_to_not_convert\":[\"lm_head\"]}}", (int)strlen(good_config) - 1, good_config);
    CHECK_MSG(config_parse(buf, "c.json", &c) == 0 && c.arch == ARCH_LLAMA && c.bitnet_linears &&
                  c.bitnet_scale == BITNET_BITLINEAR && strcmp(c.bitnet_mode, "offline") == 0,
              "%s", err_msg());
    CHECK(config_parse(good_config, "c.json", &c) == 0 && !c.bitnet_linears);
    expect_config_error("\"tie_word_embeddings\":false", "\"tie_word_embeddings\":false,"
                        "\"quantization_config\":{\"quant_method\":\"bitnet\",\"modules_to_not_convert\":"
                        "[\"lm_head\",\"down_proj\"]}",
                        "entry 'down_proj' keeps model.layers.0.mlp.down_proj dense");
    expect_config_error("\"tie_word_embeddings\":false", "\"tie_word_embeddings\":false,"
                        "\"quantization_config\":{\"quant_method\":\"bitnet\",\"modules_to_not_convert\":\"lm_head\"}",
                        "must be a list of names");
    /* entries naming one layer: refused where that layer exists (by its index, or
     * an index that ends in it), taken where it does not; and the layers are not
     * enumerated (num_hidden_layers 1e9 with lm_head kept had been 7e9 names) */
    expect_config_error("\"tie_word_embeddings\":false", "\"tie_word_embeddings\":false,"
                        "\"quantization_config\":{\"quant_method\":\"bitnet\",\"modules_to_not_convert\":"
                        "[\"layers.3.mlp.down_proj\"]}", "keeps model.layers.3.mlp.down_proj dense");
    expect_config_error("\"num_hidden_layers\":4", "\"num_hidden_layers\":20,"
                        "\"quantization_config\":{\"quant_method\":\"bitnet\",\"modules_to_not_convert\":"
                        "[\"3.self_attn.o\"]}", "keeps model.layers.3.self_attn.o_proj dense");
    snprintf(buf, sizeof buf, "%.*s,\"quantization_config\":{\"quant_method\":\"bitnet\","
             "\"modules_to_not_convert\":[\"lm_head\",\"layers.7.mlp\",\"layers.03.mlp\"]}}",
             (int)strlen(good_config) - 1, good_config);
    CHECK_MSG(config_parse(buf, "c.json", &c) == 0, "%s", err_msg());
    {
        const char *nl = strstr(good_config, "\"num_hidden_layers\":4");
        REQUIRE(nl);
        snprintf(buf, sizeof buf, "%.*s\"num_hidden_layers\":999999999%.*s,\"quantization_config\":"
                 "{\"quant_method\":\"bitnet\",\"modules_to_not_convert\":[\"lm_head\"]}}",
                 (int)(nl - good_config), good_config, (int)strlen(nl + 21) - 1, nl + 21);
        CHECK_MSG(config_parse(buf, "c.json", &c) == 0 && c.n_layers == 999999999, "%s: %s", buf, err_msg());
    }
    expect_config_error("\"tie_word_embeddings\":false", "\"tie_word_embeddings\":false,"
                        "\"quantization_config\":{\"quant_method\":\"bitnet\",\"linear_class\":\"ternlinear\"}",
                        "linear_class 'ternlinear' is not supported");
    /* a bitnet model: linear_class absent is bitlinear; no quantization_config at all is refused */
    const char *ll = strstr(good_config, "\"llama\"");
    REQUIRE(ll);
    snprintf(buf, sizeof buf, "%.*s\"bitnet\"%s", (int)(ll - good_config), good_config, ll + 7);
    CHECK(config_parse(buf, "c.json", &c) != 0 && strstr(err_msg(), "without a quantization_config"));
    REQUIRE(buf[strlen(buf) - 1] == '}');
    buf[strlen(buf) - 1] = 0;
    strcat(buf, ",\"quantization_config\":{\"quant_method\":\"bitnet\"}}");
    CHECK_MSG(config_parse(buf, "c.json", &c) == 0 && c.arch == ARCH_BITNET && c.bitnet_linears &&
                  c.bitnet_scale == BITNET_BITLINEAR, "%s", err_msg());
    /* escaped NUL: in a value and in a key; an escaped backslash before "u0000" is not one */
    expect_config_error("\"model_type\":\"llama\"", "\"model_type\":\"llama\\u0000x\"", "escaped NUL");
    expect_config_error("\"hidden_act\":\"silu\"", "\"hidden_act\":\"silu\",\"x\\u0000\":1", "escaped NUL");
    snprintf(buf, sizeof buf, "%.*s,\"note\":\"a\\\\u0000\"}", (int)strlen(good_config) - 1, good_config);
    CHECK_MSG(config_parse(buf, "c.json", &c) == 0, "%s: %s", buf, err_msg());
}

/* ---- checkpoints rewritten from the fixtures ----------------------------------- */

/* bytes of n elements of the ExtraTensor dtypes used here */
static uint64_t elem_bytes(const char *dt, int64_t n) {
    return (uint64_t)n * (!strcmp(dt, "I64") ? 64 : !strcmp(dt, "F32") ? 32 : !strcmp(dt, "F4") ? 4
                          : !strcmp(dt, "F8_E8M0") || !strcmp(dt, "U8") ? 8 : 16) / 8;
}

typedef struct {
    const char *name, *dtype; /* dtype "BF16", "F32", "I64", "F8_E8M0", "U8" or "F4"; NULL: removed */
    int64_t rows, cols;       /* cols 0: a vector of rows */
    const void *data;         /* its bytes, or NULL: zeros */
} ExtraTensor;

/* OUT/ = SRC's config.json + SRC's model.safetensors rewritten: each extra
 * tensor added (or replacing the one of its name; the old bytes stay as an
 * unreferenced hole) with its data (or zeros) appended, or (dtype NULL) the
 * tensor of its name removed from the header, and the header padded with
 * spaces so that the data section starts at an odd offset (`odd`, as a
 * writer with an odd header length leaves it: every BF16 value misaligned)
 * or at a multiple of 8.  Returns 0 or -1. */
static int rewrite_checkpoint(const char *src, const char *out, int odd, const ExtraTensor *x,
                              int nx) {
    char path[1024], *buf = NULL;
    size_t n = 0;
    snprintf(path, sizeof path, "mkdir -p '%s' && cp '%s/config.json' '%s/'", out, src, out);
    if (test_run(path, NULL) != 0) return -1;
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    if (file_read_all(path, &buf, &n) != 0 || n < 8) {
        free(buf);
        return -1;
    }
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | (uint8_t)buf[i];
    cJSON *h = hl <= n - 8 ? cJSON_ParseWithLength(buf + 8, (size_t)hl) : NULL;
    if (!h) {
        free(buf);
        return -1;
    }
    uint64_t end = n - 8 - hl, extra = 0;
    for (int i = 0; i < nx; i++) {
        cJSON_DeleteItemFromObjectCaseSensitive(h, x[i].name);
        if (!x[i].dtype) continue;
        int64_t cnt = x[i].rows * (x[i].cols ? x[i].cols : 1);
        uint64_t nb = elem_bytes(x[i].dtype, cnt);
        cJSON *e = cJSON_AddObjectToObject(h, x[i].name);
        cJSON_AddStringToObject(e, "dtype", x[i].dtype);
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)x[i].rows));
        if (x[i].cols) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)x[i].cols));
        cJSON *o = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)(end + extra)));
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)(end + extra + nb)));
        extra += nb;
    }
    char *text = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    size_t tl = strlen(text), pad = (8 - (8 + tl) % 8) % 8 + (odd ? 1 : 0);
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    FILE *f = fopen(path, "wb");
    int ok = f != NULL;
    if (ok) {
        uint64_t nl = tl + pad;
        for (int i = 0; i < 8; i++) fputc((int)((nl >> (8 * i)) & 0xff), f);
        fwrite(text, 1, tl, f);
        for (size_t i = 0; i < pad; i++) fputc(' ', f);
        fwrite(buf + 8 + hl, 1, (size_t)end, f);
        for (int i = 0; i < nx; i++) {
            if (!x[i].dtype) continue;
            const uint64_t nb = elem_bytes(x[i].dtype, x[i].rows * (x[i].cols ? x[i].cols : 1));
            if (x[i].data) fwrite(x[i].data, 1, (size_t)nb, f);
            else
                for (uint64_t b = 0; b < nb; b++) fputc(0, f);
        }
        ok = fclose(f) == 0;
    }
    free(text);
    free(buf);
    return ok ? 0 : -1;
}

/* A valid file whose header length is odd puts every tensor at an odd
 * address of the mapping: BF16 weights and BitNet's BF16 weight_scale are
 * read there alignment-safely (the sanitizer build aborted on the misaligned
 * uint16_t loads) and give the same model as the original. */
TEST(loader_odd_header_length_reads_misaligned_data) {
    char dir[600];
    const char *srcs[] = {LLAMA_DIR, BITNET_DIR};
    for (int i = 0; i < 2; i++) {
        snprintf(dir, sizeof dir, "%s/odd%d", test_tmpdir(), i);
        REQUIRE(rewrite_checkpoint(test_path(srcs[i]), dir, 1, NULL, 0) == 0);
        SafeTensors st;
        char path[700];
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        REQUIRE(st_open_file(path, &st) == 0);
        const StTensor *e = st_find(&st, "model.embed_tokens.weight");
        CHECK(e && (uintptr_t)e->data % 2 == 1); /* the case under test */
        st_close(&st);
        Model a, b;
        REQUIRE(model_load(test_path(srcs[i]), NULL, &a) == 0);
        int rc = model_load(dir, NULL, &b);
        CHECK_MSG(rc == 0, "%s", err_msg());
        if (rc == 0) {
            size_t ne = sizeof(float) * (size_t)a.cfg.vocab * (size_t)a.cfg.hidden;
            CHECK(memcmp(a.embed, b.embed, ne) == 0);
            CHECK(memcmp(a.layers[0].attn_norm, b.layers[0].attn_norm,
                         sizeof(float) * (size_t)a.cfg.hidden) == 0);
            const Linear *qa = &a.layers[0].q, *qb = &b.layers[0].q;
            if (qa->t) { /* BitNet: the weight_scale read from an odd address */
                CHECK(qb->t && qa->t->n_scales == qb->t->n_scales &&
                      memcmp(qa->t->scales, qb->t->scales,
                             sizeof(float) * (size_t)qa->t->n_scales) == 0);
            } else {
                CHECK(qb->w && memcmp(qa->w, qb->w, sizeof(float) * (size_t)(qa->out * qa->in)) == 0);
            }
            model_free(&b);
        }
        model_free(&a);
    }
}

static void expect_loads(const char *dir) {
    Model m;
    CHECK_MSG(model_load(dir, NULL, &m) == 0, "%s: %s", dir, err_msg());
    model_free(&m);
}

static void expect_load_error(const char *dir, const char *needle) {
    Model m;
    int rc = model_load(dir, NULL, &m);
    CHECK_MSG(rc != 0, "%s loaded", dir);
    if (rc == 0) model_free(&m);
    else CHECK_MSG(strstr(err_msg(), needle) != NULL, "message '%s' lacks '%s'", err_msg(), needle);
}

/* How many codes of two ternary linears of one shape differ. */
static int64_t codes_differ(const Linear *a, const Linear *b) {
    int64_t diff = 0;
    for (int64_t r = 0; r < a->out; r++)
        for (int64_t k = 0; k < a->in; k++)
            diff += tern_get(a->t->codes + r * a->t->row_bytes, k) != tern_get(b->t->codes + r * b->t->row_bytes, k);
    return diff;
}

/* dir = TMP/sub: src's checkpoint with the nx extra tensors x (rewrite_checkpoint);
 * it loads (err NULL) or is refused with err in the message. */
static void extra_case(char *dir, size_t n, const char *sub, const char *src, const ExtraTensor *x, int nx,
                       const char *err) {
    snprintf(dir, n, "%s/%s", test_tmpdir(), sub);
    REQUIRE(rewrite_checkpoint(test_path(src), dir, 0, x, nx) == 0);
    if (err) expect_load_error(dir, err);
    else expect_loads(dir);
}

/* A bias tensor of a linear (or any other .bias) is refused by name; harmless
 * extras such as rotary_emb.inv_freq are still ignored. */
TEST(loader_refuses_bias_tensors) {
    char dir[600];
    const struct {
        const char *sub, *src;
        ExtraTensor x;
        const char *err;
    } cases[] = {
        {"bias", LLAMA_DIR, {"model.layers.2.self_attn.q_proj.bias", "BF16", 256, 0, NULL},
         "tensor 'model.layers.2.self_attn.q_proj.bias' is a bias"},
        {"bias2", LLAMA_DIR, {"model.layers.0.mlp.down_proj.bias", "F32", 256, 0, NULL},
         "'model.layers.0.mlp.down_proj.bias' is a bias"},
        /* a buffer of another safetensors dtype that the model does not use loads (it had
         * failed the load: "unknown dtype 'I64'"); as a weight it is refused by dtype */
        {"posids", LLAMA_DIR, {"model.position_ids", "I64", 1, 64, NULL}, NULL},
        {"i64norm", LLAMA_DIR, {"model.norm.weight", "I64", 256, 0, NULL}, "dtype I64 where a float tensor"},
        /* the MX formats' packed F4 and F8_E8M0 likewise, refused by the format's name */
        {"f4norm", LLAMA_DIR, {"model.norm.weight", "F4", 256, 0, NULL}, "dtype F4 where a float tensor"},
        {"e8ws", BITNET_DIR, {"model.layers.0.self_attn.q_proj.weight_scale", "F8_E8M0", 1, 0, NULL},
         "dtype F8_E8M0, expected a float"},
        {"invfreq", LLAMA_DIR, {"model.layers.0.self_attn.rotary_emb.inv_freq", "F32", 16, 0, NULL}, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        extra_case(dir, sizeof dir, cases[i].sub, cases[i].src, &cases[i].x, 1, cases[i].err);
    /* unused MX blocks and scales load (they had failed it: "unknown dtype"), and
     * quantize copies them as they are (the E8M0 one had been "cannot be copied") */
    ExtraTensor mx[2] = {{"model.mx.blocks", "F4", 64, 32, NULL}, {"model.mx.scales", "F8_E8M0", 64, 1, NULL}};
    extra_case(dir, sizeof dir, "mx", LLAMA_DIR, mx, 2, NULL);
    char cmd[2000], path[700];
    snprintf(cmd, sizeof cmd, "%s quantize --model %s --quant rule=twn,group=row --out %s/q", bin_path("ternlab"),
             dir, dir);
    CHECK(test_run(cmd, NULL) == 0);
    SafeTensors a, b;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    REQUIRE(st_open_file(path, &a) == 0);
    snprintf(path, sizeof path, "%s/q/model.safetensors", dir);
    int rc = st_open_file(path, &b);
    CHECK_MSG(rc == 0, "%s", err_msg());
    for (int i = 0; i < 2 && rc == 0; i++) {
        const StTensor *x = st_find(&a, mx[i].name), *y = st_find(&b, mx[i].name);
        CHECK_MSG(x && y && x->dtype == y->dtype && !strcmp(st_dtype_name(y->dtype), mx[i].dtype) &&
                      x->nbytes == y->nbytes && x->ndim == y->ndim && x->shape[0] == y->shape[0] &&
                      x->shape[1] == y->shape[1] && !memcmp(x->data, y->data, x->nbytes),
                  "%s", mx[i].name);
    }
    if (rc == 0) st_close(&b);
    st_close(&a);
}

static void expect_cli_error(const char *args, const char *needle);

/* A NaN or infinite weight anywhere is refused at load, naming the tensor (it
 * had run as "ppl nan", exit 0, and ternarised had hidden the NaN: ppl 1975
 * against 1169); so is a scale that is not finite (a ternary checkpoint's NaN
 * scale, a BitNet weight_scale whose reciprocal overflows). */
TEST(loader_refuses_nonfinite_weights_and_scales) {
    Model a;
    REQUIRE(model_load(test_path(LLAMA_DIR), NULL, &a) == 0);
    const int64_t rows = a.layers[1].down.out, cols = a.layers[1].down.in;
    model_free(&a);
    float *w = xcalloc((size_t)(rows * cols), sizeof(float));
    const float bad[2] = {NAN, INFINITY};
    for (int k = 0; k < 2; k++) {
        w[rows * cols / 2] = bad[k];
        char dir[600];
        snprintf(dir, sizeof dir, "%s/nonfinite%d", test_tmpdir(), k);
        ExtraTensor x = {"model.layers.1.mlp.down_proj.weight", "F32", rows, cols, w};
        REQUIRE(rewrite_checkpoint(test_path(LLAMA_DIR), dir, 0, &x, 1) == 0);
        expect_load_error(dir, "tensor 'model.layers.1.mlp.down_proj.weight': element");
        Model m; /* ternarised on load as well */
        ModelLoadOpts o = {.quant = "rule=absmean"};
        CHECK(model_load(dir, &o, &m) != 0 && strstr(err_msg(), "must be finite"));
    }
    /* finite weights whose products overflow: ppl refuses the non-finite result
     * (its last line had been "ppl nan", exit 0) */
    for (int64_t i = 0; i < rows * cols; i++) w[i] = 3e38f;
    char odir[600], args[1400];
    snprintf(odir, sizeof odir, "%s/overflow", test_tmpdir());
    ExtraTensor big = {"model.layers.1.mlp.down_proj.weight", "F32", rows, cols, w};
    REQUIRE(rewrite_checkpoint(test_path(LLAMA_DIR), odir, 0, &big, 1) == 0);
    snprintf(args, sizeof args, "ppl --model %s --tokens %s --window 32 --max-windows 1", odir, test_path(TOKENS_FILE));
    expect_cli_error(args, "non-finite logits");
    /* and so do logits, generate and the experiment programs, writing nothing (logits
     * had written the matrix of infinities, generate printed 0,0,0,0 -- the argmax of
     * all-inf rows -- and an experiment wrote ppl NaN, KL 0 and top-1 1 as a run file,
     * all with exit 0) */
    char outp[700], cmd[2600], *log = NULL;
    snprintf(outp, sizeof outp, "%s/overflow.f32", test_tmpdir());
    snprintf(args, sizeof args, "logits --model %s --tokens %s --window 32 --windows 0:1 --out %s", odir,
             test_path(TOKENS_FILE), outp);
    expect_cli_error(args, "non-finite logits");
    CHECK_MSG(access(outp, F_OK) != 0, "logits wrote %s", outp);
    snprintf(args, sizeof args, "generate --model %s --prompt 1,2,3 --max-new 4", odir);
    expect_cli_error(args, "non-finite logits");
    snprintf(outp, sizeof outp, "%s/overflow.h5", test_tmpdir());
    snprintf(cmd, sizeof cmd, "%s --model %s --value all --out %s tokens=%s window=32 max_windows=1 2>&1",
             bin_path("exp_kv_ternary"), odir, outp, test_path(TOKENS_FILE));
    const int erc = test_run(cmd, &log);
    CHECK_MSG(erc == 1 && log && strstr(log, "non-finite logits") && access(outp, F_OK) != 0,
              "exp_kv_ternary on an overflowing model: exit %d:\n%s", erc, log ? log : "");
    free(log);
    free(w);
    /* BitNet: a subnormal BF16 weight_scale (positive, but 1 / ws is inf) */
    char dir[600];
    snprintf(dir, sizeof dir, "%s/subnormal", test_tmpdir());
    const uint16_t sub = 0x0001;
    ExtraTensor s = {"model.layers.0.mlp.down_proj.weight_scale", "BF16", 1, 0, &sub};
    REQUIRE(rewrite_checkpoint(test_path(BITNET_DIR), dir, 0, &s, 1) == 0);
    expect_load_error(dir, "reciprocal overflows");
    /* codes with a NaN scale, and a scale the f16 scale dtype cannot hold */
    int8_t q[8] = {1, 0, -1, 1, 0, 0, 1, -1};
    float sc[2] = {0.5f, NAN};
    TernaryMatrix t;
    CHECK(tern_from_codes(q, sc, 2, 4, QG_ROW, DT_F32, &t) != 0 && strstr(err_msg(), "finite"));
    sc[1] = 1e6f;
    CHECK(tern_from_codes(q, sc, 2, 4, QG_ROW, DT_F16, &t) != 0 && strstr(err_msg(), "overflows"));
    sc[1] = -0.25f; /* (finite: taken, as llama.cpp takes a TQ block's negative d) */
    REQUIRE(tern_from_codes(q, sc, 2, 4, QG_ROW, DT_F16, &t) == 0);
    tern_free(&t);
}

/* A bitnet checkpoint with its linears stored as floats (BF16) instead of
 * packed U8: offline (the default; transformers' BitLinear loads packed
 * weights only) is refused — it had run as a dense model without int8
 * activations; online with autobitlinear (transformers ternarises the float
 * weights in every forward: per-tensor absmean, clamp 1e-5, round, clamp to
 * +-1, and int8 activations per token) loads ternarised once with that rule,
 * int8 activations, as a native ternary model: here bitnet-tiny's linears
 * dequantised to BF16 load back with their packed codes and scale mean|W|;
 * --quant applies its rule to the float weights of the linears it selects;
 * use_rms_norm (a norm inside every linear) is refused. */
TEST(loader_bitnet_float_linears) {
    char dir[600], cmd[1600];
    Model pk;
    REQUIRE(model_load(test_path(BITNET_DIR), NULL, &pk) == 0);
    const int nl = 7 * pk.cfg.n_layers;
    ExtraTensor *x = xcalloc((size_t)nl, sizeof *x);
    uint16_t **bf = xcalloc((size_t)nl, sizeof *bf);
    char (*names)[160] = xcalloc((size_t)nl, sizeof *names);
    for (int l = 0, i = 0; l < pk.cfg.n_layers; l++) {
        Layer *L = &pk.layers[l];
        Linear *lins[] = LAYER_LINEARS(L);
        for (int j = 0; j < 7; j++, i++) {
            const Linear *lin = lins[j];
            REQUIRE(lin->t);
            bf[i] = xmalloc(sizeof(uint16_t) * (size_t)(lin->out * lin->in));
            for (int64_t r = 0; r < lin->out; r++)
                for (int64_t k = 0; k < lin->in; k++)
                    bf[i][r * lin->in + k] = f32_to_bf16((float)tern_get(lin->t->codes + r * lin->t->row_bytes, k) *
                                                          lin->t->scales[0]);
            snprintf(names[i], sizeof names[i], "%s.weight", lin->name);
            x[i] = (ExtraTensor){names[i], "BF16", lin->out, lin->in, bf[i]};
        }
    }
    snprintf(dir, sizeof dir, "%s/bitbf16", test_tmpdir());
    REQUIRE(rewrite_checkpoint(test_path(BITNET_DIR), dir, 0, x, nl) == 0);
    expect_load_error(dir, "tensor 'model.layers.0.self_attn.q_proj.weight' is BF16, but this is "
                           "a bitnet checkpoint");
    CHECK(strstr(err_msg(), "quantization_mode offline") != NULL);
    snprintf(cmd, sizeof cmd, "sed -i 's/\"quantization_mode\": *\"offline\"/\"quantization_mode\": "
             "\"online\"/; s/\"bitlinear\"/\"autobitlinear\"/' %s/config.json && grep -q online "
             "%s/config.json", dir, dir);
    REQUIRE(test_run(cmd, NULL) == 0);
    Model m;
    REQUIRE(model_load(dir, NULL, &m) == 0 || (fprintf(stderr, "    %s\n", err_msg()), 0));
    CHECK(m.native_ternary);
    for (int l = 0, i = 0; l < m.cfg.n_layers; l++) {
        Layer *L = &m.layers[l], *P = &pk.layers[l];
        Linear *lins[] = LAYER_LINEARS(L);
        Linear *plins[] = LAYER_LINEARS(P);
        for (int j = 0; j < 7; j++, i++) {
            const Linear *lin = lins[j], *pl = plins[j];
            CHECK_MSG(lin->t && lin->act_int8, "%s: ternary %d, int8 activations %d", lin->name, lin->t != NULL,
                      lin->act_int8);
            if (!lin->t) continue;
            double sum = 0;
            const int64_t cnt = lin->out * lin->in;
            for (int64_t e = 0; e < cnt; e++) sum += fabs((double)bf16_to_f32(bf[i][e]));
            const double want = sum / (double)cnt > 1e-5 ? sum / (double)cnt : 1e-5;
            CHECK_MSG(lin->t->n_scales == 1 && fabs(lin->t->scales[0] - want) <= 1e-6 * want, "%s: scale %g, want %g",
                      lin->name, (double)lin->t->scales[0], want);
            const int64_t diff = codes_differ(lin, pl);
            CHECK_MSG(diff == 0, "%s: %lld codes differ from the packed model's", lin->name, (long long)diff);
        }
    }
    model_free(&m);
    /* --quant on it applies its rule to the stored float weights (not to their absmean
     * ternary): twn by row keeps the BF16 magnitude of the packed scale as the row's scale
     * (mean|W| would be that times the nonzero fraction); int8 activations stay */
    ModelLoadOpts qo = {.quant = "rule=twn,group=row,layers=0"};
    REQUIRE(model_load(dir, &qo, &m) == 0 || (fprintf(stderr, "    %s\n", err_msg()), 0));
    {
        const Linear *q0 = &m.layers[0].q, *q1 = &m.layers[1].q;
        const float want = bf16_to_f32(f32_to_bf16(fabsf(pk.layers[0].q.t->scales[0])));
        CHECK_MSG(q0->t && q0->act_int8 && q0->t->n_scales == q0->out &&
                      fabsf(q0->t->scales[0] - want) <= 1e-6f * want,
                  "layer 0 q under twn/row: scale %g, want %g", q0->t ? (double)q0->t->scales[0] : 0.0,
                  (double)want);
        /* a layer the spec does not select: BitNet's own absmean ternary */
        CHECK_MSG(q1->t && q1->act_int8 && q1->t->n_scales == 1, "layer 1 q: not the absmean ternary");
    }
    model_free(&m);
    /* bitlinear with online: not transformers' combination either */
    snprintf(cmd, sizeof cmd, "sed -i 's/\"autobitlinear\"/\"bitlinear\"/' %s/config.json", dir);
    REQUIRE(test_run(cmd, NULL) == 0);
    expect_load_error(dir, "linear_class bitlinear, quantization_mode online");
    /* use_rms_norm (a norm inside every AutoBitLinear, which the forward does not apply) */
    snprintf(cmd, sizeof cmd, "sed -i 's/\"quantization_mode\": *\"online\"/\"quantization_mode\": \"online\", "
             "\"use_rms_norm\": true/' %s/config.json && grep -q use_rms_norm %s/config.json", dir, dir);
    REQUIRE(test_run(cmd, NULL) == 0);
    expect_load_error(dir, "use_rms_norm true");
    for (int i = 0; i < nl; i++) free(bf[i]);
    free(bf);
    free(names);
    free(x);
    model_free(&pk);
}

/* A config.json claiming more layers than the checkpoint holds is refused at
 * once, naming the last layer's missing tensor (10^9 layers had spun ~14 s in
 * the memory plan and then reported "not enough memory"). */
TEST(loader_refuses_layers_beyond_the_checkpoint) {
    const char *counts[] = {"1000000000", "5"};
    const char *want[] = {"tensor 'model.layers.999999999.input_layernorm.weight' (layer 999999999) is missing",
                          "num_hidden_layers 5, but tensor 'model.layers.4.input_layernorm.weight'"};
    for (int i = 0; i < 2; i++) {
        char dir[600], cmd[1600];
        snprintf(dir, sizeof dir, "%s/layers%d", test_tmpdir(), i);
        REQUIRE(rewrite_checkpoint(test_path(LLAMA_DIR), dir, 0, NULL, 0) == 0);
        snprintf(cmd, sizeof cmd, "sed -i 's/\"num_hidden_layers\": *4/\"num_hidden_layers\": %s/' "
                 "%s/config.json && grep -q '\"num_hidden_layers\": *%s' %s/config.json",
                 counts[i], dir, counts[i], dir);
        REQUIRE(test_run(cmd, NULL) == 0);
        expect_load_error(dir, want[i]);
    }
}

/* quantize --out into a folder that already holds a checkpoint is refused
 * (the new file would sit beside an old index and shards); a new or empty
 * folder is fine. */
TEST(loader_quantize_refuses_used_out_folder) {
    const char *d = test_tmpdir();
    const char *olds[] = {"model.safetensors.index.json", "model-00001-of-00002.safetensors"};
    for (int i = 0; i < 2; i++) {
        char cmd[2048], *out = NULL;
        snprintf(cmd, sizeof cmd, "mkdir -p %s/used%d && echo '{}' > %s/used%d/%s", d, i, d, i, olds[i]);
        REQUIRE(test_run(cmd, NULL) == 0);
        snprintf(cmd, sizeof cmd, "%s quantize --model %s --quant rule=twn,group=row --out %s/used%d",
                 bin_path("ternlab"), test_path(LLAMA_DIR), d, i);
        int rc = test_run(cmd, &out);
        CHECK_MSG(rc == 2 && out && strstr(out, "already holds") && strstr(out, olds[i]),
                  "rc %d: %s", rc, out);
        free(out);
        snprintf(cmd, sizeof cmd, "test ! -e %s/used%d/config.json", d, i);
        CHECK(test_run(cmd, NULL) == 0); /* nothing written */
    }
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof cmd, "mkdir -p %s/empty && %s quantize --model %s --quant rule=twn,group=row "
             "--out %s/empty", d, bin_path("ternlab"), test_path(LLAMA_DIR), d);
    int rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
    free(out);
}

TEST(loader_tokens_refused) {
    char path[600];
    snprintf(path, sizeof path, "%s/t.i32", test_tmpdir());
    int32_t ids[3] = {5, 2048, 7};
    FILE *f = fopen(path, "wb");
    fwrite(ids, 4, 3, f);
    fclose(f);
    int32_t *t;
    int64_t n;
    CHECK(tokens_load(path, 2048, &t, &n) != 0 && strstr(err_msg(), "token 1 has id 2048"));
    f = fopen(path, "wb");
    fwrite(ids, 1, 6, f);
    fclose(f);
    CHECK(tokens_load(path, 4096, &t, &n) != 0 && strstr(err_msg(), "not a multiple of 4"));
    CHECK(tokens_parse_list("1,2,x", 10, &t, &n) != 0);
    /* an empty item anywhere, a blank or '+' before one: refused alike */
    const char *bad[] = {"1,2,", "1,,2", ",1", " 1,2", "1, 2", "+1", "1,+2", "", ","};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_MSG(tokens_parse_list(bad[i], 10, &t, &n) != 0, "'%s' accepted", bad[i]);
    CHECK(tokens_parse_list("1,20", 10, &t, &n) != 0 && strstr(err_msg(), "outside"));
    REQUIRE(tokens_parse_list("1,2,3", 10, &t, &n) == 0);
    CHECK(n == 3 && t[2] == 3);
    free(t);
}

/* The CLI turns each of these into a message on stderr and exit status 1. */
static void expect_cli_error(const char *args, const char *needle) {
    const char *bin = getenv("TERNLAB_BIN") ? getenv("TERNLAB_BIN") : "build/ternlab";
    char cmd[4096], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s %s", bin, args);
    int rc = test_run(cmd, &out);
    CHECK_MSG(rc == 1, "'%s' exited %d (want 1): %s", args, rc, out);
    CHECK_MSG(out && strstr(out, needle), "'%s' output lacks '%s': %s", args, needle, out);
    free(out);
}

TEST(loader_cli_refuses_bad_checkpoints) {
    const char *d = test_tmpdir();
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/m && cp %s %s/m/ && head -c 3000000 %s > %s/m/model.safetensors", d,
             test_path("data/llama-tiny/config.json"), d,
             test_path("data/llama-tiny/model.safetensors"), d);
    REQUIRE(test_run(cmd, NULL) == 0);
    snprintf(cmd, sizeof cmd, "info --model %s/m", d);
    expect_cli_error(cmd, "beyond the data section");
    /* config missing a field */
    snprintf(cmd, sizeof cmd,
             "cp %s %s/m/ && grep -v num_hidden_layers %s > %s/m/config.json", 
             test_path("data/llama-tiny/model.safetensors"), d,
             test_path("data/llama-tiny/config.json"), d);
    REQUIRE(test_run(cmd, NULL) == 0);
    snprintf(cmd, sizeof cmd, "ppl --model %s/m --tokens %s", d, test_path("data/wikitext2-test.tokens.i32"));
    expect_cli_error(cmd, "missing field 'num_hidden_layers'");
    /* token file with an id beyond the vocabulary / a ragged size */
    snprintf(cmd, sizeof cmd, "printf '\\001\\000\\000\\000\\000\\010\\000\\000' > %s/bad.i32 && "
                              "printf '\\001\\000\\000' > %s/ragged.i32", d, d);
    REQUIRE(test_run(cmd, NULL) == 0);
    snprintf(cmd, sizeof cmd, "ppl --model %s --tokens %s/bad.i32", test_path("data/llama-tiny"), d);
    expect_cli_error(cmd, "id 2048, outside the vocabulary");
    snprintf(cmd, sizeof cmd, "ppl --model %s --tokens %s/ragged.i32", test_path("data/llama-tiny"), d);
    expect_cli_error(cmd, "not a multiple of 4");
    snprintf(cmd, sizeof cmd, "generate --model %s --prompt 1,99999 --max-new 2", test_path("data/llama-tiny"));
    expect_cli_error(cmd, "outside the vocabulary");
}

/* Layer tensors past the declared layer count are refused by name: a
 * config.json whose num_hidden_layers understates the checkpoint (4 layers
 * stored, 2 declared) had loaded and run on the first layers alone (llama-tiny
 * window ppl 94.98 instead of 8.76, exit 0), and so had a GGUF whose
 * llama.block_count understates its blocks.  Every tensor is scanned, in one
 * file, in a second shard, and in both GGUF fixtures; an index that is no
 * plain decimal (leading zero, letters) is refused too, one of any length
 * is past without overflow, and the fixtures as they are still load. */
TEST(loader_refuses_layers_past_the_config) {
    const char *d = test_tmpdir();
    char dir[600], cmd[8192], path[700];
    /* config.json understating the layers: llama (also through the CLI) and bitnet */
    const char *srcs[] = {LLAMA_DIR, BITNET_DIR};
    const char *declared[] = {"2", "3"};
    const char *want[] = {"tensor 'model.layers.2.input_layernorm.weight': layer 2 is past the "
                          "config's num_hidden_layers (2)",
                          "tensor 'model.layers.3.input_layernorm.weight': layer 3 is past the "
                          "config's num_hidden_layers (3)"};
    for (int i = 0; i < 2; i++) {
        Model m;
        REQUIRE(model_load(test_path(srcs[i]), NULL, &m) == 0 || (fprintf(stderr, "    %s\n", err_msg()), 0));
        model_free(&m);
        snprintf(dir, sizeof dir, "%s/under%d", d, i);
        REQUIRE(rewrite_checkpoint(test_path(srcs[i]), dir, 0, NULL, 0) == 0);
        snprintf(cmd, sizeof cmd, "sed -i 's/\"num_hidden_layers\": *4/\"num_hidden_layers\": %s/' "
                 "%s/config.json && grep -q '\"num_hidden_layers\": *%s' %s/config.json",
                 declared[i], dir, declared[i], dir);
        REQUIRE(test_run(cmd, NULL) == 0);
        expect_load_error(dir, want[i]);
    }
    snprintf(cmd, sizeof cmd, "ppl --model %s/under0 --tokens %s --window 16 --max-windows 1", d,
             test_path(TOKENS_FILE));
    expect_cli_error(cmd, want[0]);
    /* one tensor past the 4 layers, or under model.layers. without a plain index */
    const struct {
        const char *name, *want;
    } extra[] = {
        {"model.layers.4.self_attn.q_proj.weight",
         "tensor 'model.layers.4.self_attn.q_proj.weight': layer 4 is past the config's "
         "num_hidden_layers (4)"},
        {"model.layers.99999999999999999999999.mlp.up_proj.weight",
         "layer 99999999999999999999999 is past the config's num_hidden_layers (4)"},
        {"model.layers.01.mlp.up_proj.weight",
         "tensor 'model.layers.01.mlp.up_proj.weight': '01' after 'model.layers.' is not a layer index"},
        {"model.layers.x.mlp.up_proj.weight", "'x' after 'model.layers.' is not a layer index"},
    };
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
        snprintf(dir, sizeof dir, "%s/extra%zu", d, i);
        ExtraTensor x = {extra[i].name, "F32", 4, 0, NULL};
        REQUIRE(rewrite_checkpoint(test_path(LLAMA_DIR), dir, 0, &x, 1) == 0);
        expect_load_error(dir, extra[i].want);
    }
    /* sharded: llama-tiny as shard 1 and a second shard holding one tensor, first a
     * harmless one of layer 3 (loads), then one of layer 4 (refused) */
    const char *second[] = {"model.layers.3.self_attn.rotary_emb.inv_freq",
                            "model.layers.4.mlp.down_proj.weight"};
    for (int i = 0; i < 2; i++) {
        snprintf(dir, sizeof dir, "%s/shards%d", d, i);
        snprintf(cmd, sizeof cmd, "mkdir -p %s && cp %s/config.json %s/ && cp %s/model.safetensors "
                 "%s/model-00001-of-00002.safetensors && printf '{\"metadata\": {}, \"weight_map\": "
                 "{\"model.embed_tokens.weight\": \"model-00001-of-00002.safetensors\", \"%s\": "
                 "\"model-00002-of-00002.safetensors\"}}' > %s/model.safetensors.index.json", dir,
                 test_path(LLAMA_DIR), dir, test_path(LLAMA_DIR), dir, second[i], dir);
        REQUIRE(test_run(cmd, NULL) == 0);
        char header[256];
        snprintf(header, sizeof header, "{\"%s\":{\"dtype\":\"F32\",\"shape\":[2],"
                 "\"data_offsets\":[0,8]}}", second[i]);
        snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
        write_st(path, header, 8);
        Model m;
        int rc = model_load(dir, NULL, &m);
        if (i == 0) {
            CHECK_MSG(rc == 0, "%s: %s", dir, err_msg());
            if (rc == 0) {
                CHECK(m.cfg.n_layers == 4 && m.st.n_files == 2);
                model_free(&m);
            }
        } else {
            CHECK_MSG(rc != 0, "%s loaded", dir);
            if (rc == 0) model_free(&m);
            else CHECK_MSG(strstr(err_msg(), "tensor 'model.layers.4.mlp.down_proj.weight': layer 4 is "
                                  "past the config's num_hidden_layers (4)"),
                           "message '%s' lacks the tensor", err_msg());
        }
    }
    /* GGUF fixtures with llama.block_count (a UINT32, 4) rewritten to 2 in place */
    const char *ggufs[] = {"data/gguf/llama-tiny-bf16.gguf", "data/gguf/llama-tiny-tq2_0.gguf"};
    for (int i = 0; i < 2; i++) {
        Model m;
        REQUIRE(model_load(test_path(ggufs[i]), NULL, &m) == 0 || (fprintf(stderr, "    %s\n", err_msg()), 0));
        model_free(&m);
        char *buf = NULL;
        size_t n = 0;
        REQUIRE(file_read_all(test_path(ggufs[i]), &buf, &n) == 0);
        static const char key[] = "llama.block_count";
        char *k = memmem(buf, n, key, sizeof key - 1);
        REQUIRE(k && (size_t)(k - buf) + sizeof key - 1 + 8 <= n);
        unsigned char *v = (unsigned char *)k + sizeof key - 1; /* u32 type, u32 value */
        REQUIRE(v[0] == 4 && v[1] == 0 && v[2] == 0 && v[3] == 0 && v[4] == 4 && v[5] == 0);
        v[4] = 2;
        snprintf(path, sizeof path, "%s/under%d.gguf", d, i);
        REQUIRE(file_write_atomic(path, buf, n) == 0);
        free(buf);
        int rc = model_load(path, NULL, &m);
        CHECK_MSG(rc != 0, "%s loaded", path);
        if (rc == 0) model_free(&m);
        else CHECK_MSG(strstr(err_msg(), "tensor 'blk.2.") &&
                           strstr(err_msg(), "': block 2 is past llama.block_count (2)"),
                       "message '%s' lacks the tensor", err_msg());
    }
}

/* tie_word_embeddings true with a stored lm_head.weight: the output layer is
 * the embedding, as transformers ties them (over the loaded lm_head), and the
 * note names the stored tensor that is not used (it had said only "tied"). */
TEST(loader_tied_lm_head_names_the_unused_tensor) {
    char dir[600], cmd[2048];
    snprintf(dir, sizeof dir, "%s/tied", test_tmpdir());
    REQUIRE(rewrite_checkpoint(test_path(LLAMA_DIR), dir, 0, NULL, 0) == 0);
    snprintf(cmd, sizeof cmd, "sed -i 's/\"tie_word_embeddings\": *false/\"tie_word_embeddings\": true/' %s/config.json "
             "&& grep -q '\"tie_word_embeddings\": *true' %s/config.json", dir, dir);
    REQUIRE(test_run(cmd, NULL) == 0);
    Model m;
    REQUIRE(model_load(dir, NULL, &m) == 0);
    CHECK(m.lm_head_tied && m.lm_head.w == m.embed);
    CHECK_MSG(strstr(m.load_notes, "the stored lm_head.weight is not used"), "notes: %s", m.load_notes);
    model_free(&m);
    Model o; /* the fixture itself stores and uses its own lm_head */
    REQUIRE(model_load(test_path(LLAMA_DIR), NULL, &o) == 0);
    CHECK(!o.lm_head_tied && !strstr(o.load_notes, "lm_head"));
    model_free(&o);
}

/* Linear j of a layer in the checkpoint's order: q k v o gate up down. */
static const Linear *layer_linear(const Layer *L, int j) {
    const Linear *lins[] = LAYER_LINEARS(L);
    return lins[j];
}

/* Sets config.json of dir to SRC's with quantization_config qc (JSON text; NULL: none). */
static int set_quant_config(const char *dir, const char *src, const char *qc) {
    char path[700], *text = NULL;
    snprintf(path, sizeof path, "%s/config.json", src);
    if (file_read_all(path, &text, NULL) != 0) return -1;
    cJSON *j = cJSON_Parse(text), *q = qc ? cJSON_Parse(qc) : NULL;
    free(text);
    if (!j || (qc && !q)) return -1;
    cJSON_DeleteItemFromObjectCaseSensitive(j, "quantization_config");
    if (q) cJSON_AddItemToObject(j, "quantization_config", q);
    char *out = cJSON_Print(j);
    cJSON_Delete(j);
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = file_write_atomic(path, out, strlen(out));
    free(out);
    return rc;
}

/* A llama model whose linears are BitNet's BitLinear (model_type llama with
 * quantization_config quant_method bitnet: Falcon3-*-1.58bit's form, no
 * linear_class, lm_head kept dense): llama-tiny ternarised by ternlab
 * (absmean per tensor, int8 activations), its codes written in BitNet's
 * packed U8 layout with weight_scale.  It had been refused ("shape expected
 * from config.json"), and the same config over float weights had run them
 * dense, int8 activations and ternary weights both lost.  Loaded, it is the
 * ternarised model: the same codes, int8 activations, the scale (1 / the
 * bitlinear weight_scale) within two ulps, and the logits of the ternarised
 * model given those scales bit for bit; with
 * autobitlinear (weight_scale multiplies) the same logits bit for bit; online
 * over the dequantised float weights the same model too; offline float
 * linears refused as for a bitnet model.  And a folder holding
 * model.safetensors beside an index reads the single file, as transformers. */
TEST(loader_llama_bitnet_linears) {
    const char *spec = "rule=absmean,group=tensor,scale=f32,act=int8";
    Model pt;
    ModelLoadOpts qo = {.quant = spec};
    REQUIRE(model_load(test_path(LLAMA_DIR), &qo, &pt) == 0 || (fprintf(stderr, "    %s\n", err_msg()), 0));
    float *want = fixture_model_logits(&pt, 64, 2);
    REQUIRE(want);
    const int64_t nlog = 2 * 64 * (int64_t)pt.cfg.vocab;
    const int nl = 7 * pt.cfg.n_layers;
    ExtraTensor *x = xcalloc((size_t)(3 * nl), sizeof *x);
    uint8_t **pk = xcalloc((size_t)nl, sizeof *pk);
    uint16_t **bf = xcalloc((size_t)nl, sizeof *bf);
    float *ws = xcalloc((size_t)(2 * nl), sizeof *ws); /* bitlinear 1/s, then autobitlinear s */
    char (*names)[160] = xcalloc((size_t)(3 * nl), sizeof *names);
    for (int l = 0, i = 0; l < pt.cfg.n_layers; l++) {
        for (int j = 0; j < 7; j++, i++) {
            const Linear *lin = layer_linear(&pt.layers[l], j);
            REQUIRE(lin->t && lin->act_int8 && lin->t->n_scales == 1);
            const int64_t pr = (lin->out + 3) / 4;
            pk[i] = xcalloc((size_t)(pr * lin->in), 1);
            bf[i] = xmalloc(sizeof(uint16_t) * (size_t)(lin->out * lin->in));
            for (int64_t r = 0; r < lin->out; r++)
                for (int64_t k = 0; k < lin->in; k++) {
                    const int v = tern_get(lin->t->codes + r * lin->t->row_bytes, k);
                    pk[i][(r % pr) * lin->in + k] |= (uint8_t)((v + 1) << (2 * (r / pr)));
                    bf[i][r * lin->in + k] = f32_to_bf16((float)v * lin->t->scales[0]);
                }
            ws[i] = 1.0f / lin->t->scales[0];
            ws[nl + i] = lin->t->scales[0];
            snprintf(names[i], sizeof names[i], "%s.weight", lin->name);
            snprintf(names[nl + i], sizeof names[0], "%s.weight_scale", lin->name);
            x[i] = (ExtraTensor){names[i], "U8", pr, lin->in, pk[i]};
            x[nl + i] = (ExtraTensor){names[nl + i], "F32", 1, 0, &ws[i]};
        }
    }
    char dir[600], d2[700];
    snprintf(dir, sizeof dir, "%s/llama_bitnet", test_tmpdir());
    const char *forms[][2] = {
        {"{\"quant_method\":\"bitnet\",\"modules_to_not_convert\":[\"lm_head\"]}", "bitlinear"},
        {"{\"quant_method\":\"bitnet\",\"linear_class\":\"autobitlinear\"}", "autobitlinear"}};
    for (int f = 0; f < 2; f++) {
        if (f == 1)
            for (int i = 0; i < nl; i++) x[nl + i].data = &ws[nl + i];
        REQUIRE(rewrite_checkpoint(test_path(LLAMA_DIR), dir, 0, x, 2 * nl) == 0);
        REQUIRE(set_quant_config(dir, test_path(LLAMA_DIR), forms[f][0]) == 0);
        Model m;
        int rc = model_load(dir, NULL, &m);
        CHECK_MSG(rc == 0, "%s: %s", forms[f][1], err_msg());
        if (rc != 0) continue;
        CHECK(m.cfg.arch == ARCH_LLAMA && m.cfg.bitnet_linears && m.native_ternary &&
              strcmp(m.cfg.bitnet_class, forms[f][1]) == 0);
        int all_tern = 1;
        for (int l = 0, i = 0; l < m.cfg.n_layers; l++)
            for (int j = 0; j < 7; j++, i++) {
                const Linear *a = layer_linear(&m.layers[l], j), *b = layer_linear(&pt.layers[l], j);
                if (!a->t || !a->act_int8) {
                    all_tern = 0;
                    CHECK_MSG(0, "%s %s: ternary %d, int8 activations %d", forms[f][1], a->name, a->t != NULL,
                              a->act_int8);
                    continue;
                }
                const int64_t diff = codes_differ(a, b);
                const float sa = a->t->scales[0], sb = b->t->scales[0];
                CHECK_MSG(diff == 0 && (f == 1 ? sa == sb : fabsf(sa - sb) <= 2 * (nextafterf(sb, INFINITY) - sb)),
                          "%s %s: %lld codes differ, scale %.9g against %.9g", forms[f][1], a->name,
                          (long long)diff, (double)sa, (double)sb);
            }
        float *got = fixture_model_logits(&m, 64, 2);
        /* bitlinear's scale is 1 / its weight_scale, an ulp or two from the
         * ternarised model's: against that model with the loaded scales (an
         * ulp moves an int8 activation code at a tie, and through the layers
         * the logits by up to ~1e-2, however the BLAS rounds) */
        float *ref = want;
        if (f == 0 && all_tern) {
            float *keep = xcalloc((size_t)nl, sizeof *keep);
            for (int l = 0, i = 0; l < m.cfg.n_layers; l++)
                for (int j = 0; j < 7; j++, i++) {
                    keep[i] = layer_linear(&pt.layers[l], j)->t->scales[0];
                    layer_linear(&pt.layers[l], j)->t->scales[0] = layer_linear(&m.layers[l], j)->t->scales[0];
                }
            ref = fixture_model_logits(&pt, 64, 2);
            for (int l = 0, i = 0; l < m.cfg.n_layers; l++)
                for (int j = 0; j < 7; j++, i++) layer_linear(&pt.layers[l], j)->t->scales[0] = keep[i];
            free(keep);
        }
        if (got && ref) {
            const double e = rel_l2(got, ref, nlog);
            CHECK_MSG(memcmp(got, ref, sizeof(float) * (size_t)nlog) == 0,
                      "%s: logits rel L2 %g against the ternarised llama with its scales", forms[f][1], e);
        } else CHECK_MSG(0, "%s: no logits", forms[f][1]);
        free(got);
        if (ref != want) free(ref);
        model_free(&m);
    }
    /* float (BF16) linears: offline refused; online with autobitlinear ternarised on load */
    for (int i = 0; i < nl; i++) x[i] = (ExtraTensor){names[i], "BF16", 0, x[i].cols, bf[i]};
    for (int l = 0, i = 0; l < pt.cfg.n_layers; l++)
        for (int j = 0; j < 7; j++, i++) x[i].rows = layer_linear(&pt.layers[l], j)->out;
    snprintf(d2, sizeof d2, "%s/llama_bitnet_bf16", test_tmpdir());
    REQUIRE(rewrite_checkpoint(test_path(LLAMA_DIR), d2, 0, x, nl) == 0);
    REQUIRE(set_quant_config(d2, test_path(LLAMA_DIR), forms[0][0]) == 0);
    expect_load_error(d2, "tensor 'model.layers.0.self_attn.q_proj.weight' is BF16, but this is a bitnet checkpoint");
    REQUIRE(set_quant_config(d2, test_path(LLAMA_DIR), "{\"quant_method\":\"bitnet\",\"linear_class\":"
                                                       "\"autobitlinear\",\"quantization_mode\":\"online\"}") == 0);
    {
        /* transformers' online rule (absmean per tensor, int8 activations) is ternlab's
         * --quant of that spec on the same float weights, as a plain llama */
        Model m, p;
        float *got = NULL, *ref = NULL;
        int rc = model_load(d2, NULL, &m);
        CHECK_MSG(rc == 0, "online: %s", err_msg());
        if (rc == 0) {
            CHECK(m.native_ternary && m.layers[0].q.t && m.layers[0].q.act_int8);
            got = fixture_model_logits(&m, 64, 2);
            model_free(&m);
        }
        REQUIRE(set_quant_config(d2, test_path(LLAMA_DIR), NULL) == 0);
        REQUIRE(model_load(d2, &qo, &p) == 0 || (fprintf(stderr, "    %s\n", err_msg()), 0));
        ref = fixture_model_logits(&p, 64, 2);
        model_free(&p);
        CHECK(got && ref && memcmp(got, ref, sizeof(float) * (size_t)nlog) == 0);
        free(got), free(ref);
    }
    free(want);
    for (int i = 0; i < nl; i++) free(pk[i]), free(bf[i]);
    free(pk), free(bf), free(ws), free(names), free(x);
    model_free(&pt);
}

/* A folder with model.safetensors and an index beside it: transformers reads
 * the single file (it looks for it first); the shards had been read here.  The
 * load report notes the index left unread. */
TEST(loader_single_file_before_index) {
    char dir[600], cmd[5000], path[700];
    snprintf(dir, sizeof dir, "%s/single_and_index", test_tmpdir());
    snprintf(cmd, sizeof cmd, "mkdir -p %s && cp %s/config.json %s/ && cp %s/model.safetensors "
             "%s/model-00001-of-00002.safetensors && printf '{\"metadata\": {}, \"weight_map\": "
             "{\"model.embed_tokens.weight\": \"model-00001-of-00002.safetensors\", \"extra.inv_freq\": "
             "\"model-00002-of-00002.safetensors\"}}' > %s/model.safetensors.index.json", dir,
             test_path(LLAMA_DIR), dir, test_path(LLAMA_DIR), dir, dir);
    REQUIRE(test_run(cmd, NULL) == 0);
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    write_st(path, "{\"extra.inv_freq\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
    Model m;
    REQUIRE(model_load(dir, NULL, &m) == 0 || (fprintf(stderr, "    %s\n", err_msg()), 0));
    CHECK(m.st.n_files == 2 && !m.st.index_ignored && st_find(&m.st, "extra.inv_freq"));
    model_free(&m);
    /* shards that contradict their index: a tensor the index puts in the other shard;
     * one tensor in both shards (a mutation audit found neither check tested) */
    SafeTensors st;
    snprintf(cmd, sizeof cmd, "sed -i 's/\"extra.inv_freq\": \"model-00002/\"extra.inv_freq\": \"model-00001/' "
             "%s/model.safetensors.index.json", dir);
    REQUIRE(test_run(cmd, NULL) == 0);
    CHECK_MSG(st_open_dir(dir, &st) != 0 && strstr(err_msg(), "index says tensor 'extra.inv_freq' is in "
                                                                "model-00001-of-00002.safetensors, but it is not there"),
              "%s", err_msg());
    snprintf(cmd, sizeof cmd, "sed -i 's/\"extra.inv_freq\": \"model-00001/\"extra.inv_freq\": \"model-00002/' "
             "%s/model.safetensors.index.json", dir);
    REQUIRE(test_run(cmd, NULL) == 0);
    write_st(path, "{\"extra.inv_freq\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                   "\"model.norm.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16);
    CHECK_MSG(st_open_dir(dir, &st) != 0 && strstr(err_msg(), "tensor 'model.norm.weight' appears twice"), "%s",
              err_msg());
    snprintf(cmd, sizeof cmd, "cp %s/model.safetensors %s/", test_path(LLAMA_DIR), dir);
    REQUIRE(test_run(cmd, NULL) == 0);
    REQUIRE(model_load(dir, NULL, &m) == 0 || (fprintf(stderr, "    %s\n", err_msg()), 0));
    CHECK_MSG(m.st.n_files == 1 && m.st.index_ignored && !st_find(&m.st, "extra.inv_freq") &&
                  strstr(m.load_notes, "model.safetensors.index.json beside it is not"),
              "files %d, index_ignored %d, notes '%s'", m.st.n_files, m.st.index_ignored, m.load_notes);
    model_free(&m);
}

/* 1bitLLM's BitNet b1.58 form (bitnet_b1_58-large / -3B: model_type llama,
 * architectures BitnetForCausalLM, float linears that its BitLinear
 * ternarises in every forward — per-tensor absmean, int8 activations per
 * token — and BitNet's sub-norms stored as self_attn.inner_attn_ln /
 * mlp.ffn_layernorm).  It had loaded as a dense llama with those norms
 * dropped, exit 0.  Here bitnet-tiny is written in that form: each linear as
 * F32 weights whose absmean ternary is bitnet-tiny's (a zero code 0, a
 * nonzero one +-s/p, p the nonzero fraction, so mean|W| = s), the sub-norms
 * under 1bitLLM's names; it loads as bitnet-tiny (same codes, scales within
 * 1e-6, int8 activations, the packed model's logits bit for bit, and within
 * transformers' bounds on bitnet-tiny).  The same tensors under a plain llama
 * config are refused naming the norm the forward would drop, as are other
 * bit widths and a quantization_config beside the form. */
TEST(loader_1bitllm_bitnet_form) {
    Model pk;
    REQUIRE(model_load(test_path(BITNET_DIR), NULL, &pk) == 0 || (fprintf(stderr, "    %s\n", err_msg()), 0));
    const int nl = 7 * pk.cfg.n_layers, nn = 2 * pk.cfg.n_layers;
    /* the linears as F32, their weight_scale removed, the sub-norms renamed */
    ExtraTensor *x = xcalloc((size_t)(2 * nl + 2 * nn), sizeof *x);
    float **w = xcalloc((size_t)nl, sizeof *w);
    char (*names)[160] = xcalloc((size_t)(2 * nl + 2 * nn), sizeof *names);
    int nx = 0;
    for (int l = 0, i = 0; l < pk.cfg.n_layers; l++) {
        for (int j = 0; j < 7; j++, i++) {
            const Linear *lin = layer_linear(&pk.layers[l], j);
            REQUIRE(lin->t && lin->t->n_scales == 1);
            const int64_t cnt = lin->out * lin->in;
            int64_t nz = 0;
            for (int64_t r = 0; r < lin->out; r++)
                for (int64_t k = 0; k < lin->in; k++) nz += tern_get(lin->t->codes + r * lin->t->row_bytes, k) != 0;
            REQUIRE(nz > 0);
            /* +-a on the nonzero codes and a small e on the first zero one, so that the
             * absmean (quant_absmean_ref: |w| summed in double, rounded to f32, over n in
             * f32) is bitnet-tiny's scale s exactly: the sum nz a + e is F, the f32
             * nearest s cnt (an inexact scale moves int8 codes downstream, as any last
             * bit does); a / s >= cnt / nz >= 1 codes +-1, e < s / 4 codes 0 */
            const float s = lin->t->scales[0];
            float F = 0; /* (cnt need not be a power of two: an f32 near s cnt that divides back to s) */
            for (int k = 0; k <= 8 && F == 0; k++) {
                float c = (float)((double)s * (double)cnt);
                for (int u = 0; u < (k + 1) / 2; u++) c = nextafterf(c, k % 2 ? INFINITY : 0.0f);
                if (c / (float)cnt == s) F = c;
            }
            float a = (float)((double)F / (double)nz);
            while ((double)nz * (double)a >= (double)F) a = nextafterf(a, 0.0f);
            const double r = (double)F - (double)nz * (double)a;
            const float e = (float)r;
            CHECK_MSG(F / (float)cnt == s && (double)e == r && e < 0.25f * s && nz < cnt,
                      "%s: no exact construction (s %.9g, F %.9g, e %g)", lin->name, (double)s, (double)F, (double)e);
            REQUIRE(F / (float)cnt == s && (double)e == r && e < 0.25f * s && nz < cnt);
            w[i] = xmalloc(sizeof(float) * (size_t)cnt);
            int put_e = 0;
            for (int64_t r = 0; r < lin->out; r++)
                for (int64_t k = 0; k < lin->in; k++) {
                    const int c = tern_get(lin->t->codes + r * lin->t->row_bytes, k);
                    w[i][r * lin->in + k] = c ? (float)c * a : put_e++ ? 0.0f : e;
                }
            snprintf(names[nx], sizeof names[0], "%s.weight", lin->name);
            x[nx] = (ExtraTensor){names[nx], "F32", lin->out, lin->in, w[i]};
            nx++;
            snprintf(names[nx], sizeof names[0], "%s.weight_scale", lin->name);
            x[nx] = (ExtraTensor){names[nx], NULL, 0, 0, NULL};
            nx++;
        }
        const Layer *L = &pk.layers[l];
        const char *from[2] = {"self_attn.attn_sub_norm", "mlp.ffn_sub_norm"},
                   *to[2] = {"self_attn.inner_attn_ln", "mlp.ffn_layernorm"};
        const float *v[2] = {L->attn_sub_norm, L->ffn_sub_norm};
        const int64_t len[2] = {(int64_t)pk.cfg.n_heads * pk.cfg.head_dim, pk.cfg.inter};
        for (int k = 0; k < 2; k++) {
            REQUIRE(v[k]);
            snprintf(names[nx], sizeof names[0], "model.layers.%d.%s.weight", l, from[k]);
            x[nx] = (ExtraTensor){names[nx], NULL, 0, 0, NULL};
            nx++;
            snprintf(names[nx], sizeof names[0], "model.layers.%d.%s.weight", l, to[k]);
            x[nx] = (ExtraTensor){names[nx], "F32", len[k], 0, v[k]};
            nx++;
        }
    }
    char dir[600], path[700], *text = NULL;
    snprintf(dir, sizeof dir, "%s/onebit", test_tmpdir());
    REQUIRE(rewrite_checkpoint(test_path(BITNET_DIR), dir, 0, x, nx) == 0);
    /* the config: bitnet-tiny's as a llama with 1bitLLM's keys, hidden_act kept (relu2) */
    snprintf(path, sizeof path, "%s/config.json", dir);
    REQUIRE(file_read_all(path, &text, NULL) == 0);
    cJSON *cj = cJSON_Parse(text);
    free(text);
    REQUIRE(cj);
    cJSON_DeleteItemFromObjectCaseSensitive(cj, "quantization_config");
    cJSON_DeleteItemFromObjectCaseSensitive(cj, "model_type");
    cJSON_DeleteItemFromObjectCaseSensitive(cj, "architectures");
    cJSON_AddStringToObject(cj, "model_type", "llama");
    cJSON *ar = cJSON_AddArrayToObject(cj, "architectures");
    cJSON_AddItemToArray(ar, cJSON_CreateString("BitnetForCausalLM"));
    cJSON_AddNumberToObject(cj, "weight_bits", 1);
    cJSON_AddNumberToObject(cj, "input_bits", 8);
    char *good = cJSON_Print(cj);
    REQUIRE(file_write_atomic(path, good, strlen(good)) == 0);
    Model m;
    int rc = model_load(dir, NULL, &m);
    CHECK_MSG(rc == 0, "1bitLLM form: %s", err_msg());
    if (rc == 0) {
        CHECK(m.cfg.arch == ARCH_BITNET && m.cfg.bitnet_1bitllm && m.native_ternary);
        for (int l = 0; l < m.cfg.n_layers; l++) {
            const Layer *L = &m.layers[l], *P = &pk.layers[l];
            const int64_t qd = (int64_t)m.cfg.n_heads * m.cfg.head_dim;
            CHECK_MSG(L->attn_sub_norm && L->ffn_sub_norm &&
                          !memcmp(L->attn_sub_norm, P->attn_sub_norm, sizeof(float) * (size_t)qd) &&
                          !memcmp(L->ffn_sub_norm, P->ffn_sub_norm, sizeof(float) * (size_t)m.cfg.inter),
                      "layer %d: sub-norms not bitnet-tiny's", l);
            for (int j = 0; j < 7; j++) {
                const Linear *a = layer_linear(L, j), *b = layer_linear(P, j);
                if (!a->t || !a->act_int8 || a->t->n_scales != 1) {
                    CHECK_MSG(0, "%s: ternary %d, int8 activations %d", a->name, a->t != NULL, a->act_int8);
                    continue;
                }
                const int64_t diff = codes_differ(a, b);
                const float sa = a->t->scales[0], sb = b->t->scales[0];
                CHECK_MSG(diff == 0 && fabsf(sa - sb) <= 1e-6f * sb, "%s: %lld codes differ, scale %.9g against %.9g",
                          a->name, (long long)diff, (double)sa, (double)sb);
            }
        }
        const int T = 256;
        float *got = fixture_model_logits(&m, T, 2), *same = fixture_model_logits(&pk, T, 2), *ref = NULL;
        char rp[600];
        snprintf(rp, sizeof rp, "%s/ref_logits.f32", test_path(BITNET_DIR));
        const int64_t n = 2 * (int64_t)T * m.cfg.vocab;
        REQUIRE(got && same && fixture_read_f32(rp, &ref) == n);
        const double e_pk = rel_l2(got, same, n), e_ref = rel_l2(got, ref, n);
        int agree = 0;
        for (int r = 0; r < 2 * T; r++)
            agree += argmax_f32(got + (int64_t)r * m.cfg.vocab, m.cfg.vocab) ==
                     argmax_f32(ref + (int64_t)r * m.cfg.vocab, m.cfg.vocab);
        printf("    1bitLLM form: logits rel L2 %.3g against the packed model, %.3g against transformers "
               "(top-1 %.4f)\n", e_pk, e_ref, agree / (2.0 * T));
        CHECK_MSG(memcmp(got, same, sizeof(float) * (size_t)n) == 0, "rel L2 %g against the packed model", e_pk);
        CHECK_MSG(e_ref <= 3e-2 && agree >= 0.97 * 2 * T, "against transformers: rel L2 %g, top-1 %d of %d", e_ref,
                  agree, 2 * T);
        /* written by quantize with the online rule's spec and read back (a ternlab
         * checkpoint keeping 1bitLLM's config and norm names): the same model */
        char q[700], cmd[2000];
        snprintf(q, sizeof q, "%s/onebit-q", test_tmpdir());
        snprintf(cmd, sizeof cmd, "%s quantize --model %s --quant rule=absmean,group=tensor,scale=f32,act=int8 --out %s",
                 bin_path("ternlab"), dir, q);
        CHECK(test_run(cmd, NULL) == 0);
        Model mq;
        rc = model_load(q, NULL, &mq);
        CHECK_MSG(rc == 0, "quantized 1bitLLM form: %s", err_msg());
        if (rc == 0) {
            CHECK(mq.cfg.ternlab_packed && mq.cfg.bitnet_1bitllm && mq.layers[0].attn_sub_norm);
            float *lq = fixture_model_logits(&mq, T, 2);
            CHECK(lq && memcmp(lq, got, sizeof(float) * (size_t)n) == 0);
            free(lq);
            model_free(&mq);
        }
        free(got), free(same), free(ref);
        model_free(&m);
    }
    /* info says what runs (it had printed autobitlinear, weight_scale multiplies) */
    {
        char cmd[1200], *out = NULL;
        snprintf(cmd, sizeof cmd, "%s info --model %s", bin_path("ternlab"), dir);
        CHECK_MSG(test_run(cmd, &out) == 0 && out && strstr(out, "architecture bitnet (model_type llama)") &&
                      strstr(out, "1bitLLM's BitnetForCausalLM") && !strstr(out, "linear_class"),
                  "%s", out ? out : "");
        free(out);
    }
    /* a plain llama over the same tensors: the norm it would drop is named */
    cJSON_DeleteItemFromObjectCaseSensitive(cj, "architectures");
    char *plain = cJSON_Print(cj);
    REQUIRE(file_write_atomic(path, plain, strlen(plain)) == 0);
    expect_load_error(dir, "' is not one this model's layers are run with");
    CHECK_MSG(strstr(err_msg(), "inner_attn_ln.weight'") || strstr(err_msg(), "ffn_layernorm.weight'"), "%s",
              err_msg());
    free(plain);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(cj, "architectures"), cJSON_CreateString("BitnetForCausalLM"));
    /* other bit widths; a quantization_config beside the form */
    const char *bad[][3] = {{"input_bits", "4", "input_bits other than 8"},
                            {"weight_bits", "2", "weight_bits other than 1"},
                            {"quantization_config", "{\"quant_method\": \"bitnet\"}",
                             "with a quantization_config other than ternlab's"}};
    for (int b = 0; b < 3; b++) {
        cJSON *keep = cJSON_DetachItemFromObjectCaseSensitive(cj, bad[b][0]);
        cJSON_AddItemToObject(cj, bad[b][0], cJSON_Parse(bad[b][1]));
        char *t = cJSON_Print(cj);
        REQUIRE(file_write_atomic(path, t, strlen(t)) == 0);
        expect_load_error(dir, bad[b][2]);
        free(t);
        cJSON_DeleteItemFromObjectCaseSensitive(cj, bad[b][0]);
        if (keep) cJSON_AddItemToObject(cj, bad[b][0], keep);
    }
    free(good);
    cJSON_Delete(cj);
    for (int i = 0; i < nl; i++) free(w[i]);
    free(w), free(names), free(x);
    model_free(&pk);
}

/* Shapes, scales and spec edges of the loaders, each a mutation from an audit that
 * the suite had passed: a dense linear one column short and a packed BitNet one a
 * column long are refused by shape; a BitNet weight_scale of 0 is refused; a
 * ternlab checkpoint's weight_scales one short is refused; --quant layers=0-4 of
 * a 4-layer model is refused; an absent tie_word_embeddings with lm_head.weight
 * stored is untied; an explicit act= reaches the linears --quant leaves as
 * stored; a tied head is not counted twice in the weight bytes; a GGUF --model
 * is not written over by --out. */
TEST(loader_shapes_scales_and_spec_edges) {
    char dir[600], cmd[2400];
    const char *d = test_tmpdir();
    /* down_proj [256, 767] against the config's 768 */
    snprintf(dir, sizeof dir, "%s/short", d);
    ExtraTensor x1 = {"model.layers.0.mlp.down_proj.weight", "BF16", 256, 767, NULL};
    REQUIRE(rewrite_checkpoint(test_path(LLAMA_DIR), dir, 0, &x1, 1) == 0);
    expect_load_error(dir, "shape [256, 768] expected from config.json, file has 2 dims [256, 767");
    /* packed q_proj [64, 257] */
    snprintf(dir, sizeof dir, "%s/packedlong", d);
    ExtraTensor x2 = {"model.layers.0.self_attn.q_proj.weight", "U8", 64, 257, NULL};
    REQUIRE(rewrite_checkpoint(test_path(BITNET_DIR), dir, 0, &x2, 1) == 0);
    expect_load_error(dir, "packed BitNet shape [64, 256] expected");
    /* weight_scale 0 */
    snprintf(dir, sizeof dir, "%s/ws0", d);
    const uint16_t zero = 0;
    ExtraTensor x3 = {"model.layers.0.self_attn.q_proj.weight_scale", "BF16", 1, 0, &zero};
    REQUIRE(rewrite_checkpoint(test_path(BITNET_DIR), dir, 0, &x3, 1) == 0);
    expect_load_error(dir, "weight_scale 0 must be positive");
    /* a ternlab checkpoint (group row: 256 scales for q_proj) with 255 */
    char qdir[600];
    snprintf(qdir, sizeof qdir, "%s/tl", d);
    snprintf(cmd, sizeof cmd, "%s quantize --model %s --quant rule=absmean,group=row --out %s > /dev/null 2>&1",
             bin_path("ternlab"), test_path(LLAMA_DIR), qdir);
    REQUIRE(test_run(cmd, NULL) == 0);
    expect_loads(qdir);
    snprintf(dir, sizeof dir, "%s/tlshort", d);
    ExtraTensor x4 = {"model.layers.0.self_attn.q_proj.weight_scales", "F32", 255, 0, NULL};
    REQUIRE(rewrite_checkpoint(qdir, dir, 0, &x4, 1) == 0);
    expect_load_error(dir, "tensor 'model.layers.0.self_attn.q_proj.weight_scales': F32 with 256 scales expected");
    /* layers past the last */
    Model m;
    ModelLoadOpts o = {.quant = "rule=absmean,layers=0-4"};
    CHECK(model_load(test_path(LLAMA_DIR), &o, &m) != 0 && strstr(err_msg(), "0-4 is past the model's 4 layers"));
    o.quant = "rule=absmean,layers=0-3";
    REQUIRE(model_load(test_path(LLAMA_DIR), &o, &m) == 0);
    model_free(&m);
    /* tie_word_embeddings absent, lm_head.weight stored: the stored head */
    snprintf(dir, sizeof dir, "%s/notie", d);
    REQUIRE(rewrite_checkpoint(test_path(LLAMA_DIR), dir, 0, NULL, 0) == 0);
    snprintf(cmd, sizeof cmd, "sed -i '/tie_word_embeddings/d' %s/config.json && ! grep -q tie_ %s/config.json", dir, dir);
    REQUIRE(test_run(cmd, NULL) == 0);
    Model a, b;
    REQUIRE(model_load(test_path(LLAMA_DIR), NULL, &a) == 0);
    REQUIRE(model_load(dir, NULL, &b) == 0);
    const size_t nh = sizeof(float) * (size_t)(a.cfg.vocab * a.cfg.hidden);
    CHECK_MSG(!a.lm_head_tied && !b.lm_head_tied && b.lm_head.w != b.embed && !memcmp(a.lm_head.w, b.lm_head.w, nh),
              "absent tie: tied %d", b.lm_head_tied);
    model_free(&b);
    /* the bytes: a tied head is the embedding, counted once */
    snprintf(dir, sizeof dir, "%s/tied", d);
    REQUIRE(rewrite_checkpoint(test_path(LLAMA_DIR), dir, 0, NULL, 0) == 0);
    snprintf(cmd, sizeof cmd, "sed -i 's/\"tie_word_embeddings\": false/\"tie_word_embeddings\": true/' %s/config.json", dir);
    REQUIRE(test_run(cmd, NULL) == 0);
    REQUIRE(model_load(dir, NULL, &b) == 0);
    size_t lin = 0;
    for (int l = 0; l < b.cfg.n_layers; l++) {
        const Layer *L = &b.layers[l];
        const Linear *ls[] = LAYER_LINEARS(L);
        for (int i = 0; i < 7; i++) lin += linear_bytes(ls[i]);
    }
    CHECK_MSG(b.lm_head_tied && model_weight_bytes(&b) == lin + nh && model_weight_bytes(&a) == lin + 2 * nh,
              "tied %d: %zu bytes, linears %zu + embedding %zu (untied %zu)", b.lm_head_tied, model_weight_bytes(&b),
              lin, nh, model_weight_bytes(&a));
    model_free(&b);
    model_free(&a);
    /* act= explicit reaches the linears left as stored (BitNet: int8 unless told) */
    const char *specs[2] = {"rule=absmean,layers=0,act=f32", "rule=absmean,layers=0"};
    for (int k = 0; k < 2; k++) {
        o.quant = specs[k];
        REQUIRE(model_load(test_path(BITNET_DIR), &o, &m) == 0);
        int bad = 0;
        for (int l = 1; l < m.cfg.n_layers; l++) bad += m.layers[l].q.act_int8 != k || m.layers[l].down.act_int8 != k;
        CHECK_MSG(bad == 0 && m.layers[0].q.act_int8 == k, "%s: %d linears of layers 1.. not act %s", specs[k], bad,
                  k ? "int8" : "f32");
        model_free(&m);
    }
    /* --out naming a GGUF --model */
    char gg[700], *out = NULL;
    snprintf(gg, sizeof gg, "%s/m.gguf", d);
    snprintf(cmd, sizeof cmd, "cp %s %s && %s logits --model %s --tokens %s --window 16 --windows 0:1 --out %s 2>&1",
             test_path("data/gguf/llama-tiny-tq2_0.gguf"), gg, bin_path("ternlab"), gg, test_path(TOKENS_FILE), gg);
    CHECK_MSG(test_run(cmd, &out) == 1 && out && strstr(out, "is the --model file"), "%s", out ? out : "");
    free(out);
    snprintf(cmd, sizeof cmd, "cmp %s %s", test_path("data/gguf/llama-tiny-tq2_0.gguf"), gg);
    CHECK(test_run(cmd, NULL) == 0);
}

/* A ternlab checkpoint is what its quantization_config.spec says, or it is
 * refused naming the tensor: a stored scale that is not a value of the spec's
 * scale dtype (it had been rounded to one: another model, exit 0), a dense
 * linear the spec makes ternary (it had run dense) and a packed one the spec
 * leaves out (it had run ternary under a spec that does not say so), an empty
 * spec (read as the defaults); a BitNet config whose linears are float
 * weights (online, autobitlinear) over packed ones (run with that form's scale
 * convention; transformers does not load them).  quantize writes no file of
 * the kind: a native ternary linear that --quant's layers= leaves out is
 * refused (its spec had said layers=mlp over packed attention linears).  The
 * load report gives the whole spec (it had cut it at 40 characters). */
TEST(loader_ternlab_checkpoint_is_its_spec) {
    char q[600], dir[600], cmd[2400], *out = NULL;
    const char *d = test_tmpdir(), *tl = bin_path("ternlab");
    snprintf(q, sizeof q, "%s/qattn", d);
    snprintf(cmd, sizeof cmd, "%s quantize --model %s --quant rule=absmean,group=128,scale=f16,layers=attn --out %s "
             "> /dev/null 2>&1", tl, test_path(LLAMA_DIR), q);
    REQUIRE(test_run(cmd, NULL) == 0);
    Model m;
    REQUIRE(model_load(q, NULL, &m) == 0 || (fprintf(stderr, "    %s\n", err_msg()), 0));
    ReportRow *rows;
    int n;
    REQUIRE(report_rows(&m, &rows, &n) == 0);
    const char *want = "native ternary packed (ternlab rule=absmean,group=128,scale=f16,act=f32,layers=attn)";
    CHECK_MSG(n > 1 && strcmp(rows[1].stored, want) == 0, "row 1 stored '%s'", n > 1 ? rows[1].stored : "");
    free(rows);
    model_free(&m);
#define TL_QC(spec) "{\"quant_method\": \"ternlab\", \"spec\": \"" spec "\"}"
    const struct {
        const char *src, *qc, *err; /* err NULL: loads */
    } cases[] = {
        {q, TL_QC("rule=absmean,group=128,scale=f32,act=f32,layers=attn"), NULL}, /* f16 values are f32 ones */
        {q, TL_QC("rule=absmean,group=128,scale=e8m0,act=f32,layers=attn"),
         "q_proj.weight_scales': scale 0 is"},
        {q, TL_QC("rule=absmean,group=128,scale=f16,act=f32,layers=mlp"),
         "tensor 'model.layers.0.self_attn.q_proj.weight' is U8 (packed ternary), but quantization_config.spec"},
        {q, TL_QC("rule=absmean,group=128,scale=f16,act=f32,layers=all"),
         "tensor 'model.layers.0.mlp.gate_proj.weight' is BF16, but quantization_config.spec"},
        {test_path(LLAMA_DIR), TL_QC("rule=absmean,group=128,scale=f16,act=f32,layers=all"),
         "tensor 'model.layers.0.self_attn.q_proj.weight' is BF16, but quantization_config.spec"},
        {q, TL_QC(""), "needs a 'spec' string (not empty"},
        {test_path(BITNET_DIR),
         "{\"quant_method\": \"bitnet\", \"linear_class\": \"autobitlinear\", \"quantization_mode\": \"online\"}",
         "tensor 'model.layers.0.self_attn.q_proj.weight' is U8 (packed ternary), but this checkpoint's linears "
         "are float weights"},
    };
#undef TL_QC
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(dir, sizeof dir, "%s/spec%zu", d, i);
        REQUIRE(rewrite_checkpoint(cases[i].src, dir, 0, NULL, 0) == 0);
        REQUIRE(set_quant_config(dir, cases[i].src, cases[i].qc) == 0);
        if (cases[i].err) expect_load_error(dir, cases[i].err);
        else expect_loads(dir);
    }
    /* the stored scale named with its dtype */
    snprintf(dir, sizeof dir, "%s/spec1", d);
    expect_load_error(dir, "not a value of the spec's scale dtype (quantization_config.spec says scale=e8m0)");
    /* quantize: native ternary linears left out by layers= refused, nothing written; layers=all writes */
    const struct {
        const char *src, *quant, *err;
    } qz[] = {{test_path(BITNET_DIR), "rule=twn,group=tensor,scale=f32,layers=mlp",
               "model.layers.0.self_attn.q_proj is ternary as stored (a native ternary checkpoint), but --quant's "
               "layers= leaves it out"},
              {q, "rule=twn,group=128,scale=f16,layers=mlp", "self_attn.q_proj is ternary as stored"},
              {q, "rule=twn,group=128,scale=f16", NULL}};
    for (size_t i = 0; i < sizeof qz / sizeof qz[0]; i++) {
        snprintf(dir, sizeof dir, "%s/qz%zu", d, i);
        snprintf(cmd, sizeof cmd, "%s quantize --model %s --quant %s --out %s 2>&1", tl, qz[i].src, qz[i].quant, dir);
        const int rc = test_run(cmd, &out);
        if (qz[i].err) {
            CHECK_MSG(rc == 1 && out && strstr(out, qz[i].err), "%s: rc %d: %s", qz[i].quant, rc, out ? out : "");
            CHECK_MSG(access(dir, F_OK) != 0, "%s: %s written", qz[i].quant, dir);
        } else {
            CHECK_MSG(rc == 0, "%s: rc %d: %s", qz[i].quant, rc, out ? out : "");
            expect_loads(dir);
        }
        free(out);
        out = NULL;
    }
}

/* --quant act=... alone changes the activations of linears already ternary as
 * loaded and keeps their codes and scales (a native checkpoint's linears had
 * been re-ternarised with the default rule, absmean per tensor, which keeps
 * the codes and multiplies each scale by the share of non-zero weights: act
 * could not be varied on its own); the spec reads back as given; the load
 * report calls them native (a TQ GGUF's too); quantize refuses such a spec (a
 * file needs its weights' spec: the default rule had been written over
 * another rule's codes).  A spec naming another key still re-ternarises. */
TEST(loader_act_only_spec_keeps_ternary_weights) {
    Model base, m;
    REQUIRE(model_load(test_path(BITNET_DIR), NULL, &base) == 0);
    const Linear *b0 = &base.layers[0].q;
    REQUIRE(b0->t && b0->act_int8);
    const char *specs[] = {"act=f32", "act=int8", "rule=absmean,act=int8"};
    for (int k = 0; k < 3; k++) {
        ModelLoadOpts o = {.quant = specs[k]};
        REQUIRE(model_load(test_path(BITNET_DIR), &o, &m) == 0);
        int64_t moved = 0, scales = 0, acts = 0;
        for (int l = 0; l < m.cfg.n_layers; l++)
            for (int j = 0; j < 7; j++) {
                const Linear *a = layer_linear(&base.layers[l], j), *b = layer_linear(&m.layers[l], j);
                REQUIRE(b->t);
                moved += codes_differ(a, b);
                scales += a->t->n_scales != b->t->n_scales ||
                          memcmp(a->t->scales, b->t->scales, sizeof(float) * (size_t)a->t->n_scales) != 0;
                acts += b->act_int8 != (k != 0);
            }
        if (k < 2) CHECK_MSG(moved == 0 && scales == 0 && acts == 0, "%s: %lld codes moved, %lld linears' scales "
                             "changed, %lld linears of another act", specs[k], (long long)moved, (long long)scales,
                             (long long)acts);
        else CHECK_MSG(scales > 0, "%s: the scales kept (re-ternarised: absmean's scale)", specs[k]);
        char buf[256];
        REQUIRE(quant_spec_format(&m.quant, buf, sizeof buf) > 0);
        if (k < 2) CHECK_MSG(strcmp(buf, specs[k]) == 0, "formatted '%s'", buf);
        ReportRow *rows;
        int n;
        REQUIRE(report_rows(&m, &rows, &n) == 0);
        CHECK_MSG(n > 1 && strstr(rows[1].run_as, k < 2 ? "(native)" : "(ternarised)"), "%s: row 1 runs as '%s'",
                  specs[k], n > 1 ? rows[1].run_as : "");
        free(rows);
        model_free(&m);
    }
    model_free(&base);
    /* a TQ2_0 GGUF: its linears kept, reported native */
    {
        ModelLoadOpts o = {.quant = "act=int8"};
        REQUIRE(model_load(test_path("data/gguf/llama-tiny-tq2_0.gguf"), &o, &m) == 0);
        ReportRow *rows;
        int n;
        REQUIRE(report_rows(&m, &rows, &n) == 0);
        CHECK_MSG(n > 1 && strstr(rows[1].stored, "GGUF TQ1_0/TQ2_0") && strstr(rows[1].run_as, "(native)") &&
                      strstr(rows[1].rule, "absmax") && m.layers[0].q.act_int8 &&
                      model_act_only_kept(&m) == 7 * m.cfg.n_layers,
                  "row 1: %s / %s / %s", n > 1 ? rows[1].stored : "", n > 1 ? rows[1].run_as : "",
                  n > 1 ? rows[1].rule : "");
        free(rows);
        model_free(&m);
    }
    /* quantize: refused, nothing written */
    char dir[600], cmd[1600], *out = NULL;
    snprintf(dir, sizeof dir, "%s/actonly", test_tmpdir());
    snprintf(cmd, sizeof cmd, "%s quantize --model %s --quant act=f32 --out %s 2>&1", bin_path("ternlab"),
             test_path(BITNET_DIR), dir);
    CHECK_MSG(test_run(cmd, &out) == 2 && out && strstr(out, "act= alone changes activations, not weights"), "%s",
              out ? out : "");
    free(out);
    CHECK(access(dir, F_OK) != 0);
}
