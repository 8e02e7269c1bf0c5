/*
 * standby_frames.c — the replication stream's frames (docs/scheduler.md,
 * "Standby and failover") and the objects a changeset names.
 *
 * An answer of GET /replication/stream is a run of frames
 * [u64 lsn][u64 term][u32 flags = 0][u32 len][len bytes changeset], all
 * big-endian. The bytes come from the network: every length is checked
 * against what is left before it is used, and a changeset is walked by
 * standby_changeset_valid (every table header, record and length within
 * its bytes) before SQLite's iterator sees it: SQLite 3.40's iterator
 * spins forever on a truncated table header.
 * tests/fuzz/fuzz_standby_frames.c feeds both functions arbitrary bytes.
 */
/* The session extension's declarations (libsqlite3 is built with it). */
#ifndef SQLITE_ENABLE_SESSION
#define SQLITE_ENABLE_SESSION 1
#endif
#ifndef SQLITE_ENABLE_PREUPDATE_HOOK
#define SQLITE_ENABLE_PREUPDATE_HOOK 1
#endif
#include "scheduler/standby/standby.h"

#include "hf_be.h"
#include "hf_err.h"

#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

int standby_frame_next(const uint8_t *buf, size_t n, size_t *off, standby_frame *f)
{
    if (*off > n) return HF_EPARSE;
    if (*off == n) return 0;
    if (n - *off < STANDBY_FRAME_HDR) return HF_EPARSE;
    const uint8_t *p = buf + *off;
    uint64_t lsn = hf_be_get(p, 8), term = hf_be_get(p + 8, 8);
    uint32_t flags = (uint32_t)hf_be_get(p + 16, 4), len = (uint32_t)hf_be_get(p + 20, 4);
    if (lsn > INT64_MAX || term > INT64_MAX || flags) return HF_EPARSE;
    if (len > STANDBY_FRAME_MAX) return HF_ETOOBIG;
    if (n - *off - STANDBY_FRAME_HDR < len) return HF_EPARSE;
    f->lsn = (int64_t)lsn;
    f->term = (int64_t)term;
    f->flags = flags;
    f->len = len;
    f->data = p + STANDBY_FRAME_HDR;
    *off += STANDBY_FRAME_HDR + (size_t)len;
    return 1;
}

/* SQLite's varint (1..9 bytes) at p[*i] of n. RET 0, or -1 past the end. */
static int varint(const uint8_t *p, size_t n, size_t *i, uint64_t *v)
{
    *v = 0;
    for (int k = 0; k < 9; k++) {
        if (*i >= n) return -1;
        uint8_t b = p[(*i)++];
        if (k == 8) { *v = *v << 8 | b; return 0; }
        *v = *v << 7 | (b & 0x7f);
        if (!(b & 0x80)) return 0;
    }
    return 0;
}

/* One record of ncol values at p[*i]. RET 0 or -1 (truncated, bad type). */
static int record(const uint8_t *p, size_t n, size_t *i, uint64_t ncol)
{
    for (uint64_t c = 0; c < ncol; c++) {
        uint64_t len;
        if (*i >= n) return -1;
        switch (p[(*i)++]) {
        case 0: case 5: break;                                   /* undefined, NULL */
        case 1: case 2: if (n - *i < 8) return -1; *i += 8; break; /* integer, real */
        case 3: case 4:                                          /* text, blob */
            if (varint(p, n, i, &len) || len > n - *i) return -1;
            *i += (size_t)len;
            break;
        default: return -1;
        }
    }
    return 0;
}

/* Walk cs (n bytes) as standby_changeset_valid says; *objects (may be
 * NULL) is set when a table header names checkpoints or contexts, the
 * tables whose rows name objects. RET 0 or HF_EPARSE. */
static int walk(const void *cs, size_t n, int *objects)
{
    const uint8_t *p = cs;
    size_t i = 0;
    uint64_t ncol = 0;
    int have_table = 0;
    while (i < n) {
        uint8_t op = p[i++];
        if (op == 'T') {   /* table header: ncol, ncol PK flags, NUL-terminated name */
            if (varint(p, n, &i, &ncol) || ncol == 0 || ncol > 32767 || ncol > n - i) return HF_EPARSE;
            i += (size_t)ncol;
            const uint8_t *z = i < n ? memchr(p + i, 0, n - i) : NULL;
            if (!z) return HF_EPARSE;
            if (objects && (!strcmp((const char *)p + i, "checkpoints") || !strcmp((const char *)p + i, "contexts")))
                *objects = 1;
            i = (size_t)(z - p) + 1;
            have_table = 1;
            continue;
        }
        if (!have_table || i >= n) return HF_EPARSE;
        i++;   /* the indirect flag */
        if (op == SQLITE_INSERT || op == SQLITE_DELETE) {
            if (record(p, n, &i, ncol)) return HF_EPARSE;
        } else if (op == SQLITE_UPDATE) {
            if (record(p, n, &i, ncol) || record(p, n, &i, ncol)) return HF_EPARSE;
        } else {
            return HF_EPARSE;
        }
    }
    return 0;
}

