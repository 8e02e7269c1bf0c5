/*
 * standby.h — a standby scheduler (docs/scheduler.md, "Standby and
 * failover"): a live replica of a primary's database and checkpoint
 * store, kept by applying the primary's session changesets
 * (GET /api/v1/replication/stream) and fetching the objects they name
 * (GET /api/v1/replication/objects/#), and its promotion to primary.
 *
 * The pieces:
 *   standby_frames.c  the stream's frame decoder and the object hashes a
 *                     changeset inserts (pure functions on untrusted bytes)
 *   standby_boot.c    bootstrap: snapshot download, verification, durable
 *                     rename, object fetch; moving a database aside
 *   standby.c         the stream loop (thread "hf-standby"), the apply
 *                     thread ("hf-sb-apply"), promotion and the re-exec
 *                     that ends a standby's life
 *   standby_spool.c   the spool: answers durable (and acknowledged)
 *                     before they are applied
 *   failover.c        the witness votes and the automatic-promotion rule
 *   standby_peers.c   a primary's peer check (thread "hf-peers"), fencing
 *
 * One standby per process: the loop's state is file-static (the API
 * reaches it through standby_figures, standby_peers_json and
 * standby_request_promote).
 */
#ifndef HF_STANDBY_H
#define HF_STANDBY_H

#include "hf_http.h"

#include <jansson.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>

/* ---------- standby_frames.c ---------- */

#define STANDBY_FRAME_HDR  24              /* u64 lsn, u64 term, u32 flags, u32 len (big-endian) */
#define STANDBY_FRAME_MAX  (64u << 20)     /* no single changeset is larger */

typedef struct standby_frame {
    int64_t        lsn, term;
    uint32_t       flags;
    const uint8_t *data;     /* points into the decoded buffer */
    uint32_t       len;
} standby_frame;

/* Decode the frame at *off of buf (n bytes) and advance *off past it.
 * RET 1 with *f filled; 0 at the end (*off == n); HF_ETOOBIG for a
 * well-formed header whose length is over STANDBY_FRAME_MAX (one
 * transaction larger than a standby takes through the stream: it
 * bootstraps, the snapshot holds it); HF_EPARSE for a truncated header or
 * body, flags != 0, or an lsn/term that does not fit an int64_t. */
int standby_frame_next(const uint8_t *buf, size_t n, size_t *off, standby_frame *f);

/* Check a whole answer: frames consecutive from after+1, every term equal
 * to term, at least one frame, each a well-formed changeset
 * (standby_changeset_valid). RET the number of frames, or HF_EPARSE /
 * HF_ESTATE (a gap, a repeat or another term) with err filled. */
int standby_frames_check(const uint8_t *buf, size_t n, int64_t after, int64_t term, char *err, size_t errlen);

/* Is cs (n bytes) a well-formed changeset: 'T' table headers (column
 * count, PK flags, NUL-terminated name) each followed by INSERT/DELETE/
 * UPDATE changes whose records lie within n? Walked without SQLite (its
 * iterator may spin on a truncated header). RET 0 or HF_EPARSE. */
int standby_changeset_valid(const void *cs, size_t n);

/* One object a changeset names. */
typedef struct standby_object {
    char    sha256[65];
    int64_t size;           /* -1 when the change does not carry it */
} standby_object;

/* Call fn(ctx, obj) for every checkpoints/contexts row the changeset
 * (len bytes) inserts, or updates, with a valid SHA-256 in column sha_col
 * and its size in size_col (the table's column numbers: ck_* for
 * checkpoints, cx_* for contexts). RET 0, HF_EPARSE (a malformed
 * changeset), or fn's non-zero return. */
typedef int standby_object_fn(void *ctx, const standby_object *o);
typedef struct standby_cols {
    int ck_sha, ck_size, cx_sha, cx_size;
} standby_cols;
int standby_changeset_objects(const void *cs, int len, const standby_cols *cols, standby_object_fn *fn, void *ctx);

/* ---------- standby_boot.c ---------- */

/* Move db (and its -wal, -shm) aside to db.<tag>-<unixtime> (tag
 * "diverged", or "fenced-<term>"), fsyncing the directory. Never deletes.
 * OUT aside (may be NULL): the new name. RET 0 (also when db is absent:
 * aside is then ""), HF_E*. */
