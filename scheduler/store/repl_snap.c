/*
 * repl_snap.c — a standby's bootstrap snapshot (GET
 * /api/v1/replication/snapshot; docs/protocol.md "Replication").
 *
 * Capture is switched on first (repl_capture_enable returns once every
 * transaction that began without a session has ended), then SQLite's
 * online backup copies the database from one read transaction of its own
 * connection into a temp file beside it: the copy holds exactly the
 * transactions up to its repl_state.lsn, and every later one is in the
 * ring. The file is unlinked as soon as it is open, so it disappears with
 * the descriptor whatever happens to the request. Readers never block the
 * writer (WAL), so the heartbeats go on meanwhile; the copy runs on the
 * requesting thread (a bootstrap is rare).
 */
#include "scheduler/store/repl.h"
#include "scheduler/store/repl_int.h"

#include "hf_err.h"
#include "hf_sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Copy db_path into the new file dst from one read transaction. RET 0 or HF_E*. */
static int copy_db(const char *db_path, const char *dst, int64_t *lsn, char *err, size_t errlen)
{
    sqlite3 *src = NULL, *out = NULL;
    sqlite3_backup *b = NULL;
    sqlite3_stmt *q = NULL;
    int rc = HF_EDB, src_rc;
    if (sqlite3_open_v2(db_path, &src, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK ||
        sqlite3_open_v2(dst, &out, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "snapshot: cannot open %s: %s", src && out ? dst : db_path,
                 sqlite3_errmsg(src && out ? out : src));
        goto end;
    }
    sqlite3_busy_timeout(src, 5000);
    /* The read transaction begins under repl_mu: a commit visible to it is
     * in the ring too, else the standby's first stream request (after =
     * this snapshot's LSN) would find the primary "behind" and 409. */
    if (repl_read_begin(src, "BEGIN; SELECT count(*) FROM sqlite_schema") != SQLITE_OK ||
        !(b = sqlite3_backup_init(out, "main", src, "main"))) {
        snprintf(err, errlen, "snapshot of %s: %s", db_path, sqlite3_errmsg(b ? src : out));
        goto end;
    }
    while ((src_rc = sqlite3_backup_step(b, 1024)) == SQLITE_OK || src_rc == SQLITE_BUSY || src_rc == SQLITE_LOCKED)
        ;
    if ((src_rc = sqlite3_backup_finish(b)) != SQLITE_OK) {
        snprintf(err, errlen, "snapshot of %s: %s", db_path, sqlite3_errstr(src_rc));
        rc = src_rc == SQLITE_FULL ? HF_ENOSPC : HF_EDB;
        goto end;
    }
    /* One self-contained file (no -wal beside it), and the LSN it holds. */
    if (sqlite3_exec(out, "PRAGMA journal_mode=DELETE", NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(out, "SELECT lsn FROM repl_state WHERE id = 1", -1, &q, NULL) != SQLITE_OK ||
        sqlite3_step(q) != SQLITE_ROW) {
        snprintf(err, errlen, "snapshot %s: %s", dst, sqlite3_errmsg(out));
        goto end;
    }
    *lsn = sqlite3_column_int64(q, 0);
    rc = 0;
end:
    sqlite3_finalize(q);
    if (src) sqlite3_exec(src, "COMMIT", NULL, NULL, NULL);
    sqlite3_close_v2(src);
    sqlite3_close_v2(out);
    return rc;
}

int repl_snapshot(const char *db_path, int *fd, int64_t *size, int64_t *lsn, char sha[65], char *err, size_t errlen)
{
    char tmp[4096];
    *fd = -1;
    if (snprintf(tmp, sizeof tmp, "%s.snap-XXXXXX", db_path) >= (int)sizeof tmp) return HF_EINVAL;
    int t = mkstemp(tmp);
    if (t < 0) {
        snprintf(err, errlen, "snapshot: cannot create a temp file beside %s", db_path);
        return hf_err_from_errno(errno);
    }
    close(t);
    repl_capture_enable();
    int rc = copy_db(db_path, tmp, lsn, err, errlen);
    int f = rc ? -1 : open(tmp, O_RDONLY | O_CLOEXEC);
    unlink(tmp);
    char j[4200];
    snprintf(j, sizeof j, "%s-journal", tmp);
    unlink(j);
    if (rc) return rc;
    if (f < 0) { snprintf(err, errlen, "snapshot: cannot reopen %s", tmp); return HF_EIO; }
    if ((rc = hf_sha256_fd(f, -1, sha, size)) || lseek(f, 0, SEEK_SET) != 0) {
        snprintf(err, errlen, "snapshot: cannot hash %s", tmp);
        close(f);
        return rc ? rc : HF_EIO;
    }
    *fd = f;
    return 0;
}
