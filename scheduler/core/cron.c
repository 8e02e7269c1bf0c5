/*
 * cron.c — periodic tick thread (see cron.h). Stops promptly: the thread
 * waits on a condition variable, not in sleep().
 */
#include "scheduler/core/cron.h"

#include "hf_time.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

struct cron {
    pthread_t       th;
    pthread_mutex_t lock;
    pthread_cond_t  cv;
    int             stop;
    sched          *s;
    events_hub     *ev;
    doorbell       *bell;
};

static void *cron_main(void *arg)
{
    cron *c = arg;
    int64_t last_ka = hf_mono_ms();
    pthread_mutex_lock(&c->lock);
    while (!c->stop) {
        struct timespec ts = hf_deadline(CLOCK_MONOTONIC, CRON_TICK_MS);
        pthread_cond_timedwait(&c->cv, &c->lock, &ts);
        if (c->stop) break;
        pthread_mutex_unlock(&c->lock);
        sched_tick(c->s);
        if (c->bell) doorbell_expire(c->bell, hf_mono_ms());
        if (hf_mono_ms() - last_ka >= CRON_KEEPALIVE_MS) {
            events_keepalive(c->ev);
            last_ka = hf_mono_ms();
        }
        pthread_mutex_lock(&c->lock);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

cron *cron_start(sched *s, events_hub *ev, doorbell *bell)
{
    cron *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&c->lock, NULL);
    c->s = s;
    c->ev = ev;
    c->bell = bell;
    if (pthread_create(&c->th, NULL, cron_main, c) != 0) {
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->lock);
        free(c);
        return NULL;
    }
    return c;
}

void cron_stop(cron *c)
{
    if (!c) return;
    pthread_mutex_lock(&c->lock);
    c->stop = 1;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->lock);
    pthread_join(c->th, NULL);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->lock);
    free(c);
}
