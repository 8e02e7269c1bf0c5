/*
 * failover.c — the witness rule of automatic promotion (docs/scheduler.md,
 * "Standby and failover").
 *
 * A standby promotes itself only when (a) no stream answer came from the
 * primary for --failover-after S seconds and (b) a strict majority of the
 * live agents agree: each has sent the standby, within the last S
 * seconds, a request with X-Hyperfarm-Lost-Primary >= S*1000/2 ms and its
 * X-Hyperfarm-Term equal to the standby's term. A voter is the agent
 * token's holder with the agent id of the request's path
 * (/api/v1/agents/{id}/..., docs/protocol.md "Agent tokens"): the vote
 * counts for the live agent of that id when the token may speak for it
 * as on the primary (schema 0011: a named token only for the agent of its
 * name, the shared token only for agents not bound to a named one), so
 * agents that share the shared token are separate voters. A request
 * without an id in its path (registration) counts for the agent of a
 * named token's name, or, from the shared token, for the unbound agent
 * whose name it registers (the shared token may register any of them),
 * else for the one live agent on it. "Live" is read from the
 * replicated agents table: state 'ALIVE' and last_heartbeat (persisted at
 * every heartbeat) within FAILOVER_LIVE_MS of the newest last_heartbeat
 * the replica holds — the replica's own notion of "now", so a standby
 * whose clock differs or whose stream stopped still counts the agents
 * that were live when it last heard the primary. No live agent: no
 * witness, no automatic promotion.
 *
 * The votes arrive on API threads (repl.h's vote hook) and are read by
 * the apply loop: one mutex (vote_mu) guards the table, which keeps the
 * newest vote of at most FAILOVER_VOTES agents.
 */
#include "scheduler/standby/standby.h"

#include "hf_time.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct vote {
    char    holder[128], name[128];   /* name: "" = none */
    int64_t agent_id, lost_ms, term, at_ms;
} vote;

static pthread_mutex_t vote_mu = PTHREAD_MUTEX_INITIALIZER;
static vote            votes[FAILOVER_VOTES];   /* guarded by vote_mu */
static int             nvotes;                  /* guarded by vote_mu */

void failover_vote(const char *holder, int64_t agent_id, const char *name, int64_t lost_ms, int64_t term)
{
    if (!holder || !*holder) return;
    if (agent_id < 0) agent_id = -1;
    if (!name || agent_id >= 0) name = "";
    int64_t now = hf_mono_ms();
    pthread_mutex_lock(&vote_mu);
    int i, oldest = 0;
    for (i = 0; i < nvotes; i++)
        if (votes[i].agent_id == agent_id && !strncmp(votes[i].holder, holder, sizeof votes[i].holder - 1) &&
            !strncmp(votes[i].name, name, sizeof votes[i].name - 1))
            break;
    if (i == nvotes && nvotes == FAILOVER_VOTES) {
        for (int k = 1; k < nvotes; k++)
            if (votes[k].at_ms < votes[oldest].at_ms) oldest = k;
        i = oldest;
    } else if (i == nvotes) {
        nvotes++;
    }
    snprintf(votes[i].holder, sizeof votes[i].holder, "%s", holder);
    snprintf(votes[i].name, sizeof votes[i].name, "%s", name);
    votes[i].agent_id = agent_id;
    votes[i].lost_ms = lost_ms;
    votes[i].term = term;
    votes[i].at_ms = now;
    pthread_mutex_unlock(&vote_mu);
}

static int is_shared(const char *h) { return !h || !*h || !strcmp(h, FAILOVER_SHARED_HOLDER); }

/* May ballot b speak for the live agent a (nshared: live agents the
 * shared token may speak for)? The primary's binding, sched_token.c. */
static int speaks_for(const failover_ballot *b, const failover_live *a, int nshared)
{
    int shared = !strcmp(b->holder, FAILOVER_SHARED_HOLDER);
    if (b->agent_id >= 0) {
        if (b->agent_id != a->id) return 0;
        return shared ? is_shared(a->holder) : !strcmp(a->name, b->holder);
    }
    if (!shared) return !strcmp(a->name, b->holder);
    if (b->name && *b->name) return is_shared(a->holder) && !strcmp(a->name, b->name);
    return nshared == 1 && is_shared(a->holder);
}

