/* QuantSpec: parsing, canonical printing and layer selection. */
#include "quant/quant.h"

#include "core/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *rule_names[QR_COUNT] = {"absmean", "twn", "std", "l2opt", "absmax"};
static const char *group_names[QG_COUNT] = {"tensor", "row", "32", "64", "128", "256"};
static const char *act_names[QA_COUNT] = {"f32", "int8"};
static const struct {
    const char *name;
    DType t;
} scale_names[] = {{"f32", DT_F32}, {"bf16", DT_BF16}, {"f16", DT_F16},
                   {"fp8_e4m3", DT_FP8_E4M3}, {"e8m0", DT_E8M0}};
#define N_SCALES ((int)(sizeof scale_names / sizeof scale_names[0]))

const char *quant_rule_name(QuantRule r) { return (unsigned)r < QR_COUNT ? rule_names[r] : "?"; }
const char *quant_group_name(QuantGroup g) { return (unsigned)g < QG_COUNT ? group_names[g] : "?"; }
const char *quant_scale_name(DType t) {
    for (int i = 0; i < N_SCALES; i++)
        if (scale_names[i].t == t) return scale_names[i].name;
    return "?";
}

int64_t quant_group_cols(QuantGroup g, int64_t cols) {
    switch (g) {
    case QG_32: return 32;
    case QG_64: return 64;
    case QG_128: return 128;
    case QG_256: return 256;
    default: return cols;
    }
}

void quant_spec_default(QuantSpec *s) {
    memset(s, 0, sizeof *s);
    s->rule = QR_ABSMEAN;
    s->group = QG_TENSOR;
    s->scale = DT_F32;
    s->act = QA_F32;
    s->layers = QL_ALL;
}

static int find(const char *v, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (strcmp(v, names[i]) == 0) return i;
    return -1;
}

/* The ranges sorted and merged where they overlap or touch ("3+0-1+2" -> 0-3): one
 * string for one set of layers in the recorded spec (run files' quant_spec is the
 * canonical spec; "3+0-1" and "0-1+3" had been recorded as given). */
static void normalise_ranges(QuantSpec *q) {
    for (int i = 1; i < q->n_ranges; i++)
        for (int j = i; j > 0 && q->range_lo[j - 1] > q->range_lo[j]; j--) {
            int lo = q->range_lo[j], hi = q->range_hi[j];
            q->range_lo[j] = q->range_lo[j - 1];
            q->range_hi[j] = q->range_hi[j - 1];
            q->range_lo[j - 1] = lo;
            q->range_hi[j - 1] = hi;
        }
    int n = 0;
    for (int i = 0; i < q->n_ranges; i++) {
        if (n > 0 && q->range_lo[i] <= q->range_hi[n - 1] + 1) {
            if (q->range_hi[i] > q->range_hi[n - 1]) q->range_hi[n - 1] = q->range_hi[i];
        } else {
            q->range_lo[n] = q->range_lo[i];
            q->range_hi[n] = q->range_hi[i];
            n++;
        }
    }
    q->n_ranges = n;
}

/* "0-1+3+7-9" -> ranges; every item a non-negative integer or lo-hi, lo <= hi;
 * normalised (normalise_ranges). */
static int parse_ranges(const char *v, QuantSpec *out) {
    const char *p = v;
    out->n_ranges = 0;
    for (;;) {
        char *end;
        if (*p < '0' || *p > '9') goto bad;
        long lo = strtol(p, &end, 10), hi = lo;
        p = end;
        if (*p == '-') {
            p++;
            if (*p < '0' || *p > '9') goto bad;
            hi = strtol(p, &end, 10);
            p = end;
        }
        if (lo > hi || hi > 1000000) goto bad;
        if (out->n_ranges == QUANT_MAX_RANGES)
            return err_set("quant spec: layers=%s has more than %d ranges", v, QUANT_MAX_RANGES);
        out->range_lo[out->n_ranges] = (int)lo;
        out->range_hi[out->n_ranges] = (int)hi;
        out->n_ranges++;
        if (*p == '\0') {
            normalise_ranges(out);
            return 0;
        }
        if (*p != '+') goto bad;
        p++;
    }
bad:
    return err_set("quant spec: bad layers value '%s' (valid: all, attn, mlp, or indices and "
                   "inclusive ranges joined by '+', e.g. layers=0-1+3)",
                   v);
}

