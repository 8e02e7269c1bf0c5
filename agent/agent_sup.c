/*
 * agent_sup.c — the trial supervisor (see agent_sup.h for the contract):
 * the trial table, starting (through agent_spawn), stopping, output
 * capture, reaping.
 *
 * The workload: a handful of trials per agent (one per slot, at most
 * AGENT_MAX_TRIALS), each printing from a few lines per minute to, in the
 * worst case, as fast as a pipe goes. The table of trials is a plain array
 * scanned linearly; the poll set is rebuilt every call. Memory per trial is
 * bounded by two line buffers of AGENT_LINE_MAX bytes; everything else goes
 * into the bounded outbox.
 */
#include "agent_sup.h"
#include "agent_spawn.h"
#include "agent_slurm.h"
#include "hf_buf.h"
#include "hf_err.h"
#include "hf_log.h"
#include "hf_metric.h"
#include "hf_time.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { TRIAL_RUNNING = 0, TRIAL_STOPPING };

typedef struct agent_trial {
    int64_t  trial_id, attempt, rank, grace_ms;
    char     prompt_metric[65];   /* "": none; else count its reports of it in prompt_reports */
    pid_t    pid;                 /* also the process group id */
    int      fd[2];               /* stdout, stderr read ends; -1 once closed */
    hf_buf   line[2];             /* partial line per stream */
    size_t   skip[2];             /* bytes dropped of the current over-long line */
    int      state;
    int      reaped;
    int      exit_code, signal;
    int      sandboxed;           /* pid is bwrap's: exit codes 129..192 are signals (agent_spawn.h) */
    int64_t  kill_deadline;       /* monotonic ms, 0 = none */
    int      killed_hard;
    int64_t  reaped_at;           /* monotonic ms */
    int64_t  rate_window;         /* monotonic second of the current rate window */
    uint64_t rate_lines, rate_suppressed;
    uint64_t lines, metrics, bad_metrics;
    char     control[AGENT_PATH_MAX];
    char     dir[AGENT_PATH_MAX];     /* working directory */
} agent_trial;

#define AGENT_DONE_KEYS 4096

struct agent_sup {
    agent_outbox *ob;
    agent_sup_hooks hooks;
    char          workdir[AGENT_PATH_MAX];
    char          self_dir[AGENT_PATH_MAX];
    const agent_sandbox *sb;            /* NULL: trials run without a sandbox */
    int64_t       grace_ms;
    agent_trial  *t[AGENT_MAX_TRIALS];
    int           n;
    /* (trial, attempt, rank) of the last AGENT_DONE_KEYS ranks that ended
     * here. An assignment can arrive twice (a reply lost with a scheduler
     * restart is re-sent both by re-registration and by the repeated
     * batch); a quick trial may have ended before the copy arrives, and
     * must not run a second time. A real retry always has a new attempt. */
    int64_t       done[AGENT_DONE_KEYS][3];
    unsigned      ndone;
    uint64_t      prompt_reports;   /* reports queued of a trial's prompt_metric */
};

static int done_has(const agent_sup *s, int64_t trial_id, int64_t attempt, int64_t rank)
{
    unsigned n = s->ndone < AGENT_DONE_KEYS ? s->ndone : AGENT_DONE_KEYS;
    for (unsigned i = 0; i < n; i++)
        if (s->done[i][0] == trial_id && s->done[i][1] == attempt && s->done[i][2] == rank) return 1;
    return 0;
}

static void done_add(agent_sup *s, int64_t trial_id, int64_t attempt, int64_t rank)
{
    int64_t *k = s->done[s->ndone++ % AGENT_DONE_KEYS];
    k[0] = trial_id;
    k[1] = attempt;
    k[2] = rank;
}

/* SIGCHLD self-pipe (process-wide; see agent_sup_new). */
static int chld_pipe[2] = {-1, -1};

