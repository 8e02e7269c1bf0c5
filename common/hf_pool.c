/*
 * hf_pool.c — the worker pool (hf_pool.h).
 *
 * One mutex (p->mu) guards the queue (a singly linked FIFO of malloc'd
 * jobs, at most queue_max long), the running table (one slot per thread:
 * the job it runs, for hf_pool_has), the stop state and the count of
 * submitters blocked for room. Condition variables: work (a job was queued
 * or the pool stops: workers), room (a job left the queue or the pool
 * stops: blocked submitters), idle (a job finished, a submitter left:
 * hf_pool_idle_wait, hf_pool_free) and halt (a cancelling stop:
 * hf_pool_wait of running jobs). Jobs run without the lock.
 *
 * Workload: a few threads, jobs of milliseconds to minutes, a queue of
 * tens; every walk is linear.
 */
#include "hf_pool.h"

#include "hf_err.h"
#include "hf_thread.h"
#include "hf_time.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POOL_THREADS_MAX 64

typedef struct job {
    struct job *next;
    hf_pool_fn  run, drop;
    void       *arg;
    char        key[HF_POOL_KEY_MAX + 1];   /* "" when none */
} job;

struct hf_pool {
    pthread_mutex_t mu;
    pthread_cond_t  work, room, idle, halt;   /* CLOCK_MONOTONIC */
    job            *head, *tail;              /* queued (mu) */
    int             queued, queue_max;        /* (mu) */
    job            *running[POOL_THREADS_MAX];/* per thread (mu) */
    int             nrunning;                 /* (mu) */
    int             stopping;                 /* 0, or 1 + HF_POOL_* (mu) */
    atomic_int      cancel;                   /* a cancelling stop was asked */
    int             stopped;                  /* threads joined (the stopper's) */
    int             blocked;                  /* submitters waiting for room (mu) */
    int             nthreads;
    hf_thread      *th[POOL_THREADS_MAX];
    struct worker { hf_pool *p; int slot; } w[POOL_THREADS_MAX];
};

static void cond_init_mono(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

/* The oldest queued job, taken off the queue (mu held), or NULL. */
static job *pop_locked(hf_pool *p)
{
    job *j = p->head;
    if (!j) return NULL;
    p->head = j->next;
    if (!p->head) p->tail = NULL;
    p->queued--;
    j->next = NULL;
    pthread_cond_broadcast(&p->room);
    return j;
}

static void worker_main(hf_thread *t, void *arg)
{
    (void)t;
    struct worker *w = arg;
    hf_pool *p = w->p;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->head && !p->stopping) pthread_cond_wait(&p->work, &p->mu);
        if (p->stopping == 1 + HF_POOL_CANCEL || (p->stopping && !p->head)) break;
        job *j = pop_locked(p);
        p->running[w->slot] = j;
        p->nrunning++;
        pthread_mutex_unlock(&p->mu);
        j->run(p, j->arg);
        pthread_mutex_lock(&p->mu);
        p->running[w->slot] = NULL;
        p->nrunning--;
        free(j);
        pthread_cond_broadcast(&p->idle);
    }
    pthread_mutex_unlock(&p->mu);
}

hf_pool *hf_pool_new(const char *name, int threads, int queue_max)
{
    if (threads < 1 || threads > POOL_THREADS_MAX || queue_max < 1) return NULL;
    hf_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    pthread_mutex_init(&p->mu, NULL);
    cond_init_mono(&p->work);
    cond_init_mono(&p->room);
    cond_init_mono(&p->idle);
    cond_init_mono(&p->halt);
    atomic_init(&p->cancel, 0);
    p->queue_max = queue_max;
    for (int i = 0; i < threads; i++) {
        p->w[i] = (struct worker){p, i};
        if (hf_thread_start(&p->th[i], name, worker_main, &p->w[i]) != 0) {
            hf_pool_free(p);
            return NULL;
        }
        p->nthreads++;
    }
    return p;
}

/* Is a job with key queued or running? (mu held; key non-empty) */
static int has_locked(hf_pool *p, const char *key)
{
    for (job *j = p->head; j; j = j->next)
        if (strcmp(j->key, key) == 0) return 1;
    for (int i = 0; i < p->nthreads; i++)
        if (p->running[i] && strcmp(p->running[i]->key, key) == 0) return 1;
    return 0;
}

