/*
 * hf_json.c — validated unpacking with field paths (see hf_json.h).
 */
#include "hf_json.h"
#include "hf_err.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void hf_jerr_clear(hf_jerr *e)
{
    if (e) e->field[0] = e->msg[0] = '\0';
}

void hf_jpath(char *out, size_t size, const char *path, const char *key)
{
    if (!key || !*key) snprintf(out, size, "%s", path ? path : "");
    else if (!path || !*path) snprintf(out, size, "%s", key);
    else snprintf(out, size, "%s.%s", path, key);
}

void hf_jpath_index(char *out, size_t size, const char *path, size_t index)
{
    snprintf(out, size, "%s[%zu]", path ? path : "", index);
}

int hf_jerr_set(hf_jerr *e, const char *path, const char *key, const char *fmt, ...)
{
    if (!e) return HF_EINVAL;
    va_list ap;
    hf_jpath(e->field, sizeof e->field, path, key);
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return HF_EINVAL;
}

json_t *hf_jerr_json(const hf_jerr *e)
{
    json_t *o = json_object();
    json_object_set_new(o, "error", json_string(e->msg[0] ? e->msg : "invalid input"));
    if (e->field[0]) json_object_set_new(o, "field", json_string(e->field));
    return o;
}

int hf_json_depth(const json_t *v)
{
    int best = 0;
    if (json_is_object(v)) {
        const char *k; json_t *c;
        json_object_foreach((json_t *)v, k, c) {
            int d = hf_json_depth(c);
            if (d > best) best = d;
        }
    } else if (json_is_array(v)) {
        size_t i; json_t *c;
        json_array_foreach(v, i, c) {
            int d = hf_json_depth(c);
            if (d > best) best = d;
        }
    }
    return best + 1;
}

/* Nesting depth of raw text, counted before parsing so a hostile document
 * of a million '[' never reaches the (recursive) parser. Strings skipped. */
static int text_depth(const char *s, size_t len)
{
    int depth = 0, best = 0, in_str = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = 0;
        } else if (c == '"') in_str = 1;
        else if (c == '{' || c == '[') { if (++depth > best) best = depth; }
        else if (c == '}' || c == ']') depth--;
    }
    return best;
}

int hf_json_parse(const char *text, size_t len, int max_depth, int want_object,
                  json_t **out, hf_jerr *e)
{
    json_error_t je;
    *out = NULL;
    if (!text || len == 0) {
        hf_jerr_set(e, "", NULL, "empty body: expected a JSON %s", want_object ? "object" : "value");
        return HF_EPARSE;
    }
    if (max_depth > 0 && text_depth(text, len) > max_depth) {
        hf_jerr_set(e, "", NULL, "JSON nested deeper than %d levels", max_depth);
        return HF_EPARSE;
    }
    json_t *v = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!v) {
        hf_jerr_set(e, "", NULL, "malformed JSON at line %d column %d: %s", je.line, je.column, je.text);
        return HF_EPARSE;
    }
    if (want_object && !json_is_object(v)) {
        json_decref(v);
        hf_jerr_set(e, "", NULL, "expected a JSON object at the top level");
        return HF_EPARSE;
    }
    *out = v;
    return HF_OK;
}

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* Common prologue: find key; 1 = found (*v set), 0 = absent and optional, <0 = error. */
static int lookup(const json_t *obj, const char *path, const char *key, int required,
                  json_t **v, hf_jerr *e)
{
    *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
    if (!*v) {
        if (required) return hf_jerr_set(e, path, key, "required field is missing");
        return 0;
    }
    return 1;
}

int hf_json_get_string(const json_t *obj, const char *path, const char *key, int required,
                       size_t max_len, const char **out, hf_jerr *e)
{
    json_t *v;
    int rc = lookup(obj, path, key, required, &v, e);
    if (rc <= 0) return rc;
    if (!json_is_string(v)) return hf_jerr_set(e, path, key, "must be a string, got %s", type_name(v));
    if (max_len && json_string_length(v) > max_len)
        return hf_jerr_set(e, path, key, "longer than %zu bytes", max_len);
    if (strlen(json_string_value(v)) != json_string_length(v))
        return hf_jerr_set(e, path, key, "contains a NUL byte");
    *out = json_string_value(v);
    return HF_OK;
}

int hf_json_get_int(const json_t *obj, const char *path, const char *key, int required,
                    int64_t min, int64_t max, int64_t *out, hf_jerr *e)
{
    json_t *v;
    int rc = lookup(obj, path, key, required, &v, e);
    if (rc <= 0) return rc;
    int64_t x;
    if (json_is_integer(v)) x = json_integer_value(v);
    else if (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v)
             && fabs(json_real_value(v)) < 9e15) x = (int64_t)json_real_value(v);
    else return hf_jerr_set(e, path, key, "must be an integer, got %s", type_name(v));
    if (x < min || x > max)
        return hf_jerr_set(e, path, key, "must be between %lld and %lld, got %lld",
                           (long long)min, (long long)max, (long long)x);
    *out = x;
    return HF_OK;
}

int hf_json_get_number(const json_t *obj, const char *path, const char *key, int required,
                       double min, double max, double *out, hf_jerr *e)
{
    json_t *v;
    int rc = lookup(obj, path, key, required, &v, e);
    if (rc <= 0) return rc;
    if (!json_is_number(v)) return hf_jerr_set(e, path, key, "must be a number, got %s", type_name(v));
    double x = json_number_value(v);
    if (!isfinite(x)) return hf_jerr_set(e, path, key, "must be finite");
    if (x < min || x > max)
        return hf_jerr_set(e, path, key, "must be between %g and %g, got %g", min, max, x);
    *out = x;
    return HF_OK;
}

int hf_json_get_bool(const json_t *obj, const char *path, const char *key, int required,
                     int *out, hf_jerr *e)
{
    json_t *v;
    int rc = lookup(obj, path, key, required, &v, e);
    if (rc <= 0) return rc;
    if (!json_is_boolean(v)) return hf_jerr_set(e, path, key, "must be true or false, got %s", type_name(v));
    *out = json_is_true(v);
    return HF_OK;
}

int hf_json_get_object(const json_t *obj, const char *path, const char *key, int required,
                       json_t **out, hf_jerr *e)
{
    json_t *v;
    int rc = lookup(obj, path, key, required, &v, e);
    if (rc <= 0) return rc;
    if (!json_is_object(v)) return hf_jerr_set(e, path, key, "must be an object, got %s", type_name(v));
    *out = v;
    return HF_OK;
}

int hf_json_get_array(const json_t *obj, const char *path, const char *key, int required,
                      size_t max_items, json_t **out, hf_jerr *e)
{
    json_t *v;
    int rc = lookup(obj, path, key, required, &v, e);
    if (rc <= 0) return rc;
    if (!json_is_array(v)) return hf_jerr_set(e, path, key, "must be an array, got %s", type_name(v));
    if (max_items && json_array_size(v) > max_items)
        return hf_jerr_set(e, path, key, "has more than %zu items", max_items);
    *out = v;
    return HF_OK;
}

int hf_json_only_keys(const json_t *obj, const char *path, const char *const *allowed, hf_jerr *e)
{
    const char *k; json_t *v;
    json_object_foreach((json_t *)obj, k, v) {
        int ok = 0;
        for (const char *const *a = allowed; *a; a++)
            if (strcmp(*a, k) == 0) { ok = 1; break; }
        if (!ok) return hf_jerr_set(e, path, k, "unknown field");
    }
    return HF_OK;
}

char *hf_json_dump(const json_t *v)
{
    return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
}
