/* libFuzzer harness: experiment configs (configs/NAME.conf) through the calls an
 * experiment makes: expconf_parse, expconf_check, the lists, an override of
 * the first key, expconf_bind with a value, and expconf_get_i64.  Everything
 * is freed (leaks are findings too).  Seeds: tests/fuzz/corpus/expconf/. */
#include "fuzz_util.h"
#include "log/expconf.h"

#include <stdio.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = fuzz_cstr(data, size);
    ExpConf c;
    if (expconf_parse(text, "fuzz.conf", &c) == 0) {
        for (int i = 0; i < c.n; i++) FUZZ_ASSERT(c.entries[i].key && c.entries[i].value);
        (void)expconf_check(&c);
        int n = 0;
        char **vals = expconf_list(&c, "values", &n);
        FUZZ_ASSERT(vals != NULL && n >= 0);
        for (int i = 0; i < n; i++) FUZZ_ASSERT(vals[i] != NULL && vals[i][0] != '\0');
        FUZZ_ASSERT(vals[n] == NULL);
        if (c.n > 0) {
            char arg[512];
            snprintf(arg, sizeof arg, "%s = {}x", c.entries[0].key);
            (void)expconf_override(&c, arg);
            int64_t v;
            (void)expconf_get_i64(&c, c.entries[0].key, &v);
        }
        (void)expconf_bind(&c, n > 0 ? vals[0] : "v");
        expconf_free_list(vals);
        expconf_free(&c);
    }
    free(text);
    return 0;
}
