/* The paged KV cache's block allocator under random load. */
#include "test.h"
#include "core/err.h"
#include "kv/kvcache.h"
#include "kv/kv_ternary.h"
#include "core/mem.h"
#include "fixtures.h"
#include "runtime/engine.h"
#include "runtime/forward.h"

#include <stdlib.h>
#include <string.h>

TEST(kv_allocator_stress) {
    KvCache kv;
    REQUIRE(kv_init(&kv, 1, 1, 2, 4, 97) == 0);
    enum { NS = 40 };
    int ids[NS];
    int64_t lens[NS];
    for (int i = 0; i < NS; i++) ids[i] = -1;
    uint64_t x = 88172645463325252ull;
    int fails = 0, grows = 0, frees = 0;
    for (int step = 0; step < 20000; step++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int s = (int)(x % NS), op = (int)((x >> 20) % 10);
        if (ids[s] < 0) {
            ids[s] = kv_seq_new(&kv);
            lens[s] = 0;
        } else if (op < 7) {
            int64_t want = lens[s] + (int64_t)((x >> 30) % 9) + 1;
            int free_before = kv.n_free, blocks_before = kv.seqs[ids[s]].n_blocks;
            if (kv_seq_reserve(&kv, ids[s], want) == 0) {
                /* stamp every new position; a block handed out twice would be overwritten */
                for (int64_t p = lens[s]; p < want; p++) {
                    float *k = kv_k_at(&kv, 0, ids[s], p, 0);
                    k[0] = (float)ids[s];
                    k[1] = (float)p;
                }
                kv_seq_set_len(&kv, ids[s], want);
                lens[s] = want;
                grows++;
            } else {
                fails++;
                CHECK(strstr(err_msg(), "out of blocks") != NULL);
                CHECK(kv.n_free == free_before && kv.seqs[ids[s]].n_blocks == blocks_before);
            }
        } else {
            kv_seq_free(&kv, ids[s]);
            ids[s] = -1;
            frees++;
        }
        if (kv_check(&kv) != 0) {
            test_fail(__FILE__, __LINE__, "step %d: %s", step, err_msg());
            break;
        }
    }
    /* every live sequence still reads back its own stamps */
    for (int s = 0; s < NS; s++)
        for (int64_t p = 0; ids[s] >= 0 && p < lens[s]; p++) {
            float *k = kv_k_at(&kv, 0, ids[s], p, 0);
            CHECK_MSG(k[0] == (float)ids[s] && k[1] == (float)p, "seq %d pos %lld overwritten", s,
                      (long long)p);
        }
    CHECK(fails > 100 && grows > 1000 && frees > 500); /* the load really hit the limit */
    kv_reset(&kv);
    CHECK(kv.n_free == kv.n_blocks && kv_check(&kv) == 0);
    kv_free(&kv);
}

TEST(kv_reserve_failure_leaves_state) {
    KvCache kv;
    REQUIRE(kv_init(&kv, 2, 2, 4, 16, 3) == 0);
    int a = kv_seq_new(&kv), b = kv_seq_new(&kv);
    CHECK(kv_seq_reserve(&kv, a, 33) == 0); /* 3 blocks */
    CHECK(kv_seq_reserve(&kv, b, 1) != 0);
    CHECK(kv.n_free == 0 && kv.seqs[b].n_blocks == 0);
    kv_seq_free(&kv, a);
    CHECK(kv_seq_reserve(&kv, b, 48) == 0);
    CHECK(kv_check(&kv) == 0);
    KvCache bad;
    CHECK(kv_init(&bad, 1, 1, 1, 0, 4) != 0);
    kv_free(&kv);
}

/* Sequence ids that are not live (freed, never made, negative): reserving or
 * running a forward on them is an error and changes nothing.  A freed id had
 * taken blocks into its slot, lost for good once the slot was made again
 * (kv_reset left 6 of 8 free); -1 read and wrote outside the table.  And a
 * forward out of blocks gives back what its earlier tokens reserved (it had
 * left them held at length 0, the pool empty).  A logit row past the call's
 * tokens is refused before anything is reserved. */
