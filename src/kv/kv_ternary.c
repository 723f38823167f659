#include "kv/kv_ternary.h"
#include "core/dtype.h"
#include "core/err.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kv_policy_check_layers(const KvPolicy *p, int n_layers) {
    if (p->kind != KVP_NONE && p->layer_lo >= 0 && (p->layer_hi >= n_layers || p->layer_lo > p->layer_hi)) {
        char s[64]; /* (the policy as given: "@layers=4-4" had stood for all@layers=4) */
        kv_policy_format(p, s, sizeof s);
        return err_set("--kv %s: the model has %d layers (0-%d)", s, n_layers, n_layers - 1);
    }
    return 0;
}

int kv_policy_parse(const char *s, KvPolicy *p) {
    static const char *names[] = {"none", "encoder", "decoder", "all"};
    memset(p, 0, sizeof *p);
    p->layer_lo = p->layer_hi = -1;
    const char *at = strchr(s, '@');
    size_t len = at ? (size_t)(at - s) : strlen(s);
    int found = 0;
    for (int i = 0; i < 4; i++)
        if (strlen(names[i]) == len && strncmp(s, names[i], len) == 0) {
            p->kind = (KvPolicyKind)i;
            found = 1;
        }
    if (!found)
        return err_set("KV policy '%s': expected none, encoder, decoder or all, optionally "
                       "followed by @layers=a-b", s);
    if (at) {
        char *end;
        if (strncmp(at, "@layers=", 8) != 0)
            return err_set("KV policy '%s': after '@' expected layers=a-b", s);
        /* (digits first, as the QuantSpec's layers=: strtol had taken " 1", "+1" and "-0",
         * recorded as another string than given) */
        if (!isdigit((unsigned char)at[8])) return err_set("KV policy '%s': bad layer range", s);
        long lo = strtol(at + 8, &end, 10), hi = lo;
        if (*end == '-') {
            const char *h = end + 1;
            if (!isdigit((unsigned char)*h)) return err_set("KV policy '%s': bad layer range", s);
            hi = strtol(h, &end, 10);
        }
        if (*end || hi < lo || hi > 1 << 20) return err_set("KV policy '%s': bad layer range", s);
        /* none over layers a-b, full precision elsewhere, is none: taken as none and recorded
         * so (exp-kv-ternary's `kv = {}@layers=a-b` makes its baseline none@layers=a-b; it had
         * been refused, and with it the whole sweep's --check) */
        if (p->kind != KVP_NONE) {
            p->layer_lo = (int)lo;
            p->layer_hi = (int)hi;
        }
    }
    return 0;
}

void kv_policy_format(const KvPolicy *p, char *buf, size_t n) {
    static const char *names[] = {"none", "encoder", "decoder", "all"};
    if (p->layer_lo < 0) snprintf(buf, n, "%s", names[p->kind]);
    else if (p->layer_lo == p->layer_hi) snprintf(buf, n, "%s@layers=%d", names[p->kind], p->layer_lo);
    else snprintf(buf, n, "%s@layers=%d-%d", names[p->kind], p->layer_lo, p->layer_hi);
}

int kv_policy_ternary(const KvPolicy *p, int layer, int decode) {
    if (p->kind == KVP_NONE) return 0;
    if (p->layer_lo >= 0 && (layer < p->layer_lo || layer > p->layer_hi)) return 0;
    if (p->kind == KVP_ALL) return 1;
    return decode ? p->kind == KVP_DECODER : p->kind == KVP_ENCODER;
}

int kv_policy_all_ternary(const KvPolicy *p, int layer) {
    return kv_policy_ternary(p, layer, 0) && kv_policy_ternary(p, layer, 1);
}

int kvt_n_scales(int head_dim, int is_key) { return tern_kv_scales(head_dim, is_key); }

void kvt_quant_row(const float *x, int head_dim, int is_key, uint8_t *codes, uint16_t *scales) {
    int gsz = is_key ? KV_K_GROUP : head_dim;
    memset(codes, TERN_BYTE_ZERO, (size_t)tern_kv_code_bytes(head_dim)); /* code 1 = zero, also for padding */
    for (int g0 = 0, gi = 0; g0 < head_dim; g0 += gsz, gi++) {
        int g1 = g0 + gsz < head_dim ? g0 + gsz : head_dim;
        float sum = 0.0f;
        for (int i = g0; i < g1; i++) sum += fabsf(x[i]);
        float gam = sum / (float)(g1 - g0);
        if (gam < 1e-8f) gam = 1e-8f;
        /* the scale is stored in f16: past its largest finite value it had been inf, and a
         * zero code times inf a NaN in the attention (|x| ~ 7e4); saturated instead */
        if (gam > 65504.0f) gam = 65504.0f;
        for (int i = g0; i < g1; i++) {
            float q = rintf(x[i] / gam);
            q = q > 1.0f ? 1.0f : (q < -1.0f ? -1.0f : q);
            tern_kv_set(codes, i, (int)q);
        }
        scales[gi] = f32_to_f16(gam);
    }
}

void kvt_dequant_row(const uint8_t *codes, const uint16_t *scales, int head_dim, int is_key,
                     float *x) {
    int gsz = is_key ? KV_K_GROUP : head_dim;
    for (int i = 0; i < head_dim; i++) x[i] = (float)tern_kv_get(codes, i) * f16_to_f32(scales[i / gsz]);
}

size_t kvt_bytes_per_token_head(int head_dim, int ternary) {
    if (!ternary) return 2 * (size_t)head_dim * sizeof(float);
    return 2 * (size_t)tern_kv_code_bytes(head_dim) +
           sizeof(uint16_t) * (size_t)(kvt_n_scales(head_dim, 1) + kvt_n_scales(head_dim, 0));
}
