/*
 * doorbell.h — agents' long-poll waiters (GET /api/v1/agents/{id}/wait).
 *
 * An agent keeps one request open; the HTTP layer parks it here (suspended
 * with libmicrohttpd's suspend/resume, so a waiter holds no thread) and the
 * core rings the agent's doorbell when it queues an assignment or a kill
 * for it. A rung or expired waiter is woken through its wake callback
 * (MHD_resume_connection), and the HTTP layer then answers
 * {"pending": true|false}. By default the doorbell just says "heartbeat
 * now" and assignments and kills travel in heartbeat replies; a waiter
 * that asked for the push (push set, GET .../wait?assign=1) is answered
 * with its new assignments as well (sched_agent_take_assign), which saves
 * an idle agent the heartbeat round trip before it can start them.
 *
 * Waiters live in the request contexts of the HTTP layer; the doorbell only
 * links them. Thread-safe: one mutex. A wake callback is called with that
 * mutex held and must not call back into the doorbell.
 */
#ifndef HF_DOORBELL_H
#define HF_DOORBELL_H

#include <stddef.h>
#include <stdint.h>

#define DOORBELL_MAX_WAITERS 16384
#define DOORBELL_MAX_WAIT_MS 30000

enum { DOORBELL_IDLE = 0, DOORBELL_WAITING, DOORBELL_RUNG, DOORBELL_EXPIRED };

typedef struct doorbell_waiter {
    int64_t  agent_id;
    int64_t  deadline_mono;             /* ms, hf_mono_ms() clock */
    int      state;                     /* DOORBELL_* (read it with doorbell_state) */
    int      push;                      /* answer with the assignments (set by the caller) */
    void   (*wake)(void *arg);          /* resume the parked request */
    void    *arg;
    struct doorbell_waiter *prev, *next;
} doorbell_waiter;

typedef struct doorbell doorbell;

doorbell *doorbell_new(void);
void      doorbell_free(doorbell *d);

/* Park w (fields agent_id, deadline_mono, wake, arg set by the caller).
 * An older waiter of the same agent is expired (one open wait per agent:
 * a reconnecting agent does not pile up parked requests). park is called
 * under the doorbell mutex right after linking (suspend the request there,
 * so a ring can never wake a request not yet suspended). RET 0, or
 * HF_ETOOBIG (too many waiters: w is not parked, park not called). */
int  doorbell_park(doorbell *d, doorbell_waiter *w, void (*park)(void *arg));
/* Unlink w if still linked (request answered or connection closed). */
void doorbell_unpark(doorbell *d, doorbell_waiter *w);
/* The waiter's state, read under the mutex. */
int  doorbell_state(doorbell *d, const doorbell_waiter *w);
/* Wake every waiter of agent_id with RUNG. RET number woken. */
size_t doorbell_ring(doorbell *d, int64_t agent_id);
/* Wake waiters whose deadline passed (now_mono in ms) with EXPIRED;
 * now_mono = INT64_MAX wakes all (shutdown). RET number woken. */
size_t doorbell_expire(doorbell *d, int64_t now_mono);
size_t doorbell_count(doorbell *d);

#endif
