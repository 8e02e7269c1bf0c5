/*
 * api_h_repl.c — the primary's replication routes (api_h_repl.h; the wire
 * is docs/protocol.md "Replication", the policy docs/scheduler.md
 * "Replication").
 *
 * The stream is a long-poll that holds no thread: a request finding no
 * frame after its LSN is parked in the replication log (repl_park,
 * suspended) and resumed by the next commit or after STREAM_WAIT_MS, then
 * answered from the ring (200 frames, or 204). Its after=L is the
 * standby's acknowledgement of every LSN <= L: it releases the writes
 * whose answers wait for it (api_hold_writes).
 *
 * The snapshot holds no thread either: its copy runs on the snapshot
 * thread (repl.h, "hf-snapshot") while the request is suspended, one copy
 * at a time (a second request meanwhile: 503 with Retry-After).
 */
#include "scheduler/api/api_h_repl.h"

#include "hf_err.h"
#include "scheduler/api/api_h_standby.h"
#include "scheduler/api/api_handlers.h"
#include "scheduler/api/auth.h"
#include "scheduler/standby/standby.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STREAM_WAIT_MS 1000

static enum MHD_Result not_admin(api_call *k)
{
    return api_send_err(k->c, 403, NULL, "replication is for admin tokens (a standby's --standby-token-file)");
}

/* Append every element of b (a new reference, or NULL) to a. */
static void append_all(json_t *a, json_t *b)
{
    if (b) json_array_extend(a, b);
    json_decref(b);
}

/* GET /replication "peers" (docs/protocol.md "Replication"): the
 * standbys that stream from this primary, its --peers as the peer check
 * saw them, and on a standby its primary's URLs. */
static json_t *peers_json(const repl_status *st)
{
    json_t *a = json_array();
    if (!a) return NULL;
    for (int i = 0; i < st->nstandbys; i++) {
        const repl_standby_info *b = &st->standbys[i];
        json_array_append_new(a, json_pack("{s:s, s:s, s:s, s:I, s:I, s:s}", "kind", "standby", "address", b->address,
                                           "name", b->name, "acked_lsn", (json_int_t)b->acked_lsn,
                                           "last_seen_ms_ago", (json_int_t)b->last_seen_ms_ago, "state", b->state));
    }
    append_all(a, peers_status_json());
    append_all(a, standby_peers_json());
    return a;
}

enum MHD_Result api_h_repl_status(api_call *k)
{
    repl_status st;
    char hint[512];
    repl_status_get(&st);
    int has = repl_primary_hint(hint, sizeof hint);
    json_t *sb = json_null();
    if (st.role == REPL_PRIMARY && st.standby_seen)
        sb = json_pack("{sbsIsIsIsI}", "connected", st.connected, "acked_lsn", (json_int_t)st.acked_lsn, "lag_lsn",
                       (json_int_t)st.lag_lsn, "lag_ms", (json_int_t)st.lag_ms, "last_seen_ms_ago",
                       (json_int_t)st.last_seen_ms_ago);
    json_t *o = json_pack("{s:s, s:I, s:I, s:s, s:o, s:o, s:s, s:s, s:o, s:I}", "role", repl_role_name(st.role), "term", (json_int_t)st.term,
                          "lsn", (json_int_t)st.lsn, "cluster", st.cluster, "primary",
                          has ? json_string(hint) : json_null(), "peers", peers_json(&st), "mode",
                          st.mode == REPL_ASYNC ? "async" : "sync", "state", repl_state_name(st.state), "standby", sb,
                          "ring_first_lsn", (json_int_t)st.ring_first);
    /* The database's schema version: a standby follows only a primary at
     * its own binary's (store_schema_newest). */
    if (o) json_object_set_new(o, "schema", json_integer(store_version(k->a->st)));
    if (o && st.role == REPL_STANDBY) api_standby_status(o);
    return api_send_json(k->c, 200, o);
}

/* The snapshot service's done callback: the copy is ready (or failed). */
static void snap_done(void *conn) { MHD_resume_connection(conn); }

/* The answer of a copy the service finished (the handler's second call):
 * the file with its LSN, cluster and hash. */
