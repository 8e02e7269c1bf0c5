/*
 * agent_beat.c — the agent's heartbeat ("hf-beat") and long-poll
 * ("hf-poll") threads, which drive the agent_link (agent_loop.h). The
 * failure policy, the doorbell and the duplicate-safe batches are
 * described in agent_loop.c's header. Both are started by agent_run
 * (hf_thread.h) and stop when ag->stop is set under ag->mu.
 */
#include "agent_loop.h"
#include "agent_slurm.h"
#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define AGENT_BACKOFF_MAX_MS   5000
#define AGENT_POLL_BACKOFF_MAX 30000   /* long-poll retry cap */
#define AGENT_POLL_HB_WAIT_MS  2000    /* after "pending": wait for the heartbeat that fetches it */
#define AGENT_CACHED_LIST_MAX  1024    /* object hashes listed to the scheduler (newest first) */

/* ------------------------------------------------------ heartbeat thread */

/* Wait on cv up to ms (caller holds mu). */
static void cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms)
{
    struct timespec ts = hf_deadline(CLOCK_REALTIME, ms);
    pthread_cond_timedwait(cv, mu, &ts);
}

static void set_agent_id(agent *ag, int64_t id)
{
    pthread_mutex_lock(&ag->mu);
    ag->agent_id = id;
    pthread_cond_broadcast(&ag->pcv);
    pthread_mutex_unlock(&ag->mu);
}

/* Wait up to ms or until woken: stop, urgent (when on_urgent), a report
 * urge (when on_report). Caller holds mu. */
static void wait_locked(agent *ag, int64_t ms, int on_urgent, int on_report)
{
    struct timespec ts = hf_deadline(CLOCK_REALTIME, ms);
    while (!ag->stop && !(on_urgent && ag->urgent) && !(on_report && ag->report_urgent))
        if (pthread_cond_timedwait(&ag->cv, &ag->mu, &ts) == ETIMEDOUT) break;
}

static void inbox_push(agent *ag, agent_reply *r)
{
    pthread_mutex_lock(&ag->mu);
    if (ag->ninbox == ag->capinbox) {
        size_t cap = ag->capinbox ? ag->capinbox * 2 : 8;
        agent_reply *p = realloc(ag->inbox, cap * sizeof *p);
        if (!p) {
            pthread_mutex_unlock(&ag->mu);
            hf_error("out of memory: dropping a heartbeat reply's %zu assignments", r->nassign);
            agent_reply_free(r);
            return;
        }
        ag->inbox = p;
        ag->capinbox = cap;
    }
    ag->inbox[ag->ninbox++] = *r;
    memset(r, 0, sizeof *r);
    pthread_mutex_unlock(&ag->mu);
    ssize_t w = write(ag->wake[1], "w", 1);
    (void)w;
}

/* The heartbeat thread's own state between rounds (not shared). */
typedef struct hb_state {
    char              err[1024];
    int64_t           iv;            /* interval in force this round */
    int64_t           backoff;       /* 0 = the last round worked */
    int64_t           last_warn, last_send, batch;
    uint64_t          failures;      /* rounds failed in a row */
    uint64_t          cached_ver;    /* object cache version last listed to the scheduler */
    json_t           *held;          /* a batch sent without an answer: sent again as is */
    agent_outbox_mark mark;          /* what held contains */
} hb_state;

/* Register (listing the running trials) when the link has no id.
 * RET 0 or the error of agent_link_register (h->err says why). */
