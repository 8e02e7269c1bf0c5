/*
 * logpool.c — the log-search pool (logpool.h).
 *
 * The threads are an hf_pool ("hf-logsearch", common/hf_pool.h) of
 * LOGPOOL_THREADS workers. One mutex (mu) guards the list of jobs (queued
 * and running, oldest first, at most LOGPOOL_MAX_JOBS: the per-user and
 * global counts are read off it) and the stopping flag. Arming a job
 * submits one pool task, which takes the oldest armed queued job (not
 * necessarily the one that submitted it), runs it without the lock, and
 * finishes it: unlinked (its slot free), result stored, done called, the
 * pool's reference dropped. There are always at least as many pool tasks
 * waiting as armed jobs queued, so every armed job runs; a task that finds
 * none (its job was finished early) just returns. Queued jobs whose
 * client hung up are finished without running by the running searches
 * (from their stop callback, every LOGPOOL_POLL_MS), so a hang-up frees its
 * slot while the pool is busy; while a thread is idle nothing is queued.
 *
 * Workload: a few searches a minute, each up to LOGSEARCH_BUDGET_MS of
 * one CPU; the list is short, so everything is a linear walk.
 */
#include "scheduler/api/logpool.h"

#include "hf_err.h"
#include "hf_log.h"
#include "hf_pool.h"
#include "hf_time.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

enum { JOB_QUEUED, JOB_RUNNING, JOB_DONE };

struct logjob {
    logjob         *next;       /* in lp->jobs while queued or running (mu) */
    logpool        *lp;
    char            user[128];
    logsearch_pat  *p;
    logsearch_query q;
    int             fd;
    logjob_done_fn  done;
    void           *arg;
    int             state;      /* JOB_* (mu) */
    int             armed;      /* (mu) */
    atomic_int      cancel;     /* the connection let go, or the pool stops */
    atomic_int      refs;       /* the pool's and the connection's */
    int64_t         next_poll;  /* hf_mono_ms of the next hang-up check (the running thread's) */
    /* the result, written before done is called */
    int             rc;
    json_t         *out;
    hf_jerr         e;
};

struct logpool {
    store          *st;
    pthread_mutex_t mu;
    logjob         *jobs;       /* queued and running, oldest first (mu) */
    int             njobs;      /* (mu) */
    int             stopping;   /* (mu) */
    hf_pool        *pool;       /* "hf-logsearch": one task per armed job */
};

static void job_unref(logjob *j)
{
    if (atomic_fetch_sub(&j->refs, 1) != 1) return;
    logsearch_pat_free(j->p);
    json_decref(j->out);
    free(j);
}