TEST(kv_dead_sequences_and_forward_all_or_nothing) {
    KvCache kv;
    REQUIRE(kv_init(&kv, 1, 1, 2, 4, 8) == 0);
    int a = kv_seq_new(&kv), b = kv_seq_new(&kv);
    REQUIRE(kv_seq_reserve(&kv, a, 5) == 0);
    kv_seq_free(&kv, a);
    const int bad[] = {a, -1, 2, 1000};
    for (int i = 0; i < 4; i++) {
        CHECK_MSG(kv_seq_reserve(&kv, bad[i], 8) != 0 && strstr(err_msg(), "not a live sequence"),
                  "seq %d: %s", bad[i], err_msg());
        CHECK(kv.n_free == 8 && kv_check(&kv) == 0);
    }
    CHECK(kv_seq_reserve(&kv, b, 8) == 0 && kv.n_free == 6);
    kv_reset(&kv);
    CHECK(kv.n_free == 8 && kv_check(&kv) == 0);
    kv_free(&kv);

    Model m;
    REQUIRE(model_load(test_path(LLAMA_DIR), NULL, &m) == 0);
    Engine e;
    EngineOpts eo = {.max_tok = 64, .block_size = 4, .n_blocks = 8};
    REQUIRE(engine_open(&e, &m, &eo) == 0);
    float *logits = xmalloc(sizeof(float) * (size_t)m.cfg.vocab);
    int x = kv_seq_new(&e.kv), y = kv_seq_new(&e.kv), dead = kv_seq_new(&e.kv);
    kv_seq_free(&e.kv, dead);
    enum { N = 40 }; /* x 10 tokens (3 blocks), y 30 (8): 11 of 8 */
    int tok[N], seq[N];
    int64_t pos[N], last = N - 1;
    for (int i = 0; i < N; i++) tok[i] = 3 + i, seq[i] = i < 10 ? x : y, pos[i] = i < 10 ? i : i - 10;
    CHECK(forward(&m, &e.kv, &e.rs, tok, seq, pos, N, &last, 1, logits) != 0 && strstr(err_msg(), "out of blocks"));
    CHECK_MSG(e.kv.n_free == 8 && e.kv.seqs[x].n_blocks == 0 && e.kv.seqs[y].n_blocks == 0 && kv_check(&e.kv) == 0,
              "after the failed forward: %d free, x holds %d, y %d", e.kv.n_free, e.kv.seqs[x].n_blocks,
              e.kv.seqs[y].n_blocks);
    for (int i = 0; i < 5; i++) seq[i] = i < 4 ? x : dead;
    CHECK(forward(&m, &e.kv, &e.rs, tok, seq, pos, 5, &last, 0, logits) != 0 &&
          strstr(err_msg(), "token 4") && strstr(err_msg(), "not a live sequence"));
    CHECK(e.kv.n_free == 8 && e.kv.seqs[x].n_blocks == 0 && e.kv.seqs[dead].n_blocks == 0 && kv_check(&e.kv) == 0);
    int64_t neg = -1;
    CHECK(forward(&m, &e.kv, &e.rs, tok, &x, &neg, 1, NULL, 0, logits) != 0 && strstr(err_msg(), "position -1"));
    int64_t p0 = 0, row3 = 3; /* a logit row past the call's tokens (it had been read past the activations) */
    CHECK(forward(&m, &e.kv, &e.rs, tok, &x, &p0, 1, &row3, 1, logits) != 0 &&
          strstr(err_msg(), "logit row 0 is token 3 of 1"));
    CHECK(e.kv.n_free == 8 && e.kv.seqs[x].n_blocks == 0);
    /* the same tokens within the pool run */
    int64_t l9 = 9;
    CHECK(forward(&m, &e.kv, &e.rs, tok, seq, pos, 10, &l9, 1, logits) != 0); /* (seq[4] is dead) */
    for (int i = 0; i < 10; i++) seq[i] = x;
    CHECK_MSG(forward(&m, &e.kv, &e.rs, tok, seq, pos, 10, &l9, 1, logits) == 0, "%s", err_msg());
    CHECK(e.kv.seqs[x].n_blocks == 3 && e.kv.n_free == 5 && kv_check(&e.kv) == 0);
    free(logits);
    engine_free(&e);
    model_free(&m);
}