static enum MHD_Result snap_answer(api_call *k)
{
    char err[512] = "", sha[65], lsn_s[24], cluster[40];
    int fd = -1;
    int64_t size = 0, lsn = 0;
    int rc = repl_snap_result(k->rq->snap, &fd, &size, &lsn, sha, err, sizeof err);
    repl_snap_release(k->rq->snap);
    k->rq->snap = NULL;
    if (rc == HF_ECONN) return MHD_NO;   /* the client hung up: close */
    if (rc == HF_ESTATE) return api_send_err(k->c, 503, NULL, "the scheduler is stopping");
    if (rc) {
        hf_jerr_set(&k->e, "", NULL, "%s", err);
        return api_send_rc(k->c, rc, &k->e, "database");
    }
    struct MHD_Response *r = MHD_create_response_from_fd64((uint64_t)size, fd);
    if (!r) { close(fd); return MHD_NO; }
    repl_cluster(cluster, sizeof cluster);
    snprintf(lsn_s, sizeof lsn_s, "%lld", (long long)lsn);
    const api_hdr h[] = {
        {"Content-Type", "application/vnd.sqlite3"},
        {"Cache-Control", "no-store"},
        {"X-Hyperfarm-LSN", lsn_s},
        {"X-Hyperfarm-Cluster", cluster},
        {"X-Hyperfarm-Sha256", sha},
        {NULL, NULL},
    };
    return api_queue(k->c, 200, r, h);
}

/* 503 with Retry-After: another snapshot is being copied. */
static enum MHD_Result snap_busy(api_call *k, int retry_s)
{
    return api_send_json_retry(k->c, 503,
                               json_pack("{ss}", "error", "another snapshot is being copied (one at a time): retry later"),
                               retry_s);
}

/* The copy runs on the snapshot thread (repl.h, "hf-snapshot") while the
 * connection is suspended: no HTTP worker is held for it. Called again
 * when the copy is done. */
enum MHD_Result api_h_repl_snapshot(api_call *k)
{
    char ip[64];
    int retry_s = 0;
    if (k->rq->snap) return snap_answer(k);
    if (k->role != AUTH_ADMIN) return not_admin(k);
    if (repl_role() != REPL_PRIMARY) return api_send_err(k->c, 409, NULL, "only a primary serves snapshots");
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(k->c, MHD_CONNECTION_INFO_CONNECTION_FD);
    int rc = repl_snap_submit(store_path(k->a->st), api_peer_ip(k->c, ip, sizeof ip), ci ? ci->connect_fd : -1,
                              snap_done, k->c, &k->rq->snap, &retry_s);
    if (rc == HF_ETOOBIG) return snap_busy(k, retry_s);
    if (rc == HF_ESTATE) return api_send_err(k->c, 503, NULL, "the scheduler is stopping");
    if (rc) return api_send_rc(k->c, rc, NULL, "snapshot");
    MHD_suspend_connection(k->c);
    repl_snap_arm(k->rq->snap);
    return MHD_YES;
}

/* A standby's name=: 1 to REPL_STANDBY_NAME_MAX of [A-Za-z0-9._:[]-]. */
static int name_ok(const char *n)
{
    size_t len = strlen(n);
    if (len == 0 || len > REPL_STANDBY_NAME_MAX) return 0;
    for (const char *p = n; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr(".-_:[]", *p)) return 0;
    return 1;
}

/* 409 {"error", "reason"}. */
static enum MHD_Result conflict(api_call *k, const char *reason, const char *msg)
{
    return api_send_json(k->c, 409, json_pack("{ssss}", "error", msg, "reason", reason));
}

static void stream_wake(void *arg) { MHD_resume_connection(arg); }
static void stream_park(void *arg) { MHD_suspend_connection(arg); }

/* The frames after `after` (200), or 204; park the request first when
 * there are none and it has not waited yet. */
