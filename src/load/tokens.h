/* Token files: raw little-endian int32 (numpy tofile). */
#ifndef TL_TOKENS_H
#define TL_TOKENS_H

#include <stdint.h>

/* Reads a token file and checks every id is in [0, vocab).  A size that is not
 * a whole number of int32 or an id out of range is an error naming the file,
 * the index and the value.  *out is heap-allocated. */
int tokens_load(const char *path, int vocab, int32_t **out, int64_t *n);
/* Parses "1,2,3" into ids, checked against vocab (vocab <= 0: the list's form only, the
 * ids unchecked and not to be used). */
int tokens_parse_list(const char *s, int vocab, int32_t **out, int64_t *n);

#endif
