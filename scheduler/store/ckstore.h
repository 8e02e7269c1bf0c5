/*
 * ckstore.h — the scheduler's content-addressed checkpoint store
 * (docs/scheduler.md, "The checkpoint store").
 *
 * Layout under the store's directory (--checkpoint-dir):
 *
 *   objects/ab/abcdef...   one file per distinct content, named by the
 *                          lowercase hex SHA-256 of its bytes
 *   tmp/up-XXXXXX          uploads being received; removed when the
 *                          upload fails or is interrupted, and every one
 *                          of them at open (left by a crash)
 *
 * Invariants: an object file exists only complete and verified (its size
 * and SHA-256 were the client's declared ones, it was fsynced, renamed
 * into place and its directory fsynced); a checkpoints row naming an
 * object is written only after that. The same content uploaded twice is
 * one object. An upload is streamed: it holds one open file and a hash
 * context, never the body.
 *
 * Workload: a few concurrent uploads of up to --max-checkpoint-mb each,
 * from libmicrohttpd's pool threads (one upload belongs to one request,
 * so an upload is used by one thread at a time); listings and downloads
 * from any thread. The store's rows are written on its own SQLite
 * connection (the core's writer uses BEGIN IMMEDIATE and a busy timeout,
 * so both wait for each other's short transactions).
 */
#ifndef HF_CKSTORE_H
#define HF_CKSTORE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#define CKSTORE_HASH_LEN 64   /* hex characters of a SHA-256 */

/* SQL: the metrics reported at one checkpoint's step, as a JSON object of
 * each metric's last report there (schema/0014; the checkpoint list and
 * retention's fill both use it). TRIAL and STEP are SQL expressions. */
#define CKSTORE_STEP_METRICS_SQL(TRIAL, STEP)                                                        \
    "(SELECT json_group_object(name,value) FROM (SELECT m.name,m.value,MAX(m.seq) FROM metrics m " \
    "WHERE m.trial_id=" TRIAL " AND m.step=" STEP " GROUP BY m.name))"

typedef struct ckstore ckstore;
typedef struct ckstore_upload ckstore_upload;

/* A stored checkpoint of a trial (one row). */
typedef struct ckstore_info {
    char    sha256[CKSTORE_HASH_LEN + 1];
    int64_t size;
    int64_t step;       /* -1: none given */
    int64_t attempt;
    int64_t time;       /* ms since the epoch, when it was recorded */
    char    name[256];  /* the file name the trial wrote ("" = none; ckstore_name_valid) */
    int64_t agent_id;   /* the uploading agent, 0 = unknown */
} ckstore_info;

/* Open (creating dir, objects/ and tmp/ if needed) the store at dir,
 * remove every temp file a crash left, count the objects. db_path: the
 * scheduler's migrated database (rows are recorded there), or NULL for a
 * store of files only (ckstore_record and ckstore_list then answer
 * HF_EUNSUP). max_bytes: the largest object accepted.
 * RET 0 with *out, or HF_E* with a message in err. */
int  ckstore_open(const char *dir, const char *db_path, int64_t max_bytes, ckstore **out, char *err, size_t errlen);
void ckstore_close(ckstore *ck);
const char *ckstore_dir(const ckstore *ck);

/* Objects and their total bytes now (for /metrics). */
void ckstore_stats(ckstore *ck, int64_t *objects, int64_t *bytes);

/* Call fn(ctx, sha256, stat) for every object file (objects/ab/<hash>,
 * regular files with a valid name), in directory order; fn must not call
 * into the store's lock holders. RET 0, or HF_E* when objects/ cannot be
 * read. */
int ckstore_foreach_object(ckstore *ck, void (*fn)(void *ctx, const char *sha256, const struct stat *sb), void *ctx);

/* Is s exactly 64 lowercase hex characters? (Nothing else ever names an
 * object, so no path can be built from anything else.) */
int ckstore_hash_valid(const char *s);

/* Is s a checkpoint file name an agent may create: 1-255 bytes, no '/',
 * not "." or "..", no control characters? ("" is valid: no name.) */
int ckstore_name_valid(const char *s);

/* shared_fs mode (docs/scheduler.md): agents write objects into the
 * store's directory themselves; ckstore_adopt then hashes an object
 * before it is recorded. */