static enum MHD_Result stream_answer(api_call *k, int64_t after)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    char lsn_s[24];
    int n = repl_stream_read(after, 0, REPL_STREAM_MAX, &buf, &len);
    /* A standby this primary can serve: after=L acknowledges L (not one
     * told 410: it is about to bootstrap, and must not hold writes). */
    char ip[64];
    if (n >= 0 && !k->rq->repl_polled)
        repl_standby_ack(after, api_peer_ip(k->c, ip, sizeof ip), api_query_arg(k, "name"));
    if (n == 0 && !k->rq->repl_polled) {
        k->rq->repl_polled = 1;
        k->rq->rw = (repl_waiter){.kind = REPL_W_STREAM, .lsn = after, .wait_ms = STREAM_WAIT_MS,
                                  .wake = stream_wake, .arg = k->c};
        if (repl_park(&k->rq->rw, stream_park)) return MHD_YES;   /* called again once woken */
        n = repl_stream_read(after, 0, REPL_STREAM_MAX, &buf, &len);
    }
    if (n == HF_ENOTFOUND)
        return api_send_err(k->c, 410, NULL, "LSN %lld is no longer in the primary's ring: bootstrap again",
                            (long long)after + 1);
    if (n == HF_EINVAL) return conflict(k, "ahead", "the standby is ahead of this primary");
    if (n < 0) return api_send_rc(k->c, n == HF_ESTATE ? HF_EUNSUP : n, NULL, "stream");
    snprintf(lsn_s, sizeof lsn_s, "%lld", (long long)repl_lsn());
    const api_hdr h[] = {
        {"Content-Type", "application/octet-stream"},
        {"Cache-Control", "no-store"},
        {"X-Hyperfarm-LSN", lsn_s},
        {NULL, NULL},
    };
    struct MHD_Response *r = n ? MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE)
                               : MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!r) { free(buf); return MHD_NO; }
    return api_queue(k->c, n ? 200 : 204, r, h);
}

enum MHD_Result api_h_repl_stream(api_call *k)
{
    int64_t term, after;
    char cluster[40];
    const char *want = api_query_arg(k, "cluster");
    if (k->role != AUTH_ADMIN) return not_admin(k);
    if (repl_role() != REPL_PRIMARY) return api_send_err(k->c, 409, NULL, "only a primary serves the stream");
    if (!want) return api_send_err(k->c, 400, "cluster", "cluster is required");
    if (api_query_int(k->c, "term", 1, INT64_MAX, 0, &term, &k->e) ||
        api_query_int(k->c, "after", 0, INT64_MAX, -1, &after, &k->e))
        return api_send_jerr(k->c, 400, &k->e);
    if (term == 0 || after < 0) return api_send_err(k->c, 400, term ? "after" : "term", "term and after are required");
    if (k->rq->repl_polled) return stream_answer(k, after);   /* woken: answer now */
    /* name=N: what the standby calls itself (host:port), so that two
     * standbys behind one address are listed apart; shown as sent, so
     * only a host name's, an address's and a port's characters. */
    const char *name = api_query_arg(k, "name");
    if (name && !name_ok(name))
        return api_send_err(k->c, 400, "name", "name must be 1 to %d of A-Z a-z 0-9 . - _ : [ ] (host:port)",
                            REPL_STANDBY_NAME_MAX);
    /* schema=V: the standby's binary's schema version. Migrations are not
     * streamed (each side runs its own at start), and SQLite skips a
     * changeset's table whose columns differ from the replica's, so a
     * standby of another version would silently lose rows: refused. */
    int64_t schema;
    if (api_query_int(k->c, "schema", 1, INT32_MAX, 0, &schema, &k->e)) return api_send_jerr(k->c, 400, &k->e);
    int mine = store_version(k->a->st);
    if (schema && schema != mine) {
        char msg[256];
        snprintf(msg, sizeof msg, "this primary's database is at schema version %d, the standby's binary at %lld: "
                 "run the same hyperfarm version on both (docs/operations.md, \"Upgrading\")", mine, (long long)schema);
        return conflict(k, "schema", msg);
    }
    repl_capture_enable();
    repl_cluster(cluster, sizeof cluster);
    if (strcmp(want, cluster)) return conflict(k, "cluster", "another cluster: bootstrap from this primary");
    if (term != repl_term()) return conflict(k, "term", "another term: bootstrap from this primary");
    if (after > repl_lsn()) return conflict(k, "ahead", "the standby is ahead of this primary");
    return stream_answer(k, after);
}

enum MHD_Result api_h_repl_object(api_call *k)
{
    if (k->role != AUTH_ADMIN) return not_admin(k);
    return api_h_ckpt_get(k);
}