/* Has the peer of fd closed its end (or the socket failed)? */
static int client_gone(int fd)
{
    if (fd < 0) return 0;
    struct pollfd pf = {.fd = fd, .events = POLLRDHUP};
    return poll(&pf, 1, 0) == 1 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* Take j out of the list (mu held) and record its result: its slot is free. */
static void unlink_locked(logpool *lp, logjob *j, int rc)
{
    for (logjob **pp = &lp->jobs; *pp; pp = &(*pp)->next)
        if (*pp == j) {
            *pp = j->next;
            lp->njobs--;
            break;
        }
    j->next = NULL;
    j->state = JOB_DONE;
    if (rc) j->rc = rc;
}

/* After unlink_locked, without mu: tell the caller, drop the pool's reference. */
static void deliver(logjob *j)
{
    j->done(j->arg);
    job_unref(j);
}

/* Finish the armed queued jobs whose client hung up (mu held; it is
 * dropped and taken again around the done calls). */
static void sweep_locked(logpool *lp)
{
    logjob *gone[LOGPOOL_MAX_JOBS];
    int n = 0;
    for (logjob *j = lp->jobs, *nx; j; j = nx) {
        nx = j->next;
        if (j->state == JOB_QUEUED && j->armed && (atomic_load(&j->cancel) || client_gone(j->fd))) {
            unlink_locked(lp, j, HF_ECONN);
            gone[n++] = j;
        }
    }
    if (!n) return;
    pthread_mutex_unlock(&lp->mu);
    for (int i = 0; i < n; i++) deliver(gone[i]);
    pthread_mutex_lock(&lp->mu);
}

/* logsearch_query.stop of a running job: cancelled, or its client gone
 * (checked every LOGPOOL_POLL_MS, when queued jobs are swept too). */
static int job_stop(void *arg)
{
    logjob *j = arg;
    if (atomic_load(&j->cancel)) return 1;
    int64_t now = hf_mono_ms();
    if (now < j->next_poll) return 0;
    j->next_poll = now + LOGPOOL_POLL_MS;
    if (client_gone(j->fd)) {
        atomic_store(&j->cancel, 1);
        return 1;
    }
    if (pthread_mutex_trylock(&j->lp->mu) == 0) {
        sweep_locked(j->lp);
        pthread_mutex_unlock(&j->lp->mu);
    }
    return 0;
}

static logjob *next_ready_locked(logpool *lp)
{
    for (logjob *j = lp->jobs; j; j = j->next)
        if (j->state == JOB_QUEUED && j->armed) return j;
    return NULL;
}

/* A pool task ("hf-logsearch"): run the oldest armed queued job, if any. */
static void run_next(hf_pool *p, void *arg)
{
    (void)p;
    logpool *lp = arg;
    pthread_mutex_lock(&lp->mu);
    logjob *j = lp->stopping ? NULL : next_ready_locked(lp);
    if (!j) {   /* finished early (hung up, or the pool stops: logpool_stop answers it) */
        pthread_mutex_unlock(&lp->mu);
        return;
    }
    j->state = JOB_RUNNING;
    pthread_mutex_unlock(&lp->mu);
    /* Searches yield the CPU to the HTTP threads (per-thread niceness on Linux). */
    if (setpriority(PRIO_PROCESS, (id_t)gettid(), LOGPOOL_NICE) != 0) hf_debug("logpool: setpriority failed");
    hf_jerr_clear(&j->e);
    j->next_poll = 0;
    if (atomic_load(&j->cancel) || client_gone(j->fd))
        j->rc = HF_ECONN;
    else
        j->rc = logsearch_run(lp->st, j->p, &j->q, &j->out, &j->e);
    pthread_mutex_lock(&lp->mu);
    /* A search the pool's stop cancelled answers "stopping", not "hung up". */
    unlink_locked(lp, j, lp->stopping && j->rc == HF_ECONN ? HF_ESTATE : 0);
    pthread_mutex_unlock(&lp->mu);
    deliver(j);
}

logpool *logpool_new(store *st)
{
    logpool *lp = calloc(1, sizeof *lp);
    if (!lp) return NULL;
    lp->st = st;
    pthread_mutex_init(&lp->mu, NULL);
    /* Room for a task per job twice over: tasks whose job ended early
     * wait beside those of new jobs (see the header comment). */
    if (!(lp->pool = hf_pool_new("hf-logsearch", LOGPOOL_THREADS, 2 * LOGPOOL_MAX_JOBS))) {
        pthread_mutex_destroy(&lp->mu);
        free(lp);
        return NULL;
    }
    return lp;
}

void logpool_stop(logpool *lp)
{
    if (!lp) return;
    pthread_mutex_lock(&lp->mu);
    lp->stopping = 1;
    for (logjob *j = lp->jobs; j; j = j->next) atomic_store(&j->cancel, 1);
    pthread_mutex_unlock(&lp->mu);
    hf_pool_stop(lp->pool, HF_POOL_CANCEL);   /* running searches end; waiting tasks are dropped */
    /* Armed jobs still queued: answer "stopping". Unarmed ones are being
     * submitted right now; logjob_arm finishes them. */
    pthread_mutex_lock(&lp->mu);
    logjob *left[LOGPOOL_MAX_JOBS];
    int n = 0;
    for (logjob *j = lp->jobs, *nx; j; j = nx) {
        nx = j->next;
        if (j->armed) {
            unlink_locked(lp, j, HF_ESTATE);
            left[n++] = j;
        }
    }
    pthread_mutex_unlock(&lp->mu);
    for (int i = 0; i < n; i++) deliver(left[i]);
}

void logpool_free(logpool *lp)
{
    if (!lp) return;
    logpool_stop(lp);
    if (lp->jobs) hf_warn("logpool: %d search(es) never armed at free", lp->njobs);
    hf_pool_free(lp->pool);
    pthread_mutex_destroy(&lp->mu);
    free(lp);
}

/* Seconds until the earliest deadline among the jobs of user (NULL: all),
 * at least 1: when a slot should be free. mu held. */
static int retry_after_locked(logpool *lp, const char *user)
{
    int64_t now = hf_mono_ms(), best = INT64_MAX;
    for (logjob *j = lp->jobs; j; j = j->next)
        if ((!user || strcmp(j->user, user) == 0) && j->q.deadline_ms < best) best = j->q.deadline_ms;
    int64_t s = best == INT64_MAX ? 1 : (best - now + 999) / 1000;
    return s < 1 ? 1 : s > LOGSEARCH_BUDGET_MS / 1000 ? LOGSEARCH_BUDGET_MS / 1000 : (int)s;
}

int logpool_submit(logpool *lp, const char *user, logsearch_pat *p, const logsearch_query *q, int fd,
                   logjob_done_fn done, void *arg, logjob **out, int *retry_s, hf_jerr *e)
{
    *out = NULL;
    *retry_s = 0;
    logjob *j = calloc(1, sizeof *j);
    if (!j) { logsearch_pat_free(p); return HF_ENOMEM; }
    snprintf(j->user, sizeof j->user, "%s", user ? user : "");
    j->lp = lp;
    j->p = p;
    j->q = *q;
    if (j->q.deadline_ms <= 0) j->q.deadline_ms = hf_mono_ms() + LOGSEARCH_BUDGET_MS;
    j->q.stop = job_stop;
    j->q.stop_arg = j;
    j->fd = fd;
    j->done = done;
    j->arg = arg;
    atomic_init(&j->cancel, 0);
    atomic_init(&j->refs, 2);
    int rc = 0, mine = 0;
    pthread_mutex_lock(&lp->mu);
    for (logjob *o = lp->jobs; o; o = o->next) mine += strcmp(o->user, j->user) == 0;
    if (lp->stopping) {
        rc = HF_ESTATE;
    } else if (mine >= LOGPOOL_PER_USER) {
        *retry_s = retry_after_locked(lp, j->user);
        rc = hf_jerr_set(e, "grep", NULL, "too many log searches: user '%s' has %d running or queued (at most %d)",
                         j->user, mine, LOGPOOL_PER_USER);
        rc = HF_ETOOBIG;
    } else if (lp->njobs >= LOGPOOL_MAX_JOBS) {
        *retry_s = retry_after_locked(lp, NULL);
        rc = hf_jerr_set(e, "grep", NULL, "too many log searches: %d running or queued (at most %d)", lp->njobs,
                         LOGPOOL_MAX_JOBS);
        rc = HF_ETOOBIG;
    } else {
        logjob **pp = &lp->jobs;
        while (*pp) pp = &(*pp)->next;
        *pp = j;
        lp->njobs++;
    }
    pthread_mutex_unlock(&lp->mu);
    if (rc) {
        logsearch_pat_free(p);
        free(j);
        return rc;
    }
    *out = j;
    return 0;
}

void logjob_arm(logpool *lp, logjob *j)
{
    pthread_mutex_lock(&lp->mu);
    if (lp->stopping) {
        unlink_locked(lp, j, HF_ESTATE);
        pthread_mutex_unlock(&lp->mu);
        deliver(j);
        return;
    }
    j->armed = 1;
    pthread_mutex_unlock(&lp->mu);
    /* HF_ETOOBIG cannot leave j behind: a full queue holds more tasks than
     * there are armed jobs queued, and each takes the oldest. */
    int rc = hf_pool_submit(lp->pool, NULL, run_next, NULL, lp, 0);
    if (rc == 0 || rc == HF_ETOOBIG || rc == HF_ESTATE) return;   /* HF_ESTATE: logpool_stop answers it */
    hf_warn("logpool: cannot queue a search: %s", hf_strerror(rc));
    pthread_mutex_lock(&lp->mu);
    int queued = j->state == JOB_QUEUED;
    if (queued) unlink_locked(lp, j, rc);
    pthread_mutex_unlock(&lp->mu);
    if (queued) deliver(j);
}

int logjob_result(logjob *j, json_t **out, hf_jerr *e)
{
    *out = j->out;
    j->out = NULL;
    *e = j->e;
    return j->rc;
}

void logjob_release(logjob *j)
{
    if (!j) return;
    atomic_store(&j->cancel, 1);
    if (!j->armed) {   /* never handed over (armed is the caller's own write): the pool lets go too */
        logpool *lp = j->lp;
        pthread_mutex_lock(&lp->mu);
        int queued = j->state == JOB_QUEUED;
        if (queued) unlink_locked(lp, j, HF_ECONN);
        pthread_mutex_unlock(&lp->mu);
        if (queued) job_unref(j);
    }
    job_unref(j);
}

int logpool_jobs(logpool *lp)
{
    pthread_mutex_lock(&lp->mu);
    int n = lp->njobs;
    pthread_mutex_unlock(&lp->mu);
    return n;
}
