/*
 * standby_peers.c — fencing of a returning old primary (docs/scheduler.md,
 * "Standby and failover").
 *
 * A primary started with --peers URL,... asks each peer's
 * GET /api/v1/replication before it accepts writes (peers_check_once, on
 * main's thread, before the core starts) and every PEERS_PERIOD_MS after
 * (thread "hf-peers"). It steps down when a peer answers as PRIMARY with a
 * higher term than its own (repl_state.term of its database), or when a
 * request carrying a higher term has FENCED it (repl_role): its database
 * is moved aside to DB.fenced-<term>-<unixtime> (never deleted; the
 * checkpoint directory is kept: objects are content-addressed and a new
 * bootstrap reuses them) and the process re-executes itself as
 * --standby-of that peer, which bootstraps from it. Renaming the open
 * database is safe: this process keeps writing its open files (whatever
 * their names) until the exec, and the files move together with their
 * -wal and -shm.
 *
 * What each check saw (the peer's role and term, or why it did not
 * answer, and when) is kept for GET /api/v1/replication "peers"
 * (peers_status_json), under seen_mu.
 */
#include "scheduler/standby/standby.h"

#include "hf_err.h"
#include "hf_log.h"
#include "hf_thread.h"
#include "hf_time.h"
#include "scheduler/store/repl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PEERS_PERIOD_MS 2000
#define PEERS_MAX       16        /* main.c's --peers list holds no more */

static hf_thread   *peers_th;
static peers_config peers_cfg;   /* a copy; strings owned by main */

/* What the last checks saw of each peer (GET /api/v1/replication
 * "peers"), guarded by seen_mu. */
static pthread_mutex_t seen_mu = PTHREAD_MUTEX_INITIALIZER;
static struct peer_seen {
    char    url[512];
    char    role[32];           /* of the last answer; "" = none yet */
    int64_t term;
    char    err[256];           /* of the last check; "" = it answered */
    int64_t checked_ms, answered_ms;   /* hf_mono_ms; 0 = never */
} seen[PEERS_MAX];
static int nseen;

/* Record check i's outcome (role/term when err is ""). */
static void seen_note(const char *url, int i, const char *role, int64_t term, const char *err)
{
    if (i >= PEERS_MAX) return;
    pthread_mutex_lock(&seen_mu);
    struct peer_seen *p = &seen[i];
    if (strncmp(p->url, url, sizeof p->url - 1)) memset(p, 0, sizeof *p);   /* another URL in slot i */
    snprintf(p->url, sizeof p->url, "%s", url);
    p->checked_ms = hf_mono_ms();
    snprintf(p->err, sizeof p->err, "%s", err);
    if (!err[0]) {
        snprintf(p->role, sizeof p->role, "%s", role);
        p->term = term;
        p->answered_ms = p->checked_ms;
    }
    if (i >= nseen) nseen = i + 1;
    pthread_mutex_unlock(&seen_mu);
}

json_t *peers_status_json(void)
{
    json_t *a = NULL;
    int64_t now = hf_mono_ms();
    pthread_mutex_lock(&seen_mu);
    if (nseen) a = json_array();
    for (int i = 0; a && i < nseen; i++) {
        const struct peer_seen *p = &seen[i];
        json_t *role = p->role[0] ? json_string(p->role) : json_null();
        json_t *term = p->role[0] ? json_integer((json_int_t)p->term) : json_null();
        json_t *err = p->err[0] ? json_string(p->err) : json_null();
        json_t *checked = p->checked_ms ? json_integer((json_int_t)(now - p->checked_ms)) : json_null();
        json_t *answered = p->answered_ms ? json_integer((json_int_t)(now - p->answered_ms)) : json_null();
        json_array_append_new(a, json_pack("{s:s, s:s, s:o, s:o, s:o, s:o, s:o}", "kind", "peer", "url", p->url,
                                           "role", role, "term", term, "error", err, "checked_ms_ago", checked,
                                           "answered_ms_ago", answered));
    }
    pthread_mutex_unlock(&seen_mu);
    return a;
}