static void on_sigchld(int sig)
{
    int saved = errno;
    (void)sig;
    if (chld_pipe[1] >= 0) {
        ssize_t r = write(chld_pipe[1], "c", 1);
        (void)r;
    }
    errno = saved;
}

/* ------------------------------------------------------------- table */

void agent_sup_set_sandbox(agent_sup *s, const agent_sandbox *sb) { s->sb = sb; }

agent_sup *agent_sup_new(const char *workdir, const char *self_dir, int64_t grace_ms, agent_outbox *ob)
{
    agent_sup *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->ob = ob;
    s->grace_ms = grace_ms >= 0 ? grace_ms : 10000;
    if (snprintf(s->workdir, sizeof s->workdir, "%s", workdir) >= (int)sizeof s->workdir / 2) goto fail;
    snprintf(s->self_dir, sizeof s->self_dir, "%s", self_dir ? self_dir : "");
    if (chld_pipe[0] < 0) {
        if (pipe2(chld_pipe, O_CLOEXEC | O_NONBLOCK)) goto fail;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigchld;
        sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGCHLD, &sa, NULL);
    }
    return s;
fail:
    free(s);
    return NULL;
}

void agent_sup_set_hooks(agent_sup *s, const agent_sup_hooks *h) { s->hooks = *h; }

/* A metric report named a checkpoint: tell the uploader (absolute path). */
static void note_checkpoint(agent_sup *s, const agent_trial *t, const hf_metric_report *rep)
{
    char path[2 * AGENT_PATH_MAX + 2];
    if (!s->hooks.on_checkpoint || !rep->checkpoint[0]) return;
    if (rep->checkpoint[0] == '/') snprintf(path, sizeof path, "%s", rep->checkpoint);
    else snprintf(path, sizeof path, "%s/%s", t->dir, rep->checkpoint);
    int64_t step = rep->has_step ? rep->step : rep->has_epoch ? (int64_t)rep->epoch : -1;
    s->hooks.on_checkpoint(s->hooks.ctx, t->trial_id, t->attempt, step, path);
}

static void trial_free(agent_trial *t)
{
    if (!t) return;
    for (int i = 0; i < 2; i++) {
        if (t->fd[i] >= 0) close(t->fd[i]);
        hf_buf_free(&t->line[i]);
    }
    free(t);
}

void agent_sup_free(agent_sup *s)
{
    if (!s) return;
    for (int i = 0; i < s->n; i++) {
        agent_trial *t = s->t[i];
        if (!t->reaped) {
            kill(-t->pid, SIGKILL);
            waitpid(t->pid, NULL, 0);
        }
        trial_free(t);
    }
    free(s);
}

int agent_sup_count(const agent_sup *s) { return s->n; }
uint64_t agent_sup_prompt_reports(const agent_sup *s) { return s->prompt_reports; }

/* First trial matching; attempt <= 0 and rank < 0 match any. */
static agent_trial *find(const agent_sup *s, int64_t trial_id, int64_t attempt, int64_t rank)
{
    for (int i = 0; i < s->n; i++)
        if (s->t[i]->trial_id == trial_id && (attempt <= 0 || s->t[i]->attempt == attempt)
            && (rank < 0 || s->t[i]->rank == rank))
            return s->t[i];
    return NULL;
}

pid_t agent_sup_pid(const agent_sup *s, int64_t trial_id, int64_t attempt)
{
    agent_trial *t = find(s, trial_id, attempt, -1);
    return t ? t->pid : -1;
}

static void publish_running(agent_sup *s)
{
    json_t *arr = json_array();
    if (!arr) return;
    for (int i = 0; i < s->n; i++) {
        agent_trial *t = s->t[i];
        if (t->reaped) continue;
        json_array_append_new(arr, json_pack("{s:I, s:I, s:i, s:I}", "trial_id", (json_int_t)t->trial_id,
                                             "attempt", (json_int_t)t->attempt, "pid", (int)t->pid,
                                             "rank", (json_int_t)t->rank));
    }
    agent_outbox_set_running(s->ob, arr);
}

