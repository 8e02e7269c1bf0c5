/*
 * agent_loop.c — the agent daemon's run: the main (supervisor) loop, the
 * signals that stop it, and the shutdown. Start-up is agent_start.c, the
 * handling of replies agent_inbox.c, the heartbeat and long-poll threads
 * that drive the agent_link agent_beat.c, the state they share
 * agent_loop.h (see agent.h for the threading model).
 *
 * Failure policy: the agent never exits because the scheduler or a trial
 * misbehaves. A failed registration or heartbeat is retried with
 * exponential backoff (from the heartbeat interval up to 5 s, logged on
 * the first failure and then every 30 s); meanwhile trials keep running
 * and their output waits in the bounded outbox. A 404 on heartbeat means
 * the scheduler forgot us (new database): register again, listing the
 * trials still running so they are re-adopted, not duplicated. The agent
 * also registers again after any connection failure or timeout before its
 * next heartbeat (idempotent: same name, same id), so a scheduler that was
 * restarted hears the running list first.
 *
 * Doorbell: a third thread keeps a long-poll open
 * (GET /api/v1/agents/{id}/wait, own HTTP handle); when the scheduler says
 * work is pending it wakes the heartbeat thread, which heartbeats at once
 * and gets the assignments or kills in that reply (the only delivery path).
 *
 * Duplicate-safe heartbeats: every heartbeat carries this process's random
 * "instance" id and a "batch" number. A batch that failed (timeout after
 * the scheduler may have committed it, 5xx, connection lost) is sent again
 * with the same number and the same items, so the scheduler can recognise
 * it and acknowledge it without storing its metrics and logs twice.
 */
#include "agent_loop.h"
#include "agent_slurm.h"
#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define AGENT_FINAL_FLUSH_MS   3000    /* last heartbeat at shutdown */

static volatile sig_atomic_t got_term;
static int term_fd = -1;

static void on_term(int sig)
{
    int saved = errno;
    got_term = sig;
    if (term_fd >= 0) {
        ssize_t r = write(term_fd, "t", 1);
        (void)r;
    }
    errno = saved;
}

/* A random id for this process run (heartbeat "instance"). */
static void make_instance(char *out, size_t outlen)
{
    uint64_t v = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, &v, sizeof v) != (ssize_t)sizeof v)
        v = ((uint64_t)hf_wall_ms() << 20) ^ (uint64_t)getpid() ^ (uint64_t)hf_mono_us();
    if (fd >= 0) close(fd);
    snprintf(out, outlen, "%016llx", (unsigned long long)v);
}

static void urge(agent *ag, int report)
{
    pthread_mutex_lock(&ag->mu);
    if (report) ag->report_urgent = 1;
    else ag->urgent = 1;
    pthread_cond_signal(&ag->cv);
    pthread_mutex_unlock(&ag->mu);
}

/* SIGTERM/SIGINT stop gracefully (through the wake pipe); SIGPIPE must not
 * kill us. */