/* kv_set_policy when an allocation fails (mem_fail_next): -1 with a message,
 * the policy and pages as they were (no half-built ternary pools, no f32
 * page taken or lost), and the same call succeeds once memory is there. */
TEST(kv_set_policy_failure_leaves_the_cache) {
    KvCache kv;
    REQUIRE(kv_init(&kv, 3, 2, 8, 4, 6) == 0);
    KvPolicy all, part, enc;
    REQUIRE(kv_policy_parse("all", &all) == 0 && kv_policy_parse("all@layers=1-2", &part) == 0 &&
            kv_policy_parse("encoder", &enc) == 0);
    /* 1. the ternary pools, the scales (the last two of their five allocations) refused */
    KvPolicy before = kv.policy;
    mem_fail_next("ternary KV scales", 2);
    CHECK(kv_set_policy(&kv, &all) == -1);
    CHECK_MSG(strstr(err_msg(), "ternary KV scales") != NULL, "message: %s", err_msg());
    mem_fail_next(NULL, 0);
    CHECK(!kv.fmt && !kv.kq && !kv.vq && !kv.ks && !kv.vs);
    CHECK(memcmp(&kv.policy, &before, sizeof before) == 0);
    for (int l = 0; l < 3; l++) CHECK(kv.k[l] && kv.v[l]);
    /* 2. with layers 1-2 all ternary (their f32 pages given back), a policy
     * that needs them again, the values' page refused */
    REQUIRE(kv_set_policy(&kv, &part) == 0);
    CHECK(kv.fmt && kv.k[0] && !kv.k[1] && !kv.k[2] && !kv.v[1]);
    mem_fail_next("KV cache values", 1);
    CHECK(kv_set_policy(&kv, &enc) == -1);
    CHECK_MSG(mem_fail_next(NULL, 0) == 0, "the injected failure was not reached");
    CHECK(memcmp(&kv.policy, &part, sizeof part) == 0);
    CHECK(kv.k[0] && !kv.k[1] && !kv.k[2] && !kv.v[1] && !kv.v[2]);
    /* the cache still works under the policy it kept: a token through a
     * ternary layer reads back (exactly: one magnitude) */
    int sq = kv_seq_new(&kv);
    REQUIRE(kv_seq_reserve(&kv, sq, 1) == 0);
    float kr[16], vr[16], kc[8], vc[8];
    for (int i = 0; i < 16; i++) kr[i] = vr[i] = i % 2 ? 0.5f : -0.5f; /* exact in ternary */
    kv_write_token(&kv, 1, sq, 0, kr, vr, 0);
    kv_seq_set_len(&kv, sq, 1);
    kv_gather_head(&kv, 1, sq, 0, 1, kc, vc);
    for (int i = 0; i < 8; i++) CHECK_MSG(kc[i] == kr[i] && vc[i] == vr[i], "[%d] %g %g", i, kc[i], vc[i]);
    CHECK(kv_check(&kv) == 0);
    REQUIRE(kv_set_policy(&kv, &enc) == 0);
    CHECK(kv.k[1] && kv.v[1] && kv.k[2] && kv.v[2]);
    CHECK(memcmp(&kv.policy, &enc, sizeof enc) == 0);
    kv_free(&kv);
}

/* A policy that would give back a layer's f32 pages while the cache holds
 * tokens (stored there in full precision) is refused and changes nothing;
 * once the tokens are gone it is taken. */
