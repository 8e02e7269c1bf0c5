/*
 * search_fixture.h — what the searcher unit tests share: JSON from a
 * string, a search space from a JSON string, and a table of searcher
 * configurations that must be refused naming a given field.
 * Include after <cmocka.h>.
 */
#ifndef HF_SEARCH_FIXTURE_H
#define HF_SEARCH_FIXTURE_H

#include "hf_err.h"
#include "scheduler/search/search.h"
#include "scheduler/search/search_space.h"

#include <jansson.h>
#include <string.h>

/* s parsed (any JSON value); fails the test on bad JSON. */
static inline json_t *load(const char *s)
{
    json_error_t je;
    json_t *v = json_loads(s, JSON_DECODE_ANY, &je);
    if (!v) fail_msg("bad test JSON: %s: %s", s, je.text);
    return v;
}

/* The search space of the JSON text s; fails the test when it is refused. */
static inline search_space *space_of(const char *s)
{
    json_t *o = load(s);
    search_space *sp = NULL;
    hf_jerr e;
    if (search_space_parse(o, &sp, &e)) fail_msg("%s: %s", e.field, e.msg);
    json_decref(o);
    return sp;
}

typedef struct bad_searcher { const char *json, *field; } bad_searcher;

/* Each configuration in bad[0..n) is refused by search_validate with
 * HF_EINVAL naming exactly bad[i].field. */
static inline void expect_refused(const bad_searcher *bad, size_t n, const search_space *sp)
{
    for (size_t i = 0; i < n; i++) {
        json_t *c = load(bad[i].json);
        hf_jerr e;
        hf_jerr_clear(&e);
        int rc = search_validate(c, sp, &e);
        if (rc != HF_EINVAL || strcmp(e.field, bad[i].field))
            fail_msg("case %zu %s: rc %d field %s (%s), wanted %s", i, bad[i].json, rc, e.field, e.msg,
                     bad[i].field);
        json_decref(c);
    }
}

/* Every one of good[0..n) (searcher JSON) passes search_validate. */
static inline void expect_accepted(const char *const *good, size_t n, const search_space *sp)
{
    for (size_t i = 0; i < n; i++) {
        json_t *c = load(good[i]);
        hf_jerr e;
        hf_jerr_clear(&e);
        int rc = search_validate(c, sp, &e);
        if (rc != 0) fail_msg("case %zu %s: rc %d field %s (%s), wanted accepted", i, good[i], rc, e.field, e.msg);
        json_decref(c);
    }
}

#endif
