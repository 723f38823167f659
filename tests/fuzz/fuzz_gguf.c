/* libFuzzer harness: the GGUF parser (gguf_parse on an in-memory image).  On
 * success every metadata value and tensor byte range must lie inside the
 * image (the harness touches their first and last bytes), lookups must find
 * what the parser listed, the typed getters must not crash on any key, and
 * small tensors are dequantised.  Seeds: tests/fuzz/corpus/gguf/ (headers of
 * the data/gguf fixtures with their data cut off, and tiny whole files). */
#include "fuzz_util.h"
#include "load/gguf.h"

#define FUZZ_GGUF_MAX_DEQUANT 4096 /* elements; bounds the time per input */

static void touch(const uint8_t *p, size_t n, const uint8_t *data, size_t size) {
    FUZZ_ASSERT(n == 0 || (p >= data && p + n <= data + size));
    volatile uint8_t sink = 0;
    if (n) sink ^= p[0] ^ p[n - 1];
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    GgufFile g;
    memset(&g, 0, sizeof g);
    if (gguf_parse(data, size, "fuzz.gguf", &g) == 0) {
        for (int64_t i = 0; i < g.n_kv; i++) {
            const GgufKV *kv = &g.kv[i];
            touch(kv->data, kv->nbytes, data, size);
            FUZZ_ASSERT(gguf_find_kv(&g, kv->key) != NULL);
            int64_t iv;
            double dv;
            const char *s;
            size_t sl;
            (void)gguf_get_int(&g, kv->key, &iv);
            (void)gguf_get_float(&g, kv->key, &dv);
            if (gguf_get_str(&g, kv->key, &s, &sl) == 1) touch((const uint8_t *)s, sl, data, size);
            if (kv->type != GGUF_TYPE_STRING && kv->type != GGUF_TYPE_ARRAY)
                (void)gguf_kv_scalar(kv);
        }
        for (int64_t i = 0; i < g.n_tensors; i++) {
            const GgufTensor *t = &g.tensors[i];
            FUZZ_ASSERT(t->n_dims >= 0 && t->n_dims <= GGUF_MAX_DIMS && t->n_elements >= 0);
            touch(t->data, t->nbytes, data, size);
            FUZZ_ASSERT(gguf_find_tensor(&g, t->name) == t);
            if (t->n_elements > 0 && t->n_elements <= FUZZ_GGUF_MAX_DEQUANT) {
                float *w = malloc(sizeof(float) * (size_t)t->n_elements);
                if (!w) abort();
                (void)gguf_tensor_to_f32(t, w);
                free(w);
            }
        }
    }
    gguf_close(&g);
    return 0;
}