TEST(kv_set_policy_keeps_held_tokens_pages) {
    KvCache kv;
    REQUIRE(kv_init(&kv, 3, 2, 8, 4, 6) == 0);
    KvPolicy part, enc;
    REQUIRE(kv_policy_parse("all@layers=1-2", &part) == 0 && kv_policy_parse("encoder", &enc) == 0);
    int sq = kv_seq_new(&kv);
    REQUIRE(kv_seq_reserve(&kv, sq, 2) == 0);
    float kr[16], vr[16], kc[16], vc[16];
    for (int i = 0; i < 16; i++) kr[i] = 0.25f * (float)i, vr[i] = -0.125f * (float)i;
    for (int p = 0; p < 2; p++) kv_write_token(&kv, 1, sq, p, kr, vr, 0);
    kv_seq_set_len(&kv, sq, 2);
    KvPolicy before = kv.policy;
    CHECK(kv_set_policy(&kv, &part) == -1);
    CHECK_MSG(strstr(err_msg(), "layer 1's f32 pages") && strstr(err_msg(), "holds 2 tokens"), "message: %s",
              err_msg());
    CHECK(memcmp(&kv.policy, &before, sizeof before) == 0 && kv.k[1] && kv.v[1] && kv.k[2]);
    kv_gather_head(&kv, 1, sq, 1, 2, kc, vc);
    for (int i = 0; i < 16; i++) CHECK_MSG(kc[i] == kr[8 + i % 8] && vc[i] == vr[8 + i % 8], "[%d]", i);
    /* a policy that keeps every f32 page is taken with tokens held */
    CHECK(kv_set_policy(&kv, &enc) == 0);
    kv_seq_free(&kv, sq);
    CHECK(kv_set_policy(&kv, &part) == 0);
    CHECK(kv.k[0] && !kv.k[1] && !kv.k[2]);
    kv_free(&kv);
}

/* A cache of block tables only (kv_init_tables: the CUDA engine's, whose pages
 * are on the GPU) takes a policy without host pools or pages (it had gone on
 * to allocate every layer's f32 pages on the host, the array of them being
 * there); a layer range past the model is still refused. */
TEST(kv_set_policy_on_tables_only_cache) {
    KvCache kv;
    REQUIRE(kv_init_tables(&kv, 3, 2, 8, 4, 6) == 0);
    KvPolicy enc, bad;
    REQUIRE(kv_policy_parse("encoder@layers=1-2", &enc) == 0 && kv_policy_parse("all@layers=2-3", &bad) == 0);
    CHECK(kv_set_policy(&kv, &bad) == -1 && strstr(err_msg(), "--kv all@layers=2-3: the model has 3 layers"));
    CHECK(kv.policy.kind == KVP_NONE);
    /* one layer past the model, named as the policy is written (it had read "@layers=3-3") */
    REQUIRE(kv_policy_parse("decoder@layers=3", &bad) == 0);
    CHECK(kv_set_policy(&kv, &bad) == -1 && strstr(err_msg(), "--kv decoder@layers=3: the model has 3 layers (0-2)"));
    REQUIRE(kv_set_policy(&kv, &enc) == 0);
    CHECK(memcmp(&kv.policy, &enc, sizeof enc) == 0);
    CHECK(!kv.fmt && !kv.kq && !kv.vq && !kv.ks && !kv.vs);
    for (int l = 0; l < 3; l++) CHECK(!kv.k[l] && !kv.v[l]);
    CHECK(kv_alloc_bytes(&kv) == 0);
    int sq = kv_seq_new(&kv);
    CHECK(kv_seq_reserve(&kv, sq, 9) == 0 && kv_check(&kv) == 0);
    /* with tokens held, a policy that would change a layer's pages between f32 and
     * ternary (the backend's are ternary alone where a layer's every token is) is
     * refused; one that keeps every layer's kind is taken */
    kv_seq_set_len(&kv, sq, 9);
    KvPolicy all1, dec;
    REQUIRE(kv_policy_parse("all@layers=1", &all1) == 0 && kv_policy_parse("decoder", &dec) == 0);
    CHECK(kv_set_policy(&kv, &all1) == -1 && strstr(err_msg(), "layer 1's pages") && strstr(err_msg(), "holds 9"));
    CHECK(memcmp(&kv.policy, &enc, sizeof enc) == 0);
    CHECK(kv_set_policy(&kv, &dec) == 0);
    kv_seq_free(&kv, sq);
    CHECK(kv_set_policy(&kv, &all1) == 0);
    kv_free(&kv);
}

