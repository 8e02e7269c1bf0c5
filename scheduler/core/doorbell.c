/*
 * doorbell.c — agents' long-poll waiters (see doorbell.h): a doubly linked
 * list under one mutex. Rings scan it; with one open wait per agent that is
 * at most one entry per agent, and a ring costs microseconds for thousands.
 */
#include "scheduler/core/doorbell.h"

#include "hf_err.h"

#include <pthread.h>
#include <stdlib.h>

struct doorbell {
    pthread_mutex_t  lock;
    doorbell_waiter *head;
    size_t           n;
};

doorbell *doorbell_new(void)
{
    doorbell *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    pthread_mutex_init(&d->lock, NULL);
    return d;
}

void doorbell_free(doorbell *d)
{
    if (!d) return;
    pthread_mutex_destroy(&d->lock);
    free(d);
}

static void unlink_locked(doorbell *d, doorbell_waiter *w)
{
    if (w->prev) w->prev->next = w->next;
    else d->head = w->next;
    if (w->next) w->next->prev = w->prev;
    w->prev = w->next = NULL;
    d->n--;
}

/* Wake w with state st and unlink it: a woken waiter is never woken twice. */
static void wake_locked(doorbell *d, doorbell_waiter *w, int st)
{
    unlink_locked(d, w);
    w->state = st;
    w->wake(w->arg);
}

int doorbell_park(doorbell *d, doorbell_waiter *w, void (*park)(void *arg))
{
    pthread_mutex_lock(&d->lock);
    for (doorbell_waiter *o = d->head, *nx; o; o = nx) {
        nx = o->next;
        if (o->agent_id == w->agent_id) wake_locked(d, o, DOORBELL_EXPIRED);
    }
    if (d->n >= DOORBELL_MAX_WAITERS) {
        pthread_mutex_unlock(&d->lock);
        return HF_ETOOBIG;
    }
    w->state = DOORBELL_WAITING;
    w->prev = NULL;
    w->next = d->head;
    if (d->head) d->head->prev = w;
    d->head = w;
    d->n++;
    if (park) park(w->arg);
    pthread_mutex_unlock(&d->lock);
    return 0;
}

void doorbell_unpark(doorbell *d, doorbell_waiter *w)
{
    pthread_mutex_lock(&d->lock);
    if (w->state == DOORBELL_WAITING) {
        unlink_locked(d, w);
        w->state = DOORBELL_IDLE;
    }
    pthread_mutex_unlock(&d->lock);
}

int doorbell_state(doorbell *d, const doorbell_waiter *w)
{
    pthread_mutex_lock(&d->lock);
    int st = w->state;
    pthread_mutex_unlock(&d->lock);
    return st;
}

size_t doorbell_ring(doorbell *d, int64_t agent_id)
{
    size_t n = 0;
    pthread_mutex_lock(&d->lock);
    for (doorbell_waiter *w = d->head, *nx; w; w = nx) {
        nx = w->next;
        if (w->agent_id == agent_id) {
            wake_locked(d, w, DOORBELL_RUNG);
            n++;
        }
    }
    pthread_mutex_unlock(&d->lock);
    return n;
}

size_t doorbell_expire(doorbell *d, int64_t now_mono)
{
    size_t n = 0;
    pthread_mutex_lock(&d->lock);
    for (doorbell_waiter *w = d->head, *nx; w; w = nx) {
        nx = w->next;
        if (w->deadline_mono <= now_mono) {
            wake_locked(d, w, DOORBELL_EXPIRED);
            n++;
        }
    }
    pthread_mutex_unlock(&d->lock);
    return n;
}

size_t doorbell_count(doorbell *d)
{
    pthread_mutex_lock(&d->lock);
    size_t n = d->n;
    pthread_mutex_unlock(&d->lock);
    return n;
}