/* Room for j, or why not (mu held; may wait on room with HF_POOL_BLOCK). */
static int admit_locked(hf_pool *p, const job *j, int flags)
{
    for (;;) {
        if (p->stopping) return HF_ESTATE;
        if ((flags & HF_POOL_UNIQUE) && j->key[0] && has_locked(p, j->key)) return HF_EEXIST;
        if (p->queued < p->queue_max) return 0;
        if (!(flags & HF_POOL_BLOCK)) return HF_ETOOBIG;
        p->blocked++;
        pthread_cond_wait(&p->room, &p->mu);
        p->blocked--;
        pthread_cond_broadcast(&p->idle);
    }
}

int hf_pool_submit(hf_pool *p, const char *key, hf_pool_fn run, hf_pool_fn drop, void *arg, int flags)
{
    if (!p || !run) return HF_EINVAL;
    job *j = calloc(1, sizeof *j);
    if (!j) return HF_ENOMEM;
    j->run = run;
    j->drop = drop;
    j->arg = arg;
    if (key) snprintf(j->key, sizeof j->key, "%s", key);
    pthread_mutex_lock(&p->mu);
    int rc = admit_locked(p, j, flags);
    if (rc == 0) {
        if (p->tail) p->tail->next = j;
        else p->head = j;
        p->tail = j;
        p->queued++;
        pthread_cond_signal(&p->work);
    }
    pthread_mutex_unlock(&p->mu);
    if (rc) free(j);
    return rc;
}

int hf_pool_has(hf_pool *p, const char *key)
{
    if (!p || !key || !*key) return 0;
    char k[HF_POOL_KEY_MAX + 1];
    snprintf(k, sizeof k, "%s", key);
    pthread_mutex_lock(&p->mu);
    int r = has_locked(p, k);
    pthread_mutex_unlock(&p->mu);
    return r;
}

int hf_pool_pending(hf_pool *p)
{
    pthread_mutex_lock(&p->mu);
    int n = p->queued + p->nrunning;
    pthread_mutex_unlock(&p->mu);
    return n;
}

int hf_pool_idle_wait(hf_pool *p, int64_t ms)
{
    struct timespec dl = hf_deadline(CLOCK_MONOTONIC, ms > 0 ? ms : 0);
    int rc = 0;
    pthread_mutex_lock(&p->mu);
    while (p->queued + p->nrunning > 0 && rc == 0)
        if (pthread_cond_timedwait(&p->idle, &p->mu, &dl) == ETIMEDOUT)
            rc = p->queued + p->nrunning > 0 ? HF_ETIMEOUT : 0;
    pthread_mutex_unlock(&p->mu);
    return rc;
}

int hf_pool_stopping(hf_pool *p)
{
    return atomic_load(&p->cancel) ? 1 : 0;
}

int hf_pool_wait(hf_pool *p, int64_t ms)
{
    pthread_mutex_lock(&p->mu);
    if (ms > 0 && !atomic_load(&p->cancel)) {
        struct timespec dl = hf_deadline(CLOCK_MONOTONIC, ms);
        while (!atomic_load(&p->cancel))
            if (pthread_cond_timedwait(&p->halt, &p->mu, &dl) == ETIMEDOUT) break;
    }
    int r = atomic_load(&p->cancel) ? 1 : 0;
    pthread_mutex_unlock(&p->mu);
    return r;
}

void hf_pool_stop(hf_pool *p, int how)
{
    if (!p || p->stopped) return;
    job *left = NULL;
    pthread_mutex_lock(&p->mu);
    if (!p->stopping) p->stopping = 1 + (how == HF_POOL_CANCEL ? HF_POOL_CANCEL : HF_POOL_DRAIN);
    if (p->stopping == 1 + HF_POOL_CANCEL) {
        atomic_store(&p->cancel, 1);
        left = p->head;
        p->head = p->tail = NULL;
        p->queued = 0;
    }
    pthread_cond_broadcast(&p->work);
    pthread_cond_broadcast(&p->room);
    pthread_cond_broadcast(&p->halt);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nthreads; i++) hf_thread_join(p->th[i]);
    p->stopped = 1;
    while (left) {
        job *nx = left->next;
        if (left->drop) left->drop(p, left->arg);
        free(left);
        left = nx;
    }
}

void hf_pool_free(hf_pool *p)
{
    if (!p) return;
    hf_pool_stop(p, HF_POOL_CANCEL);
    pthread_mutex_lock(&p->mu);
    while (p->blocked > 0) pthread_cond_wait(&p->idle, &p->mu);
    pthread_mutex_unlock(&p->mu);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->room);
    pthread_cond_destroy(&p->idle);
    pthread_cond_destroy(&p->halt);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
