/* Experiment configs (configs/<experiment>.conf): the factor an experiment
 * varies, its values, and the fixed settings.  Format (paper/SCHEMA.md has the
 * full description):
 *
 *   # a comment; blank lines are ignored
 *   factor      = rule
 *   values      = absmean twn std l2opt absmax      # space-separated list
 *   models      = data/llama-tiny data/bitnet-tiny
 *   quant       = rule={},group=128,scale=f16       # {} = the factor's value
 *
 * One `key = value` per line; keys are [a-z0-9_]+ and appear once; the value
 * is the rest of the line with surrounding blanks removed, up to a `#` that
 * follows a blank (a comment).  `{}` in a value is replaced by the factor's
 * value when the experiment binds one (expconf_bind).
 *
 * Command-line overrides `key=value` may only name keys the file defines (a
 * typo is an error, not a silently ignored setting). */
#ifndef TL_EXPCONF_H
#define TL_EXPCONF_H

#include <stdint.h>

typedef struct {
    char *key;
    char *value;
    int line;       /* line in the file, 0 when set by an override */
} ExpConfEntry;

typedef struct {
    char *path;     /* the file (or name given to expconf_parse) */
    ExpConfEntry *entries;
    int n, cap;
} ExpConf;

/* Keys every experiment config must define. */
extern const char *const EXPCONF_REQUIRED_KEYS[];

/* Reads and parses a config file.  Returns 0, or -1 with err_set naming the
 * file and line.  On success *out owns its memory (expconf_free). */
int expconf_load(const char *path, ExpConf *out);
/* Parses text held in memory; `name` is used in messages. */
int expconf_parse(const char *text, const char *name, ExpConf *out);
void expconf_free(ExpConf *c);

/* Checks that every key of EXPCONF_REQUIRED_KEYS is present and non-empty
 * where it must be (factor, values, models). */
int expconf_check(const ExpConf *c);

/* Checks that every key c defines is one of `known` or `extra` (each
 * NULL-terminated; extra may be NULL): a
 * misspelt key in a config file had been ignored, its setting taken from the
 * default (qaunt = ... ran the dense model under every label).  Returns 0, or
 * -1 with err_set naming the file, line and key and listing the known keys. */
int expconf_check_keys(const ExpConf *c, const char *const *known, const char *const *extra);

/* The value of key, or NULL when absent. */
const char *expconf_get(const ExpConf *c, const char *key);
const char *expconf_get_or(const ExpConf *c, const char *key, const char *dflt);
/* Integer value of key: -1 with err_set when absent or not an integer. */
int expconf_get_i64(const ExpConf *c, const char *key, int64_t *out);

/* Applies one override "key=value" (blanks around '=' allowed).  The key must
 * already exist in c.  Returns 0 or -1 with err_set. */
int expconf_override(ExpConf *c, const char *arg);
/* Applies every argument that contains '=' and does not start with '-' as an
 * override; *consumed (may be NULL) receives how many were applied. */
int expconf_apply_args(ExpConf *c, int argc, char **argv, int *consumed);

/* Replaces every "{}" in every value except `values` by `value` (the point of
 * the sweep this run is), and sets key "value" to it.  Returns how many
 * settings took the value (0: none has a "{}", e.g. an override replaced the
 * one that had), or -1. */
int expconf_bind(ExpConf *c, const char *value);

/* Splits a value on blanks into a NULL-terminated heap array (free with
 * expconf_free_list); *n (may be NULL) receives the count.  An absent key
 * gives an empty list. */
char **expconf_list(const ExpConf *c, const char *key, int *n);
char **expconf_split(const char *value, int *n);
void expconf_free_list(char **items);

/* A copy of tmpl with every "{}" replaced by value (heap). */
char *expconf_subst(const char *tmpl, const char *value);

#endif