static int hb_register(agent *ag, hb_state *h)
{
    if (agent_link_id(ag->link)) return HF_OK;
    json_t *running = agent_outbox_running(ag->ob);
    uint64_t ver = agent_objects_version(ag->objs);
    json_t *cached = agent_objects_list(ag->objs, AGENT_CACHED_LIST_MAX);
    agent_link_set_cached(ag->link, cached);
    json_decref(cached);
    int rc = agent_link_register(ag->link, running, h->err, sizeof h->err);
    if (rc == HF_OK) {
        char shared[1024];
        h->cached_ver = ver;
        int sh = agent_link_shared_store(ag->link, shared, sizeof shared);
        agent_objects_set_shared(ag->objs, sh ? shared : NULL);
        if (sh) hf_info("checkpoint storage: shared_fs at %s", shared);
        agent_upload_set_agent(ag->up, agent_link_id(ag->link));   /* after the mode: it starts the uploads */
        hf_info("registered with %s as agent %lld (%zu running trials listed)", agent_link_url(ag->link),
                (long long)agent_link_id(ag->link), json_array_size(running));
        if (!ag->cfg->heartbeat_ms && agent_link_interval(ag->link) > 0) {
            pthread_mutex_lock(&ag->mu);
            ag->interval_ms = agent_link_interval(ag->link);
            h->iv = ag->interval_ms;
            pthread_mutex_unlock(&ag->mu);
        }
        set_agent_id(ag, agent_link_id(ag->link));
    }
    json_decref(running);
    return rc;
}

/* Send the held batch again (same number and items; only the running list
 * is fresh) or take a new one from the outbox, and post it.
 * RET 0 with *reply, or an error of agent_link_heartbeat; a batch the
 * scheduler refused (HF_EINVAL) is dropped here and HF_EHTTP returned. */
static int hb_send(agent *ag, hb_state *h, json_t **reply)
{
    int rc;
    if (h->held) {
        json_object_set_new(h->held, "running", agent_outbox_running(ag->ob));
    } else if ((h->held = agent_outbox_take(ag->ob, &h->mark))) {
        json_object_set_new(h->held, "instance", json_string(ag->instance));
        json_object_set_new(h->held, "batch", json_integer(++h->batch));
        /* the object cache changed: list it (placement prefers holders) */
        uint64_t ver = agent_objects_version(ag->objs);
        if (ver != h->cached_ver) {
            json_t *c = agent_objects_list(ag->objs, AGENT_CACHED_LIST_MAX);
            if (c) {
                json_object_set_new(h->held, "cached", c);
                h->cached_ver = ver;
            }
        }
    }
    if (!h->held) return HF_ENOMEM;
    if (agent_draining()) json_object_set_new(h->held, "draining", json_true());   /* agent_slurm.h */
    h->last_send = hf_mono_ms();
    rc = agent_link_heartbeat(ag->link, h->held, reply, h->err, sizeof h->err);
    if (rc == HF_EINVAL) {
        /* A poison batch would block the outbox forever: drop it, loudly. */
        hf_error("scheduler refused a heartbeat (%s): dropping its %zu events, %zu metrics, %zu logs",
                 h->err, h->mark.n_events, h->mark.n_metrics, h->mark.n_logs);
        agent_outbox_ack(ag->ob, &h->mark);
        json_decref(h->held);
        h->held = NULL;
        rc = HF_EHTTP;     /* and back off like any failure */
    }
    return rc;
}

/* A heartbeat was answered 200 with reply (borrowed): acknowledge the
 * batch, wake the long-poll thread, and hand the reply's work to the main
 * loop (rejected assignments go back to the scheduler as events). */
static void hb_on_reply(agent *ag, hb_state *h, const json_t *reply)
{
    agent_reply r;
    hf_jerr e;

    agent_outbox_ack(ag->ob, &h->mark);
    json_decref(h->held);
    h->held = NULL;
    pthread_mutex_lock(&ag->mu);
    ag->hb_done++;
    pthread_cond_broadcast(&ag->pcv);
    pthread_mutex_unlock(&ag->mu);
    if (h->failures) hf_info("scheduler reachable again after %llu failed attempts", (unsigned long long)h->failures);
    h->failures = 0;
    h->backoff = 0;
    if (agent_reply_parse(reply, &r, &e)) {
        hf_warn("malformed heartbeat reply: %s: %s", e.field, e.msg);
        return;
    }
    for (size_t i = 0; i < json_array_size(r.rejected); i++)
        agent_outbox_event(ag->ob, json_incref(json_array_get(r.rejected, i)));
    if (r.report_gap_ms > 0) {
        pthread_mutex_lock(&ag->mu);
        ag->report_gap_ms = r.report_gap_ms;
        pthread_mutex_unlock(&ag->mu);
    }
    if (r.interval_ms > 0 && !ag->cfg->heartbeat_ms) {
        pthread_mutex_lock(&ag->mu);
        ag->interval_ms = r.interval_ms;
        pthread_mutex_unlock(&ag->mu);
        h->iv = r.interval_ms;
    }
    if (r.nassign || r.nkill) inbox_push(ag, &r);
    agent_reply_free(&r);
}

