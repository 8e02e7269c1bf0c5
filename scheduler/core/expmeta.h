/*
 * expmeta.h — what users write about their experiments and trials, and
 * what identifies a trial's run (issue #17; docs/scheduler.md,
 * "Workflow"): tags, Markdown descriptions and notes (validation of the
 * experiment file's fields and of the PATCH bodies), and the per-trial
 * seed HYPERFARM_SEED.
 *
 * Pure functions over JSON: the core (sched_actions.c) applies what they
 * accept; nothing here touches the model or the store. Markdown is stored
 * and served as text; rendering it safely is the dashboard's job
 * (docs/dashboard.md: marked + DOMPurify, never raw HTML).
 */
#ifndef HF_EXPMETA_H
#define HF_EXPMETA_H

#include "hf_json.h"

#include <stdint.h>

#define EXPMETA_MAX_TAGS     64
#define EXPMETA_MAX_TAG_LEN  64
#define EXPMETA_MAX_NOTES    65536   /* bytes of Markdown per trial */
#define EXPMETA_MAX_USER     64

/* Is tag a valid tag: 1..EXPMETA_MAX_TAG_LEN bytes of [A-Za-z0-9_.:/=+-]? */
int expmeta_tag_ok(const char *tag);

/* Validate an array of tags at path (NULL or absent is fine): strings,
 * each expmeta_tag_ok, at most EXPMETA_MAX_TAGS. RET 0 or HF_EINVAL. */
int expmeta_tags_check(const json_t *tags, const char *path, hf_jerr *e);

/* The tags an experiment starts with: a copy of cfg's "tags" without
 * duplicates, or [] when absent. Invalid entries are dropped (stored
 * configs from before this check may hold anything). New reference. */
json_t *expmeta_tags_from_config(const json_t *cfg);

/* PATCH /experiments/{id} body: {"description": text|null, "tags": [...],
 * "add_tags": [...], "remove_tags": [...]} (at least one member; "tags"
 * replaces, then add/remove apply). On success *tags is the new tag list
 * (new reference, NULL when tags are unchanged) computed from cur, and
 * *desc_set says whether "description" was given (*desc then borrowed
 * from body, NULL for null). RET 0 or HF_EINVAL naming the member. */
int expmeta_patch_experiment(const json_t *body, const json_t *cur, json_t **tags, int *desc_set,
                             const char **desc, hf_jerr *e);

/* PATCH /trials/{id} body: {"notes": text|null}. *notes borrowed from
 * body (NULL for null). RET 0 or HF_EINVAL. */
int expmeta_patch_trial(const json_t *body, const char **notes, hf_jerr *e);

/* Does the tag list (array of strings) contain tag? */
int expmeta_has_tag(const json_t *tags, const char *tag);

/* HYPERFARM_SEED of a trial: splitmix64 of the experiment's searcher seed
 * and the trial's index within the experiment (0 = its first trial, not
 * the farm-wide id), reduced to 31 bits so that every common library takes
 * it (numpy's seed must be below 2^32). Same inputs, same seed: a trial
 * run again (restart, promotion) gets the same one, and the same file
 * submitted again gives its trials the same seeds (docs/search.md
 * "Reproducibility and restart"). */
uint32_t expmeta_trial_seed(uint64_t exp_seed, int64_t trial_idx);

#endif
