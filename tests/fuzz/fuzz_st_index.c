/* libFuzzer harness: the sharded safetensors index
 * (model.safetensors.index.json) through st_open_dir.  A scratch folder holds
 * two small valid shards (written once at start-up); each input becomes the
 * folder's index file.  On success every tensor the loader hands out must lie
 * inside its shard's mapping.  Seeds: tests/fuzz/corpus/st_index/. */
#include "fuzz_util.h"
#include "load/safetensors.h"

#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256], index_path[300];

/* A one-file safetensors image: F32 tensors named names[i] of n[i] elements,
 * laid out back to back. */
static void write_shard(const char *name, const char *const *names, const int *n, int count) {
    char hdr[1024], path[400];
    size_t o = 0, off = 0;
    o += (size_t)snprintf(hdr + o, sizeof hdr - o, "{");
    for (int i = 0; i < count; i++) {
        o += (size_t)snprintf(hdr + o, sizeof hdr - o,
                              "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]}",
                              i ? "," : "", names[i], n[i], off, off + 4 * (size_t)n[i]);
        off += 4 * (size_t)n[i];
    }
    o += (size_t)snprintf(hdr + o, sizeof hdr - o, "}");
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)o >> (8 * i));
    fwrite(len, 1, 8, f);
    fwrite(hdr, 1, o, f);
    for (size_t i = 0; i < off; i++) fputc(0, f);
    fclose(f);
}

static const char *const shard_names[] = {"model-00001-of-00002.safetensors",
                                          "model-00002-of-00002.safetensors",
                                          "model.safetensors.index.json"};

static void remove_dir(void) {
    char path[400];
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, shard_names[i]);
        unlink(path);
    }
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    if (dir[0]) return 0;
    snprintf(dir, sizeof dir, "/tmp/ternlab-fuzz-index-%d", (int)getpid());
    if (mkdir(dir, 0700) != 0 && access(dir, W_OK) != 0) abort();
    const char *a[] = {"a", "b"}, *c[] = {"c"};
    const int na[] = {4, 3}, nc[] = {5};
    write_shard(shard_names[0], a, na, 2);
    write_shard(shard_names[1], c, nc, 1);
    atexit(remove_dir);
    snprintf(index_path, sizeof index_path, "%s/model.safetensors.index.json", dir);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FILE *f = fopen(index_path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    SafeTensors st;
    if (st_open_dir(dir, &st) == 0) {
        volatile uint8_t sink = 0;
        for (int i = 0; i < st.n_tensors; i++) {
            const StTensor *t = &st.tensors[i];
            FUZZ_ASSERT(t->file >= 0 && t->file < st.n_files);
            const MappedFile *mf = &st.files[t->file];
            const uint8_t *p = t->data;
            FUZZ_ASSERT(p >= mf->data && p + t->nbytes <= mf->data + mf->size);
            if (t->nbytes) sink ^= p[0] ^ p[t->nbytes - 1];
            FUZZ_ASSERT(st_find(&st, t->name) == t);
        }
        (void)sink;
        st_close(&st);
    }
    return 0;
}