/* Registration or heartbeat failed with rc: back off, say so now and then. */
static void hb_on_failure(agent *ag, hb_state *h, int rc)
{
    h->failures++;
    /* When it answers again, register first: a restarted scheduler
     * learns which trials still run here before anything else. */
    if (rc == HF_ECONN || rc == HF_ETIMEOUT) {
        agent_link_forget(ag->link);
        set_agent_id(ag, 0);
    }
    int64_t now = hf_mono_ms();
    if (h->failures == 1 || now - h->last_warn >= 30000) {
        agent_outbox_stats st;
        agent_outbox_get_stats(ag->ob, &st);
        hf_warn("scheduler %s unreachable (%s); trials keep running, %zu logs/%zu metrics/%zu events "
                "queued, %llu logs dropped so far; retrying", agent_link_url(ag->link), h->err, st.logs,
                st.metrics, st.events, (unsigned long long)st.dropped_logs);
        h->last_warn = now;
    }
    h->backoff = h->backoff ? h->backoff * 2 : h->iv;
    if (h->backoff > AGENT_BACKOFF_MAX_MS) h->backoff = AGENT_BACKOFF_MAX_MS;
    /* several URLs: keep trying at the interval (a standby answers, and
     * counts the X-Hyperfarm-Lost-Primary votes only from recent requests;
     * a dead URL costs a short connect timeout, then is passed over) */
    if (agent_link_following(ag->link) && h->backoff > h->iv) h->backoff = h->iv;
}

/* Sleep until the next heartbeat is due: the interval, the backoff, a
 * short gap while a backlog over a batch drains, or sooner when the main
 * loop urged: an event AGENT_URGENT_GAP_MS after the last heartbeat (a
 * burst goes in one batch; during a backoff at once), a prompt_metric
 * report the scheduler's report_gap_ms after the last heartbeat or
 * attempt (that bounds a farm's report-triggered heartbeats, and its
 * retries while the scheduler is away, as the interval bounds the
 * others). What arrived while a batch was under way waits for the
 * interval or an urge. */
static void hb_wait_next(agent *ag, hb_state *h)
{
    pthread_mutex_lock(&ag->mu);
    int64_t due = hf_mono_ms() + (h->backoff ? h->backoff : h->mark.more ? AGENT_URGENT_GAP_MS : h->iv);
    if (h->backoff) ag->urgent = ag->report_urgent = 0;   /* only urges after the failure shorten it */
    for (;;) {
        int64_t t = due, now = hf_mono_ms();
        int64_t ev = h->backoff ? now : h->last_send + AGENT_URGENT_GAP_MS;
        if (ag->urgent && ev < t) t = ev;
        if (ag->report_urgent && h->last_send + ag->report_gap_ms < t) t = h->last_send + ag->report_gap_ms;
        if (ag->stop || t <= now) break;
        wait_locked(ag, t - now, !ag->urgent, !ag->report_urgent);
    }
    ag->urgent = 0;
    ag->report_urgent = 0;
    pthread_mutex_unlock(&ag->mu);
}

void agent_hb_main(hf_thread *t, void *arg)
{
    agent *ag = arg;
    (void)t;   /* stopped through ag->stop and ag->cv (shared with the main loop's urges) */
    hb_state h;

    memset(&h, 0, sizeof h);
    for (;;) {
        pthread_mutex_lock(&ag->mu);
        int stop = ag->stop;
        h.iv = ag->interval_ms;
        pthread_mutex_unlock(&ag->mu);
        if (stop) break;
        agent_link_set_interval(ag->link, h.iv);   /* several URLs: when "lost" begins */

        json_t *reply = NULL;
        int rc = hb_register(ag, &h);
        if (rc == HF_OK) {
            rc = hb_send(ag, &h, &reply);
            if (rc == HF_ENOTFOUND || rc == HF_ESTATE) {
                if (rc == HF_ESTATE) hf_info("%s: registering there", h.err);   /* several URLs: it moved */
                else hf_warn("scheduler does not know agent id any more (%s): registering again", h.err);
                set_agent_id(ag, 0);
                continue;   /* re-register at once, listing running trials */
            }
        }
        if (rc == HF_OK) hb_on_reply(ag, &h, reply);
        else hb_on_failure(ag, &h, rc);
        json_decref(reply);
        hb_wait_next(ag, &h);
    }
    json_decref(h.held);
}