void ckstore_set_shared(ckstore *ck, int shared);
int  ckstore_shared(const ckstore *ck);

/* An object already in objects/ (shared_fs: written there by an agent;
 * else: uploaded before, by anyone) is to be recorded: check its size and,
 * in shared_fs mode, its SHA-256 (streamed). A file whose bytes do not
 * match its name is removed (it can never become valid). RET 0 with
 * info's sha256 and size set, HF_EINVAL (malformed hash), HF_ENOTFOUND (no
 * such object), HF_ECORRUPT (size or hash differ; msg says which), HF_EIO. */
int ckstore_adopt(ckstore *ck, const char *sha256, int64_t size, ckstore_info *info, char *msg, size_t msglen);

/* Start receiving an object of size bytes whose SHA-256 the client says
 * is sha256 (checked with ckstore_hash_valid). RET 0 with *out, HF_EINVAL
 * (bad hash or negative size), HF_ETOOBIG (size over the store's
 * maximum), HF_ENOSPC, HF_EIO. */
int ckstore_upload_begin(ckstore *ck, const char *sha256, int64_t size, ckstore_upload **out);
/* Append n bytes. After a failure the upload keeps its first error, its
 * temp file is already removed, and later writes are ignored.
 * RET 0, HF_ENOSPC (disk full), HF_ETOOBIG (more than declared), HF_EIO. */
int ckstore_upload_write(ckstore_upload *up, const void *data, size_t n);
/* Finish: verify size and hash, fsync, rename into objects/ (or drop the
 * copy when the object exists already), fsync the directory; up is freed
 * in every case. RET 0 with *info's sha256 and size set; HF_ECORRUPT
 * (size or hash differ from the declared ones: nothing is visible, msg
 * says which), the write's first error, HF_ENOSPC, HF_EIO. */
int ckstore_upload_commit(ckstore_upload *up, ckstore_info *info, char *msg, size_t msglen);
/* Give up an upload (interrupted request): its temp file is removed. NULL ok. */
void ckstore_upload_abort(ckstore_upload *up);

/* Record a committed object as a checkpoint of trial_id (info's sha256,
 * size, step, attempt, name, agent_id; info->time is set here). The
 * object must still be there (checked under the lock ckstore_release
 * holds, so a row never names an object that garbage collection removed;
 * the client uploads again). RET 0, HF_ENOTFOUND (no such trial),
 * HF_ECORRUPT (the object is gone), HF_ENOSPC, HF_EDB, HF_EUNSUP (no
 * database). */
int ckstore_record(ckstore *ck, int64_t trial_id, ckstore_info *info);
/* {"checkpoints": [{sha256, size, step, attempt, time, name, agent_id,
 * metrics, scored}], "scored_step"} of trial_id, oldest first (the newest
 * last): metrics {"name": value} reported at the row's step; scored true on
 * the newest row at scored_step, the step of the report that scored the
 * trial's objective (null when unknown). RET 0 with *out (caller owns), HF_EDB,
 * HF_ENOMEM, HF_EUNSUP. */
int ckstore_list(ckstore *ck, int64_t trial_id, json_t **out);

/* Remove object sha256 when nothing names it any more: no checkpoints row
 * and no experiment's "context" (docs/scheduler.md, "Checkpoint
 * retention"). The check and the unlink run under the store's lock, which
 * ckstore_record also holds. *removed (may be NULL): its bytes, 0 when
 * kept or absent. RET 0, HF_EINVAL (malformed hash), HF_EDB, HF_EIO,
 * HF_EUNSUP (no database). */
int ckstore_release(ckstore *ck, const char *sha256, int64_t *removed);
/* Record a committed object as an uploaded code context (a contexts row
 * without an experiment; schema 0006, docs/scheduler.md "Code contexts").
 * RET 0, HF_ENOSPC, HF_EDB, HF_EUNSUP (no database). */
int ckstore_context_record(ckstore *ck, const char *sha256, int64_t size);

/* Open the object sha256 for reading. RET 0 with *fd (caller closes) and
 * *size, HF_EINVAL (malformed hash), HF_ENOTFOUND, HF_EIO. */
int ckstore_open_object(ckstore *ck, const char *sha256, int *fd, int64_t *size);

#endif