int standby_move_aside(const char *db, const char *tag, char *aside, size_t asidelen);

/* Download the primary's snapshot into db (which must not exist):
 * db.tmp, hashed as it arrives; its SHA-256 must be the answer's
 * X-Hyperfarm-Sha256 (missing or other: refused, logged with both
 * hashes, nothing renamed); PRAGMA quick_check, fsync, rename, directory
 * fsync. RET 0, HF_ECORRUPT, HF_EEXIST, HF_E*; err. OUT retry_s: on a
 * 503 with Retry-After (another standby's copy is running), its seconds
 * (at most STANDBY_RETRY_MAX_S), else left as it was. */
#define STANDBY_RETRY_MAX_S 60
int standby_download_snapshot(hf_http *c, const char *db, int *retry_s, char *err, size_t errlen);

/* Fetch into the checkpoint store ck_dir (ck_dir/objects/ab/<hash>) the
 * object o unless present, verified by hf_xfer. A 404 is a warning (the
 * primary's retention removed it), not an error. RET 0, HF_E*; err. */
int standby_fetch_object(hf_http *c, const char *ck_dir, const standby_object *o, char *err, size_t errlen);

/* Fetch every object the database db names (BACKUP_REFERENCED_SQL) that
 * ck_dir lacks. OUT *fetched (may be NULL). RET 0, HF_E*; err. */
int standby_fetch_referenced(hf_http *c, const char *db, const char *ck_dir, int64_t *fetched, char *err,
                             size_t errlen);

/* Read repl_state of the database db. RET 0, HF_ENOTFOUND (no file or
 * no row), HF_EDB. cluster: 64 bytes. */
int standby_read_state(const char *db, int64_t *term, int64_t *lsn, char *cluster, size_t clusterlen);

/* ---------- standby_apply.c ---------- */

struct sqlite3;

/* Open the loop's own connection to db: WAL, synchronous=FULL, triggers
 * and foreign keys off, and the column numbers of the object columns.
 * RET 0 or HF_EDB; err. */
int standby_apply_open(const char *db, struct sqlite3 **out, standby_cols *cols, char *err, size_t errlen);

/* repl_state of the open replica. RET 0 or HF_EDB. cluster: 80 bytes. */
int standby_apply_state(struct sqlite3 *db, int64_t *term, int64_t *lsn, char *cluster, size_t clusterlen);

/* Apply every frame of buf (checked by standby_frames_check) in one
 * BEGIN IMMEDIATE ... COMMIT. RET 0; HF_ECORRUPT on any conflict (rolled
 * back: divergence); HF_EPARSE / HF_EDB (rolled back); err. */
int standby_apply_frames(struct sqlite3 *db, const uint8_t *buf, size_t n, char *err, size_t errlen);

/* The size of object sha256 per the replica's rows, or -1. */
int64_t standby_apply_object_size(struct sqlite3 *db, const char *sha256);

/* Promotion's one transaction: term = term + 1 and a repl_terms row
 * (start_lsn = lsn, by). RET 0 with *term (the new one), HF_EDB; err. */
int standby_apply_promote(struct sqlite3 *db, const char *by, int64_t *term, char *err, size_t errlen);

/* ---------- standby_spool.c ---------- */

/* The spool DB.spool: stream answers made durable before they are
 * applied (docs/scheduler.md, "Standby and failover"). One appender
 * thread, one taker thread. */
typedef struct standby_spool standby_spool;

/* Open (create) db's spool for a replica at lsn applied in term: keeps
 * the records whose frames follow applied consecutively in term (those at
 * or below it were applied), truncates a torn, corrupt or foreign tail.
 * RET 0 with *sp, HF_E*; err. */
int standby_spool_open(const char *db, int64_t applied, int64_t term, standby_spool **sp, char *err, size_t errlen);
/* The LSN of the last frame spooled (the replica's LSN when none is). */
int64_t standby_spool_last(standby_spool *sp);
/* Append one checked answer (n bytes of frames, the last one last_lsn)
 * and fdatasync it. RET 0 or HF_E* (nothing counts as spooled then). */
