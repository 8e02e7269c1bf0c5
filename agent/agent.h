/*
 * agent.h — the hyperfarm-agent daemon: configuration and the main loop.
 *
 * Threads (docs/agent.md, "Threads and loop"; each started through
 * common/hf_thread.h or common/hf_pool.h, named as below):
 *   - the main thread runs agent_sup_poll(): one poll(2) over every trial's
 *     stdout/stderr, the SIGCHLD self-pipe and a wake pipe; it starts and
 *     stops trials and is the only thread that touches the supervisor;
 *   - the heartbeat thread (hf-beat) owns the agent_link: it registers, sends a batch
 *     from the outbox every interval (at once when a trial started or
 *     exited, back to back while a backlog drains), and hands the replies'
 *     assignments and kills to the main thread through a mutex-protected
 *     inbox and the wake pipe;
 *   - the long-poll thread (hf-poll) keeps the scheduler's doorbell open (agent_poll)
 *     and wakes the heartbeat thread when work waits;
 *   - the uploader (hf-upload, agent_upload.h) moves checkpoints into the
 *     object cache and up to the scheduler;
 *   - the prep pool (hf-prep x 4, agent_prep.h) fetches restores and code
 *     contexts, one job per assignment, so one large restore never holds
 *     up another trial's start.
 * A slow or stopped scheduler therefore never stalls the reading of trial
 * output (a trial blocked on a full pipe would stall its training), and the
 * outbox bounds what accumulates meanwhile.
 */
#ifndef AGENT_H
#define AGENT_H

#include <stdint.h>

typedef struct agent_cfg {
    const char *scheduler;      /* base URL */
    const char *name;           /* NULL = hostname */
    int64_t     slots;          /* 0 = GPUs if any, else online CPUs */
    const char *gpus;           /* auto | none | 0,1,... */
    const char *workdir;
    const char *token_file;
    const char *ca_file;
    const char *host;           /* address advertised to the scheduler; NULL = auto */
    int64_t     heartbeat_ms;   /* 0 = as the scheduler says (default 1000) */
    int64_t     grace_ms;       /* default grace period for kills */
    int64_t     http_timeout_ms;
    int64_t     max_log_lines, max_log_mb, max_metrics;
    int64_t     cache_mb;           /* object cache bound (MiB) */
    int         checkpoint_upload;  /* 0: checkpoints are not uploaded (stay on this disk) */
    int64_t     keep_trial_dirs_s;  /* a finished trial's directory is removed this long after its
                                       exit once its checkpoints are uploaded (< 0: never) */
    const char *sandbox;        /* on | off: trials in a bwrap sandbox (docs/agent.md "Sandbox") */
    const char *sandbox_bind;   /* "PATH[:ro],...": host paths trials see */
    const char *trial_user;     /* agent root: the user trials run as */
    const char *bwrap;          /* the bwrap program */
    const char *log_level, *log_format, *config;
    int         print_config;
    int         slurm;            /* inside a Slurm job: its resources, drain on SIGTERM (agent_slurm.h) */
    int64_t     idle_timeout_s;   /* exit after this long without a trial (0 = never) */
} agent_cfg;

#define AGENT_DEFAULT_WORKDIR "hyperfarm-agent-work"   /* --workdir's default */

/* Run the agent until SIGTERM/SIGINT; then stop every trial (grace period,
 * SIGKILL), send a last heartbeat, and return. RET 0, or an HF_E* code for
 * a fatal start-up problem (bad work directory, unreadable token file). */
int agent_run(const agent_cfg *cfg);

#endif
