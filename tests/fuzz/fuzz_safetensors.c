/* libFuzzer harness: the safetensors header parser (st_parse_header), fed a
 * whole file image (8-byte little-endian header length, JSON header, data).
 * On success every tensor's byte range must lie inside the image: the harness
 * touches the first and last byte of each, so ASan reports a range the
 * validator let through.  Seeds: tests/fuzz/corpus/safetensors/. */
#include "fuzz_util.h"
#include "load/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    SafeTensors st;
    memset(&st, 0, sizeof st);
    if (st_parse_header(data, size, "fuzz.safetensors", 0, &st) == 0) {
        volatile uint8_t sink = 0;
        for (int i = 0; i < st.n_tensors; i++) {
            const StTensor *t = &st.tensors[i];
            FUZZ_ASSERT(t->name && t->ndim >= 0 && t->ndim <= ST_MAX_DIMS);
            FUZZ_ASSERT((uint64_t)t->nbytes * 8 == (uint64_t)t->numel * dtype_bits(t->dtype));
            const uint8_t *p = t->data;
            FUZZ_ASSERT(p >= data && p + t->nbytes <= data + size);
            if (t->nbytes) sink ^= p[0] ^ p[t->nbytes - 1];
        }
        (void)sink;
    }
    st_close(&st);
    return 0;
}