/* A ternary KV row whose group mean |x| is past f16's largest finite value
 * (the scale's storage) dequantises to finite values: the scale saturates at
 * 65504 (it had been inf, and the zero codes inf x 0 = NaN); a K row (one
 * scale per 16 channels) and a V row (one scale). */
/* Layout TKV (kernels/ternary_format.h, the one definition the CPU and CUDA
 * kernels share): channel i in bits 2*(i%4) of byte i/4, code q + 1, padding
 * code 1; K one f16 scale per 16 channels, V one.  The bytes here are worked
 * out by hand from that text, and kvt_quant_row writes the same. */
TEST(kv_ternary_row_layout) {
    CHECK(tern_kv_code_bytes(10) == 3 && tern_kv_code_bytes(128) == 32 && tern_kv_code_bytes(1) == 1);
    CHECK(tern_kv_scales(10, 1) == 1 && tern_kv_scales(17, 1) == 2 && tern_kv_scales(128, 1) == 8 &&
          tern_kv_scales(128, 0) == 1);
    CHECK(kvt_n_scales(17, 1) == 2 && kvt_bytes_per_token_head(10, 1) == 2 * 3 + 2 * (1 + 1));
    const int q[10] = {-1, 0, 1, 1, 0, 0, 0, -1, 1, -1};
    uint8_t c[3];
    memset(c, TERN_BYTE_ZERO, sizeof c);
    for (int i = 0; i < 10; i++) tern_kv_set(c, i, q[i]);
    /* codes 0 1 2 2 | 1 1 1 0 | 2 0 (1 1): 0xA4, 0x15, 0x52 */
    CHECK_MSG(c[0] == 0xA4 && c[1] == 0x15 && c[2] == 0x52, "bytes %02x %02x %02x", c[0], c[1], c[2]);
    for (int i = 0; i < 10; i++) CHECK(tern_kv_get(c, i) == q[i]);
    /* the same row through the reference quantiser (a V row: one scale, mean |x| = 0.6) */
    float x[10];
    for (int i = 0; i < 10; i++) x[i] = (float)q[i];
    uint8_t kc[3];
    uint16_t vs;
    kvt_quant_row(x, 10, 0, kc, &vs);
    CHECK_MSG(memcmp(kc, c, sizeof c) == 0, "kvt_quant_row wrote %02x %02x %02x", kc[0], kc[1], kc[2]);
}

TEST(kv_ternary_scale_saturates) {
    for (int is_key = 1; is_key >= 0; is_key--) {
        float k[16], y[16];
        for (int i = 0; i < 16; i++) k[i] = i == 15 ? 0.0f : (i % 2 ? 70000.0f : -70000.0f);
        uint8_t codes[4];
        uint16_t sc[1];
        kvt_quant_row(k, 16, is_key, codes, sc);
        kvt_dequant_row(codes, sc, 16, is_key, y);
        for (int i = 0; i < 16; i++) {
            const float want = i == 15 ? 0.0f : (i % 2 ? 65504.0f : -65504.0f);
            CHECK_MSG(y[i] == want, "%s[%d] = %g, want %g", is_key ? "k" : "v", i, y[i], want);
        }
    }
}

