#include "kv/kvcache.h"
#include "core/err.h"
#include "core/mem.h"

#include <stdlib.h>
#include <string.h>

size_t kv_bytes_needed(int n_layers, int n_kv_heads, int head_dim, int block_size, int n_blocks) {
    return 2 * (size_t)n_layers * (size_t)n_blocks * (size_t)n_kv_heads * (size_t)block_size *
           (size_t)head_dim * sizeof(float);
}

static int kv_init_pages(KvCache *kv, int n_layers, int n_kv_heads, int head_dim, int block_size,
                         int n_blocks, int pages) {
    memset(kv, 0, sizeof *kv);
    if (block_size < 1 || n_blocks < 1)
        return err_set("KV cache: block size (%d) and block count (%d) must be >= 1", block_size,
                       n_blocks);
    kv->n_layers = n_layers;
    kv->n_kv_heads = n_kv_heads;
    kv->head_dim = head_dim;
    kv->block_size = block_size;
    kv->n_blocks = n_blocks;
    kv->host_pages = pages;
    size_t per_layer = kv_bytes_needed(1, n_kv_heads, head_dim, block_size, n_blocks) / 2;
    kv->k = xcalloc((size_t)n_layers, sizeof(float *));
    kv->v = xcalloc((size_t)n_layers, sizeof(float *));
    for (int l = 0; l < n_layers && pages; l++) {
        kv->k[l] = mem_alloc(per_layer, "KV cache keys");
        kv->v[l] = kv->k[l] ? mem_alloc(per_layer, "KV cache values") : NULL;
        if (!kv->k[l] || !kv->v[l]) {
            kv_free(kv);
            return err_prefix("KV cache (%d blocks of %d tokens, try a shorter --window / --max-new or "
                              "a smaller --batch): ", n_blocks, block_size);
        }
    }
    kv->free_list = xmalloc(sizeof(int) * (size_t)n_blocks);
    /* stack: pop from the end; lowest block ids come out first */
    for (int i = 0; i < n_blocks; i++) kv->free_list[i] = n_blocks - 1 - i;
    kv->n_free = n_blocks;
    return 0;
}

int kv_init(KvCache *kv, int n_layers, int n_kv_heads, int head_dim, int block_size, int n_blocks) {
    return kv_init_pages(kv, n_layers, n_kv_heads, head_dim, block_size, n_blocks, 1);
}

int kv_init_tables(KvCache *kv, int n_layers, int n_kv_heads, int head_dim, int block_size,
                   int n_blocks) {
    return kv_init_pages(kv, n_layers, n_kv_heads, head_dim, block_size, n_blocks, 0);
}

void kv_free(KvCache *kv) {
    for (int l = 0; kv->k && l < kv->n_layers; l++) {
        mem_free(kv->k[l]);
        mem_free(kv->v[l]);
    }
    free(kv->k);
    free(kv->v);
    mem_free(kv->fmt);
    mem_free(kv->kq);
    mem_free(kv->vq);
    mem_free(kv->ks);
    mem_free(kv->vs);
    free(kv->free_list);
    for (int i = 0; i < kv->n_seqs; i++) free(kv->seqs[i].blocks);
    free(kv->seqs);
    memset(kv, 0, sizeof *kv);
}

int kv_seq_new(KvCache *kv) {
    for (int i = 0; i < kv->n_seqs; i++)
        if (!kv->seqs[i].active) {
            kv->seqs[i].active = 1;
            kv->seqs[i].len = 0;
            kv->seqs[i].n_blocks = 0;
            return i;
        }
    if (kv->n_seqs == kv->seq_cap) {
        kv->seq_cap = kv->seq_cap ? 2 * kv->seq_cap : 8;
        kv->seqs = xrealloc(kv->seqs, sizeof(KvSeq) * (size_t)kv->seq_cap);
    }
    KvSeq *s = &kv->seqs[kv->n_seqs];
    memset(s, 0, sizeof *s);
    s->active = 1;
    return kv->n_seqs++;
}

int kv_seq_live(const KvCache *kv, int seq) {
    if (seq < 0 || seq >= kv->n_seqs || !kv->seqs[seq].active)
        return err_set("KV cache: sequence %d is not a live sequence (never made, or freed)", seq);
    return 0;
}

