/* Load test of the paged KV cache (issue 8, "Load"): a decode server's life
 * for thousands of steps — sequences arrive with a prompt (prefill), every
 * live sequence then grows one token per step (batched decode), finished
 * sequences leave, and when the pool is exhausted the newest sequence is
 * preempted (freed) as a scheduler would.  The allocator invariants
 * (kv_check) are checked after every step, the pool never holds more than its
 * configured blocks, and every live sequence reads back exactly what was
 * written for it.  The second half drives the real forward pass on
 * data/llama-tiny through a pool that is too small, so out-of-blocks happens
 * inside forward(): it must be a clean error that writes nothing and leaves
 * the cache consistent, and the logits of every sequence must equal a
 * prefill of the same tokens on its own (results independent of neighbours,
 * block placement and preemption). */
#include "test.h"
#include "core/err.h"
#include "fixtures.h"
#include "kv/kvcache.h"
#include "load/tokens.h"
#include "runtime/forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_next(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* Blocks owned by live sequences; with n_free it must add up to n_blocks. */
static int owned_blocks(const KvCache *kv) {
    int n = 0;
    for (int s = 0; s < kv->n_seqs; s++)
        if (kv->seqs[s].active) n += kv->seqs[s].n_blocks;
    return n;
}

/* The stamp for (sequence generation tag, layer, head, pos, component): exact in f32. */
static float stamp(int tag, int layer, int head, int64_t pos, int c) {
    return (float)(((tag * 4 + layer) * 4 + head) * 1024 + (int)pos) + 0.25f * (float)c;
}

enum { L_LAYERS = 2, L_HEADS = 2, L_HD = 3, L_BS = 5, L_BLOCKS = 61, L_SLOTS = 24 };

typedef struct {
    int id;      /* KV sequence id, -1 when the slot is empty */
    int tag;     /* distinct per admitted sequence, for the stamps */
    int64_t len; /* positions written */
    int64_t target;
} LoadSeq;

static void write_pos(KvCache *kv, const LoadSeq *q, int64_t p) {
    for (int l = 0; l < L_LAYERS; l++)
        for (int h = 0; h < L_HEADS; h++) {
            float *k = kv_k_at(kv, l, q->id, p, h), *v = kv_v_at(kv, l, q->id, p, h);
            for (int c = 0; c < L_HD; c++) {
                k[c] = stamp(q->tag, l, h, p, c);
                v[c] = -stamp(q->tag, l, h, p, c);
            }
        }
}

static int check_seq(const KvCache *kv, const LoadSeq *q) {
    for (int64_t p = 0; p < q->len; p++)
        for (int l = 0; l < L_LAYERS; l++)
            for (int h = 0; h < L_HEADS; h++) {
                const float *k = kv_k_at(kv, l, q->id, p, h), *v = kv_v_at(kv, l, q->id, p, h);
                for (int c = 0; c < L_HD; c++)
                    if (k[c] != stamp(q->tag, l, h, p, c) || v[c] != -stamp(q->tag, l, h, p, c))
                        return -1;
            }
    return 0;
}

