/*
 * unit_fixture.h — what the scheduler's unit tests share: a scratch
 * directory per test group (removed with everything in it) and reading
 * one integer from SQLite.
 *
 *   static char dir[256];
 *   static int setup(void **st)    { (void)st; return unit_tmpdir(dir, sizeof dir, "store"); }
 *   static int teardown(void **st) { (void)st; return unit_rmtree(dir); }
 */
#ifndef HF_UNIT_FIXTURE_H
#define HF_UNIT_FIXTURE_H

#include "hf_log.h"

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

#endif
