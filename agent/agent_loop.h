/*
 * agent_loop.h — the agent daemon's shared state, internal to the files
 * that run it (see agent.h for the threading model):
 *
 *   agent_loop.c   agent_run: the main (supervisor) loop, signals, shutdown
 *   agent_start.c  start-up: configuration, token, GPUs, the modules
 *   agent_inbox.c  what the heartbeat replies bring: assignments to start
 *                  or prepare (agent_prep.h), kills, prepared starts
 *   agent_beat.c   the heartbeat ("hf-beat") and long-poll ("hf-poll")
 *                  threads
 *
 * They call one way: agent_loop.c calls the other three; none calls back.
 */
#ifndef AGENT_LOOP_H
#define AGENT_LOOP_H

#include "agent.h"
#include "agent_assign.h"
#include "agent_link.h"
#include "agent_objects.h"
#include "agent_outbox.h"
#include "agent_prep.h"
#include "agent_sup.h"
#include "agent_upload.h"
#include "hf_thread.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define AGENT_URGENT_GAP_MS 20   /* min gap between event-triggered heartbeats */

typedef struct agent {
    const agent_cfg *cfg;
    agent_outbox    *ob;
    agent_objects   *objs;             /* the object cache (thread-safe) */
    agent_upload    *up;               /* the checkpoint uploader ("hf-upload") */
    char             workdir[AGENT_PATH_MAX];
    agent_sup       *sup;
    agent_prep      *prep;             /* restores and contexts on the worker pool ("hf-prep") */
    agent_link      *link;
    agent_poll      *poll;             /* long-poll thread's HTTP handle */
    hf_thread       *beat, *poller;    /* the heartbeat and long-poll threads (NULL: not started) */
    atomic_int       cancel;           /* aborts the long-poll in flight */
    char             instance[24];     /* random id of this process run */
    int              wake[2];          /* heartbeat thread, prep pool -> main loop */

    pthread_mutex_t  mu;               /* guards everything below */
    pthread_cond_t   cv;
    int              stop;             /* heartbeat and long-poll threads: exit now */
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
void agent_hb_main(hf_thread *t, void *arg);
/* The long-poll thread (arg: the agent): the doorbell that urges the
 * heartbeat thread when the scheduler has work pending (agent_beat.c). */
void agent_poll_main(hf_thread *t, void *arg);

/* Everything before the threads start (agent_start.c): the work
 * directory, token, GPUs, slots, name and advertised host; the outbox,
 * supervisor and its sandbox, object cache, uploader, preparation pool,
 * wake pipe and HTTP handles. RET 0 or an HF_E* code (logged); what was
 * made is in ag either way (agent_run frees it). */
int agent_start_up(agent *ag, const agent_cfg *cfg);

/* The main thread's share of the heartbeat replies (agent_inbox.c): the
 * kills and assignments in the inbox (stopping: refuse assignments with
 * "agent shutting down"), then the assignments the prep pool finished. */
void agent_inbox_handle(agent *ag, int stopping);

#endif