int kv_seq_reserve(KvCache *kv, int seq, int64_t new_len) {
    if (kv_seq_live(kv, seq) != 0) return -1;
    KvSeq *s = &kv->seqs[seq];
    int64_t need = (new_len + kv->block_size - 1) / kv->block_size;
    if (need <= s->n_blocks) return 0;
    int64_t extra = need - s->n_blocks;
    if (extra > kv->n_free)
        return err_set("KV cache out of blocks: sequence %d needs %lld more block(s) of %d "
                       "tokens for length %lld, %d of %d free (raise --kv-blocks or lower "
                       "--batch / --window / --max-new)", seq, (long long)extra, kv->block_size,
                       (long long)new_len, kv->n_free, kv->n_blocks);
    if (need > s->cap) {
        s->cap = (int)(need > 2 * (int64_t)s->cap ? need : 2 * (int64_t)s->cap);
        s->blocks = xrealloc(s->blocks, sizeof(int) * (size_t)s->cap);
    }
    while (s->n_blocks < need) s->blocks[s->n_blocks++] = kv->free_list[--kv->n_free];
    return 0;
}

void kv_seq_set_len(KvCache *kv, int seq, int64_t len) { kv->seqs[seq].len = len; }

void kv_seq_shrink(KvCache *kv, int seq, int n_blocks) {
    KvSeq *s = &kv->seqs[seq];
    while (s->n_blocks > n_blocks) kv->free_list[kv->n_free++] = s->blocks[--s->n_blocks];
}

void kv_seq_free(KvCache *kv, int seq) {
    KvSeq *s = &kv->seqs[seq];
    /* return in reverse so that a free followed by a reserve reuses the same blocks */
    for (int i = s->n_blocks - 1; i >= 0; i--) kv->free_list[kv->n_free++] = s->blocks[i];
    s->n_blocks = 0;
    s->len = 0;
    s->active = 0;
}

void kv_reset(KvCache *kv) {
    for (int i = 0; i < kv->n_seqs; i++)
        if (kv->seqs[i].active) kv_seq_free(kv, i);
}

/* offset of (seq, pos, head) inside one layer's f32 pages */
static inline size_t kv_offset(const KvCache *kv, int seq, int64_t pos, int head) {
    const KvSeq *s = &kv->seqs[seq];
    int blk = s->blocks[pos / kv->block_size];
    int64_t off = pos % kv->block_size;
    return (((size_t)blk * (size_t)kv->n_kv_heads + (size_t)head) * (size_t)kv->block_size +
            (size_t)off) * (size_t)kv->head_dim;
}

float *kv_k_at(const KvCache *kv, int layer, int seq, int64_t pos, int head) {
    return kv->k[layer] ? kv->k[layer] + kv_offset(kv, seq, pos, head) : NULL;
}

float *kv_v_at(const KvCache *kv, int layer, int seq, int64_t pos, int head) {
    return kv->v[layer] ? kv->v[layer] + kv_offset(kv, seq, pos, head) : NULL;
}

void kv_shuffle_free_list(KvCache *kv, uint64_t seed) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int i = kv->n_free - 1; i > 0; i--) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int j = (int)(x % (uint64_t)(i + 1));
        int t = kv->free_list[i];
        kv->free_list[i] = kv->free_list[j];
        kv->free_list[j] = t;
    }
}

int kv_check(const KvCache *kv) {
    int rc = 0;
    unsigned char *owner = xcalloc((size_t)kv->n_blocks, 1);
    for (int i = 0; i < kv->n_free && rc == 0; i++) {
        int b = kv->free_list[i];
        if (b < 0 || b >= kv->n_blocks) rc = err_set("free list holds invalid block %d", b);
        else if (owner[b]++) rc = err_set("block %d is on the free list twice", b);
    }
    for (int s = 0; s < kv->n_seqs && rc == 0; s++) {
        const KvSeq *q = &kv->seqs[s];
        if (!q->active) {
            if (q->n_blocks) rc = err_set("freed sequence %d still holds blocks", s);
            continue;
        }
        if (q->len > (int64_t)q->n_blocks * kv->block_size)
            rc = err_set("sequence %d has length %lld but only %d blocks", s, (long long)q->len,
                         q->n_blocks);
        for (int i = 0; i < q->n_blocks && rc == 0; i++) {
            int b = q->blocks[i];
            if (b < 0 || b >= kv->n_blocks) rc = err_set("sequence %d maps invalid block %d", s, b);
            else if (owner[b]++) rc = err_set("block %d is owned twice (sequence %d)", b, s);
        }
    }
    for (int b = 0; b < kv->n_blocks && rc == 0; b++)
        if (!owner[b]) rc = err_set("block %d leaked: neither free nor owned", b);
    free(owner);
    return rc;
}

