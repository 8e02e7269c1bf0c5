/*
 * backup_restore.c — a ready-to-start database and checkpoint store from a
 * snapshot of backup.c (backup.h; docs/operations.md, "Backup and
 * restore").
 *
 * Nothing is trusted before it is checked: the manifest must parse and be
 * format 1; the database file's SHA-256 must be the manifest's; the copy
 * must pass PRAGMA integrity_check and carry the manifest's schema
 * version; every object a row names must be in the snapshot (or be listed
 * missing by the manifest: retention removed it while the backup ran) and
 * hash to its name, checked while it is copied. The database is written
 * last: copied to a temp file (fsync), opened once with store_open so it
 * is migrated and in WAL mode, its id floors raised (below), closed, then
 * linked to its name (directory fsync): a scheduler started on it finds a
 * store like any other, and a failure leaves no database behind. An
 * existing database is never overwritten.
 *
 * The id floors: the lost server may have handed out experiment and trial
 * ids after the snapshot, and agents still hold them (a trial they run, a
 * finished attempt they remember so that a duplicate assignment is not
 * run twice). Reissued, such an id would meet that memory: the agent
 * ignored the new trial as a duplicate and it failed (found by
 * tests/system/test_multiserver_backup.sh under load). So the restored
 * database hands out ids from RESTORE_ID_GAP above the snapshot's largest
 * (schema/0010_id_floor.sql's id_floor; docs/operations.md, "Backup and
 * restore").
 */
#include "scheduler/store/backup.h"

#include "hf_err.h"
#include "hf_file.h"
#include "hf_log.h"
#include "hf_sha256.h"
#include "scheduler/store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void fmt(char *out, size_t len, const char *f, ...) __attribute__((format(printf, 3, 4)));
static void fmt(char *out, size_t len, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    vsnprintf(out, len, f, ap);
    va_end(ap);
}

/* Does the manifest's "missing" list name sha? */
static int listed_missing(const json_t *man, const char *sha)
{
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(json_object_get(man, "objects"), "missing"), i, v)
        if (json_is_string(v) && strcmp(json_string_value(v), sha) == 0) return 1;
    return 0;
}

/* The snapshot's database: its SHA-256, integrity and schema version. */
static int check_db(const char *dbfile, const json_t *man, char *err, size_t errlen)
{
    char hex[HF_SHA256_HEX];
    int64_t n = 0;
    const char *want = json_string_value(json_object_get(json_object_get(man, "db"), "sha256"));
    int fd = open(dbfile, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { fmt(err, errlen, "%s: %s", dbfile, strerror(errno)); return hf_err_from_errno(errno); }
    int rc = hf_sha256_fd(fd, -1, hex, &n);
    close(fd);
    if (rc == 0 && (!want || strcmp(want, hex) != 0)) {
        fmt(err, errlen, "%s: SHA-256 %s, the manifest says %s", dbfile, hex, want ? want : "nothing");
        return HF_ECORRUPT;
    }
    if (rc) { fmt(err, errlen, "reading %s: %s", dbfile, hf_strerror(rc)); return rc; }
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    rc = HF_ECORRUPT;
    if (sqlite3_open_v2(dbfile, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW && strcmp((const char *)sqlite3_column_text(st, 0), "ok") == 0)
        rc = 0;
    else fmt(err, errlen, "%s fails PRAGMA integrity_check", dbfile);
    sqlite3_finalize(st);
    st = NULL;
    json_int_t ver = json_integer_value(json_object_get(man, "schema_version"));
    if (rc == 0 && (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK ||
                    sqlite3_step(st) != SQLITE_ROW || sqlite3_column_int64(st, 0) != ver)) {
        fmt(err, errlen, "%s: schema version differs from the manifest's %lld", dbfile, (long long)ver);
        rc = HF_ECORRUPT;
    }
    sqlite3_finalize(st);
    sqlite3_close_v2(db);
    return rc;
}

/* Every object the snapshot's database names, verified into ck_dir. */
static int restore_objects(const char *snap, const char *dbfile, const json_t *man, const char *ck_dir,
                           int64_t *count, char *err, size_t errlen)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int rc = 0;
    if (sqlite3_open_v2(dbfile, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, BACKUP_REFERENCED_SQL, -1, &st, NULL) != SQLITE_OK) {
        fmt(err, errlen, "%s: %s", dbfile, db ? sqlite3_errmsg(db) : "cannot open");
        rc = HF_EDB;
    }
    while (rc == 0 && sqlite3_step(st) == SQLITE_ROW) {
        const char *sha = (const char *)sqlite3_column_text(st, 0);
        char path[PATH_MAX];
        struct stat sb;
        if (!sha || !hf_sha256_hex_valid(sha)) continue;
        fmt(path, sizeof path, "%s/objects/%.2s/%s", snap, sha, sha);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            if (listed_missing(man, sha)) { hf_warn("restore: object %s was missing at backup time", sha); continue; }
            fmt(err, errlen, "object %s is not in the snapshot", sha);
            rc = HF_ECORRUPT;
            break;
        }
        rc = fstat(fd, &sb) == 0 ? backup_object_copy(fd, sb.st_size, sha, ck_dir) : hf_err_from_errno(errno);
        close(fd);
        if (rc) fmt(err, errlen, "object %s: %s", sha, rc == HF_ECORRUPT ? "its bytes do not match its name"
                                                                          : hf_strerror(rc));
        else (*count)++;
    }
    sqlite3_finalize(st);
    sqlite3_close_v2(db);
    return rc;
}

#define RESTORE_ID_GAP 1000000

/* Raise id_floor for experiments and trials to RESTORE_ID_GAP above the
 * largest id the database holds or has handed out, in one transaction.
 * RET 0 or HF_EDB. */
