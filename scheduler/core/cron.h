/*
 * cron.h — the scheduler's periodic housekeeping (Redis's serverCron):
 * a thread ("hf-cron") that calls sched_tick every CRON_TICK_MS (agent expiry,
 * assignment timeouts, a dispatch pass), expires agents' long-poll waiters
 * (doorbell.h) and sends SSE keepalives.
 */
#ifndef HF_CRON_H
#define HF_CRON_H

#include "scheduler/core/doorbell.h"
#include "scheduler/notify/events.h"
#include "scheduler/core/sched.h"

#define CRON_TICK_MS       100
#define CRON_KEEPALIVE_MS  15000

typedef struct cron cron;

/* bell may be NULL. */
cron *cron_start(sched *s, events_hub *ev, doorbell *bell);
void  cron_stop(cron *c);

#endif
