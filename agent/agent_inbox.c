/*
 * agent_inbox.c — the main thread's share of the heartbeat replies
 * (agent_loop.h): kills go to the supervisor (or stop an assignment still
 * being prepared); an assignment starts at once when it needs nothing
 * fetched, else it goes to the preparation pool (agent_prep.h: its
 * restore checkpoint, its code context) and starts when the pool hands it
 * back. Everything here runs on the main thread and never blocks.
 *
 * A restore is skipped when the file it would write is the trial's own
 * newer checkpoint here (restore_older_than_local).
 */
#include "agent_loop.h"
#include "agent_slurm.h"
#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void start_failed_event(agent *ag, const agent_spec *sp, const char *why)
{
    json_t *ev = json_pack("{s:I, s:I, s:I, s:s, s:I, s:s}", "trial_id", (json_int_t)sp->trial_id, "attempt",
                           (json_int_t)sp->attempt, "rank", (json_int_t)sp->rank, "type", "start_failed", "time",
                           (json_int_t)hf_wall_ms(), "error", why);
    if (ev && agent_draining()) json_object_set_new(ev, "drained", json_true());   /* agent_slurm.h */
    agent_outbox_event(ag->ob, ev);
}

/* A line "[hyperfarm-agent] text" in the trial's log. */
static void trial_note(agent *ag, const agent_spec *sp, const char *text)
{
    char note[700];
    int n = snprintf(note, sizeof note, "[hyperfarm-agent] %s", text);
    agent_outbox_log(ag->ob, sp->trial_id, sp->attempt, hf_wall_ms(), AGENT_STREAM_STDERR, note,
                     n < (int)sizeof note ? (size_t)n : sizeof note - 1);
}

/* Start what the preparation pool finished (or report why not). */
static void handle_prepared(agent *ag)
{
    agent_prep_done *d = NULL;
    size_t n = 0;
    char err[1024];
    if (!ag->prep) return;   /* shut down */
    agent_prep_take(ag->prep, &d, &n);
    for (size_t i = 0; i < n; i++) {
        agent_spec *sp = d[i].spec;
        if (d[i].rc && d[i].restore_failed) {
            hf_error("trial %lld attempt %lld: %s", (long long)sp->trial_id, (long long)sp->attempt, d[i].err);
            start_failed_event(ag, sp, d[i].err);
        } else if (d[i].rc) {
            agent_sup_start_failed(ag->sup, sp, d[i].err);
        } else {
            if (d[i].restore_note[0]) trial_note(ag, sp, d[i].restore_note);
            if (d[i].note[0]) {
                hf_info("trial %lld attempt %lld: %s", (long long)sp->trial_id, (long long)sp->attempt, d[i].note);
                trial_note(ag, sp, d[i].note);
            }
            agent_sup_start(ag->sup, sp, err, sizeof err);
        }
        agent_spec_free(sp);
    }
    free(d);
}

/* Is the file sp's restore would be written to the trial's own checkpoint,
 * reported here at a later step than the restore's? The store lags behind
 * the newest report while its upload is under way, and a trial that is
 * continued at once (an ASHA promotion, a restart) on the agent that ran
 * it would get an older checkpoint written over its newer file of the same
 * name (a program that keeps one file, say checkpoint.pt) and train those
 * epochs again. Then the local file is kept and nothing is fetched. */
static int restore_older_than_local(agent *ag, const agent_spec *sp, int64_t *local_step)
{
    char path[2048], dest[3 * AGENT_PATH_MAX];
    struct stat a, b;
    if (sp->restore_trial != sp->trial_id || !agent_upload_newest(ag->up, sp->trial_id, local_step, path, sizeof path))
        return 0;
    snprintf(dest, sizeof dest, "%s/%s/%s", ag->workdir, sp->checkpoint_dir, sp->restore_name);
    return *local_step > sp->restore_step && stat(path, &a) == 0 && stat(dest, &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

/* What sp needs before its start (AGENT_PREP_* flags; 0: nothing). */
static unsigned needs(agent *ag, const agent_spec *sp)
{
    unsigned what = 0;
    int64_t local_step = 0;
    if (sp->has_restore && restore_older_than_local(ag, sp, &local_step)) {
        char note[512];
        snprintf(note, sizeof note, "kept its own checkpoint %s of step %lld here (the store's newest, step %lld, "
                 "is older: its upload was under way)", sp->restore_name, (long long)local_step,
                 (long long)sp->restore_step);
        hf_info("trial %lld attempt %lld: %s", (long long)sp->trial_id, (long long)sp->attempt, note);
        trial_note(ag, sp, note);
    } else if (sp->has_restore) {
        what |= AGENT_PREP_RESTORE;
    }
    if (agent_prep_needed(sp) && !agent_sup_known(ag->sup, sp->trial_id, sp->attempt, sp->rank))
        what |= AGENT_PREP_CONTEXT;
    return what;
}

/* Start an assignment, or hand it to the preparation pool first; sp is
 * taken. */
static void start_or_prepare(agent *ag, agent_spec *sp)
{
    char err[1024];
    unsigned what = needs(ag, sp);
    if (what) {
        int rc = agent_prep_submit(ag->prep, sp, what);
        if (rc == HF_EEXIST)
            hf_debug("trial %lld attempt %lld: being prepared already", (long long)sp->trial_id,
                     (long long)sp->attempt);
        else if (rc == HF_ETOOBIG) {
            snprintf(err, sizeof err, "cannot prepare its start: %d assignments wait for the agent's workers already",
                     AGENT_PREP_QUEUE);
            start_failed_event(ag, sp, err);
            agent_spec_free(sp);
        }
        return;
    }
    if (agent_sup_start(ag->sup, sp, err, sizeof err) == HF_EEXIST)
        hf_debug("trial %lld attempt %lld already runs here", (long long)sp->trial_id, (long long)sp->attempt);
    agent_spec_free(sp);
}

/* One reply: its kills, then its assignments. */
static void handle_reply(agent *ag, agent_reply *r, int stopping)
{
    for (size_t k = 0; k < r->nkill; k++) {
        agent_killreq *kr = &r->kill[k];
        if (agent_sup_kill(ag->sup, kr->trial_id, kr->attempt, kr->grace_ms, kr->reason) == HF_ENOTFOUND &&
            (!ag->prep || !agent_prep_cancel(ag->prep, kr->trial_id, kr->attempt, kr->reason)))
            hf_info("kill for trial %lld attempt %lld: not running here", (long long)kr->trial_id,
                    (long long)kr->attempt);
    }
    for (size_t k = 0; k < r->nassign; k++) {
        agent_spec *sp = r->assign[k];
        if (stopping || !ag->prep) {
            start_failed_event(ag, sp, "agent shutting down");   /* say so instead of starting it */
            continue;
        }
        r->assign[k] = NULL;   /* taken */
        start_or_prepare(ag, sp);
    }
}

void agent_inbox_handle(agent *ag, int stopping)
{
    agent_reply *items;
    size_t n;

    pthread_mutex_lock(&ag->mu);
    items = ag->inbox;
    n = ag->ninbox;
    ag->inbox = NULL;
    ag->ninbox = ag->capinbox = 0;
    pthread_mutex_unlock(&ag->mu);

    for (size_t i = 0; i < n; i++) {
        handle_reply(ag, &items[i], stopping);
        agent_reply_free(&items[i]);
    }
    free(items);
    handle_prepared(ag);
}
