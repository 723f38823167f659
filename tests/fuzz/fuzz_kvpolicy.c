/* libFuzzer harness: KV policy strings (--kv, kv_policy_parse).  An accepted
 * policy must print (kv_policy_format) to a string that parses back to the
 * same policy, and kv_policy_ternary must answer 0 or 1 for every layer and
 * phase.  Seeds: tests/fuzz/corpus/kvpolicy/. */
#include "fuzz_util.h"
#include "kv/kv_ternary.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *s = fuzz_cstr(data, size);
    KvPolicy p, back;
    if (kv_policy_parse(s, &p) == 0) {
        FUZZ_ASSERT((unsigned)p.kind <= KVP_ALL);
        FUZZ_ASSERT((p.layer_lo == -1 && p.layer_hi == -1) ||
                    (p.layer_lo >= 0 && p.layer_lo <= p.layer_hi));
        char buf[256];
        kv_policy_format(&p, buf, sizeof buf);
        FUZZ_ASSERT(kv_policy_parse(buf, &back) == 0);
        FUZZ_ASSERT(back.kind == p.kind && back.layer_lo == p.layer_lo &&
                    back.layer_hi == p.layer_hi);
        for (int l = 0; l < 8; l++)
            for (int d = 0; d < 2; d++) {
                int t = kv_policy_ternary(&p, l, d);
                FUZZ_ASSERT(t == 0 || t == 1);
            }
    }
    free(s);
    return 0;
}