/* ------------------------------------------------------ long-poll thread */

/* A "pending" answer's pushed assignments (agent_link.h): to the main loop
 * as a heartbeat reply's would go, malformed ones back to the scheduler as
 * start_failed events. No "assign": a scheduler without the push. */
static void poll_on_push(agent *ag, const json_t *answer)
{
    agent_reply r;
    hf_jerr e;
    json_t *assign = json_object_get(answer, "assign");
    if (!json_is_array(assign) || !json_array_size(assign)) return;
    /* The answer parses as a reply: its other keys ("pending") are not a
     * reply's, and a reply's others are optional. */
    if (agent_reply_parse(answer, &r, &e)) {
        hf_warn("malformed long-poll answer: %s: %s", e.field, e.msg);
        return;
    }
    hf_debug("long-poll pushed %zu assignments", r.nassign);
    for (size_t i = 0; i < json_array_size(r.rejected); i++)
        agent_outbox_event(ag->ob, json_incref(json_array_get(r.rejected, i)));
    if (r.nassign) inbox_push(ag, &r);
    agent_reply_free(&r);
}

void agent_poll_main(hf_thread *t, void *arg)
{
    agent *ag = arg;
    (void)t;   /* stopped through ag->stop, ag->pcv and ag->cancel (aborts the request in flight) */
    char err[1024];
    int64_t backoff = 0;
    uint64_t failures = 0;

    pthread_mutex_lock(&ag->mu);
    while (!ag->stop) {
        if (!ag->agent_id) {
            cond_wait_ms(&ag->pcv, &ag->mu, 1000);   /* until registered */
            continue;
        }
        int64_t id = ag->agent_id;
        pthread_mutex_unlock(&ag->mu);
        int pending = 0;
        json_t *reply = NULL;
        int rc = agent_poll_wait(ag->poll, id, AGENT_POLL_WAIT_MS, &pending, &reply, err, sizeof err);
        if (rc == HF_OK && pending) poll_on_push(ag, reply);
        json_decref(reply);
        pthread_mutex_lock(&ag->mu);
        if (ag->stop) break;
        if (rc == HF_OK) {
            if (failures) hf_debug("long-poll works again after %llu failures", (unsigned long long)failures);
            failures = 0;
            backoff = 0;
            if (!pending) continue;
            /* Work waits: heartbeat now, and do not ask again before that
             * heartbeat was answered (it fetches the kills and what the push
             * did not carry, and reports what the push started). */
            uint64_t seen = ag->hb_done;
            int64_t t0 = hf_mono_ms();
            ag->urgent = 1;
            pthread_cond_signal(&ag->cv);
            while (!ag->stop && ag->hb_done == seen && hf_mono_ms() - t0 < AGENT_POLL_HB_WAIT_MS)
                cond_wait_ms(&ag->pcv, &ag->mu, AGENT_POLL_HB_WAIT_MS - (hf_mono_ms() - t0));
            continue;
        }
        /* The heartbeat thread reports an unreachable scheduler; here a
         * debug line is enough (a scheduler without the route answers 404:
         * heartbeats alone then deliver the work). */
        if (failures++ == 0) hf_debug("long-poll failed (%s); retrying with backoff", err);
        backoff = backoff ? backoff * 2 : 250;
        if (backoff > AGENT_POLL_BACKOFF_MAX) backoff = AGENT_POLL_BACKOFF_MAX;
        cond_wait_ms(&ag->pcv, &ag->mu, backoff);
    }
    pthread_mutex_unlock(&ag->mu);
}
