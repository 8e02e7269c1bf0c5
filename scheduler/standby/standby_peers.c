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
 */
#include "scheduler/standby/standby.h"

#include "hf_err.h"
#include "hf_log.h"
#include "hf_thread.h"
#include "scheduler/store/repl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PEERS_PERIOD_MS 2000

static hf_thread   *peers_th;
static peers_config peers_cfg;   /* a copy; strings owned by main */

/* Peer i's role and term. RET 0, or HF_ECONN (no usable answer). */
static int peer_status(const peers_config *cfg, int i, char *role, size_t rolelen, int64_t *term)
{
    char err[256];
    long status = 0;
    json_t *r = NULL;
    const char *ro = NULL;
    json_int_t t = 0;
    hf_http *c = hf_http_new(cfg->urls[i], cfg->token, 2000, 0);
    if (!c) return HF_ENOMEM;
    if (cfg->cafile) hf_http_set_cafile(c, cfg->cafile);
    int rc = hf_http_request(c, "GET", "/api/v1/replication", NULL, &status, &r, err, sizeof err);
    if (!rc && (status != 200 || json_unpack(r, "{s:s, s:I}", "role", &ro, "term", &t))) rc = HF_ECONN;
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
        char role[32];
        int64_t t;
        if (peer_status(cfg, i, role, sizeof role, &t)) continue;
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