int standby_spool_append(standby_spool *sp, const uint8_t *buf, size_t n, int64_t last_lsn);
/* The records not yet applied, waiting up to wait_ms for one: their
 * bodies (whole records, at least one, up to max bytes) in *buf
 * (malloc'd; *len 0: none) and in *mark what standby_spool_applied takes
 * once they are applied. RET 0, HF_ECORRUPT (synced bytes fail their
 * hash), HF_E*. */
int standby_spool_take(standby_spool *sp, int wait_ms, size_t max, uint8_t **buf, size_t *len, int64_t *mark);
void standby_spool_applied(standby_spool *sp, int64_t mark);
/* Is anything spooled not yet applied? */
int standby_spool_pending(standby_spool *sp);
/* Wake a taker waiting in standby_spool_take (and no more waits). */
void standby_spool_wake(standby_spool *sp);
void standby_spool_close(standby_spool *sp);
/* Apply the frames of buf (whole spooled answers) after *lsn to the
 * replica db in one transaction (frames at or below *lsn skipped: a
 * record can begin below only after a crash between the apply's commit
 * and its mark); *lsn becomes the replica's LSN and *start the offset of
 * the first frame applied. RET the frames applied (0: none new),
 * HF_ECORRUPT (divergence, a malformed frame), HF_E*; err. */
int standby_spool_apply(struct sqlite3 *db, const uint8_t *buf, size_t n, int64_t *lsn, size_t *start, char *err,
                        size_t errlen);
/* At start, before the replica is read or migrated: apply what db's
 * spool holds past it, so the replica is whole at its own schema version.
 * RET 0 (also: no replica), HF_ECORRUPT (it does not apply), HF_E*. */
int standby_spool_catch_up(const char *db, char *err, size_t errlen);
#define STANDBY_APPLY_MAX ((size_t)8 << 20)   /* one apply transaction: up to this much of the spool */
/* Remove db's spool (with the replica it belongs to). RET 0 or HF_E*. */
int standby_spool_remove(const char *db);
void standby_spool_path(const char *db, char *out, size_t outlen);

/* ---------- standby.c ---------- */

typedef struct standby_config {
    const char *const *urls;     /* the primary's URL(s), nurls of them */
    int                nurls;
    const char        *token;    /* an admin token of the primary (NULL: none) */
    const char        *cafile;   /* TLS CA file or NULL */
    const char        *db;       /* --db */
    const char        *ck_dir;   /* --checkpoint-dir */
    int64_t            failover_after_s;   /* 0: manual promotion only */
    char *const       *argv;     /* the process's arguments, for the re-exec */
    int                argc;
    char               name[64]; /* host:port, the stream requests' name= ("": none) */
} standby_config;

/* Before the store is opened: make db a replica of the primary, i.e.
 * bootstrap it unless it exists with the primary's cluster and term
 * (waits and retries while no primary answers, until *stop). RET 0, or
 * HF_E* (stopped, or the primary refused the token); err. */
int standby_prepare(const standby_config *cfg, volatile sig_atomic_t *stop, char *err, size_t errlen);

/* Start the apply loop (thread "hf-standby"). cfg is copied. RET 0, HF_E*. */
int  standby_start(const standby_config *cfg);
/* Stop and join it. Safe when not started. */
void standby_stop(void);

/* Ask for promotion (admin route or automatic) and wait up to wait_ms
 * for the new term's commit. RET 0 with *term, HF_ESTATE (not a standby
 * or already promoting), HF_ETIMEOUT, HF_E*. The process re-executes
 * itself as a primary shortly after. */
int  standby_request_promote(const char *by, int64_t wait_ms, int64_t *term);

/* The standby's figures for GET /replication and /metrics: applied_lsn,
 * lag_ms, bootstraps, votes. RET 0, or HF_ESTATE when no standby runs. */
int  standby_figures(int64_t *applied_lsn, int64_t *lag_ms, int64_t *bootstraps, int64_t *votes);

/* The standby's primaries for GET /api/v1/replication "peers": one
 * {"kind": "primary", "url", "following"} per --standby-of URL, following
 * true for the one the apply loop streams from now (it moves on when
 * that one does not answer as primary). RET a new array, or NULL when no
 * standby runs. */
json_t *standby_peers_json(void);

/* Re-execute /proc/self/exe with argv, after marking every descriptor
 * above 2 close-on-exec (the listening socket, SQLite's files). Returns
 * only on failure (HF_E*). */
