/*
 * fuzz_json.c — libFuzzer target for common/hf_json.c.
 *
 * Every request body and experiment file enters the system through
 * hf_json_parse and is read through the hf_json_get_* getters, so this
 * target drives both: the input is parsed with a depth limit (the first
 * byte picks the limit and whether an object is required), and every
 * member of a resulting object is read with every getter, with bounds
 * chosen from the input, so type mismatches, range errors and field-path
 * construction (long keys, deep paths) are all exercised. Whatever the
 * input, nothing may crash, leak or read out of bounds, and the error
 * strings must stay NUL-terminated within their arrays.
 */
// FUZZ_SOURCES: common/hf_json.c common/hf_err.c
// FUZZ_LIBS: -ljansson
#include "hf_json.h"
#include "hf_err.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_err(const hf_jerr *e)
{
    assert(memchr(e->field, '\0', sizeof e->field) != NULL);
    assert(memchr(e->msg, '\0', sizeof e->msg) != NULL);
}

/* Read every member of obj with every getter; recurse into objects and
 * arrays with a growing path so long field paths are built. */
static void walk(const json_t *obj, const char *path, int depth)
{
    const char *key;
    json_t *val;
    hf_jerr e;

    if (depth > HF_JSON_MAX_DEPTH + 2)
        return;
    if (json_is_array(obj)) {
        size_t i;
        json_t *item;
        json_array_foreach(obj, i, item) {
            char sub[512];
            hf_jpath_index(sub, sizeof sub, path, i);
            assert(memchr(sub, '\0', sizeof sub) != NULL);
            walk(item, sub, depth + 1);
            if (i > 64)
                break;
        }
        return;
    }
    if (!json_is_object(obj))
        return;
    json_object_foreach((json_t *)obj, key, val) {
        const char *s = NULL;
        int64_t i64 = 0;
        double d = 0;
        int b = 0;
        json_t *o = NULL, *a = NULL;
        char sub[512];

        hf_jerr_clear(&e);
        (void)hf_json_get_string(obj, path, key, 1, 16, &s, &e);
        check_err(&e);
        hf_jerr_clear(&e);
        (void)hf_json_get_int(obj, path, key, 1, -5, 1000000, &i64, &e);
        check_err(&e);
        hf_jerr_clear(&e);
        (void)hf_json_get_number(obj, path, key, 1, -1e6, 1e6, &d, &e);
        check_err(&e);
        hf_jerr_clear(&e);
        (void)hf_json_get_bool(obj, path, key, 1, &b, &e);
        check_err(&e);
        hf_jerr_clear(&e);
        (void)hf_json_get_object(obj, path, key, 1, &o, &e);
        check_err(&e);
        hf_jerr_clear(&e);
        (void)hf_json_get_array(obj, path, key, 1, 4, &a, &e);
        check_err(&e);
        if (e.field[0] || e.msg[0]) {
            json_t *ej = hf_jerr_json(&e);
            json_decref(ej);
        }
        hf_jpath(sub, sizeof sub, path, key);
        assert(memchr(sub, '\0', sizeof sub) != NULL);
        walk(val, sub, depth + 1);
    }
    /* Absent keys: optional leaves *out alone, required fails. */
    if (!json_object_get(obj, "\x01" "absent")) {
        int64_t keep = 42;
        hf_jerr_clear(&e);
        assert(hf_json_get_int(obj, path, "\x01" "absent", 0, 0, 1, &keep, &e) == 0 && keep == 42);
        assert(hf_json_get_int(obj, path, "\x01" "absent", 1, 0, 1, &keep, &e) == HF_EINVAL);
        check_err(&e);
    }
    {
        static const char *const allowed[] = {"a", "b", "name", NULL};
        hf_jerr_clear(&e);
        (void)hf_json_only_keys(obj, path, allowed, &e);
        check_err(&e);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *v = NULL;
    hf_jerr e;
    int max_depth, want_object, rc;

    if (size < 1)
        return 0;
    max_depth = (data[0] & 0x3f);            /* 0 = unlimited .. 63 */
    want_object = (data[0] & 0x40) != 0;
    hf_jerr_clear(&e);
    rc = hf_json_parse((const char *)data + 1, size - 1, max_depth, want_object, &v, &e);
    check_err(&e);
    if (rc != HF_OK) {
        assert(v == NULL);
        assert(rc == HF_EPARSE);
        return 0;
    }
    assert(v != NULL);
    if (want_object)
        assert(json_is_object(v));
    /* hf_json_depth counts a scalar as 1, the text limit counts brackets. */
    if (max_depth > 0)
        assert(hf_json_depth(v) <= max_depth + 1);
    walk(v, "", 0);
    {
        char *txt = hf_json_dump(v);
        if (txt) {
            /* What we dump must parse back. */
            json_t *back = NULL;
            hf_jerr e2;
            hf_jerr_clear(&e2);
            rc = hf_json_parse(txt, strlen(txt), 0, 0, &back, &e2);
            assert(rc == HF_OK);
            json_decref(back);
            free(txt);
        }
    }
    json_decref(v);
    return 0;
}