static int raise_id_floors(store *st, char *err, size_t errlen)
{
    static const char *const tables[] = {"experiments", "trials"};
    sqlite3 *db = store_db(st);
    int rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    for (size_t i = 0; i < sizeof tables / sizeof tables[0] && rc == SQLITE_OK; i++) {
        char sql[512];
        sqlite3_stmt *q = NULL;
        fmt(sql, sizeof sql,
            "INSERT INTO id_floor(name,id) VALUES('%s',?1+max(coalesce((SELECT max(id) FROM %s),0),"
            "coalesce((SELECT id FROM id_floor WHERE name='%s'),0))) ON CONFLICT(name) DO UPDATE SET id=excluded.id",
            tables[i], tables[i], tables[i]);
        rc = sqlite3_prepare_v2(db, sql, -1, &q, NULL);
        if (rc == SQLITE_OK) sqlite3_bind_int64(q, 1, RESTORE_ID_GAP);
        if (rc == SQLITE_OK && (rc = sqlite3_step(q)) == SQLITE_DONE) rc = SQLITE_OK;
        sqlite3_finalize(q);
    }
    if (rc == SQLITE_OK) rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    if (rc == SQLITE_OK) return 0;
    fmt(err, errlen, "raising the id floors: %s", sqlite3_errmsg(db));
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return HF_EDB;
}

/* Copy src to dst (new) durably. */
static int copy_file(const char *src, const char *dst)
{
    char tmp[PATH_MAX], hex[HF_SHA256_HEX];
    int64_t n;
    fmt(tmp, sizeof tmp, "%s.restore-tmp", dst);
    int in = open(src, O_RDONLY | O_CLOEXEC), out = -1, rc;
    if (in < 0) return hf_err_from_errno(errno);
    out = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (out < 0) { rc = hf_err_from_errno(errno); close(in); return rc; }
    rc = hf_sha256_fd(in, out, hex, &n);
    if (rc == 0 && fsync(out) != 0) rc = hf_err_from_errno(errno);
    close(in);
    close(out);
    if (rc == 0 && link(tmp, dst) != 0) rc = hf_err_from_errno(errno);   /* link: never replaces dst */
    unlink(tmp);
    if (rc == 0) rc = hf_file_fsync_parent(dst);
    return rc;
}

/* Remove path and its -wal and -shm files. */
static void unlink_db(const char *path)
{
    char p[PATH_MAX];
    unlink(path);
    fmt(p, sizeof p, "%s-wal", path);
    unlink(p);
    fmt(p, sizeof p, "%s-shm", path);
    unlink(p);
}

int backup_restore(const char *snap, const char *db_path, const char *ck_dir, char *err, size_t errlen)
{
    char path[PATH_MAX], dbfile[PATH_MAX];
    struct stat sb;
    json_error_t je;
    int64_t objects = 0;
    int rc;
    fmt(path, sizeof path, "%s-wal", db_path);
    if (stat(db_path, &sb) == 0 || stat(path, &sb) == 0) {
        fmt(err, errlen, "%s exists: restore writes a new database, it never overwrites one", db_path);
        return HF_EEXIST;
    }
    fmt(path, sizeof path, "%s/" BACKUP_MANIFEST, snap);
    json_t *man = json_load_file(path, 0, &je);
    if (!man || json_integer_value(json_object_get(man, "format")) != 1) {
        fmt(err, errlen, "%s: %s", path, man ? "not a format 1 manifest" : je.text);
        json_decref(man);
        return HF_EPARSE;
    }
    fmt(dbfile, sizeof dbfile, "%s/" BACKUP_DB_FILE, snap);
    if ((rc = check_db(dbfile, man, err, errlen))) goto end;
    if ((mkdir(ck_dir, 0755) != 0 && errno != EEXIST) || (rc = hf_file_fsync_parent(ck_dir))) {
        rc = rc ? rc : hf_err_from_errno(errno);
        fmt(err, errlen, "cannot create %s: %s", ck_dir, hf_strerror(rc));
        goto end;
    }
    if ((rc = restore_objects(snap, dbfile, man, ck_dir, &objects, err, errlen))) goto end;
    char tmpdb[PATH_MAX];
    fmt(tmpdb, sizeof tmpdb, "%s.restoring", db_path);
    unlink_db(tmpdb);   /* a crashed restore's leftover, never a database in use */
    if ((rc = copy_file(dbfile, tmpdb))) {
        fmt(err, errlen, "writing %s: %s", tmpdb, hf_strerror(rc));
        goto end;
    }
    store *st = NULL;
    int version = 0;
    if ((rc = store_open(tmpdb, &st, err, errlen)) == 0) {
        version = store_version(st);
        rc = raise_id_floors(st, err, errlen);
        store_close(st);
    }
    fmt(path, sizeof path, "%s-wal", tmpdb);
    if (rc == 0 && stat(path, &sb) == 0) {
        fmt(err, errlen, "%s was not checkpointed on close", path);
        rc = HF_EDB;
    }
    if (rc == 0 && link(tmpdb, db_path) != 0) {   /* link: never replaces db_path */
        rc = hf_err_from_errno(errno);
        fmt(err, errlen, "writing %s: %s", db_path, hf_strerror(rc));
    }
    unlink_db(tmpdb);
    if (rc == 0 && (rc = hf_file_fsync_parent(db_path))) fmt(err, errlen, "%s: %s", db_path, hf_strerror(rc));
    if (rc == 0)
        hf_info("restored %s into %s (schema v%d, new ids from %d above the snapshot's) and %lld objects into %s",
                snap, db_path, version, RESTORE_ID_GAP, (long long)objects, ck_dir);
end:
    json_decref(man);
    return rc;
}
