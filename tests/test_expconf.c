/* Experiment configs: the shipped configs parse and are complete; the format's
 * rules (comments, duplicates, bad lines with their line number, overrides of
 * known keys only, {} substitution, value lists). */
#include "core/strnum.h"
#include "test.h"
#include "core/err.h"
#include "log/expconf.h"

#include <stdlib.h>
#include <string.h>

static const char *const SHIPPED[] = {"exp-threshold", "exp-scale-dtype", "exp-group-size",
                                      "exp-kv-ternary", "exp-throughput", NULL};

TEST(expconf_shipped_configs_parse) {
    for (int i = 0; SHIPPED[i]; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "configs/%s.conf", SHIPPED[i]);
        ExpConf c;
        CHECK_MSG(expconf_load(test_path(rel), &c) == 0, "%s", err_msg());
        CHECK_MSG(expconf_check(&c) == 0, "%s: %s", rel, err_msg());
        int nv = 0, nm = 0;
        char **v = expconf_list(&c, "values", &nv), **m = expconf_list(&c, "models", &nm);
        CHECK_MSG(nv >= 2, "%s: %d values", rel, nv);
        CHECK(nm == 2 && strcmp(m[0], "data/llama-tiny") == 0 &&
              strcmp(m[1], "data/bitnet-tiny") == 0);
        /* The factor's value lands somewhere (except throughput, whose factor
         * selects dense vs ternary weights rather than a setting string). */
        int has_placeholder = 0;
        for (int k = 0; k < c.n; k++)
            if (strcmp(c.entries[k].key, "values") && strstr(c.entries[k].value, "{}"))
                has_placeholder = 1;
        CHECK_MSG(has_placeholder || !strcmp(SHIPPED[i], "exp-throughput"),
                  "%s has no {} placeholder", rel);
        expconf_free_list(v);
        expconf_free_list(m);
        expconf_free(&c);
    }
}

TEST(expconf_format_rules) {
    const char *text = "# header comment\n"
                       "\n"
                       "factor = rule\n"
                       "  values=absmean   twn\tstd   # inline comment\n"
                       "models = data/a data/b\n"
                       "tokens = t.i32\n"
                       "window = 256\n"
                       "max_windows = 0\n"
                       "quant = rule={},group=128,scale=f16\n"
                       "kv = none@layers=0-1#not-a-comment\n"
                       "   # indented comment\n"
                       "last = no newline at end";
    ExpConf c;
    REQUIRE(expconf_parse(text, "mem.conf", &c) == 0 || (fprintf(stderr, "%s\n", err_msg()), 0));
    CHECK(expconf_check(&c) == 0);
    CHECK(c.n == 9);
    CHECK(strcmp(expconf_get(&c, "values"), "absmean   twn\tstd") == 0);
    CHECK(strcmp(expconf_get(&c, "kv"), "none@layers=0-1#not-a-comment") == 0);
    CHECK(strcmp(expconf_get(&c, "last"), "no newline at end") == 0);
    CHECK(expconf_get(&c, "nope") == NULL);
    CHECK(strcmp(expconf_get_or(&c, "nope", "dflt"), "dflt") == 0);
    int64_t w = 0;
    CHECK(expconf_get_i64(&c, "window", &w) == 0 && w == 256);
    CHECK(expconf_get_i64(&c, "factor", &w) != 0);
    CHECK(expconf_get_i64(&c, "nope", &w) != 0);
    int n = 0;
    char **v = expconf_list(&c, "values", &n);
    CHECK(n == 3 && !strcmp(v[0], "absmean") && !strcmp(v[1], "twn") && !strcmp(v[2], "std") &&
          v[3] == NULL);
    expconf_free_list(v);

    /* Overrides: known keys only; values may contain '=' and blanks. */
    char *args[] = {"--model", "x", "window=128", "quant = rule={},group=64", "-v", "plain"};
    int used = 0;
    CHECK(expconf_apply_args(&c, 6, args, &used) == 0 && used == 2);
    CHECK(expconf_get_i64(&c, "window", &w) == 0 && w == 128);
    CHECK(strcmp(expconf_get(&c, "quant"), "rule={},group=64") == 0);
    CHECK(expconf_override(&c, "windw=64") != 0);
    CHECK_MSG(strstr(err_msg(), "unknown key 'windw'") && strstr(err_msg(), "window"), "%s",
              err_msg());
    CHECK(expconf_override(&c, "=5") != 0);
    CHECK(expconf_override(&c, "quant=") != 0 && strstr(err_msg(), "empty value")); /* (not unset) */
    CHECK(strcmp(expconf_get(&c, "quant"), "rule={},group=64") == 0);
    CHECK(expconf_override(&c, "window") != 0);
    char *bad[] = {"Window=3"};
    CHECK(expconf_apply_args(&c, 1, bad, NULL) != 0);

    /* Binding the factor's value. */
    CHECK(expconf_bind(&c, "twn") == 1); /* one setting took it */
    CHECK(strcmp(expconf_get(&c, "quant"), "rule=twn,group=64") == 0);
    CHECK(strcmp(expconf_get(&c, "value"), "twn") == 0);
    CHECK(strstr(expconf_get(&c, "values"), "absmean") != NULL); /* untouched */
    CHECK(expconf_bind(&c, "") == -1);
    CHECK(expconf_bind(&c, "l2opt") == 0); /* the "{}" is gone: nothing takes it */
    expconf_free(&c);

    char *s = expconf_subst("a{}b{}{}", "XY");
    CHECK(strcmp(s, "aXYbXYXY") == 0);
    free(s);
    s = expconf_subst("{", "v");
    CHECK(strcmp(s, "{") == 0);
    free(s);
}