/* What a mutation audit found no test deciding (each mutant passed): a tie
 * in a ternary row rounds half to even (kv_ternary.h; half away would code
 * 0.5 as 1); a head_dim not a multiple of the key group has a scale for its
 * short last group (24 channels: 2 scales, 18 bytes a token and head; a
 * floor had given 1 and written past it); a free followed by a reserve
 * reuses the same blocks in the same order (kvcache.c: the pages a sequence
 * freed are the warm ones). */
TEST(kv_ternary_ties_short_groups_and_block_reuse) {
    const float v[4] = {1.5f, 0.5f, -0.5f, -1.5f}; /* mean|x| = 1: codes 1, 0, 0, -1 */
    uint8_t codes[8];
    uint16_t sc[2];
    float y[24];
    kvt_quant_row(v, 4, 0, codes, sc);
    kvt_dequant_row(codes, sc, 4, 0, y);
    CHECK_MSG(y[0] == 1.0f && y[1] == 0.0f && y[2] == 0.0f && y[3] == -1.0f, "%g %g %g %g", y[0], y[1], y[2], y[3]);
    CHECK(kvt_n_scales(24, 1) == 2 && kvt_n_scales(24, 0) == 1 && kvt_n_scales(16, 1) == 1);
    CHECK(kvt_bytes_per_token_head(24, 1) == 18);
    /* a key of 24 channels: 16 of magnitude 4, 8 of 0.25 -> each group its own scale */
    float k[24];
    for (int i = 0; i < 24; i++) k[i] = i < 16 ? (i % 2 ? 4.0f : -4.0f) : (i % 2 ? 0.25f : -0.25f);
    uint16_t ks[3] = {0, 0, 0x7bff}; /* a sentinel after the two scales */
    kvt_quant_row(k, 24, 1, codes, ks);
    kvt_dequant_row(codes, ks, 24, 1, y);
    CHECK(ks[2] == 0x7bff);
    for (int i = 0; i < 24; i++) CHECK_MSG(y[i] == k[i], "k[%d] = %g, want %g", i, y[i], k[i]);
    /* blocks: free then reserve takes the same physical blocks, in order */
    KvCache kv;
    REQUIRE(kv_init(&kv, 1, 1, 2, 4, 16) == 0);
    const int a = kv_seq_new(&kv), b = kv_seq_new(&kv);
    REQUIRE(kv_seq_reserve(&kv, b, 8) == 0 && kv_seq_reserve(&kv, a, 12) == 0);
    int first[3];
    REQUIRE(kv.seqs[a].n_blocks == 3);
    for (int i = 0; i < 3; i++) first[i] = kv.seqs[a].blocks[i];
    kv_seq_free(&kv, a);
    const int c = kv_seq_new(&kv);
    REQUIRE(kv_seq_reserve(&kv, c, 12) == 0 && kv.seqs[c].n_blocks == 3);
    for (int i = 0; i < 3; i++)
        CHECK_MSG(kv.seqs[c].blocks[i] == first[i], "block %d: %d, freed %d", i, kv.seqs[c].blocks[i], first[i]);
    kv_free(&kv);
}

/* Which tokens the KV policy stores ternary, through the forward pass: a
 * prompt prefilled (encoder tokens) then generated tokens fed one at a time
 * with the decode flag (decoder tokens), in blocks of 4 so that both phases
 * share a block; every layer's page format flag must say ternary exactly for
 * the policy's phase (encoder: the prompt; decoder: the generated; all;
 * none) — the split the KV experiment's encoder-vs-decoder factor rests on;
 * @layers=1 limits it to layer 1. */