TEST(kv_load_interleaved_decode) {
    KvCache kv;
    REQUIRE(kv_init(&kv, L_LAYERS, L_HEADS, L_HD, L_BS, L_BLOCKS) == 0);
    LoadSeq q[L_SLOTS];
    for (int i = 0; i < L_SLOTS; i++) q[i].id = -1;
    uint64_t x = 0x2545F4914F6CDD1Dull;
    int next_tag = 1, admitted = 0, finished = 0, preempted = 0, oob = 0, peak = 0;
    int64_t decoded = 0;
    const int steps = 6000;
    for (int step = 0; step < steps; step++) {
        /* arrivals: up to two new sequences with a prompt of 1..23 tokens */
        int arrivals = (int)(rng_next(&x) % 3);
        for (int a = 0; a < arrivals; a++) {
            int slot = -1;
            for (int i = 0; i < L_SLOTS && slot < 0; i++)
                if (q[i].id < 0) slot = i;
            if (slot < 0) break;
            LoadSeq *s = &q[slot];
            s->id = kv_seq_new(&kv);
            s->tag = next_tag++ % 1000;
            s->len = 0;
            int64_t prompt = 1 + (int64_t)(rng_next(&x) % 23);
            s->target = prompt + 1 + (int64_t)(rng_next(&x) % 60);
            int free_before = kv.n_free;
            if (kv_seq_reserve(&kv, s->id, prompt) != 0) {
                /* admission refused: the pool is full; nothing may have moved */
                oob++;
                CHECK(strstr(err_msg(), "out of blocks") != NULL);
                CHECK(kv.n_free == free_before && kv.seqs[s->id].n_blocks == 0);
                kv_seq_free(&kv, s->id);
                s->id = -1;
                continue;
            }
            for (int64_t p = 0; p < prompt; p++) write_pos(&kv, s, p);
            kv_seq_set_len(&kv, s->id, prompt);
            s->len = prompt;
            admitted++;
        }
        /* batched decode: every live sequence grows by one token; on out of
         * blocks the newest sequence is preempted and the step goes on */
        for (int i = 0; i < L_SLOTS; i++) {
            LoadSeq *s = &q[i];
            if (s->id < 0) continue;
            int free_before = kv.n_free, nb_before = kv.seqs[s->id].n_blocks;
            if (kv_seq_reserve(&kv, s->id, s->len + 1) != 0) {
                oob++;
                CHECK(strstr(err_msg(), "out of blocks") != NULL);
                CHECK(kv.n_free == free_before && kv.seqs[s->id].n_blocks == nb_before);
                int victim = i;
                for (int j = 0; j < L_SLOTS; j++)
                    if (q[j].id >= 0 && q[j].tag > q[victim].tag) victim = j;
                kv_seq_free(&kv, q[victim].id);
                q[victim].id = -1;
                preempted++;
                continue;
            }
            write_pos(&kv, s, s->len);
            kv_seq_set_len(&kv, s->id, ++s->len);
            decoded++;
            if (s->len >= s->target) {
                kv_seq_free(&kv, s->id);
                s->id = -1;
                finished++;
            }
        }
        if (step % 997 == 500) kv_shuffle_free_list(&kv, (uint64_t)step);
        if (step == steps / 2) { /* a full reset mid-run: everything comes back */
            kv_reset(&kv);
            for (int i = 0; i < L_SLOTS; i++) q[i].id = -1;
            CHECK(kv.n_free == L_BLOCKS);
        }

        int owned = owned_blocks(&kv);
        peak = owned > peak ? owned : peak;
        if (kv_check(&kv) != 0 || owned + kv.n_free != L_BLOCKS || kv.n_blocks != L_BLOCKS) {
            test_fail(__FILE__, __LINE__, "step %d: %s (owned %d + free %d vs %d blocks)", step,
                      err_msg(), owned, kv.n_free, L_BLOCKS);
            break;
        }
        int bad = 0;
        for (int i = 0; i < L_SLOTS && !bad; i++)
            if (q[i].id >= 0) {
                const KvSeq *ks = &kv.seqs[q[i].id];
                if (ks->len != q[i].len || ks->n_blocks != (q[i].len + L_BS - 1) / L_BS ||
                    check_seq(&kv, &q[i]) != 0) {
                    test_fail(__FILE__, __LINE__, "step %d: sequence %d (id %d) corrupted", step,
                              q[i].tag, q[i].id);
                    bad = 1;
                }
            }
        if (bad) break;
    }
    fprintf(stderr,
            "    %d steps: %d admitted, %d finished, %d preempted, %d out-of-blocks, %lld decode "
            "tokens, peak %d/%d blocks\n",
            steps, admitted, finished, preempted, oob, (long long)decoded, peak, L_BLOCKS);
    /* the run must actually have exercised every path */
    CHECK(oob > 100 && preempted > 50 && finished > 100 && peak == L_BLOCKS);
    kv_free(&kv);
}