/* Peer i's role and term. RET 0, or HF_ECONN (no usable answer; err
 * says why). */
static int peer_status(const peers_config *cfg, int i, char *role, size_t rolelen, int64_t *term, char *err,
                       size_t errlen)
{
    long status = 0;
    json_t *r = NULL;
    const char *ro = NULL;
    json_int_t t = 0;
    json_error_t je;
    hf_http *c = hf_http_new(cfg->urls[i], cfg->token, 2000, 0);
    if (!c) { snprintf(err, errlen, "out of memory"); return HF_ENOMEM; }
    if (cfg->cafile) hf_http_set_cafile(c, cfg->cafile);
    int rc = hf_http_request(c, "GET", "/api/v1/replication", NULL, &status, &r, err, errlen);
    if (!rc && status != 200) {
        snprintf(err, errlen, "GET /api/v1/replication: HTTP %ld", status);
        rc = HF_ECONN;
    } else if (!rc && json_unpack_ex(r, &je, 0, "{s:s, s:I}", "role", &ro, "term", &t)) {
        snprintf(err, errlen, "GET /api/v1/replication: %s", je.text);
        rc = HF_ECONN;
    }
    if (!rc) {
        snprintf(role, rolelen, "%s", ro);
        *term = t;
    }
    json_decref(r);
    hf_http_free(c);
    return rc;
}

/* Move the database aside and re-execute as a standby of url. */
static void step_down(const peers_config *cfg, const char *url, int64_t my_term, const char *why)
{
    char tag[64], aside[4096];
    repl_set_role(REPL_FENCED);
    hf_warn("fenced: %s: stepping down to a standby of %s", why, url);
    snprintf(tag, sizeof tag, "fenced-%lld", (long long)my_term);
    int rc = standby_move_aside(cfg->db, tag, aside, sizeof aside);
    if (rc) { hf_error("fenced: cannot move %s aside: %s; refusing writes until restarted", cfg->db, hf_strerror(rc)); return; }
    char **v = standby_argv_edit(cfg->argv, cfg->argc, "--standby-of", "--standby-of", url);
    if (v) standby_reexec(v);
    free(v);
    hf_error("fenced: cannot re-execute as a standby; refusing writes until restarted");
}

int peers_check_once(const peers_config *cfg)
{
    int64_t my_term = 0, lsn = 0;
    char cl[80];
    if (standby_read_state(cfg->db, &my_term, &lsn, cl, sizeof cl)) return 0;
    int fenced = repl_role() == REPL_FENCED;
    for (int i = 0; i < cfg->nurls; i++) {
        char role[32] = "", err[256] = "";
        int64_t t = 0;
        int rc = peer_status(cfg, i, role, sizeof role, &t, err, sizeof err);
        seen_note(cfg->urls[i], i, role, t, rc ? (err[0] ? err : hf_strerror(rc)) : "");
        if (rc) continue;
        if (!strcmp(role, "primary") && (t > my_term || fenced)) {
            char why[200];
            snprintf(why, sizeof why, "peer %s is primary of term %lld (ours: %lld)", cfg->urls[i], (long long)t,
                     (long long)my_term);
            step_down(cfg, cfg->urls[i], my_term, why);
            return 0;
        }
    }
    if (fenced) hf_warn("fenced by a higher term, but no peer answers as primary yet: refusing writes");
    return 0;
}

static void peers_main(hf_thread *t, void *arg)
{
    (void)arg;
    while (!hf_thread_wait(t, PEERS_PERIOD_MS)) peers_check_once(&peers_cfg);
}

int peers_start(const peers_config *cfg)
{
    if (peers_th) return HF_ESTATE;
    peers_cfg = *cfg;
    return hf_thread_start(&peers_th, "hf-peers", peers_main, NULL);
}

void peers_stop(void)
{
    hf_thread_stop_join(peers_th);
    peers_th = NULL;
}