TEST(kv_policy_marks_prompt_and_generated_tokens) {
    Model m;
    REQUIRE(model_load(test_path(LLAMA_DIR), NULL, &m) == 0);
    enum { P = 6, D = 5 };
    const char *pols[] = {"encoder", "decoder", "all", "none", "decoder@layers=1"};
    for (size_t pi = 0; pi < sizeof pols / sizeof pols[0]; pi++) {
        Engine e;
        EngineOpts eo = {.max_tok = 64, .block_size = 4, .n_blocks = 8};
        REQUIRE(engine_open(&e, &m, &eo) == 0);
        KvPolicy pol;
        REQUIRE(kv_policy_parse(pols[pi], &pol) == 0 && kv_set_policy(&e.kv, &pol) == 0);
        const int s = kv_seq_new(&e.kv);
        int tok[P], seq[P];
        int64_t pos[P], last = P - 1;
        for (int i = 0; i < P; i++) tok[i] = 3 + 7 * i, seq[i] = s, pos[i] = i;
        float *logits = xmalloc(sizeof(float) * (size_t)m.cfg.vocab);
        e.rs.decode = 0;
        REQUIRE(forward(&m, &e.kv, &e.rs, tok, seq, pos, P, &last, 1, logits) == 0);
        e.rs.decode = 1;
        for (int d = 0; d < D; d++) {
            int t1 = 5 + d, s1 = s;
            int64_t p1 = P + d, l0 = 0;
            REQUIRE(forward(&m, &e.kv, &e.rs, &t1, &s1, &p1, 1, &l0, 1, logits) == 0);
        }
        e.rs.decode = 0;
        const int ternary_pages = strcmp(pols[pi], "none") != 0;
        CHECK_MSG((e.kv.fmt != NULL) == ternary_pages, "%s: ternary pools %s", pols[pi],
                  e.kv.fmt ? "allocated" : "missing");
        int bad = 0;
        for (int l = 0; l < m.cfg.n_layers && e.kv.fmt; l++)
            for (int64_t p = 0; p < P + D; p++) {
                const int gen = p >= P, in_layers = pi != 4 || l == 1;
                const int want = in_layers && (pi == 2 || (pi == 0 && !gen) || ((pi == 1 || pi == 4) && gen));
                const int blk = e.kv.seqs[s].blocks[p / 4];
                const int got = e.kv.fmt[((size_t)l * (size_t)e.kv.n_blocks + (size_t)blk) * 4 + (size_t)(p % 4)];
                if (got != want && bad++ < 5)
                    fprintf(stderr, "    %s: layer %d pos %lld ternary %d, want %d\n", pols[pi], l, (long long)p,
                            got, want);
            }
        CHECK_MSG(bad == 0, "%s: %d tokens stored in the wrong format", pols[pi], bad);
        free(logits);
        engine_free(&e);
    }
    model_free(&m);
}

/* kv_check, the stress tests' oracle, finds each kind of broken state: a
 * leaked block, one owned twice, a length past its blocks, a block free twice
 * (its detection had never run: dropping any branch passed the suite). */
TEST(kv_check_detects_corruption) {
    for (int k = 0; k < 4; k++) {
        KvCache kv;
        REQUIRE(kv_init(&kv, 1, 1, 2, 4, 4) == 0);
        const int a = kv_seq_new(&kv);
        REQUIRE(kv_seq_reserve(&kv, a, 8) == 0 && kv.seqs[a].n_blocks == 2 && kv.n_free == 2);
        kv_seq_set_len(&kv, a, 8);
        REQUIRE(kv_check(&kv) == 0);
        static const char *const want[] = {"leaked", "owned twice", "length 9 but only 2 blocks",
                                           "on the free list twice"};
        if (k == 0) kv.n_free--;                                      /* a free block dropped */
        if (k == 1) kv.seqs[a].blocks[1] = kv.seqs[a].blocks[0];      /* (and block 1 leaked after) */
        if (k == 2) kv.seqs[a].len = 9;                               /* past 2 blocks of 4 */
        if (k == 3) kv.free_list[1] = kv.free_list[0];                /* one free block twice */
        CHECK_MSG(kv_check(&kv) == -1 && strstr(err_msg(), want[k]), "case %d: %s", k, err_msg());
        kv_free(&kv);
    }
}

