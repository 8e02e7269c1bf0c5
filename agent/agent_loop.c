/*
 * agent_loop.c — the agent daemon: start-up, the main (supervisor) loop,
 * the heartbeat and long-poll threads that drive the agent_link, and
 * shutdown (see agent.h for the threading model).
 *
 * Failure policy: the agent never exits because the scheduler or a trial
 * misbehaves. A failed registration or heartbeat is retried with
 * exponential backoff (from the heartbeat interval up to 5 s, logged on
 * the first failure and then every 30 s); meanwhile trials keep running
 * and their output waits in the bounded outbox. A 404 on heartbeat means
 * the scheduler forgot us (new database): register again, listing the
 * trials still running so they are re-adopted, not duplicated. The agent
 * also registers again after any connection failure or timeout before its
 * next heartbeat (idempotent: same name, same id), so a scheduler that was
 * restarted hears the running list first.
 *
 * Doorbell: a third thread keeps a long-poll open
 * (GET /api/v1/agents/{id}/wait, own HTTP handle); when the scheduler says
 * work is pending it wakes the heartbeat thread, which heartbeats at once
 * and gets the assignments or kills in that reply (the only delivery path).
 *
 * Duplicate-safe heartbeats: every heartbeat carries this process's random
 * "instance" id and a "batch" number. A batch that failed (timeout after
 * the scheduler may have committed it, 5xx, connection lost) is sent again
 * with the same number and the same items, so the scheduler can recognise
 * it and acknowledge it without storing its metrics and logs twice.
 */
#include "agent.h"
#include "agent_assign.h"
#include "agent_context.h"
#include "agent_gpu.h"
#include "agent_link.h"
#include "agent_objects.h"
#include "agent_outbox.h"
#include "agent_spawn.h"
#include "agent_sup.h"
#include "agent_upload.h"
#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"

#include <arpa/inet.h>
#include <stdatomic.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define AGENT_BACKOFF_MAX_MS   5000
#define AGENT_URGENT_GAP_MS    20      /* min gap between event-triggered heartbeats */
#define AGENT_FINAL_FLUSH_MS   3000    /* last heartbeat at shutdown */
#define AGENT_POLL_BACKOFF_MAX 30000   /* long-poll retry cap */
#define AGENT_POLL_HB_WAIT_MS  2000    /* after "pending": wait for the heartbeat that fetches it */
#define AGENT_CACHED_LIST_MAX  1024    /* object hashes listed to the scheduler (newest first) */
#define AGENT_MAX_FETCHES      64      /* restores being fetched at once */

/* An assignment with a "restore", waiting for its checkpoint to be
 * fetched (one thread each) before the main loop starts it. */
typedef struct fetch_job {
    struct agent     *ag;
    agent_spec       *sp;           /* owned */
    pthread_t         th;
    int               done, canceled, rc;   /* under ag->mu */
    int64_t           t0;
    char              err[1024];
    struct fetch_job *next;
} fetch_job;

typedef struct agent {
    const agent_cfg *cfg;
    agent_outbox    *ob;
    agent_objects   *objs;             /* the object cache (thread-safe) */
    agent_upload    *up;               /* the checkpoint uploader */
    char             workdir[AGENT_PATH_MAX];
    fetch_job       *fetches;          /* main thread only (done/canceled under mu) */
    agent_sup       *sup;
    agent_prep      *prep;             /* fetches and unpacks contexts off the main thread */
    agent_link      *link;
    agent_poll      *poll;             /* long-poll thread's HTTP handle */
    atomic_int       cancel;           /* aborts the long-poll in flight */
    char             instance[24];     /* random id of this process run */
    int              wake[2];          /* heartbeat thread -> main loop */

    pthread_mutex_t  mu;               /* guards everything below */
    pthread_cond_t   cv;
    int              stop;             /* heartbeat thread: exit now */
    int              urgent;           /* heartbeat thread: send soon */
    agent_reply     *inbox;            /* replies waiting for the main loop */
    size_t           ninbox, capinbox;
    int64_t          interval_ms;
    pthread_cond_t   pcv;              /* long-poll thread waits here */
    int64_t          agent_id;         /* 0 = not registered (for the long-poll thread) */
    uint64_t         hb_done;          /* heartbeats answered 200 */
} agent;

