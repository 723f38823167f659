#include "load/json_strict.h"
#include "core/err.h"
#include "core/mem.h"

#include <stdlib.h>
#include <string.h>

static int cmp_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first object under j (depth first) holding a key twice: that key, else NULL. */
static const char *dup_key(const cJSON *j) {
    if (!j) return NULL;
    int n = 0;
    for (const cJSON *c = j->child; c; c = c->next) n++;
    if (cJSON_IsObject(j) && n > 1) {
        const char **names = xcalloc((size_t)n, sizeof *names);
        int k = 0;
        for (const cJSON *c = j->child; c; c = c->next) names[k++] = c->string ? c->string : "";
        qsort(names, (size_t)n, sizeof *names, cmp_name);
        const char *d = NULL;
        for (int i = 1; i < n && !d; i++)
            if (strcmp(names[i - 1], names[i]) == 0) d = names[i];
        free(names);
        if (d) return d;
    }
    for (const cJSON *c = j->child; c; c = c->next) {
        const char *d = dup_key(c);
        if (d) return d;
    }
    return NULL;
}

/* The offset of the first \u0000 escape inside a string of text[0, len), or -1:
 * cJSON's C strings end there, so "a\u0000b" had been read as "a". */
static long nul_escape(const char *text, size_t len) {
    int in_str = 0;
    for (size_t i = 0; i < len; i++) {
        if (!in_str) {
            in_str = text[i] == '"';
        } else if (text[i] == '"') {
            in_str = 0;
        } else if (text[i] == '\\' && i + 1 < len) {
            if (text[i + 1] == 'u' && i + 5 < len && memcmp(text + i + 2, "0000", 4) == 0) return (long)i;
            i++; /* the escaped character (\" and \\ included) */
        }
    }
    return -1;
}

cJSON *json_parse_strict(const char *text, size_t len, const char *path) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        err_set("%s: not well-formed JSON", path);
        return NULL;
    }
    for (const char *p = end; p && p < text + len; p++)
        if (*p && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(root);
            err_set("%s: data after the JSON value (at byte %zu)", path, (size_t)(p - text));
            return NULL;
        }
    const long z = nul_escape(text, (size_t)(end && end <= text + len ? end - text : (long)len));
    if (z >= 0) {
        cJSON_Delete(root);
        err_set("%s: a string holds an escaped NUL (\\u0000, at byte %ld), which would cut it short", path, z);
        return NULL;
    }
    const char *d = dup_key(root);
    if (d) {
        err_set("%s: key '%s' appears twice in one object (readers disagree on which value counts)", path, d);
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}