int  standby_reexec(char *const *argv);

/* A new argv (malloc'd, NULL-terminated, caller frees the array only):
 * argv without any "--standby-of X"/"--standby-of=X", plus, unless add
 * is NULL, "flag add". The strings are argv's or add's. */
char **standby_argv_edit(char *const *argv, int argc, const char *drop, const char *flag, const char *add);

/* ---------- failover.c ---------- */

#define FAILOVER_LIVE_MS 60000    /* an agent seen within this of the replica's newest heartbeat is live */
#define FAILOVER_VOTES   256      /* voters remembered */
#define FAILOVER_SHARED_HOLDER "agent"   /* the shared agent token's holder (docs/protocol.md "Agent tokens") */

/* A witness vote (repl.h's vote hook): an agent token's request to a
 * standby carrying X-Hyperfarm-Lost-Primary. holder: the token's holder
 * name; agent_id: the {id} of its /api/v1/agents/{id}/... path, or -1;
 * name: a registration's claimed agent name, or NULL. Votes are kept per
 * (holder, agent_id, name). Any thread. */
void failover_vote(const char *holder, int64_t agent_id, const char *name, int64_t lost_ms, int64_t term);

/* A live agent of the replica: its id, name and the token holder it
 * registered with (agents.holder, schema 0011: NULL, "" or "agent" =
 * the shared token may speak for it). */
typedef struct failover_live {
    int64_t     id;
    const char *name, *holder;
} failover_live;

/* A vote as counted: holder, agent id (-1: none), lost_ms, term, at_ms,
 * the name a registration claims (NULL: none). */
typedef struct failover_ballot {
    const char *holder;
    int64_t     agent_id, lost_ms, term, at_ms;
    const char *name;
} failover_ballot;

/* The rule, pure: of the live agents (nlive), how many have a vote
 * (nvotes) within after_s seconds of now_ms, with lost_ms >=
 * after_s*500 and term == term, that speaks for them. A vote speaks for
 * the live agent of its agent id when its holder may speak for that
 * agent as on the primary (a named token only for the agent of its
 * name, the shared token only for agents not bound to a named one);
 * without an agent id, a named token's vote speaks for the agent of its
 * name; the shared token's for the agent its registration names (which
 * the shared token could register) or, naming none, only for the one
 * live agent on the shared token. */
int failover_count(const failover_live *live, int nlive, const failover_ballot *votes, int nvotes, int64_t now_ms,
                   int64_t after_s, int64_t term);

/* Should a standby that heard nothing from the primary for silent_ms
 * promote itself now? Reads the live agents from the replica db (sqlite3
 * connection, any), counts the votes. OUT *agree, *live (may be NULL).
 * RET 1 yes, 0 no. */
struct sqlite3;
int failover_decide(struct sqlite3 *db, int64_t silent_ms, int64_t after_s, int64_t term, int *agree, int *live);

/* Votes received in the last after_s seconds (the metric). */
int64_t failover_votes_recent(int64_t after_s);

/* ---------- standby_peers.c ---------- */

/* A primary's peers (--peers): before accepting writes, and every 2 s in
 * thread "hf-peers". If a peer is PRIMARY with a higher term, or this
 * scheduler was FENCED (repl_role), it steps down: db moved aside to
 * db.fenced-<term>-<unixtime>, then re-exec as --standby-of that peer. */
typedef struct peers_config {
    const char *const *urls;
    int                nurls;
    const char        *token;
    const char        *cafile;
    const char        *db;
    char *const       *argv;
    int                argc;
} peers_config;

/* Ask every peer once; steps down (does not return) when fenced. RET 0. */
int  peers_check_once(const peers_config *cfg);
/* The peers as the last checks saw them, for GET /api/v1/replication
 * "peers": one {"kind": "peer", "url", "role", "term" (of its last
 * answer; null before one), "error" (why the last check got no usable
 * answer; null when it answered), "checked_ms_ago", "answered_ms_ago"
 * (null: never)} per --peers URL. RET a new array, or NULL when no check
 * ran (no --peers). Any thread. */
json_t *peers_status_json(void);
int  peers_start(const peers_config *cfg);
void peers_stop(void);

#endif
