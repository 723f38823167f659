/* Experiment config parser (format in expconf.h).  Input is outside input:
 * every malformed line is an error naming the file and line, never a crash. */
#include "log/expconf.h"

#include "core/err.h"
#include "core/mem.h"
#include "core/strnum.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const EXPCONF_REQUIRED_KEYS[] = {"factor", "values", "models", "tokens",
                                             "window", "max_windows", NULL};

static int find(const ExpConf *c, const char *key) {
    for (int i = 0; i < c->n; i++)
        if (strcmp(c->entries[i].key, key) == 0) return i;
    return -1;
}

static void add(ExpConf *c, const char *key, size_t klen, const char *val, size_t vlen,
                int line) {
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 16;
        c->entries = xrealloc(c->entries, (size_t)c->cap * sizeof *c->entries);
    }
    ExpConfEntry *e = &c->entries[c->n++];
    e->key = xmalloc(klen + 1);
    memcpy(e->key, key, klen);
    e->key[klen] = 0;
    e->value = xmalloc(vlen + 1);
    memcpy(e->value, val, vlen);
    e->value[vlen] = 0;
    e->line = line;
}

static int is_key_char(int ch) { return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_'; }
static int is_blank(int ch) { return ch == ' ' || ch == '\t' || ch == '\r'; }

/* Parses "key = value" in [s, e) (no newline inside).  Sets key/value spans;
 * returns 0, or -1 with a message (without file/line, added by the caller).
 * allow_comment: a '#' after a blank ends the value (files, not overrides). */
static int parse_kv(const char *s, const char *e, int allow_comment, const char **k, size_t *kl,
                    const char **v, size_t *vl) {
    while (s < e && is_blank(*s)) s++;
    const char *k0 = s;
    while (s < e && is_key_char((unsigned char)*s)) s++;
    if (s == k0) return err_set("expected a key ([a-z0-9_]+) at the start of the line");
    const char *k1 = s;
    while (s < e && is_blank(*s)) s++;
    if (s == e || *s != '=') {
        if (s < e && !is_blank(*s) && *s != '=')
            return err_set("bad character '%c' in key (keys are [a-z0-9_]+)", *s);
        return err_set("expected '=' after key '%.*s'", (int)(k1 - k0), k0);
    }
    s++;
    while (s < e && is_blank(*s)) s++;
    const char *v0 = s, *v1 = e;
    if (allow_comment) {
        for (const char *p = v0; p < e; p++)
            if (*p == '#' && (p == v0 || is_blank(p[-1]))) {
                v1 = p;
                break;
            }
    }
    while (v1 > v0 && is_blank(v1[-1])) v1--;
    /* an empty value is no setting: `quant =` (or the override quant=, a sweep's unset
     * variable) had run the model ternarised by the empty spec's defaults, exit 0 */
    if (v1 == v0) return err_set("key '%.*s' has an empty value", (int)(k1 - k0), k0);
    for (const char *p = v0; p < v1; p++)
        if ((unsigned char)*p < 0x20 && *p != '\t')
            return err_set("control character (0x%02x) in value", (unsigned char)*p);
    *k = k0, *kl = (size_t)(k1 - k0), *v = v0, *vl = (size_t)(v1 - v0);
    return 0;
}

int expconf_parse(const char *text, const char *name, ExpConf *out) {
    memset(out, 0, sizeof *out);
    out->path = xstrdup(name ? name : "(config)");
    const char *s = text;
    int line = 0;
    while (*s) {
        line++;
        const char *e = strchr(s, '\n');
        if (!e) e = s + strlen(s);
        const char *p = s;
        while (p < e && is_blank(*p)) p++;
        if (p < e && *p != '#') {
            const char *k, *v;
            size_t kl, vl;
            if (parse_kv(p, e, 1, &k, &kl, &v, &vl)) {
                err_prefix("%s:%d: ", out->path, line);
                expconf_free(out);
                return -1;
            }
            for (int i = 0; i < out->n; i++)
                if (strlen(out->entries[i].key) == kl && !memcmp(out->entries[i].key, k, kl)) {
                    err_set("%s:%d: key '%.*s' already set on line %d", out->path, line, (int)kl,
                            k, out->entries[i].line);
                    expconf_free(out);
                    return -1;
                }
            add(out, k, kl, v, vl, line);
        }
        s = *e ? e + 1 : e;
    }
    return 0;
}

int expconf_load(const char *path, ExpConf *out) {
    char *text = NULL;
    size_t size = 0;
    memset(out, 0, sizeof *out);
    if (file_read_all(path, &text, &size)) return err_prefix("experiment config: ");
    if (strlen(text) != size) {
        free(text);
        return err_set("%s: NUL byte in a config file", path);
    }
    int rc = expconf_parse(text, path, out);
    free(text);
    return rc;
}

void expconf_free(ExpConf *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) {
        free(c->entries[i].key);
        free(c->entries[i].value);
    }
    free(c->entries);
    free(c->path);
    memset(c, 0, sizeof *c);
}