/* ---- through the real forward pass ------------------------------------ */

/* Decode vs prefill of the same tokens: different GEMM shapes, so fp32 sums
 * are associated differently; test_forward_llama sees ~2e-6 rel L2 per row. */
#define LOAD_LOGIT_TOL 1e-4

enum { F_SLOTS = 6, F_MAXLEN = 40, F_BS = 4 };

typedef struct {
    int id;
    int64_t start;  /* offset into the token stream */
    int64_t len;    /* tokens in the cache */
    int64_t target;
    float *logits;  /* (F_MAXLEN, vocab): logits of each position as decoded */
} FwdSeq;

/* Sum of the K cache of layer 0 over the live sequences' positions: a cheap
 * witness that a failed forward wrote nothing. */
static double kv_witness(const KvCache *kv, const FwdSeq *q, int hd) {
    double s = 0;
    for (int i = 0; i < F_SLOTS; i++)
        for (int64_t p = 0; q[i].id >= 0 && p < q[i].len; p++) {
            const float *k = kv_k_at(kv, 0, q[i].id, p, 0);
            for (int c = 0; c < hd; c++) s += k[c] * (double)(c + 1);
        }
    return s;
}

/* Compares a sequence's decoded logits with one prefill of its tokens on a
 * separate engine.  Returns the worst row rel L2 (or INFINITY on error). */
static double verify_seq(Engine *ref, const FwdSeq *s, const int32_t *stream, int64_t V) {
    int64_t n = s->len;
    int *tok = malloc(sizeof(int) * (size_t)n), *seq = malloc(sizeof(int) * (size_t)n);
    int64_t *pos = malloc(sizeof(int64_t) * (size_t)n);
    float *lg = malloc(sizeof(float) * (size_t)(n * V));
    int id = kv_seq_new(&ref->kv);
    for (int64_t i = 0; i < n; i++) {
        tok[i] = stream[s->start + i];
        seq[i] = id;
        pos[i] = i;
    }
    double worst = INFINITY;
    if (forward(ref->m, &ref->kv, &ref->rs, tok, seq, pos, n, NULL, 0, lg) == 0) {
        worst = 0;
        for (int64_t i = 0; i < n; i++) {
            double r = rel_l2(s->logits + i * V, lg + i * V, V);
            worst = r > worst ? r : worst;
        }
    } else {
        fprintf(stderr, "    reference prefill: %s\n", err_msg());
    }
    kv_seq_free(&ref->kv, id);
    free(tok), free(seq), free(pos), free(lg);
    return worst;
}