static volatile sig_atomic_t got_term;
static int term_fd = -1;

static void on_term(int sig)
{
    int saved = errno;
    got_term = sig;
    if (term_fd >= 0) {
        ssize_t r = write(term_fd, "t", 1);
        (void)r;
    }
    errno = saved;
}

/* ------------------------------------------------------------ start-up */

static int read_token(const char *path, char *out, size_t outlen)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    int rc = HF_ENOTFOUND;
    if (!f) {
        hf_error("--token-file %s: %s", path, strerror(errno));
        return HF_EIO;
    }
    while (fgets(line, sizeof line, f)) {
        char *p = line;
        p[strcspn(p, "\r\n")] = '\0';
        while (*p == ' ' || *p == '\t') p++;
        if (*p == '#' || *p == '\0') continue;
        if (!strncmp(p, "user:", 5)) continue;        /* a shared token file: take the agent's */
        if (!strncmp(p, "agent:", 6)) p += 6;
        size_t n = strlen(p);
        while (n && (p[n - 1] == ' ' || p[n - 1] == '\t')) p[--n] = '\0';
        if (n == 0 || n >= outlen) continue;
        memcpy(out, p, n + 1);
        rc = HF_OK;
        break;
    }
    fclose(f);
    if (rc) hf_error("--token-file %s: no token (a line 'TOKEN' or 'agent:TOKEN')", path);
    return rc;
}

/* The local address used to reach the scheduler (a UDP connect sends nothing). */
static void local_address(const char *url, char *out, size_t outlen)
{
    char host[256] = "", port[16] = "80";
    const char *p = strstr(url, "://");
    p = p ? p + 3 : url;
    if (!strncmp(url, "https", 5)) snprintf(port, sizeof port, "443");
    if (*p == '[') {
        const char *e = strchr(p, ']');
        if (e) {
            snprintf(host, sizeof host, "%.*s", (int)(e - p - 1), p + 1);
            p = e + 1;
        }
    } else {
        size_t n = strcspn(p, ":/");
        snprintf(host, sizeof host, "%.*s", (int)n, p);
        p += n;
    }
    if (*p == ':') snprintf(port, sizeof port, "%.*s", (int)strcspn(p + 1, "/"), p + 1);

    struct addrinfo hints = {.ai_socktype = SOCK_DGRAM}, *res = NULL;
    snprintf(out, outlen, "127.0.0.1");
    if (getaddrinfo(host, port, &hints, &res) || !res) return;
    int fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0
        && getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        getnameinfo((struct sockaddr *)&ss, sl, out, (socklen_t)outlen, NULL, 0, NI_NUMERICHOST);
    if (fd >= 0) close(fd);
    freeaddrinfo(res);
}

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

/* Wait up to ms or until woken (urgent/stop). Caller holds mu. */
static void wait_locked(agent *ag, int64_t ms)
{
    struct timespec ts = hf_deadline(CLOCK_REALTIME, ms);
    while (!ag->stop && !ag->urgent)
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
        hf_info("registered with %s as agent %lld (%zu running trials listed)", ag->cfg->scheduler,
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
                "queued, %llu logs dropped so far; retrying", ag->cfg->scheduler, h->err, st.logs,
                st.metrics, st.events, (unsigned long long)st.dropped_logs);
        h->last_warn = now;
    }
    h->backoff = h->backoff ? h->backoff * 2 : h->iv;
    if (h->backoff > AGENT_BACKOFF_MAX_MS) h->backoff = AGENT_BACKOFF_MAX_MS;
}

/* Sleep until the next heartbeat is due: the interval, the backoff, a
 * short gap while a backlog drains, or at once (after a short gap that
 * lets a burst go in one batch) when the main loop urged. */