int standby_changeset_valid(const void *cs, size_t n) { return walk(cs, n, NULL); }

int standby_frames_check(const uint8_t *buf, size_t n, int64_t after, int64_t term, char *err, size_t errlen)
{
    size_t off = 0;
    standby_frame f;
    int count = 0, rc;
    while ((rc = standby_frame_next(buf, n, &off, &f)) == 1) {
        if (after == INT64_MAX || f.lsn != after + 1) {
            snprintf(err, errlen, "frame %d has lsn %lld, expected %lld", count, (long long)f.lsn,
                     (long long)after + 1);
            return HF_ESTATE;
        }
        if (f.term != term) {
            snprintf(err, errlen, "frame lsn %lld has term %lld, expected %lld", (long long)f.lsn,
                     (long long)f.term, (long long)term);
            return HF_ESTATE;
        }
        if (standby_changeset_valid(f.data, f.len)) {
            snprintf(err, errlen, "frame lsn %lld: a malformed changeset", (long long)f.lsn);
            return HF_EPARSE;
        }
        after = f.lsn;
        if (count == INT32_MAX) break;
        count++;
    }
    if (rc == HF_ETOOBIG) {
        snprintf(err, errlen, "the frame after lsn %lld is larger than a standby takes (%u MiB)", (long long)after,
                 STANDBY_FRAME_MAX >> 20);
        return HF_ETOOBIG;
    }
    if (rc < 0) {
        snprintf(err, errlen, "malformed frame after %d frames (offset %zu of %zu)", count, off, n);
        return HF_EPARSE;
    }
    if (!count) {
        snprintf(err, errlen, "an answer without frames");
        return HF_EPARSE;
    }
    return count;
}

/* The text of column col of the change (new values of an INSERT/UPDATE;
 * NULL when absent or not text). */
static sqlite3_value *change_value(sqlite3_changeset_iter *it, int op, int col)
{
    sqlite3_value *v = NULL;
    if (op == SQLITE_INSERT || op == SQLITE_UPDATE) {
        if (sqlite3changeset_new(it, col, &v) != SQLITE_OK) return NULL;
    }
    return v;
}

/* Report the object of one change to fn. RET 0 or fn's code. */
static int change_object(sqlite3_changeset_iter *it, int op, int sha_col, int size_col, standby_object_fn *fn,
                         void *ctx)
{
    sqlite3_value *h = change_value(it, op, sha_col);
    if (!h || sqlite3_value_type(h) != SQLITE_TEXT || sqlite3_value_bytes(h) != 64) return 0;
    standby_object o;
    memcpy(o.sha256, sqlite3_value_text(h), 64);
    o.sha256[64] = 0;
    for (int i = 0; i < 64; i++)
        if (!((o.sha256[i] >= '0' && o.sha256[i] <= '9') || (o.sha256[i] >= 'a' && o.sha256[i] <= 'f'))) return 0;
    sqlite3_value *s = size_col >= 0 ? change_value(it, op, size_col) : NULL;
    o.size = s && sqlite3_value_type(s) == SQLITE_INTEGER ? sqlite3_value_int64(s) : -1;
    if (o.size < -1) o.size = -1;
    return fn(ctx, &o);
}

int standby_changeset_objects(const void *cs, int len, const standby_cols *cols, standby_object_fn *fn, void *ctx)
{
    sqlite3_changeset_iter *it = NULL;
    int rc = 0, src = SQLITE_DONE;
    if (len < 0) return HF_EPARSE;
    if (len == 0) return 0;
    /* A changeset's tables start with 'T' ('P' is a patchset, which the
     * primary never sends; SQLite's iterator may spin on a truncated one). */
    int objects = 0;
    if (((const uint8_t *)cs)[0] != 'T' || walk(cs, (size_t)len, &objects)) return HF_EPARSE;
    /* most frames (heartbeats) name no object table: SQLite's iterator,
     * a call per change, is not needed to learn that */
    if (!objects) return 0;
    if (sqlite3changeset_start(&it, len, (void *)cs) != SQLITE_OK) return HF_EPARSE;
    int64_t budget = (int64_t)len + 1;   /* every change takes at least one byte */
    while (budget-- > 0 && (src = sqlite3changeset_next(it)) == SQLITE_ROW) {
        const char *tab;
        int ncol, op, indirect;
        if (sqlite3changeset_op(it, &tab, &ncol, &op, &indirect) != SQLITE_OK) { rc = HF_EPARSE; break; }
        int sha = -1, size = -1;
        if (!strcmp(tab, "checkpoints")) sha = cols->ck_sha, size = cols->ck_size;
        else if (!strcmp(tab, "contexts")) sha = cols->cx_sha, size = cols->cx_size;
        if (sha < 0 || sha >= ncol || size >= ncol) continue;
        if ((rc = change_object(it, op, sha, size, fn, ctx))) break;
    }
    if (!rc && src != SQLITE_DONE && src != SQLITE_ROW) rc = HF_EPARSE;
    if (sqlite3changeset_finalize(it) != SQLITE_OK && !rc) rc = HF_EPARSE;
    return rc;
}