int expconf_check(const ExpConf *c) {
    for (int i = 0; EXPCONF_REQUIRED_KEYS[i]; i++)
        if (!expconf_get(c, EXPCONF_REQUIRED_KEYS[i]))
            return err_set("%s: missing key '%s'", c->path, EXPCONF_REQUIRED_KEYS[i]);
    const char *nonempty[] = {"factor", "values", "models"};
    for (int i = 0; i < 3; i++) {
        int n = 0;
        char **l = expconf_list(c, nonempty[i], &n);
        expconf_free_list(l);
        if (n == 0) return err_set("%s: key '%s' is empty", c->path, nonempty[i]);
    }
    int64_t v;
    if (expconf_get_i64(c, "window", &v)) return -1;
    if (v < 2) return err_set("%s: window = %lld, must be at least 2", c->path, (long long)v);
    if (expconf_get_i64(c, "max_windows", &v)) return -1;
    if (v < 0) return err_set("%s: max_windows = %lld, must be >= 0 (0 = all)", c->path,
                              (long long)v);
    return 0;
}

/* word appended to the blank-separated list buf (n bytes, *len used; cut to fit) */
static void join_word(char *buf, size_t n, size_t *len, const char *word) {
    if (*len >= n - 1) return;
    int w = snprintf(buf + *len, n - *len, "%s%s", *len ? " " : "", word);
    *len = w < 0 ? n : *len + (size_t)w;
}

int expconf_check_keys(const ExpConf *c, const char *const *known, const char *const *extra) {
    for (int i = 0; i < c->n; i++) {
        int ok = 0;
        for (int j = 0; known[j] && !ok; j++) ok = strcmp(c->entries[i].key, known[j]) == 0;
        for (int j = 0; extra && extra[j] && !ok; j++) ok = strcmp(c->entries[i].key, extra[j]) == 0;
        if (ok) continue;
        char list[1024] = "";
        size_t len = 0;
        for (int j = 0; known[j]; j++) join_word(list, sizeof list, &len, known[j]);
        for (int j = 0; extra && extra[j]; j++) join_word(list, sizeof list, &len, extra[j]);
        return err_set("%s:%d: unknown key '%s' (this experiment reads: %s)", c->path, c->entries[i].line,
                       c->entries[i].key, list);
    }
    return 0;
}

const char *expconf_get(const ExpConf *c, const char *key) {
    int i = find(c, key);
    return i < 0 ? NULL : c->entries[i].value;
}

const char *expconf_get_or(const ExpConf *c, const char *key, const char *dflt) {
    const char *v = expconf_get(c, key);
    return v ? v : dflt;
}

