/*
 * cron.c — periodic tick thread "hf-cron" (see cron.h). Stops promptly:
 * the thread sleeps in hf_thread_wait, which returns as soon as cron_stop
 * asks (common/hf_thread.h), not in sleep(). The core kicks it awake when
 * a submission's burst is placed in chunks (sched_set_kick): it places the
 * rest at once (sched_dispatch_more), between ticks.
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

static void cron_kick(void *arg)
{
    cron *c = arg;
    hf_thread_kick(c->th);
}

static void cron_main(hf_thread *t, void *arg)
{
    cron *c = arg;
    int64_t last_ka = hf_mono_ms(), next_tick = last_ka + CRON_TICK_MS;
    for (;;) {
        int64_t now = hf_mono_ms();
        if (hf_thread_wait(t, next_tick > now ? next_tick - now : 0)) break;
        sched_dispatch_more(c->s);   /* a kick: the rest of a burst (cheap when none) */
        if (hf_mono_ms() < next_tick) continue;
        next_tick = hf_mono_ms() + CRON_TICK_MS;
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
    sched_set_kick(s, cron_kick, c);
    return c;
}

void cron_stop(cron *c)
{
    if (!c) return;
    sched_set_kick(c->s, NULL, NULL);
    hf_thread_stop_join(c->th);
    free(c);
}
