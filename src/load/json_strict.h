/* JSON as the checkpoints' own readers take it, or refused: config.json, a
 * safetensors header and a shard index are parsed here so that a file Python's
 * json (transformers, safetensors) reads one way is not read another way. */
#ifndef TL_JSON_STRICT_H
#define TL_JSON_STRICT_H

#include <cJSON.h>
#include <stddef.h>

/* Parses text[0, len) as one JSON value followed by nothing but whitespace
 * (blanks, tabs, newlines, NUL padding) and with no object holding a key
 * twice.  cJSON keeps the first of two equal keys where Python keeps the last,
 * and stops at the end of the first value where Python refuses what follows:
 * a config.json with "rms_norm_eps" twice had run with the other value
 * (ppl 594.6 against 207.0) and exit 0.  Returns the tree (cJSON_Delete), or
 * NULL with err_set naming path and what is wrong. */
cJSON *json_parse_strict(const char *text, size_t len, const char *path);

#endif
