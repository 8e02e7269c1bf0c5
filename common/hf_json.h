/*
 * hf_json.h — Jansson helpers for validated unpacking with field-path errors.
 *
 * Every value read from a request body or a file is read through these, so
 * a rejected input always says which field was wrong and why:
 *     {"error": "must be > 0", "field": "searcher.max_trials"}
 *
 * Getters: look up obj[key]; if absent and !required leave *out untouched
 * and return 0; if absent and required, or of the wrong type, or out of
 * range, fill err (field = path + "." + key) and return HF_EINVAL.
 * Returned strings point into obj and live as long as it does.
 */
#ifndef HF_JSON_H
#define HF_JSON_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define HF_JSON_MAX_DEPTH 32

typedef struct hf_jerr {
    char field[256];   /* dotted path of the offending field, "" for the whole document */
    char msg[256];     /* why it was rejected */
} hf_jerr;

void hf_jerr_clear(hf_jerr *e);
/* Set err: field = path(.key when key != NULL), msg = printf(fmt...). RET HF_EINVAL. */
int  hf_jerr_set(hf_jerr *e, const char *path, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Join path and key ("a.b" + "c" -> "a.b.c"; "" + "c" -> "c"; index as "a[3]"). */
void hf_jpath(char *out, size_t size, const char *path, const char *key);
void hf_jpath_index(char *out, size_t size, const char *path, size_t index);
/* {"error": msg, "field": field} (field omitted when empty). New reference. */
json_t *hf_jerr_json(const hf_jerr *e);

/* Parse text of len bytes, rejecting nesting deeper than max_depth and
 * anything but an object at the top when want_object. RET 0 or HF_EPARSE. */
int hf_json_parse(const char *text, size_t len, int max_depth, int want_object,
                  json_t **out, hf_jerr *e);
/* Depth of a parsed value (a scalar is 1). */
int hf_json_depth(const json_t *v);

int hf_json_get_string(const json_t *obj, const char *path, const char *key, int required,
                       size_t max_len, const char **out, hf_jerr *e);
int hf_json_get_int(const json_t *obj, const char *path, const char *key, int required,
                    int64_t min, int64_t max, int64_t *out, hf_jerr *e);
/* Accepts integers and reals; rejects NaN/inf (Jansson never produces them). */
int hf_json_get_number(const json_t *obj, const char *path, const char *key, int required,
                       double min, double max, double *out, hf_jerr *e);
int hf_json_get_bool(const json_t *obj, const char *path, const char *key, int required,
                     int *out, hf_jerr *e);
int hf_json_get_object(const json_t *obj, const char *path, const char *key, int required,
                       json_t **out, hf_jerr *e);
int hf_json_get_array(const json_t *obj, const char *path, const char *key, int required,
                      size_t max_items, json_t **out, hf_jerr *e);
/* Reject keys of obj that are not in the NULL-terminated list allowed. */
int hf_json_only_keys(const json_t *obj, const char *path, const char *const *allowed, hf_jerr *e);

/* Serialise compactly; caller frees. NULL on failure. */
char *hf_json_dump(const json_t *v);

#endif
