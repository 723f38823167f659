#include "core/hash.h"
#include "core/err.h"
#include "core/mem.h"

#include <openssl/evp.h>
#include <stdio.h>

static void hex(const unsigned char *md, unsigned n, char out[65]) {
    for (unsigned i = 0; i < n && i < 32; i++) snprintf(out + 2 * i, 3, "%02x", md[i]);
    out[64] = 0;
}

void sha256_bytes(const void *data, size_t n, char out[65]) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    EVP_Digest(data, n, md, &len, EVP_sha256(), NULL);
    hex(md, len, out);
}

int sha256_file(const char *path, char out[65]) {
    MappedFile mf;
    if (file_map(path, &mf) != 0) return -1;
    sha256_bytes(mf.data ? (const void *)mf.data : (const void *)"", mf.size, out);
    file_unmap(&mf);
    return 0;
}