int expconf_get_i64(const ExpConf *c, const char *key, int64_t *out) {
    const char *v = expconf_get(c, key);
    if (!v) return err_set("%s: missing key '%s'", c->path, key);
    if (str_to_i64(v, INT64_MIN, INT64_MAX, out) < 0)
        return err_set("%s: %s = '%s' is not an integer", c->path, key, v);
    return 0;
}

int expconf_override(ExpConf *c, const char *arg) {
    const char *k, *v;
    size_t kl, vl;
    if (parse_kv(arg, arg + strlen(arg), 0, &k, &kl, &v, &vl))
        return err_prefix("override '%s': ", arg);
    for (int i = 0; i < c->n; i++) {
        ExpConfEntry *e = &c->entries[i];
        if (strlen(e->key) == kl && !memcmp(e->key, k, kl)) {
            free(e->value);
            e->value = xmalloc(vl + 1);
            memcpy(e->value, v, vl);
            e->value[vl] = 0;
            e->line = 0;
            return 0;
        }
    }
    /* Unknown key: list the known ones so the typo is easy to see. */
    char known[1024] = "";
    size_t len = 0;
    for (int i = 0; i < c->n; i++) join_word(known, sizeof known, &len, c->entries[i].key);
    return err_set("override '%s': unknown key '%.*s' (%s defines: %s)", arg, (int)kl, k, c->path,
                   known);
}

int expconf_apply_args(ExpConf *c, int argc, char **argv, int *consumed) {
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (!argv[i] || argv[i][0] == '-' || !strchr(argv[i], '=')) continue;
        if (expconf_override(c, argv[i])) return -1;
        n++;
    }
    if (consumed) *consumed = n;
    return 0;
}

char *expconf_subst(const char *tmpl, const char *value) {
    size_t n = 0, vl = strlen(value);
    for (const char *p = tmpl; *p; p++) n += (p[0] == '{' && p[1] == '}') ? (p++, vl) : 1;
    char *out = xmalloc(n + 1), *o = out;
    for (const char *p = tmpl; *p; p++) {
        if (p[0] == '{' && p[1] == '}') {
            memcpy(o, value, vl);
            o += vl;
            p++;
        } else {
            *o++ = *p;
        }
    }
    *o = 0;
    return out;
}

int expconf_bind(ExpConf *c, const char *value) {
    if (!value || !value[0]) return err_set("%s: empty factor value", c->path);
    int bound = 0;
    for (int i = 0; i < c->n; i++) {
        ExpConfEntry *e = &c->entries[i];
        if (strcmp(e->key, "values") == 0 || !strstr(e->value, "{}")) continue;
        char *s = expconf_subst(e->value, value);
        free(e->value);
        e->value = s;
        bound++;
    }
    int i = find(c, "value");
    if (i >= 0) {
        free(c->entries[i].value);
        c->entries[i].value = xstrdup(value);
    } else {
        add(c, "value", 5, value, strlen(value), 0);
    }
    return bound;
}

char **expconf_split(const char *value, int *n) {
    int count = 0, cap = 8;
    char **items = xmalloc((size_t)cap * sizeof *items);
    const char *s = value ? value : "";
    for (;;) {
        while (*s && isspace((unsigned char)*s)) s++;
        if (!*s) break;
        const char *b = s;
        while (*s && !isspace((unsigned char)*s)) s++;
        if (count + 1 >= cap) items = xrealloc(items, (size_t)(cap *= 2) * sizeof *items);
        items[count] = xmalloc((size_t)(s - b) + 1);
        memcpy(items[count], b, (size_t)(s - b));
        items[count][s - b] = 0;
        count++;
    }
    items[count] = NULL;
    if (n) *n = count;
    return items;
}

char **expconf_list(const ExpConf *c, const char *key, int *n) {
    return expconf_split(expconf_get(c, key), n);
}

void expconf_free_list(char **items) {
    if (!items) return;
    for (char **p = items; *p; p++) free(*p);
    free(items);
}
