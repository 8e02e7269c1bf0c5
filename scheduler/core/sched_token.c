/*
 * sched_token.c — the agent token binding of the scheduler core
 * (docs/protocol.md, "Agent tokens"; sched_int.h): which agent the agent
 * token of a holder may register and speak for, the binding of an agent
 * to the holder it registered with (agents.holder, schema 0011), whether
 * an attempt was ever assigned to an agent (allocations), and the
 * AGENT_REFUSED events row of a refusal.
 *
 * With a token file each request carries the holder name of its agent
 * token. A named token ("agent:NAME TOKEN") registers and speaks for only
 * the agent named NAME; the shared unnamed one ("agent:TOKEN", holder
 * "agent") only for agents not bound to a named token. Anything else is
 * HF_EPERM (403) before the core changes (an AGENT_REFUSED event, at most
 * one a second, records who tried). Registration (sched_register.c), the
 * heartbeat (sched_heartbeat.c) and checkpoint uploads (sched_ckpt.c) ask
 * here.
 *
 * Layer: above the transactions (a refusal writes its own events row),
 * below everything that serves an agent.
 */
#include "scheduler/core/sched_int.h"

#include "hf_assert.h"
#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"

#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

int agent_holder_shared(const char *h) { return strcmp(h, SCHED_SHARED_AGENT_HOLDER) == 0; }

/* a's holder ("" = registered without a token file or before schema
 * 0011), read from its row the first time. RET NULL when the store could
 * not say (callers refuse: fail closed). */
static const char *agent_holder(sched *s, agent *a)
{
    sqlite3_stmt *st = NULL;
    if (a->holder_known) return a->holder;
    if (sqlite3_prepare_v2(store_db(s->st), "SELECT holder FROM agents WHERE id=?", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, a->id);
        int src = sqlite3_step(st);
        const unsigned char *h = src == SQLITE_ROW ? sqlite3_column_text(st, 0) : NULL;
        snprintf(a->holder, sizeof a->holder, "%s", h ? (const char *)h : "");
        a->holder_known = src == SQLITE_ROW || src == SQLITE_DONE;
    }
    sqlite3_finalize(st);
    return a->holder_known ? a->holder : NULL;
}

int agent_may_speak_locked(sched *s, agent *a, const char *holder, hf_jerr *e)
{
    HF_ASSERT(sched_lock_held(s));
    if (!holder) return 0;
    if (!agent_holder_shared(holder)) {
        if (strcmp(a->name, holder) == 0) return 0;
        hf_jerr_set(e, "", NULL, "agent %lld is '%.64s': the agent token of '%.64s' speaks only for the agent named '%.64s'",
                    (long long)a->id, a->name, holder, holder);
        return HF_EPERM;
    }
    const char *h = agent_holder(s, a);
    if (!h) {
        hf_jerr_set(e, "", NULL, "agent %lld: its token binding cannot be read from the store", (long long)a->id);
        return HF_EPERM;
    }
    if (!*h || agent_holder_shared(h)) return 0;
    hf_jerr_set(e, "", NULL, "agent %lld ('%.64s') has its own agent token: the shared agent token may not speak for it",
                (long long)a->id, a->name);
    return HF_EPERM;
}

int alloc_was_assigned(sched *s, int64_t tid, int64_t att, int64_t aid)
{
    sqlite3_stmt *st = NULL;
    int found = -1;
    if (sqlite3_prepare_v2(store_db(s->st), "SELECT 1 FROM allocations WHERE trial_id=? AND attempt=? AND agent_id=? "
                                             "LIMIT 1", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, tid);
        sqlite3_bind_int64(st, 2, att);
        sqlite3_bind_int64(st, 3, aid);
        int src = sqlite3_step(st);
        found = src == SQLITE_ROW ? 1 : src == SQLITE_DONE ? 0 : -1;
    }
    if (found < 0) hf_error("allocations of trial %lld: %s", (long long)tid, sqlite3_errmsg(store_db(s->st)));
    sqlite3_finalize(st);
    return found;
}

/* A 403 of the binding: an AGENT_REFUSED events row ("who tried": the
 * token's holder as its user), at most one a second whatever the rate of
 * refused requests, so a flood of them cannot grow the store; the log
 * line is the caller's. Its own transaction (ends an open group first). */
void agent_refused_note(sched *s, const char *what, const hf_jerr *e)
{
    static _Atomic int64_t last_mono;
    char d[320];
    int64_t now = hf_mono_ms(), prev = atomic_load(&last_mono);
    if (now - prev < 1000 || !atomic_compare_exchange_strong(&last_mono, &prev, now)) return;
    snprintf(d, sizeof d, "%s refused (403): %s", what, e->msg);
    txn_begin(s);
    row_event(s, 0, 0, "AGENT_REFUSED", d);
    txn_end(s);
}

int sched_agent_may_speak(sched *s, int64_t agent_id, const char *holder, hf_jerr *e)
{
    int rc = 0;
    sched_lock(s);
    agent *a = agent_find(s, agent_id);
    if (!a) {
        hf_jerr_set(e, "", NULL, "unknown agent %lld: register again", (long long)agent_id);
        rc = HF_ENOTFOUND;
    } else if ((rc = agent_may_speak_locked(s, a, holder, e))) {
        hf_warn("refused (403): token of '%s' for agent %lld: %s", holder, (long long)agent_id, e->msg);
        actor_set(s, holder);
        agent_refused_note(s, "long-poll", e);
        actor_set(s, NULL);
    }
    sched_unlock(s);
    return rc;
}

/* May the token of holder register the agent named name? RET 0 or HF_EPERM. */
int agent_may_register(sched *s, const char *name, const char *holder, hf_jerr *e)
{
    if (!holder) return 0;
    if (!agent_holder_shared(holder)) {
        if (strcmp(name, holder) == 0) return 0;
        hf_jerr_set(e, "", "name", "this agent token belongs to '%.64s': it may register only the agent named '%.64s', "
                    "not '%.64s'", holder, holder, name);
        return HF_EPERM;
    }
    agent *a = agent_by_name(s, name);
    return a ? agent_may_speak_locked(s, a, holder, e) : 0;
}

/* Bind a to holder (row and record; NULL = no token file). */
void agent_bind_holder(sched *s, agent *a, const char *holder)
{
    sqlite3_stmt *st = NULL;
    snprintf(a->holder, sizeof a->holder, "%s", holder ? holder : "");
    a->holder_known = 1;
    if (s->txn_rc) return;
    if (sqlite3_prepare_v2(store_db(s->st), "UPDATE agents SET holder=? WHERE id=?", -1, &st, NULL) != SQLITE_OK) {
        s->txn_rc = HF_EDB;
        return;
    }
    if (holder) sqlite3_bind_text(st, 1, holder, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, a->id);
    int rc = store_exec_stmt(st);
    if (rc) s->txn_rc = rc;
    sqlite3_finalize(st);
}