/* 1 when the policy may store a full-precision token in this layer */
static int layer_needs_f32(const KvPolicy *p, int layer) { return !kv_policy_all_ternary(p, layer); }

int64_t kv_tokens_held(const KvCache *kv) {
    int64_t held = 0;
    for (int i = 0; i < kv->n_seqs; i++)
        if (kv->seqs[i].active) held += kv->seqs[i].len;
    return held;
}

int kv_set_policy(KvCache *kv, const KvPolicy *p) {
    if (kv_policy_check_layers(p, kv->n_layers) != 0) return -1;
    if (!kv->host_pages) { /* (the pools and pages below are the host's) */
        /* the backend's pages (the CUDA engine's) are ternary alone in the layers a
         * policy stores all ternary: with tokens held, those layers may not change */
        const int64_t held = kv_tokens_held(kv);
        for (int l = 0; l < kv->n_layers && held > 0; l++)
            if (layer_needs_f32(p, l) != layer_needs_f32(&kv->policy, l)) {
                char pol[64];
                kv_policy_format(p, pol, sizeof pol);
                return err_set("--kv %s: layer %d's pages would change between f32 and ternary while the cache "
                               "holds %lld tokens; set the policy on an empty cache", pol, l, (long long)held);
            }
        kv->policy = *p;
        return 0;
    }
    /* Everything that can fail first, the policy taken last: a failed call
     * leaves the cache as it was (with at most the ternary pools added). */
    /* 0. a layer's f32 pages go (step 3) only while no token is held: the rows
     * in them would be lost, and a later read would find no page */
    const int64_t held = kv_tokens_held(kv);
    for (int l = 0; l < kv->n_layers && held > 0; l++)
        if (!layer_needs_f32(p, l) && kv->k[l]) {
            char pol[64];
            kv_policy_format(p, pol, sizeof pol);
            return err_set("--kv %s: layer %d's f32 pages would be given back while the cache holds %lld tokens; "
                           "set the policy on an empty cache", pol, l, (long long)held);
        }
    /* 1. the ternary pools (the first policy other than none), all or none */
    if (p->kind != KVP_NONE && !kv->fmt) {
        size_t tokens = (size_t)kv->n_layers * (size_t)kv->n_blocks * (size_t)kv->block_size;
        size_t rows = tokens * (size_t)kv->n_kv_heads;
        kv->code_bytes = tern_kv_code_bytes(kv->head_dim);
        kv->k_scales = kvt_n_scales(kv->head_dim, 1);
        kv->fmt = mem_alloc(tokens, "KV page formats");
        kv->kq = mem_alloc(rows * (size_t)kv->code_bytes, "ternary KV pages");
        kv->vq = mem_alloc(rows * (size_t)kv->code_bytes, "ternary KV pages");
        kv->ks = mem_alloc(rows * (size_t)kv->k_scales * 2, "ternary KV scales");
        kv->vs = mem_alloc(rows * 2, "ternary KV scales");
        if (!kv->fmt || !kv->kq || !kv->vq || !kv->ks || !kv->vs) {
            /* (a later call would otherwise see fmt and take the pools as there) */
            mem_free(kv->fmt);
            mem_free(kv->kq);
            mem_free(kv->vq);
            mem_free(kv->ks);
            mem_free(kv->vs);
            kv->fmt = NULL, kv->kq = kv->vq = NULL, kv->ks = kv->vs = NULL;
            return -1;
        }
        memset(kv->fmt, 0, tokens);
    }
    /* 2. f32 pages only where some token stays full precision (with `all` the
     * ternary pages are the whole cache of those layers): the missing ones */
    size_t per_layer = kv_bytes_needed(1, kv->n_kv_heads, kv->head_dim, kv->block_size,
                                       kv->n_blocks) / 2;
    for (int l = 0; l < kv->n_layers; l++)
        if (layer_needs_f32(p, l) && !kv->k[l]) {
            float *k = mem_alloc(per_layer, "KV cache keys");
            float *v = k ? mem_alloc(per_layer, "KV cache values") : NULL;
            if (!k || !v) { /* (both or neither: a later call tests k) */
                mem_free(k);
                return -1;
            }
            kv->k[l] = k, kv->v[l] = v;
        }
    /* 3. then the ones the policy does not need go, and the policy is taken */
    for (int l = 0; l < kv->n_layers; l++)
        if (!layer_needs_f32(p, l)) {
            mem_free(kv->k[l]);
            mem_free(kv->v[l]);
            kv->k[l] = kv->v[l] = NULL;
        }
    kv->policy = *p;
    return 0;
}

