#include "load/safetensors.h"
#include "load/json_strict.h"
#include "core/err.h"
#include "core/mem.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The format's dtypes (safetensors' Dtype enum, all 22) and ternlab's for them. */
static const struct {
    const char *name;
    DType t;
} st_dtypes[] = {{"F64", DT_F64},         {"F32", DT_F32},         {"BF16", DT_BF16},
                 {"F16", DT_F16},         {"F8_E4M3", DT_FP8_E4M3}, {"F8_E5M2", DT_F8_E5M2},
                 {"F8_E8M0", DT_E8M0},    {"F8_E4M3FNUZ", DT_F8_E4M3FNUZ},
                 {"F8_E5M2FNUZ", DT_F8_E5M2FNUZ}, {"F6_E2M3", DT_F6_E2M3},
                 {"F6_E3M2", DT_F6_E3M2}, {"F4", DT_F4},           {"C64", DT_C64},
                 {"I64", DT_I64},         {"I32", DT_I32},         {"I16", DT_I16},
                 {"I8", DT_I8},           {"U64", DT_U64},         {"U32", DT_U32},
                 {"U16", DT_U16},         {"U8", DT_U8},           {"BOOL", DT_BOOL}};
enum { N_ST_DTYPES = sizeof st_dtypes / sizeof st_dtypes[0] };

static int dtype_from_st(const char *s, DType *out) {
    for (int i = 0; i < N_ST_DTYPES; i++)
        if (strcmp(s, st_dtypes[i].name) == 0) {
            *out = st_dtypes[i].t;
            return 0;
        }
    return -1;
}

const char *st_dtype_name(DType t) {
    for (int i = 0; i < N_ST_DTYPES; i++)
        if (st_dtypes[i].t == t) return st_dtypes[i].name;
    return NULL;
}

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp(((const StTensor *)a)->name, ((const StTensor *)b)->name);
}

typedef struct {
    uint64_t begin, end;
    const char *name;
} Range;

