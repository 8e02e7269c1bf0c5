/*
 * unit_fixture.h — what the scheduler's unit tests share: a scratch
 * directory per test group (removed with everything in it), reading one
 * integer from SQLite, and driving a real core on a real store (open it,
 * register an agent, submit an experiment). Include after <cmocka.h>.
 *
 *   static char dir[256];
 *   static int setup(void **st)    { (void)st; return unit_tmpdir(dir, sizeof dir, "store"); }
 *   static int teardown(void **st) { (void)st; return unit_rmtree(dir); }
 */
#ifndef HF_UNIT_FIXTURE_H
#define HF_UNIT_FIXTURE_H

#include "hf_log.h"
#include "scheduler/core/sched.h"
#include "scheduler/store/store.h"

#include <ftw.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* mkdtemp /tmp/hf_TAG_XXXXXX into dir; quiet logs (warnings and up).
 * RET 0, or -1 (cmocka: the group fails to set up). */
static inline int unit_tmpdir(char *dir, size_t len, const char *tag)
{
    snprintf(dir, len, "/tmp/hf_%s_XXXXXX", tag);
    hf_log_set_level(HF_LOG_WARN);
    return mkdtemp(dir) ? 0 : -1;
}

static inline int unit_rm_one(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)type;
    (void)ftw;
    return remove(path);
}

/* Remove dir and everything below it (symlinks are not followed). */
static inline int unit_rmtree(const char *dir)
{
    return nftw(dir, unit_rm_one, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}

/* The first column of the first row of sql, or -1. */
static inline int64_t unit_one_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    int64_t v = -1;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* A store at path and a core on it (cfg NULL: the defaults). */
static inline void unit_open_core(const char *path, const sched_config *cfg, store **s, sched **c)
{
    char err[256] = "";
    sched_config def;
    if (!cfg) {
        sched_config_defaults(&def);
        cfg = &def;
    }
    if (store_open(path, s, err, sizeof err)) fail_msg("store_open %s: %s", path, err);
    if (sched_new(cfg, *s, NULL, c, err, sizeof err)) fail_msg("sched_new: %s", err);
}

/* Register agent name with slots slots; RET its id. */
static inline int64_t unit_register(sched *c, const char *name, int slots)
{
    char body[128];
    snprintf(body, sizeof body, "{\"name\": \"%s\", \"slots\": %d}", name, slots);
    json_t *b = json_loads(body, 0, NULL), *out = NULL;
    hf_jerr je;
    assert_int_equal(sched_agent_register(c, b, "127.0.0.1", &out, &je), 0);
    int64_t id = json_integer_value(json_object_get(out, "id"));
    json_decref(out);
    json_decref(b);
    return id;
}

/* Submit the experiment in JSON text json (it must be accepted); RET its id. */
static inline int64_t unit_submit(sched *c, const char *json)
{
    json_t *e = json_loads(json, 0, NULL);
    assert_non_null(e);
    hf_jerr je;
    int64_t id = 0;
    int rc = sched_experiment_submit(c, e, &id, &je);
    if (rc) fprintf(stderr, "submit: %s: %s\n", je.field, je.msg);
    assert_int_equal(rc, 0);
    json_decref(e);
    return id;
}

#endif
