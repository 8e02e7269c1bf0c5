/*
 * agent_loop.h — the agent daemon's shared state, internal to
 * agent_loop.c (start-up, the main loop, restores, shutdown) and
 * agent_beat.c (the heartbeat and long-poll threads). See agent.h for the
 * threading model and agent_loop.c's header for the failure policy.
 */
#ifndef AGENT_LOOP_H
#define AGENT_LOOP_H

#include "agent.h"
#include "agent_assign.h"
#include "agent_context.h"
#include "agent_link.h"
#include "agent_objects.h"
#include "agent_outbox.h"
#include "agent_sup.h"
#include "agent_upload.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define AGENT_URGENT_GAP_MS 20   /* min gap between event-triggered heartbeats */

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
    int              urgent;           /* heartbeat thread: send soon (an event, the doorbell) */
    int              report_urgent;    /* ... send once report_gap_ms after the last (a prompt_metric report) */
    int64_t          report_gap_ms;    /* from the scheduler's replies (AGENT_URGENT_GAP_MS until then) */
    agent_reply     *inbox;            /* replies waiting for the main loop */
    size_t           ninbox, capinbox;
    int64_t          interval_ms;
    pthread_cond_t   pcv;              /* long-poll thread waits here */
    int64_t          agent_id;         /* 0 = not registered (for the long-poll thread) */
    uint64_t         hb_done;          /* heartbeats answered 200 */
} agent;

/* The heartbeat thread (arg: the agent): registers, heartbeats every
 * interval or at once when urged, and hands each reply to the main loop
 * through the inbox and the wake pipe (agent_beat.c). */
void *agent_hb_main(void *arg);
/* The long-poll thread (arg: the agent): the doorbell that urges the
 * heartbeat thread when the scheduler has work pending (agent_beat.c). */
void *agent_poll_main(void *arg);

#endif
