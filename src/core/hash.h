/* SHA-256 of files and strings (OpenSSL libcrypto), as lowercase hex. */
#ifndef TL_HASH_H
#define TL_HASH_H

#include <stddef.h>

/* out receives 65 bytes (64 hex digits + NUL).  Returns 0 or -1 (err_set). */
int sha256_file(const char *path, char out[65]);
void sha256_bytes(const void *data, size_t n, char out[65]);

#endif
