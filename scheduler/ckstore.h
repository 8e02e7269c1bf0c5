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

#define CKSTORE_HASH_LEN 64   /* hex characters of a SHA-256 */

typedef struct ckstore ckstore;
typedef struct ckstore_upload ckstore_upload;

/* A stored checkpoint of a trial (one row). */
typedef struct ckstore_info {
    char    sha256[CKSTORE_HASH_LEN + 1];
    int64_t size;
    int64_t step;       /* -1: none given */
    int64_t attempt;
    int64_t time;       /* ms since the epoch, when it was recorded */
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

/* Is s exactly 64 lowercase hex characters? (Nothing else ever names an
 * object, so no path can be built from anything else.) */
int ckstore_hash_valid(const char *s);

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
 * size, step, attempt; info->time is set here). RET 0, HF_ENOTFOUND (no
 * such trial), HF_ENOSPC, HF_EDB, HF_EUNSUP (no database). */
int ckstore_record(ckstore *ck, int64_t trial_id, ckstore_info *info);
/* {"checkpoints": [{sha256, size, step, attempt, time}]} of trial_id,
 * oldest first (the newest last). RET 0 with *out (caller owns), HF_EDB,
 * HF_ENOMEM, HF_EUNSUP. */
int ckstore_list(ckstore *ck, int64_t trial_id, json_t **out);

/* Open the object sha256 for reading. RET 0 with *fd (caller closes) and
 * *size, HF_EINVAL (malformed hash), HF_ENOTFOUND, HF_EIO. */
int ckstore_open_object(ckstore *ck, const char *sha256, int *fd, int64_t *size);

#endif
