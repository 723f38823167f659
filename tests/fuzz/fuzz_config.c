/* libFuzzer harness: config.json (config_parse).  An accepted config must be
 * one the forward pass can run: positive sizes, even head_dim, heads a
 * multiple of kv heads, eps and rope_theta positive and finite as the fp32
 * the forward pass uses.
 * Seeds: tests/fuzz/corpus/config/. */
#include "fuzz_util.h"
#include "load/config.h"

#include <math.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *json = fuzz_cstr(data, size);
    ModelConfig c;
    if (config_parse(json, "fuzz/config.json", &c) == 0) {
        FUZZ_ASSERT(c.hidden > 0 && c.n_layers > 0 && c.n_heads > 0 && c.n_kv_heads > 0);
        FUZZ_ASSERT(c.head_dim > 0 && c.head_dim % 2 == 0 && c.inter > 0 && c.vocab > 0);
        FUZZ_ASSERT(c.n_heads % c.n_kv_heads == 0);
        FUZZ_ASSERT(c.eps > 0 && isfinite(c.eps) && c.rope_theta > 0 && isfinite(c.rope_theta));
        /* the forward pass computes RoPE with powf((float)rope_theta, ...) */
        FUZZ_ASSERT((float)c.rope_theta > 0 && isfinite((float)c.rope_theta));
        FUZZ_ASSERT(memchr(c.model_type, 0, sizeof c.model_type) != NULL);
    }
    free(json);
    return 0;
}