int failover_count(const failover_live *live, int nlive, const failover_ballot *v, int nv, int64_t now_ms,
                   int64_t after_s, int64_t term)
{
    int agree = 0, nshared = 0;
    for (int i = 0; i < nlive; i++) nshared += is_shared(live[i].holder);
    for (int i = 0; i < nlive; i++) {
        for (int k = 0; k < nv; k++) {
            if (!speaks_for(&v[k], &live[i], nshared)) continue;
            if (now_ms - v[k].at_ms <= after_s * 1000 && v[k].lost_ms >= after_s * 500 && v[k].term == term) {
                agree++;
                break;
            }
        }
    }
    return agree;
}

int64_t failover_votes_recent(int64_t after_s)
{
    int64_t now = hf_mono_ms(), n = 0;
    if (after_s <= 0) after_s = 10;
    pthread_mutex_lock(&vote_mu);
    for (int i = 0; i < nvotes; i++)
        if (now - votes[i].at_ms <= after_s * 1000) n++;
    pthread_mutex_unlock(&vote_mu);
    return n;
}

/* The live agents: id, name, holder (NULL when registered without a
 * token file or before schema 0011). */
#define LIVE_SQL                                                                                        \
    "SELECT id, name, holder FROM agents WHERE state = 'ALIVE' AND last_heartbeat >= "                 \
    "(SELECT MAX(last_heartbeat) FROM agents) - ?1"

static void live_free(failover_live *a, int n)
{
    for (int i = 0; i < n; i++) {
        free((char *)a[i].name);
        free((char *)a[i].holder);
    }
    free(a);
}

/* The live agents (malloc'd array, strings malloc'd: live_free). RET
 * count or -1. */
static int live_agents(sqlite3 *db, failover_live **out)
{
    sqlite3_stmt *q = NULL;
    failover_live *a = NULL;
    int n = 0, cap = 0;
    *out = NULL;
    if (sqlite3_prepare_v2(db, LIVE_SQL, -1, &q, NULL) != SQLITE_OK) return -1;
    sqlite3_bind_int64(q, 1, FAILOVER_LIVE_MS);
    while (sqlite3_step(q) == SQLITE_ROW && n < 100000) {
        if (n == cap) {
            failover_live *g = realloc(a, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *g);
            if (!g) break;
            a = g;
        }
        const char *h = (const char *)sqlite3_column_text(q, 2);
        a[n] = (failover_live){.id = sqlite3_column_int64(q, 0),
                               .name = strdup((const char *)sqlite3_column_text(q, 1) ?: ""),
                               .holder = h ? strdup(h) : NULL};
        if (!a[n].name || (h && !a[n].holder)) {
            free((char *)a[n].name);
            free((char *)a[n].holder);
            break;
        }
        n++;
    }
    sqlite3_finalize(q);
    *out = a;
    return n;
}

int failover_decide(sqlite3 *db, int64_t silent_ms, int64_t after_s, int64_t term, int *agree, int *live)
{
    failover_live *agents = NULL;
    failover_ballot b[FAILOVER_VOTES];
    vote copy[FAILOVER_VOTES];
    int nv, nl, ag = 0;
    if (agree) *agree = 0;
    if (live) *live = 0;
    if (after_s <= 0) return 0;
    if ((nl = live_agents(db, &agents)) < 0) return 0;
    pthread_mutex_lock(&vote_mu);
    nv = nvotes;
    memcpy(copy, votes, (size_t)nv * sizeof *copy);
    pthread_mutex_unlock(&vote_mu);
    for (int i = 0; i < nv; i++)
        b[i] = (failover_ballot){.holder = copy[i].holder, .agent_id = copy[i].agent_id, .lost_ms = copy[i].lost_ms,
                                 .term = copy[i].term, .at_ms = copy[i].at_ms, .name = copy[i].name};
    ag = failover_count(agents, nl, b, nv, hf_mono_ms(), after_s, term);
    live_free(agents, nl);
    if (agree) *agree = ag;
    if (live) *live = nl;
    return silent_ms >= after_s * 1000 && nl > 0 && 2 * ag > nl;
}