static void install_signals(agent *ag)
{
    struct sigaction sa;
    term_fd = ag->wake[1];
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* A draining agent (agent_slurm.h) leaves only once the scheduler has
 * answered two heartbeats since the drain began: the first told it
 * "draining" (it places nothing more here), the second carried the
 * start_failed of any assignment the first reply still brought. At most
 * AGENT_DRAIN_TELL_MS, for a scheduler that does not answer. */
#define AGENT_DRAIN_TELL_MS 5000
static int drain_told(agent *ag, uint64_t hb0, int64_t t0)
{
    if (!agent_draining()) return 1;
    pthread_mutex_lock(&ag->mu);
    uint64_t done = ag->hb_done;
    pthread_mutex_unlock(&ag->mu);
    if (done >= hb0 + 2 || hf_mono_ms() - t0 > AGENT_DRAIN_TELL_MS) return 1;
    urge(ag, 0);
    return 0;
}

/* The main loop: supervise trials and start or stop what the heartbeat
 * thread received, until a signal stopped every trial; then give the
 * heartbeat thread up to AGENT_FINAL_FLUSH_MS to deliver the exit events. */
static void serve(agent *ag)
{
    int stopping = 0;
    int64_t stop_started = 0;
    agent_idle idle = {0};
    uint64_t drain_hb = 0;
    agent_outbox_stats prev;
    agent_outbox_get_stats(ag->ob, &prev);
    uint64_t prompt_prev = 0;
    for (;;) {
        if (agent_sup_poll(ag->sup, 200, ag->wake[0])) {
            char junk[64];
            while (read(ag->wake[0], junk, sizeof junk) > 0) {}
        }
        int busy = agent_sup_count(ag->sup) > 0 || agent_prep_pending(ag->prep) > 0;
        if (!stopping && agent_idle_expired(&idle, busy, ag->cfg->idle_timeout_s, hf_mono_ms())) {
            hf_info("no trial for %lld s (--idle-timeout): exiting", (long long)ag->cfg->idle_timeout_s);
            got_term = SIGTERM;
        }
        if (got_term && !stopping) {
            stopping = 1;
            stop_started = hf_mono_ms();
            if (ag->cfg->slurm) agent_drain_begin();   /* preemption, time limit: requeue, no restart */
            pthread_mutex_lock(&ag->mu);
            drain_hb = ag->hb_done;
            pthread_mutex_unlock(&ag->mu);
            hf_info("signal %d: stopping %d trials (grace %lld ms) and exiting", (int)got_term,
                    agent_sup_count(ag->sup), (long long)ag->cfg->grace_ms);
            agent_sup_kill_all(ag->sup, -1, "agent shutdown");
            agent_prep_cancel(ag->prep, 0, 0, "agent shutdown");
        }
        agent_inbox_handle(ag, stopping);
        /* a trial started or ended: tell the scheduler soon */
        agent_outbox_stats st;
        agent_outbox_get_stats(ag->ob, &st);
        if (st.events > 0 && (st.events != prev.events || st.sent_events != prev.sent_events)) urge(ag, 0);
        prev = st;
        /* a report a searcher may stop the trial on (its prompt_metric):
         * deliver it now, so the stop comes back in this heartbeat's reply
         * (docs/agent.md), at most once per the scheduler's report_gap_ms */
        uint64_t prompt = agent_sup_prompt_reports(ag->sup);
        if (prompt != prompt_prev) urge(ag, 1);
        prompt_prev = prompt;
        if (stopping && agent_sup_count(ag->sup) == 0 && agent_prep_pending(ag->prep) == 0 &&
            drain_told(ag, drain_hb, stop_started))
            break;
    }

    /* last heartbeat(s): deliver the exit events */
    int64_t t0 = hf_mono_ms();
    while (hf_mono_ms() - t0 < AGENT_FINAL_FLUSH_MS) {
        urge(ag, 0);   /* at least one; then 20 ms apart until they are delivered */
        agent_outbox_stats st;
        agent_outbox_get_stats(ag->ob, &st);
        if (st.events == 0 && st.metrics == 0) break;
        hf_sleep_ms(20);
    }
    hf_info("stopped after %lld ms", (long long)(hf_mono_ms() - stop_started));
}

/* Stop and join the threads that started, answer what is left in the
 * inbox, and free everything. The preparation pool stops first (queued
 * assignments dropped, running ones finish), so nothing starts past it. */
static void shut_down(agent *ag)
{
    pthread_mutex_lock(&ag->mu);
    ag->stop = 1;
    atomic_store(&ag->cancel, 1);
    pthread_cond_broadcast(&ag->cv);
    pthread_cond_broadcast(&ag->pcv);
    pthread_mutex_unlock(&ag->mu);
    hf_thread_stop_join(ag->beat);
    hf_thread_stop_join(ag->poller);
    term_fd = -1;
    agent_prep_free(ag->prep);
    ag->prep = NULL;
    agent_inbox_handle(ag, 1);
    agent_upload_free(ag->up);     /* before the supervisor: its hooks name the uploader */
    agent_sup_free(ag->sup);
    agent_objects_close(ag->objs);
    agent_link_free(ag->link);
    agent_poll_free(ag->poll);
    agent_outbox_free(ag->ob);
    for (int i = 0; i < 2; i++)
        if (ag->wake[i] >= 0) close(ag->wake[i]);
    pthread_mutex_destroy(&ag->mu);
    pthread_cond_destroy(&ag->cv);
    pthread_cond_destroy(&ag->pcv);
}

int agent_run(const agent_cfg *cfg)
{
    agent ag;
    int rc;

    memset(&ag, 0, sizeof ag);
    ag.cfg = cfg;
    ag.wake[0] = ag.wake[1] = -1;
    pthread_mutex_init(&ag.mu, NULL);
    pthread_cond_init(&ag.cv, NULL);
    pthread_cond_init(&ag.pcv, NULL);
    atomic_init(&ag.cancel, 0);
    make_instance(ag.instance, sizeof ag.instance);
    ag.interval_ms = cfg->heartbeat_ms > 0 ? cfg->heartbeat_ms : 1000;
    ag.report_gap_ms = AGENT_URGENT_GAP_MS;

    if ((rc = agent_start_up(&ag, cfg))) goto end;
    install_signals(&ag);
    if ((rc = hf_thread_start(&ag.beat, "hf-beat", agent_hb_main, &ag))) {
        hf_error("cannot start the heartbeat thread: %s", hf_strerror(rc));
        goto end;
    }
    if ((rc = hf_thread_start(&ag.poller, "hf-poll", agent_poll_main, &ag))) {
        hf_error("cannot start the long-poll thread: %s", hf_strerror(rc));
        goto end;
    }
    serve(&ag);
end:
    shut_down(&ag);
    return rc;
}