static int cmp_range(const void *a, const void *b) {
    const Range *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* A JSON number that is a non-negative integer exactly representable. */
static int json_u64(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return -1;
    double d = j->valuedouble;
    if (!(d >= 0) || d > 9007199254740992.0 || d != (double)(uint64_t)d) return -1;
    *out = (uint64_t)d;
    return 0;
}

int st_parse_header(const uint8_t *buf, size_t file_size, const char *path, int file,
                    SafeTensors *st) {
    if (file_size < 8)
        return err_set("%s: truncated safetensors file (%zu bytes, need at least 8 for the "
                       "header length)", path, file_size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | buf[i];
    if (hlen > file_size - 8)
        return err_set("%s: header length %llu goes beyond the end of the file (%zu bytes): "
                       "truncated or not a safetensors file", path, (unsigned long long)hlen,
                       file_size);
    if (hlen > 100u * 1024 * 1024)
        return err_set("%s: header length %llu is implausibly large", path,
                       (unsigned long long)hlen);
    const uint8_t *data = buf + 8 + hlen;
    uint64_t data_size = file_size - 8 - hlen;

    cJSON *root = json_parse_strict((const char *)buf + 8, (size_t)hlen, path);
    if (!root) return -1;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return err_set("%s: header is not a well-formed JSON object", path);
    }
    int n = 0;
    for (cJSON *it = root->child; it; it = it->next) n++;
    Range *ranges = xcalloc((size_t)n + 1, sizeof *ranges);
    int n_ranges = 0, rc = 0, first_new = st->n_tensors;
    st->tensors = xrealloc(st->tensors, sizeof(StTensor) * (size_t)(st->n_tensors + n + 1));

    for (cJSON *it = root->child; it; it = it->next) {
        const char *name = it->string;
        if (!name) { rc = err_set("%s: header entry without a name", path); break; }
        if (strcmp(name, "__metadata__") == 0) continue;
        if (!cJSON_IsObject(it)) {
            rc = err_set("%s: tensor '%s': entry is not an object", path, name);
            break;
        }
        cJSON *jd = cJSON_GetObjectItemCaseSensitive(it, "dtype");
        cJSON *js = cJSON_GetObjectItemCaseSensitive(it, "shape");
        cJSON *jo = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
        if (!cJSON_IsString(jd) || !cJSON_IsArray(js) || !cJSON_IsArray(jo)) {
            rc = err_set("%s: tensor '%s': needs string 'dtype', array 'shape' and array "
                         "'data_offsets'", path, name);
            break;
        }
        StTensor t = {0};
        if (dtype_from_st(jd->valuestring, &t.dtype) != 0) {
            char known[400];
            size_t kl = 0;
            for (int i = 0; i < N_ST_DTYPES && kl < sizeof known; i++)
                kl += (size_t)snprintf(known + kl, sizeof known - kl, "%s%s", i ? ", " : "",
                                       st_dtypes[i].name);
            rc = err_set("%s: tensor '%s': unknown dtype '%s' (the format's: %s)", path, name,
                         jd->valuestring, known);
            break;
        }
        int nd = cJSON_GetArraySize(js);
        if (nd > ST_MAX_DIMS) {
            rc = err_set("%s: tensor '%s': %d dimensions (at most %d)", path, name, nd,
                         ST_MAX_DIMS);
            break;
        }
        t.ndim = nd;
        uint64_t numel = 1;
        int bad = 0;
        for (int d = 0; d < nd; d++) {
            uint64_t v;
            if (json_u64(cJSON_GetArrayItem(js, d), &v) != 0) { bad = 1; break; }
            t.shape[d] = (int64_t)v;
            if (v && numel > UINT64_MAX / v) { bad = 2; break; }
            numel *= v;
        }
        if (bad) {
            rc = err_set("%s: tensor '%s': %s", path, name,
                         bad == 1 ? "shape entries must be non-negative integers"
                                  : "shape overflows");
            break;
        }
        uint64_t b, e;
        if (cJSON_GetArraySize(jo) != 2 || json_u64(cJSON_GetArrayItem(jo, 0), &b) != 0 ||
            json_u64(cJSON_GetArrayItem(jo, 1), &e) != 0 || e < b) {
            rc = err_set("%s: tensor '%s': data_offsets must be [begin, end] with "
                         "0 <= begin <= end", path, name);
            break;
        }
        if (e > data_size) {
            rc = err_set("%s: tensor '%s': data_offsets [%llu, %llu] go beyond the data section "
                         "(%llu bytes): file truncated or header corrupt", path, name,
                         (unsigned long long)b, (unsigned long long)e,
                         (unsigned long long)data_size);
            break;
        }
        /* bits, as the format counts them: a sub-byte dtype (F4, F6_*) packs its
         * elements, and a tensor whose bits do not fill whole bytes is refused */
        const uint64_t bits = dtype_bits(t.dtype);
        if (numel > UINT64_MAX / bits) {
            rc = err_set("%s: tensor '%s': shape overflows", path, name);
            break;
        }
        if (numel * bits % 8) {
            rc = err_set("%s: tensor '%s': %llu elements of %s (%u bits each) do not fill whole "
                         "bytes", path, name, (unsigned long long)numel, st_dtype_name(t.dtype),
                         (unsigned)bits);
            break;
        }
        uint64_t want = numel * bits / 8;
        if (e - b != want) {
            rc = err_set("%s: tensor '%s': shape and dtype %s need %llu bytes but data_offsets "
                         "span %llu", path, name, st_dtype_name(t.dtype),
                         (unsigned long long)want, (unsigned long long)(e - b));
            break;
        }
        t.name = xstrdup(name);
        t.numel = (int64_t)numel;
        t.data = data + b;
        t.nbytes = (size_t)(e - b);
        t.file = file;
        st->tensors[st->n_tensors++] = t;
        ranges[n_ranges++] = (Range){b, e, t.name};
    }
    cJSON_Delete(root);
    if (rc == 0) {
        qsort(ranges, (size_t)n_ranges, sizeof *ranges, cmp_range);
        for (int i = 1; i < n_ranges; i++)
            if (ranges[i].begin < ranges[i - 1].end) {
                rc = err_set("%s: tensors '%s' and '%s' overlap in the file", path,
                             ranges[i - 1].name, ranges[i].name);
                break;
            }
    }
    free(ranges);
    if (rc != 0) {
        for (int i = first_new; i < st->n_tensors; i++) free(st->tensors[i].name);
        st->n_tensors = first_new;
    }
    return rc;
}

static void st_sort(SafeTensors *st) {
    if (st->n_tensors > 1) qsort(st->tensors, (size_t)st->n_tensors, sizeof(StTensor), cmp_tensor_name);
}

static int st_check_duplicates(SafeTensors *st) {
    for (int i = 1; i < st->n_tensors; i++)
        if (strcmp(st->tensors[i].name, st->tensors[i - 1].name) == 0)
            return err_set("tensor '%s' appears twice (in %s and %s)", st->tensors[i].name,
                           st->files[st->tensors[i - 1].file].path,
                           st->files[st->tensors[i].file].path);
    return 0;
}

static int st_add_file(SafeTensors *st, const char *path) {
    st->files = xrealloc(st->files, sizeof(MappedFile) * (size_t)(st->n_files + 1));
    if (file_map(path, &st->files[st->n_files]) != 0) return -1;
    int idx = st->n_files++;
    return st_parse_header(st->files[idx].data, st->files[idx].size, path, idx, st);
}

int st_open_file(const char *path, SafeTensors *st) {
    memset(st, 0, sizeof *st);
    if (st_add_file(st, path) != 0) {
        st_close(st);
        return -1;
    }
    st_sort(st);
    if (st_check_duplicates(st) != 0) {
        st_close(st);
        return -1;
    }
    return 0;
}

/* The index at path parsed (*root, for cJSON_Delete) and its weight_map
 * (*wm) checked: an object naming at least one tensor, each in a file of the
 * same folder.  0, or -1 with err_set (nothing to free). */
static int index_read(const char *path, cJSON **root, const cJSON **wm) {
    char *text = NULL;
    if (file_read_all(path, &text, NULL) != 0) return -1;
    *root = json_parse_strict(text, strlen(text), path);
    free(text);
    if (!*root) {
        *wm = NULL;
        return -1;
    }
    *wm = *root ? cJSON_GetObjectItemCaseSensitive(*root, "weight_map") : NULL;
    int rc = 0;
    if (!cJSON_IsObject(*wm)) rc = err_set("%s: not a well-formed index (needs an object 'weight_map')", path);
    else if (!(*wm)->child) rc = err_set("%s: weight_map names no tensors", path);
    for (const cJSON *it = rc == 0 ? (*wm)->child : NULL; it; it = it->next)
        if (!cJSON_IsString(it) || strchr(it->valuestring, '/')) {
            rc = err_set("%s: weight_map entry '%s' must name a file in the same folder", path,
                         it->string ? it->string : "?");
            break;
        }
    if (rc != 0) cJSON_Delete(*root);
    return rc;
}

int st_index_shards(const char *dir, char ***names, int *n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    cJSON *root;
    const cJSON *wm;
    if (index_read(path, &root, &wm) != 0) return -1;
    int k = 0, cap = 8;
    char **v = xmalloc(sizeof(char *) * (size_t)cap);
    for (const cJSON *it = wm->child; it; it = it->next) {
        int seen = 0;
        for (int i = 0; i < k && !seen; i++) seen = strcmp(v[i], it->valuestring) == 0;
        if (seen) continue;
        if (k == cap) v = xrealloc(v, sizeof(char *) * (size_t)(cap *= 2));
        v[k++] = xstrdup(it->valuestring);
    }
    cJSON_Delete(root);
    *names = v;
    *n = k;
    return 0;
}

int st_dir_files(const char *dir, int *index_beside) {
    char path[4096];
    struct stat sb;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const int single = stat(path, &sb) == 0;
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    const int index = stat(path, &sb) == 0;
    if (index_beside) *index_beside = single && index;
    return !single && index;
}

int st_open_dir(const char *dir, SafeTensors *st) {
    char path[4096];
    memset(st, 0, sizeof *st);
    int beside;
    if (!st_dir_files(dir, &beside)) { /* (a missing file is named by st_open_file) */
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        const int rc = st_open_file(path, st);
        st->index_ignored = rc == 0 && beside;
        return rc;
    }
    /* (index_read refuses one that is not a regular file, or unreadable) */
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    cJSON *root;
    const cJSON *wm;
    if (index_read(path, &root, &wm) != 0) return -1;
    int rc = 0;
    /* open each distinct shard once, in order of first mention */
    for (const cJSON *it = wm->child; it && rc == 0; it = it->next) {
        char shard[4096];
        snprintf(shard, sizeof shard, "%s/%s", dir, it->valuestring);
        int seen = 0;
        for (int i = 0; i < st->n_files; i++)
            if (strcmp(st->files[i].path, shard) == 0) seen = 1;
        if (!seen) rc = st_add_file(st, shard);
    }
    if (rc == 0) {
        st_sort(st);
        rc = st_check_duplicates(st);
    }
    /* every tensor the index names must be in the shard it names */
    for (const cJSON *it = wm->child; it && rc == 0; it = it->next) {
        const StTensor *t = st_find(st, it->string);
        char shard[4096];
        snprintf(shard, sizeof shard, "%s/%s", dir, it->valuestring);
        if (!t || strcmp(st->files[t->file].path, shard) != 0)
            rc = err_set("%s: index says tensor '%s' is in %s, but it is not there", path,
                         it->string, it->valuestring);
    }
    cJSON_Delete(root);
    if (rc != 0) st_close(st);
    return rc;
}

void st_close(SafeTensors *st) {
    for (int i = 0; i < st->n_tensors; i++) free(st->tensors[i].name);
    for (int i = 0; i < st->n_files; i++) file_unmap(&st->files[i]);
    free(st->tensors);
    free(st->files);
    memset(st, 0, sizeof *st);
}

const StTensor *st_find(const SafeTensors *st, const char *name) {
    int lo = 0, hi = st->n_tensors - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        int c = strcmp(st->tensors[mid].name, name);
        if (c == 0) return &st->tensors[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}