/* One token held is enough to keep a layer's pages: a policy that would give
 * them back (host pages) or change their kind (a backend's pages) is refused
 * with a single token too, and the page stays. */
TEST(kv_set_policy_one_held_token) {
    KvPolicy part;
    REQUIRE(kv_policy_parse("all@layers=1-2", &part) == 0);
    for (int tables = 0; tables < 2; tables++) {
        KvCache kv;
        REQUIRE((tables ? kv_init_tables : kv_init)(&kv, 3, 2, 8, 4, 6) == 0);
        const int sq = kv_seq_new(&kv);
        REQUIRE(kv_seq_reserve(&kv, sq, 1) == 0);
        if (!tables) {
            float kr[16], vr[16];
            for (int i = 0; i < 16; i++) kr[i] = 0.5f * (float)i, vr[i] = -(float)i;
            kv_write_token(&kv, 1, sq, 0, kr, vr, 0);
        }
        kv_seq_set_len(&kv, sq, 1);
        CHECK_MSG(kv_set_policy(&kv, &part) == -1 && strstr(err_msg(), "holds 1 tokens"), "%s: %s",
                  tables ? "tables" : "host pages", err_msg());
        CHECK(kv.policy.kind == KVP_NONE && (tables || (kv.k[1] && kv.v[1])));
        kv_free(&kv);
    }
}

/* KV bytes a token takes, layer by layer under the policy: per head a f32
 * row pair 2 x 8 x 4 = 64 bytes, a ternary one (TKV, ternary_format.h) 2 x
 * ceil(8 / 4) code bytes + 2 f16 scales (one K group of 16 channels, one V)
 * = 8 bytes; two heads, three layers. */
TEST(kv_bytes_per_token_by_layer) {
    static const struct {
        const char *pol;
        int decode;
        size_t want;
    } cs[] = {{"none", 0, 3 * 128},           {"all@layers=1-2", 0, 128 + 2 * 16}, {"all@layers=1-2", 1, 160},
              {"all@layers=0", 1, 16 + 2 * 128}, {"decoder@layers=1", 1, 272},      {"decoder@layers=1", 0, 384},
              {"encoder", 0, 3 * 16},         {"encoder", 1, 3 * 128}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        KvCache kv;
        KvPolicy p;
        REQUIRE(kv_init(&kv, 3, 2, 8, 4, 2) == 0 && kv_policy_parse(cs[i].pol, &p) == 0);
        REQUIRE(kv_set_policy(&kv, &p) == 0);
        const size_t got = kv_bytes_per_token(&kv, cs[i].decode);
        CHECK_MSG(got == cs[i].want, "%s, decode %d: %zu bytes, want %zu", cs[i].pol, cs[i].decode, got, cs[i].want);
        kv_free(&kv);
    }
}

/* A pool of no blocks, or blocks of no tokens, is refused (both counts >= 1);
 * an id one past the last sequence made is not live, whatever its slot holds. */
TEST(kv_init_refuses_empty_pools_and_seq_ids_past_the_end) {
    KvCache kv;
    CHECK(kv_init(&kv, 1, 1, 4, 4, 0) == -1 && strstr(err_msg(), "must be >= 1"));
    CHECK(kv_init_tables(&kv, 1, 1, 4, 4, 0) == -1 && strstr(err_msg(), "must be >= 1"));
    CHECK(kv_init(&kv, 1, 1, 4, 0, 4) == -1);
    REQUIRE(kv_init(&kv, 1, 1, 4, 4, 4) == 0);
    REQUIRE(kv_seq_new(&kv) == 0 && kv_seq_new(&kv) == 1);
    REQUIRE(kv.seq_cap > 2);
    kv.seqs[2].active = 1; /* (a slot past n_seqs: never made) */
    CHECK(kv_seq_live(&kv, 1) == 0 && kv_seq_live(&kv, 2) == -1 && kv_seq_live(&kv, -1) == -1);
    kv.seqs[2].active = 0;
    kv_free(&kv);
}
