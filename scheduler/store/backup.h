/*
 * backup.h — online backups of the scheduler's two stores, and their
 * restore (docs/operations.md, "Backup and restore").
 *
 * A snapshot is a directory DIR/hf-YYYYMMDDTHHMMSSmmmZ holding
 *
 *   hyperfarm.db    a consistent copy of the database (SQLite's online
 *                   backup API, in slices, inside one read transaction:
 *                   the writer and the heartbeats are never blocked)
 *   objects/ab/...  every checkpoint-store object that a row of that copy
 *                   names, SHA-256 verified when copied
 *   manifest.json   time, schema version, row counts, the database
 *                   file's size and SHA-256, object counts
 *
 * built under DIR/.tmp-<name> and renamed into place only when complete
 * and fsynced, so a snapshot directory that exists is whole. Objects are
 * content-addressed, so a snapshot links (link(2)) the objects the
 * newest earlier snapshot in DIR already holds and copies only the others:
 * each snapshot stays self-contained (pruning removes whole directories)
 * while the bytes copied are only the new objects'. backup_object_copy is
 * the one verified object copy (a standby's object stream is meant to
 * reuse it).
 *
 * One backup runs at a time in a process (a second one is HF_ESTATE).
 * The paths are the scheduler's own filesystem's.
 */
#ifndef HF_BACKUP_H
#define HF_BACKUP_H

#include "scheduler/store/ckstore.h"

#include <jansson.h>

#include <stddef.h>
#include <stdint.h>

#define BACKUP_DB_FILE "hyperfarm.db"
#define BACKUP_MANIFEST "manifest.json"

/* SQL: every object hash a database's rows name (checkpoints, uploaded
 * code contexts, experiments' "context"): what a snapshot must hold. */
#define BACKUP_REFERENCED_SQL                                                                           \
    "SELECT sha256 FROM checkpoints WHERE sha256 IS NOT NULL UNION SELECT sha256 FROM contexts UNION " \
    "SELECT json_extract(config,'$.context') FROM experiments WHERE json_valid(config) AND "          \
    "json_type(config,'$.context')='text'"

typedef struct backup_result {
    char    snapshot[4096];    /* the snapshot's directory */
    int64_t db_bytes;
    int64_t objects, objects_copied, objects_linked, objects_missing;
    int64_t bytes_copied;
    int64_t duration_ms;
} backup_result;

/* May dir receive snapshots of the database db_path and the checkpoint
 * store ck_dir (NULL: none)? dir must be absolute, without "." or ".."
 * components, an existing directory, not the database's own directory and
 * not inside the checkpoint store. RET 0, or HF_EINVAL / HF_ENOTFOUND with
 * the reason in err. */
int backup_check_dir(const char *dir, const char *db_path, const char *ck_dir, char *err, size_t errlen);

/* Take a snapshot of db_path and of the objects its rows name from ck
 * (NULL: the database only) into dir (backup_check_dir first); keep > 0:
 * remove the oldest snapshots in dir beyond keep. pages_per_step: pages
 * copied per sqlite3_backup_step (0: 256). RET 0 with *res filled,
 * HF_ESTATE (a backup is running), HF_ECORRUPT (a live object's bytes do
 * not match its name), HF_ENOSPC, HF_EIO, HF_EDB; err says what. */
int backup_take(const char *db_path, ckstore *ck, const char *dir, int keep, int pages_per_step,
                backup_result *res, char *err, size_t errlen);

/* Write a ready-to-start database db_path and checkpoint store ck_dir from
 * the snapshot directory snap, after verifying the manifest, the database
 * file's SHA-256, PRAGMA integrity_check and every object's SHA-256.
 * Refuses (HF_EEXIST) when db_path or its -wal exists. RET 0, HF_EEXIST,
 * HF_ECORRUPT, HF_EPARSE (manifest), HF_EIO, HF_EDB; err says what. */
int backup_restore(const char *snap, const char *db_path, const char *ck_dir, char *err, size_t errlen);

/* Copy the object sha256 of size bytes from src_fd into the store
 * directory root (root/objects/ab/<sha256>) through a temp file, verifying
 * the SHA-256, fsyncing the file and the directories it creates. Nothing
 * is visible unless it is whole and verified. RET 0, HF_ECORRUPT, HF_E*. */
int backup_object_copy(int src_fd, int64_t size, const char *sha256, const char *root);

/* Write backups at most bytes_per_s (0: no limit beyond a 1 ms pause per
 * slice): --backup-rate-mb, so a backup onto the database's own disk
 * leaves the heartbeats' fsyncs room. Process-wide; any thread. */
void backup_set_rate(int64_t bytes_per_s);

/* Make the running backup (and any started until backup_cancel(0)) stop
 * at its next slice or object with HF_ESTATE, leaving nothing behind. */
void backup_cancel(int on);

/* ---- backup_job.c: the service that runs them (thread "hf-backup") ----
 *
 * One thread takes the scheduled snapshots (every interval_s seconds into
 * dir, keeping keep; interval_s 0: none) and the ones an admin asks for
 * (backup_request: POST /api/v1/backups), one at a time, so no HTTP
 * thread ever waits for a backup. The last BACKUP_JOBS requests are kept
 * for GET /api/v1/backups/{id}. One service per process (the API reaches
 * it through these functions). */
#define BACKUP_JOBS 16
enum backup_state { BACKUP_QUEUED, BACKUP_RUNNING, BACKUP_DONE, BACKUP_FAILED };

/* Start the service for the database db_path and the store ck (both
 * outlive it); dir may be NULL when interval_s is 0. RET 0, HF_ESTATE
 * (already started), HF_ENOMEM. */
int  backup_service_start(const char *db_path, ckstore *ck, const char *dir, int64_t interval_s, int keep);
/* Cancel a running backup, stop and join the thread. Safe when not started. */
void backup_service_stop(void);
/* Queue a snapshot into dir for user (checked at once with
 * backup_check_dir). RET 0 with *id, HF_EINVAL / HF_ENOTFOUND (dir; err
 * says why), HF_ESTATE (a requested backup is queued or running),
 * HF_EUNSUP (no service). */
int  backup_request(const char *dir, const char *user, int64_t *id, char *err, size_t errlen);
/* {"id", "state": queued|running|done|failed, "dir", "user", "requested_at",
 * "ended_at", "error", and when done the backup_result's fields} of a
 * request. RET 0 with *out (caller owns), HF_ENOTFOUND, HF_EUNSUP. */
int  backup_job_json(int64_t id, json_t **out);

#endif