int quant_spec_parse(const char *s, QuantSpec *out) {
    QuantSpec q;
    quant_spec_default(&q);
    if (!s) return err_set("quant spec: NULL");
    char buf[512];
    if (strlen(s) >= sizeof buf) return err_set("quant spec too long (%zu chars)", strlen(s));
    strcpy(buf, s);
    /* "" is every default; an empty item (",", "a=b,,c", a trailing comma) is refused */
    const size_t len = strlen(buf);
    if (len > 0 && (buf[0] == ',' || buf[len - 1] == ',' || strstr(buf, ",,")))
        return err_set("quant spec '%s': an empty item between commas", s);
    unsigned seen = 0;
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq)
            return err_set("quant spec: '%s' is not key=value (keys: rule, group, scale, act, "
                           "layers)",
                           item);
        *eq = '\0';
        const char *k = item, *v = eq + 1;
        unsigned bit;
        if (strcmp(k, "rule") == 0) {
            bit = 1;
            int i = find(v, rule_names, QR_COUNT);
            if (i < 0)
                return err_set("quant spec: unknown rule '%s' (valid: absmean, twn, std, l2opt, "
                               "absmax)",
                               v);
            q.rule = (QuantRule)i;
        } else if (strcmp(k, "group") == 0) {
            bit = 2;
            int i = find(v, group_names, QG_COUNT);
            if (i < 0)
                return err_set("quant spec: unknown group '%s' (valid: tensor, row, 32, 64, 128, "
                               "256)",
                               v);
            q.group = (QuantGroup)i;
        } else if (strcmp(k, "scale") == 0) {
            bit = 4;
            int i;
            for (i = 0; i < N_SCALES; i++)
                if (strcmp(v, scale_names[i].name) == 0) break;
            if (i == N_SCALES)
                return err_set("quant spec: unknown scale '%s' (valid: f32, bf16, f16, fp8_e4m3, "
                               "e8m0)",
                               v);
            q.scale = scale_names[i].t;
        } else if (strcmp(k, "act") == 0) {
            bit = 8;
            int i = find(v, act_names, QA_COUNT);
            if (i < 0) return err_set("quant spec: unknown act '%s' (valid: f32, int8)", v);
            q.act = (QuantAct)i;
            q.act_explicit = 1;
        } else if (strcmp(k, "layers") == 0) {
            bit = 16;
            if (strcmp(v, "all") == 0) q.layers = QL_ALL;
            else if (strcmp(v, "attn") == 0) q.layers = QL_ATTN;
            else if (strcmp(v, "mlp") == 0) q.layers = QL_MLP;
            else {
                if (parse_ranges(v, &q) < 0) return -1;
                q.layers = QL_RANGES;
            }
        } else {
            return err_set("quant spec: unknown key '%s' (valid: rule, group, scale, act, layers)",
                           k);
        }
        if (seen & bit) return err_set("quant spec: key '%s' given twice", k);
        seen |= bit;
    }
    q.act_only = seen == 8;
    *out = q;
    return 0;
}

int quant_spec_format(const QuantSpec *s, char *buf, size_t n) {
    const char *scale = quant_scale_name(s->scale);
    char layers[QUANT_MAX_RANGES * 24 + 8];
    if (s->layers == QL_ALL) strcpy(layers, "all");
    else if (s->layers == QL_ATTN) strcpy(layers, "attn");
    else if (s->layers == QL_MLP) strcpy(layers, "mlp");
    else {
        size_t o = 0;
        layers[0] = '\0';
        for (int i = 0; i < s->n_ranges; i++) {
            if (s->range_lo[i] == s->range_hi[i])
                o += (size_t)snprintf(layers + o, sizeof layers - o, "%s%d", i ? "+" : "",
                                      s->range_lo[i]);
            else
                o += (size_t)snprintf(layers + o, sizeof layers - o, "%s%d-%d", i ? "+" : "",
                                      s->range_lo[i], s->range_hi[i]);
        }
    }
    char act[16] = "";
    if (s->act_explicit) snprintf(act, sizeof act, ",act=%s", act_names[s->act]);
    if (s->act_only) { /* (as given: the linears ternary as loaded keep their weights) */
        int len = snprintf(buf, n, "act=%s", act_names[s->act]);
        if (len < 0 || (size_t)len >= n)
            return err_set("quant_spec_format: buffer of %zu bytes too small (need %d)", n, len + 1);
        return len;
    }
    int len = snprintf(buf, n, "rule=%s,group=%s,scale=%s%s,layers=%s", quant_rule_name(s->rule),
                       quant_group_name(s->group), scale, act, layers);
    if (len < 0 || (size_t)len >= n)
        return err_set("quant_spec_format: buffer of %zu bytes too small (need %d)", n, len + 1);
    return len;
}

int quant_layer_selected(const QuantSpec *s, int layer, const char *kind) {
    static const char *attn[] = {"q", "k", "v", "o"};
    static const char *mlp[] = {"gate", "up", "down"};
    int is_attn = find(kind, attn, 4) >= 0, is_mlp = find(kind, mlp, 3) >= 0;
    if (!is_attn && !is_mlp)
        return err_set("quant_layer_selected: unknown linear '%s' (valid: q, k, v, o, gate, up, "
                       "down)",
                       kind);
    switch (s->layers) {
    case QL_ALL: return 1;
    case QL_ATTN: return is_attn;
    case QL_MLP: return is_mlp;
    case QL_RANGES:
        for (int i = 0; i < s->n_ranges; i++)
            if (layer >= s->range_lo[i] && layer <= s->range_hi[i]) return 1;
        return 0;
    }
    return 0;
}