/* index of (layer, physical block, pos-in-block) and of (..., head, pos-in-block) */
static inline size_t kv_tok_index(const KvCache *kv, int layer, int seq, int64_t pos) {
    int blk = kv->seqs[seq].blocks[pos / kv->block_size];
    return ((size_t)layer * (size_t)kv->n_blocks + (size_t)blk) * (size_t)kv->block_size +
           (size_t)(pos % kv->block_size);
}
static inline size_t kv_row_index(const KvCache *kv, int layer, int seq, int64_t pos, int head) {
    int blk = kv->seqs[seq].blocks[pos / kv->block_size];
    return (((size_t)layer * (size_t)kv->n_blocks + (size_t)blk) * (size_t)kv->n_kv_heads +
            (size_t)head) * (size_t)kv->block_size + (size_t)(pos % kv->block_size);
}

void kv_write_token(KvCache *kv, int layer, int seq, int64_t pos, const float *k, const float *v,
                    int decode) {
    int hd = kv->head_dim;
    int tern = kv->fmt && kv_policy_ternary(&kv->policy, layer, decode);
    if (kv->fmt) kv->fmt[kv_tok_index(kv, layer, seq, pos)] = (uint8_t)tern;
    for (int h = 0; h < kv->n_kv_heads; h++) {
        if (tern) {
            size_t r = kv_row_index(kv, layer, seq, pos, h);
            kvt_quant_row(k + h * hd, hd, 1, kv->kq + r * (size_t)kv->code_bytes,
                          kv->ks + r * (size_t)kv->k_scales);
            kvt_quant_row(v + h * hd, hd, 0, kv->vq + r * (size_t)kv->code_bytes, kv->vs + r);
        } else {
            memcpy(kv_k_at(kv, layer, seq, pos, h), k + h * hd, sizeof(float) * (size_t)hd);
            memcpy(kv_v_at(kv, layer, seq, pos, h), v + h * hd, sizeof(float) * (size_t)hd);
        }
    }
}

void kv_gather_head(const KvCache *kv, int layer, int seq, int head, int64_t ctx, float *kc,
                    float *vc) {
    int hd = kv->head_dim, bs = kv->block_size;
    for (int64_t p0 = 0; p0 < ctx; p0 += bs) {
        int64_t cnt = ctx - p0 < bs ? ctx - p0 : bs;
        /* a block's rows of one head are contiguous: one copy per block when all f32
         * (a layer without f32 pages holds only ternary rows, dequantised below) */
        if (kv->k[layer]) {
            memcpy(kc + p0 * hd, kv_k_at(kv, layer, seq, p0, head), sizeof(float) * (size_t)(cnt * hd));
            memcpy(vc + p0 * hd, kv_v_at(kv, layer, seq, p0, head), sizeof(float) * (size_t)(cnt * hd));
        }
        if (!kv->fmt) continue;
        const uint8_t *f = kv->fmt + kv_tok_index(kv, layer, seq, p0);
        for (int64_t i = 0; i < cnt; i++)
            if (f[i]) {
                size_t r = kv_row_index(kv, layer, seq, p0 + i, head);
                kvt_dequant_row(kv->kq + r * (size_t)kv->code_bytes,
                                kv->ks + r * (size_t)kv->k_scales, hd, 1, kc + (p0 + i) * hd);
                kvt_dequant_row(kv->vq + r * (size_t)kv->code_bytes, kv->vs + r, hd, 0,
                                vc + (p0 + i) * hd);
            }
    }
}

size_t kv_bytes_per_token(const KvCache *kv, int decode) {
    size_t b = 0;
    for (int l = 0; l < kv->n_layers; l++)
        b += (size_t)kv->n_kv_heads *
             kvt_bytes_per_token_head(kv->head_dim, kv_policy_ternary(&kv->policy, l, decode));
    return b;
}

size_t kv_alloc_bytes(const KvCache *kv) {
    size_t slots = (size_t)kv->n_blocks * (size_t)kv->block_size, b = 0;
    size_t rows = slots * (size_t)kv->n_kv_heads;
    for (int l = 0; l < kv->n_layers; l++)
        if (kv->k[l]) b += 2 * rows * (size_t)kv->head_dim * sizeof(float);
    if (kv->fmt)
        b += slots * (size_t)kv->n_layers *
             (1 + (size_t)kv->n_kv_heads * (2 * (size_t)kv->code_bytes +
                                           sizeof(uint16_t) * (size_t)(kv->k_scales + 1)));
    return b;
}
