/*
 * expmeta.c — tags, descriptions, notes and the trial seed (see
 * expmeta.h). Every check names the member it refuses, so the API can
 * answer 400 {"error", "field"} and the CLI print it.
 */
#include "scheduler/core/expmeta.h"

#include "hf_err.h"
#include "scheduler/core/experiment.h"

#include <stdio.h>
#include <string.h>

int expmeta_tag_ok(const char *t)
{
    size_t n = t ? strlen(t) : 0;
    if (n == 0 || n > EXPMETA_MAX_TAG_LEN) return 0;
    for (; *t; t++) {
        char c = *t;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("_.:/=+-", c)))
            return 0;
    }
    return 1;
}

int expmeta_tags_check(const json_t *tags, const char *path, hf_jerr *e)
{
    char fp[128];
    if (!tags) return 0;
    if (!json_is_array(tags)) return hf_jerr_set(e, path, NULL, "must be an array of tags");
    if (json_array_size(tags) > EXPMETA_MAX_TAGS)
        return hf_jerr_set(e, path, NULL, "more than %d tags", EXPMETA_MAX_TAGS);
    for (size_t i = 0; i < json_array_size(tags); i++) {
        const json_t *t = json_array_get(tags, i);
        hf_jpath_index(fp, sizeof fp, path, i);
        if (!json_is_string(t) || !expmeta_tag_ok(json_string_value(t)))
            return hf_jerr_set(e, fp, NULL, "a tag is 1..%d characters of A-Z a-z 0-9 _ . : / = + -",
                               EXPMETA_MAX_TAG_LEN);
    }
    return 0;
}

int expmeta_has_tag(const json_t *tags, const char *tag)
{
    size_t i;
    json_t *t;
    json_array_foreach(tags, i, t) if (json_is_string(t) && strcmp(json_string_value(t), tag) == 0) return 1;
    return 0;
}

/* Append the valid, new tags of src to dst (up to EXPMETA_MAX_TAGS). */
static void tags_add(json_t *dst, const json_t *src)
{
    size_t i;
    json_t *t;
    json_array_foreach(src, i, t) {
        const char *s = json_string_value(t);
        if (expmeta_tag_ok(s) && !expmeta_has_tag(dst, s) && json_array_size(dst) < EXPMETA_MAX_TAGS)
            json_array_append(dst, t);
    }
}

json_t *expmeta_tags_from_config(const json_t *cfg)
{
    json_t *out = json_array();
    if (out) tags_add(out, json_object_get(cfg, "tags"));
    return out;
}

int expmeta_patch_experiment(const json_t *body, const json_t *cur, json_t **tags, int *desc_set,
                             const char **desc, hf_jerr *e)
{
    static const char *const keys[] = {"description", "tags", "add_tags", "remove_tags", NULL};
    static const char *const lists[] = {"tags", "add_tags", "remove_tags"};
    int rc;
    *tags = NULL;
    *desc_set = 0;
    *desc = NULL;
    if (!json_is_object(body)) return hf_jerr_set(e, "", NULL, "expected a JSON object");
    if ((rc = hf_json_only_keys(body, "", keys, e))) return rc;
    if (json_object_size(body) == 0)
        return hf_jerr_set(e, "", NULL, "nothing to change: give description, tags, add_tags or remove_tags");
    json_t *d = json_object_get(body, "description");
    if (d && !json_is_null(d)) {
        if ((rc = hf_json_get_string(body, "", "description", 1, EXP_MAX_DESCRIPTION, desc, e))) return rc;
    }
    *desc_set = d != NULL;
    int any = 0;
    for (size_t k = 0; k < 3; k++) {
        const json_t *l = json_object_get(body, lists[k]);
        if ((rc = expmeta_tags_check(l, lists[k], e))) return rc;
        any |= l != NULL;
    }
    if (!any) return 0;
    const json_t *rep = json_object_get(body, "tags");
    json_t *out = json_array();
    if (!out) return HF_ENOMEM;
    tags_add(out, rep ? rep : cur);
    tags_add(out, json_object_get(body, "add_tags"));
    const json_t *rm = json_object_get(body, "remove_tags");
    for (size_t i = json_array_size(out); i-- > 0;)
        if (expmeta_has_tag(rm, json_string_value(json_array_get(out, i)))) json_array_remove(out, i);
    *tags = out;
    return 0;
}

int expmeta_patch_trial(const json_t *body, const char **notes, hf_jerr *e)
{
    static const char *const keys[] = {"notes", NULL};
    int rc;
    *notes = NULL;
    if (!json_is_object(body)) return hf_jerr_set(e, "", NULL, "expected a JSON object");
    if ((rc = hf_json_only_keys(body, "", keys, e))) return rc;
    json_t *n = json_object_get(body, "notes");
    if (!n) return hf_jerr_set(e, "", "notes", "required: the trial's notes (Markdown text, or null to clear)");
    if (json_is_null(n)) return 0;
    return hf_json_get_string(body, "", "notes", 1, EXPMETA_MAX_NOTES, notes, e);
}

/* splitmix64's output function (Steele, Lea, Flood 2014). */
static uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint32_t expmeta_trial_seed(uint64_t exp_seed, int64_t trial_idx)
{
    return (uint32_t)(mix64(mix64(exp_seed) ^ (uint64_t)trial_idx) & 0x7fffffffu);
}