TEST(expconf_errors_name_file_and_line) {
    struct {
        const char *text, *expect;
    } cases[] = {
        {"factor = a\nfactor = b\n", "bad.conf:2: key 'factor' already set on line 1"},
        {"factor = a\njust words\n", "bad.conf:2:"},
        {"# c\n\nKey = v\n", "bad.conf:3:"},
        {"a.b = c\n", "bad.conf:1: bad character '.'"},
        {"= v\n", "bad.conf:1: expected a key"},
        {"k = a\x01b\n", "bad.conf:1: control character"},
        /* an empty value is no setting (quant = had run the empty spec's defaults) */
        {"factor = a\nvalues =\n", "bad.conf:2: key 'values' has an empty value"},
        {"quant =   # unset\n", "bad.conf:1: key 'quant' has an empty value"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ExpConf c;
        CHECK_MSG(expconf_parse(cases[i].text, "bad.conf", &c) != 0, "case %zu parsed", i);
        CHECK_MSG(strstr(err_msg(), cases[i].expect) != NULL, "case %zu: %s", i, err_msg());
    }
    /* Parses, but incomplete or wrong. */
    const char *incomplete[] = {
        "factor = a\nvalues = x\nmodels = m\ntokens = t\nwindow = 4\n",                  /* max_windows */
        "factor = a\nvalues = x\nmodels = m\ntokens = t\nwindow = 4k\nmax_windows = 1\n", /* window */
        "factor = a\nvalues = x\nmodels = m\ntokens = t\nwindow = 1\nmax_windows = 1\n",
        /* (a bound one off had passed: -1 is the first value refused) */
        "factor = a\nvalues = x\nmodels = m\ntokens = t\nwindow = 4\nmax_windows = -1\n",
    };
    for (size_t i = 0; i < sizeof incomplete / sizeof incomplete[0]; i++) {
        ExpConf c;
        REQUIRE(expconf_parse(incomplete[i], "inc.conf", &c) == 0);
        CHECK_MSG(expconf_check(&c) != 0, "incomplete case %zu passed the check", i);
        CHECK(strstr(err_msg(), "inc.conf") != NULL);
        expconf_free(&c);
    }
    const char *want[] = {"missing key 'max_windows'", "window", "window = 1, must be at least 2",
                          "max_windows = -1, must be >= 0"};
    for (size_t i = 0; i < sizeof incomplete / sizeof incomplete[0]; i++) {
        ExpConf c;
        REQUIRE(expconf_parse(incomplete[i], "inc.conf", &c) == 0);
        CHECK_MSG(expconf_check(&c) != 0 && strstr(err_msg(), want[i]), "case %zu: %s", i, err_msg());
        expconf_free(&c);
    }
    /* a '#' right after '=' starts a comment too: the value is empty (it had been "#x") */
    ExpConf c;
    CHECK_MSG(expconf_parse("quant=#x\n", "hash.conf", &c) != 0 && strstr(err_msg(), "empty value"),
              "quant=#x: %s", err_msg());
    CHECK(expconf_load("/nonexistent/x.conf", &c) != 0);
    CHECK(strstr(err_msg(), "/nonexistent/x.conf") != NULL);
}

/* the strict integer parser the command lines and configs share (core/strnum.h) */
/* expconf_check_keys: a key outside the list is refused naming the file, its
 * line and the known keys; every key known passes. */
TEST(expconf_unknown_keys_refused) {
    static const char *const known[] = {"factor", "values", "models", "tokens", "window", "max_windows", "quant",
                                        NULL};
    ExpConf c;
    REQUIRE(expconf_parse("factor = rule\nvalues = a b\nmodels = m\ntokens = t\nwindow = 8\n"
                          "max_windows = 1\nqaunt = rule={}\n",
                          "typo.conf", &c) == 0);
    CHECK(expconf_check(&c) == 0);
    CHECK(expconf_check_keys(&c, known, NULL) != 0);
    CHECK_MSG(strstr(err_msg(), "typo.conf:7: unknown key 'qaunt'") && strstr(err_msg(), "max_windows quant"),
              "%s", err_msg());
    /* an experiment's own keys beside the common ones: listed after them, and taken */
    static const char *const extra[] = {"mem", NULL}, *const has[] = {"mem", "qaunt", NULL};
    CHECK(expconf_check_keys(&c, known, extra) != 0 && strstr(err_msg(), "quant mem)"));
    CHECK_MSG(expconf_check_keys(&c, known, has) == 0, "%s", err_msg());
    expconf_free(&c);
    REQUIRE(expconf_parse("factor = rule\nvalues = a\nquant = x\n", "ok.conf", &c) == 0);
    CHECK_MSG(expconf_check_keys(&c, known, NULL) == 0, "%s", err_msg());
    expconf_free(&c);
}

TEST(strnum_strict_integers) {
    int64_t v = 7;
    CHECK(str_to_i64("42", 0, 100, &v) == 0 && v == 42);
    CHECK(str_to_i64("-3", -5, 5, &v) == 0 && v == -3);
    CHECK(str_to_i64(" 9", 0, 10, &v) == 0 && v == 9); /* (strtoll's leading blanks) */
    CHECK(str_to_i64("9223372036854775807", INT64_MIN, INT64_MAX, &v) == 0 && v == INT64_MAX);
    /* both bounds inclusive */
    CHECK(str_to_i64("0", 0, 100, &v) == 0 && v == 0 && str_to_i64("100", 0, 100, &v) == 0 && v == 100);
    v = 7;
    const char *bad[] = {"", "x", "12x", "1.5", "0x10", "-", "101", "-6", "9223372036854775808", "4 "};
    const int64_t lo[] = {0, 0, 0, 0, 0, 0, 0, -5, INT64_MIN, 0}, hi[] = {100, 100, 100, 100, 100, 100, 100, 5, INT64_MAX, 100};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) CHECK(str_to_i64(bad[i], lo[i], hi[i], &v) < 0 && v == 7);
}

/* The strict decimal number of the command lines' real options (bench
 * --par-scale, diff --threshold): a whole finite value, neither overflowing nor
 * underflowing to zero (a subnormal value is taken); *out untouched otherwise. */
TEST(strnum_strict_reals) {
    double v = 7;
    CHECK(str_to_f64("0.25", &v) == 0 && v == 0.25);
    CHECK(str_to_f64("-1e3", &v) == 0 && v == -1000.0);
    CHECK(str_to_f64("1e-310", &v) == 0 && v > 0 && v < 1e-300); /* subnormal: still the number */
    v = 7;
    const char *bad[] = {"", "x", "1.5x", "nan", "inf", "1e400", "1e-400", "2 "};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK_MSG(str_to_f64(bad[i], &v) < 0 && v == 7, "'%s' accepted (%g)", bad[i], v);
}