static void push_event(agent_sup *s, json_t *ev)
{
    if (!ev || agent_outbox_event(s->ob, ev))
        hf_error("cannot queue a trial event: out of memory");
}

/* A line the agent itself writes into a trial's log. */
static void trial_note(agent_sup *s, agent_trial *t, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void trial_note(agent_sup *s, agent_trial *t, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    int n = snprintf(msg, sizeof msg, "[hyperfarm-agent] ");
    va_start(ap, fmt);
    vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    agent_outbox_log(s->ob, t->trial_id, t->attempt, hf_wall_ms(), AGENT_STREAM_STDERR, msg, strlen(msg));
}

/* ------------------------------------------------------ start and stop */

static void start_failed(agent_sup *s, const agent_spec *sp, const char *msg)
{
    hf_warn("trial %lld attempt %lld: start failed: %s", (long long)sp->trial_id, (long long)sp->attempt, msg);
    done_add(s, sp->trial_id, sp->attempt, sp->rank);
    push_event(s, json_pack("{s:I, s:I, s:I, s:s, s:I, s:s}", "trial_id", (json_int_t)sp->trial_id,
                            "attempt", (json_int_t)sp->attempt, "rank", (json_int_t)sp->rank,
                            "type", "start_failed", "time", (json_int_t)hf_wall_ms(), "error", msg));
}

void agent_sup_start_failed(agent_sup *s, const agent_spec *sp, const char *msg) { start_failed(s, sp, msg); }

int agent_sup_known(const agent_sup *s, int64_t trial_id, int64_t attempt, int64_t rank)
{
    return find(s, trial_id, attempt, rank) != NULL || done_has(s, trial_id, attempt, rank);
}

/* The notes a trial's log starts with: what the agent did for it before
 * the start (holder, host file, PBT checkpoint copy). */
static void start_notes(agent_sup *s, agent_trial *t, const agent_spec *sp, const agent_child *c)
{
    char one_line[512] = "";
    for (size_t i = 0, k = 0; sp->hostfile && sp->hostfile[i] && k + 3 < sizeof one_line; i++) {
        if (sp->hostfile[i] != '\n') one_line[k++] = sp->hostfile[i];
        else if (sp->hostfile[i + 1]) one_line[k++] = ',', one_line[k++] = ' ';
        one_line[k] = '\0';
    }
    if (sp->hold)
        trial_note(s, t, "rank %lld: holding %lld slot(s) on this agent for the mpirun started by rank 0",
                   (long long)sp->rank, (long long)sp->slots);
    else if (c->hostfile[0])
        trial_note(s, t, "mpirun launcher: host file %s (HYPERFARM_HOSTFILE): %s", c->hostfile, one_line);
    if (sp->copy_from[0] && c->copy_rc)
        trial_note(s, t, "copy_checkpoint_from %s failed (%s); the trial starts without it",
                   sp->copy_from, c->copy_err);
    else if (sp->copy_from[0])
        trial_note(s, t, "checkpoint copied from %s", sp->copy_from);
}

int agent_sup_start(agent_sup *s, const agent_spec *sp, char *err, size_t errlen)
{
    agent_trial *t = NULL;
    agent_child c;
    int rc;

    err[0] = '\0';
    if (find(s, sp->trial_id, sp->attempt, sp->rank)) return HF_EEXIST;
    if (done_has(s, sp->trial_id, sp->attempt, sp->rank)) {
        hf_info("trial %lld attempt %lld rank %lld already ran here: duplicate assignment ignored",
                (long long)sp->trial_id, (long long)sp->attempt, (long long)sp->rank);
        return HF_EEXIST;
    }
    for (int i = 0; i < s->n; i++) {
        agent_trial *old = s->t[i];
        if (old->trial_id != sp->trial_id || old->attempt >= sp->attempt || old->reaped) continue;
        /* The scheduler re-placed this trial: its older attempt must not go on. */
        hf_warn("trial %lld: attempt %lld assigned while attempt %lld still runs; killing the old one",
                (long long)sp->trial_id, (long long)sp->attempt, (long long)old->attempt);
        agent_sup_kill(s, old->trial_id, old->attempt, 0, "superseded");
    }
    if (s->n >= AGENT_MAX_TRIALS) {
        snprintf(err, errlen, "more than %d trials on this agent", AGENT_MAX_TRIALS);
        rc = HF_ETOOBIG;
        goto fail;
    }
    /* allocated before the start: what runs is always supervised */
    if (!(t = calloc(1, sizeof *t))) {
        snprintf(err, errlen, "out of memory");
        rc = HF_ENOMEM;
        goto fail;
    }
    if ((rc = agent_spawn(s->workdir, s->self_dir, s->sb, sp, &c, err, errlen))) goto fail;
    t->sandboxed = c.sandboxed;
    t->trial_id = sp->trial_id;
    t->attempt = sp->attempt;
    t->rank = sp->rank;
    t->grace_ms = sp->grace_ms;
    snprintf(t->prompt_metric, sizeof t->prompt_metric, "%s", sp->prompt_metric);
    t->pid = c.pid;
    for (int i = 0; i < 2; i++) {
        t->fd[i] = c.fd[i];
        hf_buf_init(&t->line[i], AGENT_LINE_MAX);
    }
    snprintf(t->control, sizeof t->control, "%s", c.control);
    snprintf(t->dir, sizeof t->dir, "%s", c.dir);
    s->t[s->n++] = t;
    if (s->hooks.on_start) s->hooks.on_start(s->hooks.ctx, t->trial_id, t->dir);
    hf_info("trial %lld attempt %lld started: pid %d, %s, cwd %s", (long long)t->trial_id,
            (long long)t->attempt, (int)c.pid, c.prog, c.dir);
    push_event(s, json_pack("{s:I, s:I, s:I, s:s, s:I, s:i}", "trial_id", (json_int_t)t->trial_id,
                            "attempt", (json_int_t)t->attempt, "rank", (json_int_t)t->rank, "type", "started",
                            "time", (json_int_t)hf_wall_ms(), "pid", (int)c.pid));
    start_notes(s, t, sp, &c);
    publish_running(s);
    return HF_OK;
fail:
    free(t);
    start_failed(s, sp, err);
    return rc;
}

static void trial_stop(agent_sup *s, agent_trial *t, int64_t grace_ms, const char *reason)
{
    if (t->reaped) return;
    if (grace_ms < 0) grace_ms = t->grace_ms >= 0 ? t->grace_ms : s->grace_ms;
    if (grace_ms > AGENT_GRACE_MAX_MS) grace_ms = AGENT_GRACE_MAX_MS;
    int64_t deadline = hf_mono_ms() + grace_ms;
    if (t->state == TRIAL_STOPPING) {
        if (deadline < t->kill_deadline) t->kill_deadline = deadline;   /* a second kill may hurry */
        return;
    }
    t->state = TRIAL_STOPPING;
    t->kill_deadline = deadline;
    /* No grace: SIGKILL before the control file says stop, so a trial
     * polling that file cannot exit on its own first (a supersede must
     * end the old attempt by the signal, however loaded the machine). */
    if (grace_ms == 0) {
        kill(-t->pid, SIGKILL);
        t->killed_hard = 1;
    }
    int rc = agent_fs_write_control(t->control, 1, reason);
    if (rc) hf_warn("trial %lld: cannot write %s: %s", (long long)t->trial_id, t->control, hf_strerror(rc));
    hf_info("trial %lld attempt %lld rank %lld: stopping (%s), SIGTERM to group %d, grace %lld ms",
            (long long)t->trial_id, (long long)t->attempt, (long long)t->rank, reason, (int)t->pid,
            (long long)grace_ms);
    trial_note(s, t, "stop requested (%s): SIGTERM, SIGKILL after %lld ms", reason, (long long)grace_ms);
    if (grace_ms != 0) kill(-t->pid, SIGTERM);
}

int agent_sup_kill(agent_sup *s, int64_t trial_id, int64_t attempt, int64_t grace_ms, const char *reason)
{
    int found = 0;
    for (int i = 0; i < s->n; i++) {
        agent_trial *t = s->t[i];
        if (t->trial_id != trial_id || (attempt > 0 && t->attempt != attempt)) continue;
        found = 1;
        trial_stop(s, t, grace_ms, reason ? reason : "stop");
    }
    return found ? HF_OK : HF_ENOTFOUND;
}

void agent_sup_kill_all(agent_sup *s, int64_t grace_ms, const char *reason)
{
    for (int i = 0; i < s->n; i++) agent_sup_kill(s, s->t[i]->trial_id, s->t[i]->attempt, grace_ms, reason);
}

/* ------------------------------------------------------------- output */

static void ship_line(agent_sup *s, agent_trial *t, int stream, char *line, size_t len, size_t dropped)
{
    int64_t now = hf_wall_ms();
    hf_metric_report rep;
    hf_jerr je;

    while (len > 0 && line[len - 1] == '\r') len--;
    t->lines++;
    if (!dropped && stream == AGENT_STREAM_STDOUT && hf_metric_is_line(line, len)) {
        int rc = hf_metric_parse(line, len, &rep, &je);
        if (rc == HF_OK) {
            t->metrics++;
            if (agent_outbox_metric(s->ob, t->trial_id, t->attempt, now, &rep))
                hf_error("cannot queue a metric: out of memory");
            else if (t->prompt_metric[0])
                for (size_t i = 0; i < rep.n; i++)
                    if (!strcmp(rep.m[i].name, t->prompt_metric)) { s->prompt_reports++; break; }
            note_checkpoint(s, t, &rep);
            return;
        }
        t->bad_metrics++;
        agent_outbox_log(s->ob, t->trial_id, t->attempt, now, stream, line, len);
        trial_note(s, t, "metric line ignored: %s%s%s", je.field, je.field[0] ? ": " : "", je.msg);
        return;
    }
    /* rate limit per trial per second (metric lines are not counted) */
    int64_t sec = hf_mono_ms() / 1000;
    if (sec != t->rate_window) {
        if (t->rate_suppressed)
            trial_note(s, t, "%llu lines suppressed (more than %d lines/s)",
                       (unsigned long long)t->rate_suppressed, AGENT_LOG_RATE);
        t->rate_window = sec;
        t->rate_lines = t->rate_suppressed = 0;
    }
    if (++t->rate_lines > AGENT_LOG_RATE) {
        t->rate_suppressed++;
        return;
    }
    if (dropped) {
        char note[96];
        int n = snprintf(note, sizeof note, " [hyperfarm-agent: line truncated, %zu bytes dropped]", dropped);
        /* the line buffer has room for the note: its max is the line bound, the
         * text is copied into a local buffer to stay within it */
        char *tmp = malloc(len + (size_t)n + 1);
        if (tmp) {
            memcpy(tmp, line, len);
            memcpy(tmp + len, note, (size_t)n + 1);
            agent_outbox_log(s->ob, t->trial_id, t->attempt, now, stream, tmp, len + (size_t)n);
            free(tmp);
            return;
        }
    }
    agent_outbox_log(s->ob, t->trial_id, t->attempt, now, stream, line, len);
}

/* Feed n bytes of stream i into the line splitter. */
static void feed(agent_sup *s, agent_trial *t, int i, const char *p, size_t n)
{
    hf_buf *b = &t->line[i];
    while (n > 0) {
        const char *nl = memchr(p, '\n', n);
        size_t chunk = nl ? (size_t)(nl - p) : n;
        if (t->skip[i] == 0) {
            size_t room = AGENT_LINE_MAX - b->len;
            size_t take = chunk < room ? chunk : room;
            hf_buf_add(b, p, take);     /* cannot fail: within max, memory reserved below */
            if (chunk > take) t->skip[i] += chunk - take;
        } else t->skip[i] += chunk;
        if (!nl) break;
        ship_line(s, t, i, b->data ? b->data : (char *)"", b->len, t->skip[i]);
        hf_buf_reset(b);
        t->skip[i] = 0;
        p = nl + 1;
        n -= chunk + 1;
    }
}

/* Read what is available on stream i (bounded per call for fairness). */
static void drain(agent_sup *s, agent_trial *t, int i)
{
    char buf[65536];
    for (int rounds = 0; rounds < 4 && t->fd[i] >= 0; rounds++) {
        ssize_t r = read(t->fd[i], buf, sizeof buf);
        if (r > 0) {
            feed(s, t, i, buf, (size_t)r);
            if ((size_t)r < sizeof buf) break;
            continue;
        }
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) break;
        /* EOF or error: flush a last unterminated line */
        if (t->line[i].len > 0 || t->skip[i] > 0)
            ship_line(s, t, i, t->line[i].data ? t->line[i].data : (char *)"", t->line[i].len, t->skip[i]);
        hf_buf_free(&t->line[i]);
        t->skip[i] = 0;
        close(t->fd[i]);
        t->fd[i] = -1;
    }
}

