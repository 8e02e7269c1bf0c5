/*
 * cron.c — periodic tick thread "hf-cron" (see cron.h). Stops promptly:
 * the thread sleeps in hf_thread_wait, which returns as soon as cron_stop
 * asks (common/hf_thread.h), not in sleep().
 */
#include "scheduler/core/cron.h"

#include "hf_thread.h"
#include "hf_time.h"

#include <stdlib.h>

struct cron {
    hf_thread  *th;
    sched      *s;
    events_hub *ev;
    doorbell   *bell;
};

static void cron_main(hf_thread *t, void *arg)
{
    cron *c = arg;
    int64_t last_ka = hf_mono_ms();
    while (!hf_thread_wait(t, CRON_TICK_MS)) {
        sched_tick(c->s);
        if (c->bell) doorbell_expire(c->bell, hf_mono_ms());
        if (hf_mono_ms() - last_ka >= CRON_KEEPALIVE_MS) {
            events_keepalive(c->ev);
            last_ka = hf_mono_ms();
        }
    }
}

cron *cron_start(sched *s, events_hub *ev, doorbell *bell)
{
    cron *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->s = s;
    c->ev = ev;
    c->bell = bell;
    if (hf_thread_start(&c->th, "hf-cron", cron_main, c) != 0) {
        free(c);
        return NULL;
    }
    return c;
}

void cron_stop(cron *c)
{
    if (!c) return;
    hf_thread_stop_join(c->th);
    free(c);
}
