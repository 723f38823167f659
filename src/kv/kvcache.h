/* Paged KV cache: a pool of fixed-size blocks (block_size tokens each), a
 * block allocator with a free list, and per-sequence block tables.  Prefill,
 * decode and batched decode all write and read K/V through here.
 *
 * Storage per layer: [n_blocks][n_kv_heads][block_size][head_dim] f32, so that
 * one head's keys inside a block are contiguous (attention copies or reads a
 * block per head at a time).  Full precision: the reference keeps f32 K/V. */
#ifndef TL_KVCACHE_H
#define TL_KVCACHE_H

#include "kv/kv_ternary.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int *blocks; /* block table: logical block i -> physical block */
    int n_blocks, cap;
    int64_t len; /* tokens stored (positions 0..len-1) */
    int active;
} KvSeq;

typedef struct {
    int n_layers, n_kv_heads, head_dim, block_size;
    int n_blocks;   /* pool size */
    /* per layer: (n_blocks, n_kv_heads, block_size, head_dim) f32, or NULL in a
     * layer where the policy stores every token ternary (no f32 page needed) */
    float **k, **v;
    int *free_list; /* stack of free physical blocks */
    int n_free;
    KvSeq *seqs;
    int n_seqs, seq_cap;
    /* ternary pages (kv_set_policy with a policy other than none) */
    KvPolicy policy;
    uint8_t *fmt;       /* (n_layers, n_blocks, block_size): 1 = this token's K/V are ternary */
    uint8_t *kq, *vq;   /* (n_layers, n_blocks, n_kv_heads, block_size, code_bytes) */
    uint16_t *ks, *vs;  /* (..., block_size, n_scales) f16 scales */
    int code_bytes, k_scales;
    /* 0: kv_init_tables (the pages live with a backend, which applies the policy) */
    int host_pages;
} KvCache;

/* Bytes kv_init would allocate for this geometry (f32 pages, every layer). */
size_t kv_bytes_needed(int n_layers, int n_kv_heads, int head_dim, int block_size, int n_blocks);
int kv_init(KvCache *kv, int n_layers, int n_kv_heads, int head_dim, int block_size, int n_blocks);
/* The allocator and block tables without host pages (k, v NULL): for a backend
 * that keeps the pages elsewhere (the CUDA engine).  Only the block-table and
 * sequence functions may be used on it. */
int kv_init_tables(KvCache *kv, int n_layers, int n_kv_heads, int head_dim, int block_size,
                   int n_blocks);
void kv_free(KvCache *kv);

/* A new empty sequence; returns its id (>= 0). */
int kv_seq_new(KvCache *kv);
/* 0 where `seq` is a live sequence of kv, else -1 with err_set (an id never
 * made, or freed: its slot's blocks would otherwise be taken, and lost when
 * the slot is made again). */
int kv_seq_live(const KvCache *kv, int seq);
/* Makes room for positions [0, new_len) of sequence `seq`.  On failure (out of
 * blocks, or a sequence not live) returns -1 with err_set and leaves the
 * sequence and the free list as they were: nothing is overwritten, nothing
 * leaks. */
int kv_seq_reserve(KvCache *kv, int seq, int64_t new_len);
/* Gives back the sequence's blocks past its first n_blocks (an undone
 * reservation: the caller knows none of them holds a token). */
void kv_seq_shrink(KvCache *kv, int seq, int n_blocks);
/* Marks positions [0, len) as written (len <= reserved capacity). */
void kv_seq_set_len(KvCache *kv, int seq, int64_t len);
/* Returns the sequence's blocks to the free list; the id becomes invalid. */
void kv_seq_free(KvCache *kv, int seq);
/* Drops every sequence and returns all blocks. */
void kv_reset(KvCache *kv);

/* Pointers to the K and V rows (head_dim floats) of (layer, seq, pos, head).
 * pos must be reserved. */
float *kv_k_at(const KvCache *kv, int layer, int seq, int64_t pos, int head);
float *kv_v_at(const KvCache *kv, int layer, int seq, int64_t pos, int head);

/* Sets which tokens are stored as ternary pages (allocates the ternary pools
 * the first time a policy other than none is set; on a cache without host
 * pages, kv_init_tables, only the policy is taken: the backend holding the
 * pages applies it).  While the sequences hold any token, a policy that would
 * give back a layer's f32 pages (host pages), or change which layers are
 * stored all ternary (no host pages: the backend's pages change kind there),
 * is refused.  Returns 0 or -1. */
int kv_set_policy(KvCache *kv, const KvPolicy *p);
/* Tokens the cache's active sequences hold (the sum of their lengths). */
int64_t kv_tokens_held(const KvCache *kv);
/* Stores one token's K and V rows (n_kv_heads*head_dim each) at (layer, seq, pos),
 * ternary when the policy says so for this layer and phase (decode = generated
 * token), else f32. */
void kv_write_token(KvCache *kv, int layer, int seq, int64_t pos, const float *k, const float *v,
                    int decode);
/* Gathers head `head`'s K and V for positions [0, ctx) of a sequence into
 * kc/vc (ctx, head_dim), dequantising ternary rows. */
void kv_gather_head(const KvCache *kv, int layer, int seq, int head, int64_t ctx, float *kc,
                    float *vc);
/* Bytes of K/V pages this cache holds now (f32 pages, ternary pages, formats). */
size_t kv_alloc_bytes(const KvCache *kv);
/* KV bytes one token occupies over all layers under the policy (phase as above). */
size_t kv_bytes_per_token(const KvCache *kv, int decode);

/* Permutes the free list with a seeded generator, so that tests can check
 * results do not depend on which physical blocks a sequence gets. */
void kv_shuffle_free_list(KvCache *kv, uint64_t seed);
/* Checks the allocator invariants: every block is free exactly once or owned by
 * exactly one block-table slot, and tables cover their sequence length.
 * Returns 0 or -1 with err_set describing the first violation. */
int kv_check(const KvCache *kv);

#endif