static void hb_wait_next(agent *ag, hb_state *h)
{
    pthread_mutex_lock(&ag->mu);
    int64_t wait = h->iv;
    if (h->backoff) wait = h->backoff;
    else if (agent_outbox_pending(ag->ob)) wait = AGENT_URGENT_GAP_MS;   /* backlog: keep draining */
    if (!h->backoff && ag->urgent) {
        int64_t since = hf_mono_ms() - h->last_send;
        wait = since >= AGENT_URGENT_GAP_MS ? 0 : AGENT_URGENT_GAP_MS - since;
    }
    ag->urgent = 0;
    if (wait > 0) wait_locked(ag, wait);
    if (!h->backoff && ag->urgent) {
        /* woken for an event: a short gap so a burst goes in one batch */
        int64_t since = hf_mono_ms() - h->last_send;
        if (since < AGENT_URGENT_GAP_MS) {
            ag->urgent = 0;
            wait_locked(ag, AGENT_URGENT_GAP_MS - since);
        }
    }
    ag->urgent = 0;
    pthread_mutex_unlock(&ag->mu);
}

static void *hb_main(void *arg)
{
    agent *ag = arg;
    hb_state h;

    memset(&h, 0, sizeof h);
    for (;;) {
        pthread_mutex_lock(&ag->mu);
        int stop = ag->stop;
        h.iv = ag->interval_ms;
        pthread_mutex_unlock(&ag->mu);
        if (stop) break;

        json_t *reply = NULL;
        int rc = hb_register(ag, &h);
        if (rc == HF_OK) {
            rc = hb_send(ag, &h, &reply);
            if (rc == HF_ENOTFOUND) {
                hf_warn("scheduler does not know agent id any more (%s): registering again", h.err);
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
    return NULL;
}

/* ------------------------------------------------------ long-poll thread */

static void *poll_main(void *arg)
{
    agent *ag = arg;
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
        int rc = agent_poll_wait(ag->poll, id, AGENT_POLL_WAIT_MS, &pending, err, sizeof err);
        pthread_mutex_lock(&ag->mu);
        if (ag->stop) break;
        if (rc == HF_OK) {
            if (failures) hf_debug("long-poll works again after %llu failures", (unsigned long long)failures);
            failures = 0;
            backoff = 0;
            if (!pending) continue;
            /* Work waits: heartbeat now, and do not ask again before that
             * heartbeat was answered (it fetches the work). */
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
    return NULL;
}

/* -------------------------------------------------------------- main loop */

/* A random id for this process run (heartbeat "instance"). */
static void make_instance(char *out, size_t outlen)
{
    uint64_t v = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, &v, sizeof v) != (ssize_t)sizeof v)
        v = ((uint64_t)hf_wall_ms() << 20) ^ (uint64_t)getpid() ^ (uint64_t)hf_mono_us();
    if (fd >= 0) close(fd);
    snprintf(out, outlen, "%016llx", (unsigned long long)v);
}

/* Start an assignment, or hand it to the preparation thread first when
 * it carries a code context (agent_context.h); sp is taken. */
static void start_or_prepare(agent *ag, agent_spec *sp)
{
    char err[1024];
    if (agent_prep_needed(sp) && !agent_sup_known(ag->sup, sp->trial_id, sp->attempt, sp->rank)) {
        if (agent_prep_submit(ag->prep, sp) == HF_EEXIST)
            hf_debug("trial %lld attempt %lld: being prepared already", (long long)sp->trial_id,
                     (long long)sp->attempt);
        return;
    }
    if (agent_sup_start(ag->sup, sp, err, sizeof err) == HF_EEXIST)
        hf_debug("trial %lld attempt %lld already runs here", (long long)sp->trial_id, (long long)sp->attempt);
    agent_spec_free(sp);
}

/* Start what the preparation thread finished (or report why not). */
static void handle_prepared(agent *ag)
{
    agent_prep_done *d = NULL;
    size_t n = 0;
    char err[1024];
    if (!ag->prep) return;   /* shut down */
    agent_prep_take(ag->prep, &d, &n);
    for (size_t i = 0; i < n; i++) {
        agent_spec *sp = d[i].spec;
        if (d[i].rc) {
            agent_sup_start_failed(ag->sup, sp, d[i].err);
        } else {
            char note[300];
            int len = snprintf(note, sizeof note, "[hyperfarm-agent] %s", d[i].note);
            hf_info("trial %lld attempt %lld: %s", (long long)sp->trial_id, (long long)sp->attempt, d[i].note);
            agent_outbox_log(ag->ob, sp->trial_id, sp->attempt, hf_wall_ms(), AGENT_STREAM_STDERR, note,
                             len < (int)sizeof note ? (size_t)len : sizeof note - 1);
            agent_sup_start(ag->sup, sp, err, sizeof err);
        }
        agent_spec_free(sp);
    }
    free(d);
}

/* ------------------------------------------------------------ restores */

static void start_failed_event(agent *ag, const agent_spec *sp, const char *why)
{
    agent_outbox_event(ag->ob, json_pack("{s:I, s:I, s:I, s:s, s:I, s:s}", "trial_id", (json_int_t)sp->trial_id,
                                         "attempt", (json_int_t)sp->attempt, "rank", (json_int_t)sp->rank,
                                         "type", "start_failed", "time", (json_int_t)hf_wall_ms(), "error", why));
}

/* The fetch thread: the checkpoint into <workdir>/<checkpoint_dir>/<name>
 * (from the cache when it is there: a hard link, no copy). */
static void *fetch_main(void *arg)
{
    fetch_job *f = arg;
    agent *ag = f->ag;
    const agent_spec *sp = f->sp;
    char dir[2 * AGENT_PATH_MAX], dest[3 * AGENT_PATH_MAX];
    char err[1024] = "";
    snprintf(dir, sizeof dir, "%s/%s", ag->workdir, sp->checkpoint_dir);
    snprintf(dest, sizeof dest, "%s/%s", dir, sp->restore_name);
    int rc = agent_fs_mkdirs(dir);
    if (rc) snprintf(err, sizeof err, "cannot create %.900s: %s", dir, hf_strerror(rc));
    else rc = agent_objects_get(ag->objs, sp->restore_sha, sp->restore_size, dest, err, sizeof err);
    pthread_mutex_lock(&ag->mu);
    f->rc = rc;
    snprintf(f->err, sizeof f->err, "%s", err);
    f->done = 1;
    pthread_mutex_unlock(&ag->mu);
    ssize_t w = write(ag->wake[1], "f", 1);
    (void)w;
    return NULL;
}

/* Fetch sp's restore in the background; sp is taken. A duplicate of an
 * assignment being fetched is dropped. */
static void fetch_start(agent *ag, agent_spec *sp)
{
    int n = 0;
    for (fetch_job *f = ag->fetches; f; f = f->next, n++)
        if (f->sp->trial_id == sp->trial_id && f->sp->attempt == sp->attempt && f->sp->rank == sp->rank) {
            agent_spec_free(sp);
            return;
        }
    fetch_job *f = n < AGENT_MAX_FETCHES ? calloc(1, sizeof *f) : NULL;
    if (!f) {
        start_failed_event(ag, sp, "cannot fetch its checkpoint: too many restores in progress");
        agent_spec_free(sp);
        return;
    }
    f->ag = ag;
    f->sp = sp;
    f->t0 = hf_mono_ms();
    if (pthread_create(&f->th, NULL, fetch_main, f)) {
        start_failed_event(ag, sp, "cannot fetch its checkpoint: no thread");
        agent_spec_free(sp);
        free(f);
        return;
    }
    hf_info("trial %lld attempt %lld: fetching checkpoint %s (%.12s, %lld bytes, step %lld of trial %lld)",
            (long long)sp->trial_id, (long long)sp->attempt, sp->restore_name, sp->restore_sha,
            (long long)sp->restore_size, (long long)sp->restore_step, (long long)sp->restore_trial);
    f->next = ag->fetches;
    ag->fetches = f;
}

/* A kill for a trial whose restore is being fetched: it does not start. */
static int fetch_cancel(agent *ag, int64_t trial_id, int64_t attempt)
{
    int hit = 0;
    pthread_mutex_lock(&ag->mu);
    for (fetch_job *f = ag->fetches; f; f = f->next)
        if (f->sp->trial_id == trial_id && (attempt <= 0 || f->sp->attempt == attempt)) f->canceled = hit = 1;
    pthread_mutex_unlock(&ag->mu);
    return hit;
}

/* Start (or fail) the trials whose fetch ended; all = wait for every one. */
static void fetch_reap(agent *ag, int all, int stopping)
{
    for (fetch_job **pp = &ag->fetches; *pp;) {
        fetch_job *f = *pp;
        pthread_mutex_lock(&ag->mu);
        int done = f->done;
        pthread_mutex_unlock(&ag->mu);
        if (!done && !all) { pp = &f->next; continue; }
        pthread_join(f->th, NULL);
        *pp = f->next;
        agent_spec *sp = f->sp;
        if (f->rc) {
            char why[1600];
            snprintf(why, sizeof why, "cannot restore checkpoint %s (step %lld of trial %lld): %s", sp->restore_name,
                     (long long)sp->restore_step, (long long)sp->restore_trial, f->err);
            hf_error("trial %lld attempt %lld: %s", (long long)sp->trial_id, (long long)sp->attempt, why);
            start_failed_event(ag, sp, why);
        } else if (f->canceled || stopping) {
            start_failed_event(ag, sp, stopping ? "agent shutting down" : "killed before it started");
        } else {
            char note[512];
            int n = snprintf(note, sizeof note, "[hyperfarm-agent] restored checkpoint %s (step %lld of trial %lld, "
                             "sha256 %.16s, %lld bytes) in %lld ms", sp->restore_name, (long long)sp->restore_step,
                             (long long)sp->restore_trial, sp->restore_sha, (long long)sp->restore_size,
                             (long long)(hf_mono_ms() - f->t0));
            agent_outbox_log(ag->ob, sp->trial_id, sp->attempt, hf_wall_ms(), AGENT_STREAM_STDERR, note, (size_t)n);
            start_or_prepare(ag, sp);   /* its code context next, if any; sp is taken */
            sp = NULL;
        }
        agent_spec_free(sp);
        free(f);
    }
}

/* The uploader's gate: has the metric report up to seq been delivered? */
static int gate_delivered(void *ctx, uint64_t seq) { return agent_outbox_metrics_delivered(ctx, seq); }

/* Hooks of the supervisor into the uploader. */
static void hook_checkpoint(void *ctx, int64_t trial_id, int64_t attempt, int64_t step, const char *path)
{
    if (!((agent *)ctx)->cfg->checkpoint_upload) return;   /* --no-checkpoint-upload */
    agent *ag = ctx;   /* after its report (just queued by the supervisor) reached the scheduler */
    agent_upload_note_checkpoint_after(ag->up, trial_id, attempt, step, path, agent_outbox_last_seq(ag->ob));
}
static void hook_start(void *ctx, int64_t trial_id, const char *dir)
{
    agent_upload_note_start(((agent *)ctx)->up, trial_id, dir);
}
static void hook_exit(void *ctx, int64_t trial_id, const char *dir, int others)
{
    agent_upload_note_exit(((agent *)ctx)->up, trial_id, dir, others);
}

static void handle_inbox(agent *ag, int stopping)
{
    agent_reply *items;
    size_t n;

    pthread_mutex_lock(&ag->mu);
    items = ag->inbox;
    n = ag->ninbox;
    ag->inbox = NULL;
    ag->ninbox = ag->capinbox = 0;
    pthread_mutex_unlock(&ag->mu);

    for (size_t i = 0; i < n; i++) {
        agent_reply *r = &items[i];
        for (size_t k = 0; k < r->nkill; k++) {
            agent_killreq *kr = &r->kill[k];
            if (agent_sup_kill(ag->sup, kr->trial_id, kr->attempt, kr->grace_ms, kr->reason) == HF_ENOTFOUND &&
                !fetch_cancel(ag, kr->trial_id, kr->attempt) &&
                (!ag->prep || !agent_prep_cancel(ag->prep, kr->trial_id, kr->attempt, kr->reason)))
                hf_info("kill for trial %lld attempt %lld: not running here", (long long)kr->trial_id,
                        (long long)kr->attempt);
        }
        for (size_t k = 0; k < r->nassign; k++) {
            agent_spec *sp = r->assign[k];
            if (stopping) {
                /* shutting down: say so instead of starting it */
                agent_outbox_event(ag->ob, json_pack("{s:I, s:I, s:s, s:I, s:s}", "trial_id", (json_int_t)sp->trial_id,
                                                     "attempt", (json_int_t)sp->attempt, "type", "start_failed",
                                                     "time", (json_int_t)hf_wall_ms(), "error", "agent shutting down"));
                continue;
            }
            r->assign[k] = NULL;   /* taken */
            if (sp->has_restore) fetch_start(ag, sp);   /* then start_or_prepare (fetch_reap) */
            else start_or_prepare(ag, sp);
        }
        agent_reply_free(r);
    }
    free(items);
    handle_prepared(ag);
}

static void urge(agent *ag)
{
    pthread_mutex_lock(&ag->mu);
    ag->urgent = 1;
    pthread_cond_signal(&ag->cv);
    pthread_mutex_unlock(&ag->mu);
}

/* SIGTERM/SIGINT stop gracefully (through the wake pipe); SIGPIPE must not
 * kill us. */
static void install_signals(agent *ag)
{
    struct sigaction sa;
    term_fd = ag->wake[1];
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* Everything before the threads start: the work directory (created, made
 * absolute), the agent binary's directory, the token, GPUs, slots, name
 * and advertised host; then the outbox, supervisor, wake pipe, HTTP
 * handles and signal handlers. RET 0 or an HF_E* code (logged). */
static int start_up(agent *ag, const agent_cfg *cfg)
{
    char workdir[AGENT_PATH_MAX], self_dir[AGENT_PATH_MAX] = "", token[512] = "", host[256], name[256], err[512];
    json_t *gpus = NULL, *info = NULL;
    int rc;

    if ((rc = agent_fs_mkdirs(cfg->workdir)) || !realpath(cfg->workdir, workdir)) {
        hf_error("--workdir %s: cannot create or resolve: %s", cfg->workdir, rc ? hf_strerror(rc) : strerror(errno));
        rc = rc ? rc : HF_EIO;
        goto end;
    }
    ssize_t sl = readlink("/proc/self/exe", self_dir, sizeof self_dir - 1);
    if (sl > 0) {
        self_dir[sl] = '\0';
        char *slash = strrchr(self_dir, '/');
        if (slash) *slash = '\0';
    } else self_dir[0] = '\0';
    if (cfg->token_file && (rc = read_token(cfg->token_file, token, sizeof token))) goto end;
    if ((rc = agent_gpu_discover(cfg->gpus, &gpus, err, sizeof err))) {
        hf_error("%s", err);
        goto end;
    }
    int64_t slots = cfg->slots;
    if (slots <= 0) {
        slots = (int64_t)json_array_size(gpus);
        if (slots == 0) slots = sysconf(_SC_NPROCESSORS_ONLN) > 0 ? sysconf(_SC_NPROCESSORS_ONLN) : 1;
    }
    agent_spawn_default_threads(sysconf(_SC_NPROCESSORS_ONLN), (long)slots);
    if (cfg->name && *cfg->name) snprintf(name, sizeof name, "%s", cfg->name);
    else if (gethostname(name, sizeof name)) snprintf(name, sizeof name, "agent");
    name[sizeof name - 1] = '\0';
    if (cfg->host && *cfg->host) snprintf(host, sizeof host, "%s", cfg->host);
    else local_address(cfg->scheduler, host, sizeof host);

    agent_outbox_limits lim = {.max_log_lines = (size_t)cfg->max_log_lines,
                               .max_log_bytes = (size_t)cfg->max_log_mb << 20,
                               .max_metrics = (size_t)cfg->max_metrics};
    info = json_pack("{s:s, s:I, s:O, s:s}", "name", name, "slots", (json_int_t)slots, "gpus", gpus, "host", host);
    if (!(ag->ob = agent_outbox_new(&lim))
        || !(ag->sup = agent_sup_new(workdir, self_dir[0] ? self_dir : NULL, cfg->grace_ms, ag->ob))
        || pipe2(ag->wake, O_CLOEXEC | O_NONBLOCK)) {
        hf_error("cannot initialise the agent: out of memory or descriptors");
        rc = HF_ENOMEM;
        goto end;
    }
    snprintf(ag->workdir, sizeof ag->workdir, "%s", workdir);
    if ((rc = agent_objects_open(workdir, cfg->scheduler, token[0] ? token : NULL, cfg->cache_mb << 20, &ag->objs, err,
                                 sizeof err))) {
        hf_error("%s", err);
        goto end;
    }
    agent_objects_set_cafile(ag->objs, cfg->ca_file);
    if (!(ag->up = agent_upload_new(ag->objs, workdir, cfg->keep_trial_dirs_s < 0 ? -1 : cfg->keep_trial_dirs_s * 1000))) {
        hf_error("cannot start the checkpoint uploader");
        rc = HF_ENOMEM;
        goto end;
    }
    agent_upload_set_gate(ag->up, gate_delivered, ag->ob);
    agent_sup_set_hooks(ag->sup, &(agent_sup_hooks){.ctx = ag, .on_checkpoint = hook_checkpoint,
                                                   .on_start = hook_start, .on_exit = hook_exit});
    ag->link = agent_link_new(cfg->scheduler, token[0] ? token : NULL, cfg->ca_file, (long)cfg->http_timeout_ms,
                              info);
    info = NULL;   /* owned (or freed) by agent_link_new */
    ag->poll = agent_poll_new(cfg->scheduler, token[0] ? token : NULL, cfg->ca_file, (long)cfg->http_timeout_ms,
                              &ag->cancel);
    if (!ag->link || !ag->poll) {
        hf_error("cannot initialise the HTTP client");
        rc = HF_ENOMEM;
        goto end;
    }
    if (!(ag->prep = agent_prep_new(workdir, ag->objs, ag->wake[1]))) {
        hf_error("cannot start the context preparation thread under %s", workdir);
        rc = HF_ENOMEM;
        goto end;
    }
    install_signals(ag);
    hf_info("hyperfarm-agent %s: name %s, %lld slots, %zu GPUs, workdir %s, scheduler %s, host %s",
            AGENT_VERSION, name, (long long)slots, json_array_size(gpus), workdir, cfg->scheduler, host);
end:
    memset(token, 0, sizeof token);
    json_decref(info);
    json_decref(gpus);
    return rc;
}

/* The main loop: supervise trials and start or stop what the heartbeat
 * thread received, until a signal stopped every trial; then give the
 * heartbeat thread up to AGENT_FINAL_FLUSH_MS to deliver the exit events. */
static void serve(agent *ag)
{
    int stopping = 0;
    int64_t stop_started = 0;
    agent_outbox_stats prev;
    agent_outbox_get_stats(ag->ob, &prev);
    for (;;) {
        if (agent_sup_poll(ag->sup, 200, ag->wake[0])) {
            char junk[64];
            while (read(ag->wake[0], junk, sizeof junk) > 0) {}
        }
        if (got_term && !stopping) {
            stopping = 1;
            stop_started = hf_mono_ms();
            hf_info("signal %d: stopping %d trials (grace %lld ms) and exiting", (int)got_term,
                    agent_sup_count(ag->sup), (long long)ag->cfg->grace_ms);
            agent_sup_kill_all(ag->sup, -1, "agent shutdown");
            agent_prep_cancel(ag->prep, 0, 0, "agent shutdown");
        }
        handle_inbox(ag, stopping);
        fetch_reap(ag, 0, stopping);
        /* a trial started or ended: tell the scheduler soon */
        agent_outbox_stats st;
        agent_outbox_get_stats(ag->ob, &st);
        if (st.events > 0 && (st.events != prev.events || st.sent_events != prev.sent_events)) urge(ag);
        prev = st;
        if (stopping && agent_sup_count(ag->sup) == 0 && !ag->fetches && agent_prep_pending(ag->prep) == 0) break;
    }

    /* last heartbeat(s): deliver the exit events */
    int64_t t0 = hf_mono_ms();
    urge(ag);
    while (hf_mono_ms() - t0 < AGENT_FINAL_FLUSH_MS) {
        agent_outbox_stats st;
        agent_outbox_get_stats(ag->ob, &st);
        if (st.events == 0 && st.metrics == 0) break;
        hf_sleep_ms(20);
    }
    hf_info("stopped after %lld ms", (long long)(hf_mono_ms() - stop_started));
}

/* Stop and join the threads that started (hb, pt: NULL = not started),
 * answer what is left in the inbox, and free everything. */
static void shut_down(agent *ag, pthread_t *hb, pthread_t *pt)
{
    if (hb || pt) {
        pthread_mutex_lock(&ag->mu);
        ag->stop = 1;
        atomic_store(&ag->cancel, 1);
        pthread_cond_signal(&ag->cv);
        pthread_cond_broadcast(&ag->pcv);
        pthread_mutex_unlock(&ag->mu);
        if (hb) pthread_join(*hb, NULL);
        if (pt) pthread_join(*pt, NULL);
    }
    term_fd = -1;
    agent_prep_free(ag->prep);   /* joins the thread: nothing is started past here */
    ag->prep = NULL;
    handle_inbox(ag, 1);
    fetch_reap(ag, 1, 1);
    agent_upload_free(ag->up);     /* before the supervisor: its hooks name the uploader */
    agent_sup_free(ag->sup);
    agent_objects_close(ag->objs);
    agent_link_free(ag->link);
    agent_poll_free(ag->poll);
    agent_outbox_free(ag->ob);
    for (int i = 0; i < 2; i++)
        if (ag->wake[i] >= 0) close(ag->wake[i]);
    pthread_mutex_destroy(&ag->mu);
    pthread_cond_destroy(&ag->cv);
    pthread_cond_destroy(&ag->pcv);
}

int agent_run(const agent_cfg *cfg)
{
    agent ag;
    pthread_t hb, pt;
    int hb_started = 0, poll_started = 0, rc;

    memset(&ag, 0, sizeof ag);
    ag.cfg = cfg;
    ag.wake[0] = ag.wake[1] = -1;
    pthread_mutex_init(&ag.mu, NULL);
    pthread_cond_init(&ag.cv, NULL);
    pthread_cond_init(&ag.pcv, NULL);
    atomic_init(&ag.cancel, 0);
    make_instance(ag.instance, sizeof ag.instance);
    ag.interval_ms = cfg->heartbeat_ms > 0 ? cfg->heartbeat_ms : 1000;

    if ((rc = start_up(&ag, cfg))) goto end;
    if (pthread_create(&hb, NULL, hb_main, &ag)) {
        hf_error("cannot start the heartbeat thread");
        rc = HF_ENOMEM;
        goto end;
    }
    hb_started = 1;
    if (pthread_create(&pt, NULL, poll_main, &ag)) {
        hf_error("cannot start the long-poll thread");
        rc = HF_ENOMEM;
        goto end;
    }
    poll_started = 1;
    serve(&ag);
end:
    shut_down(&ag, hb_started ? &hb : NULL, poll_started ? &pt : NULL);
    return rc;
}
