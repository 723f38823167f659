/* libFuzzer harness: QuantSpec strings (quant_spec_parse).  An accepted spec
 * must print (quant_spec_format) to a string that parses back to the same
 * spec, and layer selection must answer for every kind.
 * Seeds: tests/fuzz/corpus/quantspec/. */
#include "fuzz_util.h"
#include "quant/quant.h"

static int spec_equal(const QuantSpec *a, const QuantSpec *b) {
    if (a->rule != b->rule || a->group != b->group || a->scale != b->scale || a->act != b->act ||
        a->act_explicit != b->act_explicit || a->layers != b->layers)
        return 0;
    if (a->layers != QL_RANGES) return 1;
    if (a->n_ranges != b->n_ranges) return 0;
    for (int i = 0; i < a->n_ranges; i++)
        if (a->range_lo[i] != b->range_lo[i] || a->range_hi[i] != b->range_hi[i]) return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *s = fuzz_cstr(data, size);
    QuantSpec q, back;
    if (quant_spec_parse(s, &q) == 0) {
        FUZZ_ASSERT((unsigned)q.rule < QR_COUNT && (unsigned)q.group < QG_COUNT);
        FUZZ_ASSERT((unsigned)q.act < QA_COUNT);
        FUZZ_ASSERT(q.n_ranges >= 0 && q.n_ranges <= QUANT_MAX_RANGES);
        char buf[1024];
        int len = quant_spec_format(&q, buf, sizeof buf);
        FUZZ_ASSERT(len > 0);
        FUZZ_ASSERT(quant_spec_parse(buf, &back) == 0 && spec_equal(&q, &back));
        static const char *kinds[] = {"q", "k", "v", "o", "gate", "up", "down"};
        for (int l = 0; l < 4; l++)
            for (int k = 0; k < 7; k++) FUZZ_ASSERT(quant_layer_selected(&q, l, kinds[k]) >= 0);
    }
    free(s);
    return 0;
}