TEST(kv_load_forward_llama_small_pool) {
    Model m;
    Engine e, ref;
    /* 3 sequences x 24 tokens = 18 blocks of 4 tokens for up to 6 sequences of up to 40 */
    REQUIRE(fixture_engine(LLAMA_DIR, NULL, 64, F_BS, 3, 24, &m, &e) == 0);
    EngineOpts ro = {.max_tok = F_MAXLEN, .block_size = 16, .n_blocks = 4};
    if (engine_init(&ref, &m, &ro) != 0) {
        test_fail(__FILE__, __LINE__, "%s", err_msg());
        engine_free(&e);
        model_free(&m);
        return;
    }
    int32_t *stream;
    int64_t n_stream;
    REQUIRE(tokens_load(test_path(TOKENS_FILE), m.cfg.vocab, &stream, &n_stream) == 0);
    const int64_t V = m.cfg.vocab;
    const int n_blocks = e.kv.n_blocks, hd = m.cfg.head_dim;
    FwdSeq q[F_SLOTS];
    for (int i = 0; i < F_SLOTS; i++) {
        q[i].id = -1;
        q[i].logits = malloc(sizeof(float) * (size_t)(F_MAXLEN * V));
    }
    int tok[64], seq[64], slot_of[64];
    int64_t pos[64];
    float *logits = malloc(sizeof(float) * (size_t)(64 * V));
    uint64_t x = 0x9E3779B97F4A7C15ull;
    int oob = 0, verified = 0, preempted = 0, steps = 300;
    double worst = 0;
    int64_t next_start = 0;
    for (int step = 0; step < steps; step++) {
        /* one batch: a prompt chunk (1..8 tokens) for each new sequence, one
         * token for each live one; the batch mixes prefill and decode */
        int n = 0;
        for (int i = 0; i < F_SLOTS; i++) {
            if (q[i].id < 0 && rng_next(&x) % 3 == 0) {
                q[i].id = kv_seq_new(&e.kv);
                q[i].start = next_start;
                next_start = (next_start + 997) % (n_stream - F_MAXLEN);
                q[i].len = 0;
                q[i].target = 8 + (int64_t)(rng_next(&x) % (F_MAXLEN - 8 + 1));
            }
            if (q[i].id < 0) continue;
            int64_t cnt = q[i].len == 0 ? 1 + (int64_t)(rng_next(&x) % 8) : 1;
            for (int64_t k = 0; k < cnt; k++, n++) {
                tok[n] = stream[q[i].start + q[i].len + k];
                seq[n] = q[i].id;
                pos[n] = q[i].len + k;
                slot_of[n] = i;
            }
        }
        if (n == 0) continue;
        int64_t len_before[F_SLOTS];
        for (int i = 0; i < F_SLOTS; i++) len_before[i] = q[i].id >= 0 ? e.kv.seqs[q[i].id].len : 0;
        double wit = kv_witness(&e.kv, q, hd);
        if (forward(&m, &e.kv, &e.rs, tok, seq, pos, n, NULL, 0, logits) != 0) {
            oob++;
            CHECK_MSG(strstr(err_msg(), "out of blocks") != NULL, "step %d: %s", step, err_msg());
            /* nothing was written: lengths and cached K are as before */
            for (int i = 0; i < F_SLOTS; i++)
                if (q[i].id >= 0) CHECK(e.kv.seqs[q[i].id].len == len_before[i]);
            CHECK(kv_witness(&e.kv, q, hd) == wit);
            /* preempt the sequence that started last; it may start again later */
            int victim = -1;
            for (int i = 0; i < F_SLOTS; i++)
                if (q[i].id >= 0 && (victim < 0 || q[i].start > q[victim].start)) victim = i;
            kv_seq_free(&e.kv, q[victim].id);
            q[victim].id = -1;
            preempted++;
        } else {
            for (int j = 0; j < n; j++) {
                FwdSeq *s = &q[slot_of[j]];
                memcpy(s->logits + pos[j] * V, logits + (int64_t)j * V, sizeof(float) * (size_t)V);
            }
            for (int i = 0; i < F_SLOTS; i++) {
                if (q[i].id < 0) continue;
                q[i].len = e.kv.seqs[q[i].id].len;
                if (q[i].len >= q[i].target) {
                    double r = verify_seq(&ref, &q[i], stream, V);
                    CHECK_MSG(r <= LOAD_LOGIT_TOL, "step %d: sequence at %lld: logits differ from "
                              "its own prefill by %.3g", step, (long long)q[i].start, r);
                    worst = r > worst ? r : worst;
                    verified++;
                    kv_seq_free(&e.kv, q[i].id);
                    q[i].id = -1;
                }
            }
        }
        if (kv_check(&e.kv) != 0 || owned_blocks(&e.kv) + e.kv.n_free != n_blocks) {
            test_fail(__FILE__, __LINE__, "step %d: %s", step, err_msg());
            break;
        }
    }
    fprintf(stderr, "    %d steps on %d blocks of %d: %d out-of-blocks, %d preempted, %d sequences "
            "verified (worst rel L2 %.2g)\n", steps, n_blocks, F_BS, oob, preempted, verified,
            worst);
    CHECK(oob > 5 && verified > 10);
    for (int i = 0; i < F_SLOTS; i++) free(q[i].logits);
    free(logits);
    free(stream);
    engine_free(&ref);
    engine_free(&e);
    model_free(&m);
}