static void reap(agent_sup *s, agent_trial *t)
{
    siginfo_t si;
    int st;
    /* Look without reaping first: while the leader is a zombie its pid (the
     * group id) cannot be reused, so the group kill below cannot hit a
     * stranger. Then SIGKILL whatever the trial left in its group, and reap. */
    memset(&si, 0, sizeof si);
    if (waitid(P_PID, (id_t)t->pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid != t->pid) return;
    kill(-t->pid, SIGKILL);
    if (waitpid(t->pid, &st, 0) != t->pid) return;
    t->reaped = 1;
    t->reaped_at = hf_mono_ms();
    if (WIFEXITED(st) && t->sandboxed && WEXITSTATUS(st) > 128 && WEXITSTATUS(st) <= 128 + 64) {
        t->exit_code = WEXITSTATUS(st);      /* bwrap reports a death by signal N as 128 + N */
        t->signal = t->exit_code - 128;
    } else if (WIFEXITED(st)) {
        t->exit_code = WEXITSTATUS(st);
        t->signal = 0;
    } else {
        t->signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
        t->exit_code = 128 + t->signal;
    }
    publish_running(s);
}

static void finish(agent_sup *s, int idx)
{
    agent_trial *t = s->t[idx];
    for (int i = 0; i < 2; i++)
        if (t->fd[i] >= 0) {
            drain(s, t, i);
            if (t->fd[i] >= 0) {
                /* a grandchild outside the group still holds the pipe */
                if (t->line[i].len) ship_line(s, t, i, t->line[i].data, t->line[i].len, t->skip[i]);
                close(t->fd[i]);
                t->fd[i] = -1;
            }
        }
    if (t->rate_suppressed)
        trial_note(s, t, "%llu lines suppressed (more than %d lines/s)",
                   (unsigned long long)t->rate_suppressed, AGENT_LOG_RATE);
    hf_info("trial %lld attempt %lld exited: code %d signal %d%s (%llu lines, %llu metrics, %llu bad)",
            (long long)t->trial_id, (long long)t->attempt, t->exit_code, t->signal,
            t->killed_hard ? ", SIGKILLed after the grace period" : "", (unsigned long long)t->lines,
            (unsigned long long)t->metrics, (unsigned long long)t->bad_metrics);
    json_t *ev = json_pack("{s:I, s:I, s:I, s:s, s:I, s:i, s:i}", "trial_id", (json_int_t)t->trial_id, "attempt",
                           (json_int_t)t->attempt, "rank", (json_int_t)t->rank, "type", "exited", "time",
                           (json_int_t)hf_wall_ms(), "exit_code", t->exit_code, "signal", t->signal);
    /* stopped by a drain (agent_slurm.h): the scheduler requeues it without a restart */
    if (ev && agent_draining() && (t->exit_code || t->signal)) json_object_set_new(ev, "drained", json_true());
    push_event(s, ev);
    done_add(s, t->trial_id, t->attempt, t->rank);
    s->t[idx] = s->t[--s->n];
    s->t[s->n] = NULL;
    if (s->hooks.on_exit) {
        int others = 0;
        for (int i = 0; i < s->n; i++) others += s->t[i]->trial_id == t->trial_id;
        s->hooks.on_exit(s->hooks.ctx, t->trial_id, t->dir, others);
    }
    trial_free(t);
    publish_running(s);
}

int agent_sup_poll(agent_sup *s, int timeout_ms, int extra_fd)
{
    struct pollfd pf[2 * AGENT_MAX_TRIALS + 2];
    agent_trial *owner[2 * AGENT_MAX_TRIALS + 2];
    int which[2 * AGENT_MAX_TRIALS + 2];
    int np = 0, ret = 0;
    int64_t now = hf_mono_ms();

    /* wake up in time for the earliest grace deadline or drain timeout */
    for (int i = 0; i < s->n; i++) {
        agent_trial *t = s->t[i];
        int64_t due = -1;
        if (!t->reaped && t->state == TRIAL_STOPPING && !t->killed_hard) due = t->kill_deadline;
        if (t->reaped) due = t->reaped_at + AGENT_DRAIN_MS;
        if (due >= 0) {
            int64_t w = due - now;
            if (w < 0) w = 0;
            if (w < timeout_ms) timeout_ms = (int)w;
        }
    }
    pf[np] = (struct pollfd){.fd = chld_pipe[0], .events = POLLIN};
    owner[np++] = NULL;
    int extra_idx = -1;
    if (extra_fd >= 0) {
        extra_idx = np;
        pf[np] = (struct pollfd){.fd = extra_fd, .events = POLLIN};
        owner[np++] = NULL;
    }
    for (int i = 0; i < s->n; i++)
        for (int k = 0; k < 2; k++)
            if (s->t[i]->fd[k] >= 0) {
                pf[np] = (struct pollfd){.fd = s->t[i]->fd[k], .events = POLLIN};
                owner[np] = s->t[i];
                which[np++] = k;
            }
    int r = poll(pf, (nfds_t)np, timeout_ms < 0 ? 0 : timeout_ms);
    if (r < 0 && errno != EINTR) hf_warn("poll: %s", strerror(errno));
    if (r > 0) {
        if (pf[0].revents) {
            char junk[256];
            while (read(chld_pipe[0], junk, sizeof junk) > 0) {}
        }
        if (extra_idx >= 0 && pf[extra_idx].revents) ret = 1;
        for (int i = 0; i < np; i++)
            if (owner[i] && pf[i].revents) drain(s, owner[i], which[i]);
    }
    now = hf_mono_ms();
    for (int i = s->n - 1; i >= 0; i--) {
        agent_trial *t = s->t[i];
        if (!t->reaped) reap(s, t);
        if (!t->reaped && t->state == TRIAL_STOPPING && !t->killed_hard && now >= t->kill_deadline) {
            hf_warn("trial %lld attempt %lld: grace period over, SIGKILL to group %d",
                    (long long)t->trial_id, (long long)t->attempt, (int)t->pid);
            trial_note(s, t, "grace period over: SIGKILL");
            kill(-t->pid, SIGKILL);
            t->killed_hard = 1;
        }
        if (t->reaped && ((t->fd[0] < 0 && t->fd[1] < 0) || now >= t->reaped_at + AGENT_DRAIN_MS))
            finish(s, i);
    }
    return ret;
}
