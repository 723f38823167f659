/* The loader refuses bad input with a clear message (library and CLI). */
#include "test.h"
#include "core/err.h"
#include "core/mem.h"
#include "load/config.h"
#include "load/safetensors.h"
#include "load/tokens.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
                    "need 12 bytes but data_offsets span 8");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4,
                    "beyond the data section");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                    "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
                    "overlap");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8,
                    "non-negative");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8,
                    "data_offsets");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "data_offsets");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
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
