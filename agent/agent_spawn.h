/*
 * agent_spawn.h — starting one trial process from a validated assignment
 * (docs/agent.md, "Starting a trial"): its files, its environment and
 * argv, and fork + exec. It knows nothing of the trial table or the
 * outbox; agent_sup decides whether to start and supervises what started.
 *
 * A trial process:
 *   - is started with fork + execve of an argv array (never a shell), the
 *     program found on the PATH of the trial's environment, whose first
 *     entry is the directory of the agent's own binary;
 *   - runs in its own process group (setpgid, in the child and in the
 *     parent), in <workdir>/<dirname of checkpoint_dir>, with stdin from
 *     /dev/null, default signal dispositions, an empty signal mask, and the
 *     trial environment of docs/design.md §4 ("Trial contract") on top of
 *     the allowed part of the agent's own (docs/agent.md "Sandbox": no
 *     token, token file or HYPERFARM_AGENT_*): the experiment's env, then
 *     the contract's variables (every HYPERFARM_* the trial sees,
 *     CUDA_VISIBLE_DEVICES, PATH), written by hf_trial_env alone from the
 *     assignment's typed fields; no env entry can name one (refused when
 *     the assignment is parsed), so nothing is overridden;
 *   - gets SIGTERM if the agent dies (PR_SET_PDEATHSIG), so no orphan
 *     keeps running after an agent crash;
 *   - with a sandbox (agent_sandbox.h), is bwrap running the program
 *     through the agent's --sandbox-exec helper: bwrap starts with SIGTERM,
 *     SIGINT, SIGHUP and SIGQUIT blocked (it does not forward them; the
 *     helper unblocks them for the trial) and PR_SET_PDEATHSIG=SIGKILL;
 *   - (a holder rank of an mpirun-launcher trial: a forked placeholder that
 *     closes every inherited descriptor and only waits for its SIGTERM; no
 *     program is run, see agent_spec).
 * An exec failure travels back over a close-on-exec pipe, so it is an
 * error of agent_spawn, not a trial that exits 127.
 */
#ifndef AGENT_SPAWN_H
#define AGENT_SPAWN_H

#include "agent_assign.h"
#include "agent_fs.h"
#include "agent_sandbox.h"

#include <stddef.h>
#include <sys/types.h>

/* What agent_spawn started. */
typedef struct agent_child {
    pid_t pid;                        /* also the process group id */
    int   fd[2];                      /* stdout, stderr read ends: non-blocking, close-on-exec */
    char  dir[AGENT_PATH_MAX];        /* working directory */
    char  control[AGENT_PATH_MAX];    /* control.json */
    char  hostfile[AGENT_PATH_MAX];   /* "" unless rank 0 of an mpirun-launcher trial */
    char  prog[AGENT_PATH_MAX];       /* the program executed (a description for a holder) */
    int   sandboxed;                  /* pid is bwrap's (agent_sandbox.h): an exit code 129..192 is
                                         the trial's death by signal code - 128 */
    int   copy_rc;                    /* copy_checkpoint_from: 0 = copied or none, else HF_E* */
    char  copy_err[512];              /* why the copy failed */
} agent_child;

/* Prepare the trial's files (checkpoint directory, PBT checkpoint copy,
 * control.json with should_stop false, mpirun host file) and start it.
 * IN  workdir: absolute; self_dir: directory put first on the trial's PATH
 *     ("" = none); sb: the sandbox to run it in (NULL: none, --sandbox off;
 *     a holder never runs in one: it runs no program); sp: the assignment
 *     (borrowed).
 * OUT c: the process; its fds belong to the caller (close them). A failed
 *     PBT copy is not an error: c->copy_rc says so, the trial starts anyway.
 * RET 0; HF_EINVAL (bad or too long path), HF_ENOMEM, HF_EIO (pipes),
 *     HF_ECHILD (program not found, fork or exec failed), or the HF_E* of
 *     a file operation, with a message in err; nothing runs then. */
int agent_spawn(const char *workdir, const char *self_dir, const agent_sandbox *sb, const agent_spec *sp,
                agent_child *c, char *err, size_t errlen);

/* Export OMP_NUM_THREADS and OPENBLAS_NUM_THREADS = max(1, cpus / slots)
 * into the agent's own environment, each only where it is unset, so that
 * every trial inherits it (a trial's "env" still overrides). Without it a
 * BLAS or OpenMP library starts one thread per CPU in every trial: with 2
 * slots on 2 CPUs each trial's idle OpenBLAS thread spun 0.1 s of CPU the
 * other trial needed, and larger trials oversubscribe the machine. Ray Tune
 * sets OMP_NUM_THREADS from a trial's CPUs for the same reason. Call once,
 * before any thread starts (setenv). RET 0 or -1 (setenv failed). */
int agent_spawn_default_threads(long cpus, long slots);

/* What the sandbox sets in a trial's environment, in place of the agent's
 * own values (the experiment's env may still set HOME, USER, LOGNAME; the
 * data cache is a contract variable, HYPERFARM_DATA_CACHE). */
typedef struct agent_spawn_sbenv {
    const char *home;    /* HOME: the trial's directory */
    const char *user;    /* USER and LOGNAME: the trial user; NULL = the agent's */
    const char *cache;   /* HYPERFARM_DATA_CACHE; NULL or "" = "off" */
} agent_spawn_sbenv;

/* The environment of a trial (exposed for tests).
 * IN  base: the agent's own environment (NULL-terminated, borrowed), of
 *     which only allowed names pass (docs/agent.md "Sandbox": no token,
 *     no token file, no HYPERFARM_AGENT_*) and only where no later layer
 *     names the variable; self_dir as above; ckpt,
 *     control: absolute paths; hostfile: NULL or the host file's path;
 *     sbe: NULL without a sandbox.
 * OUT *strs: the strings built here (NULL-terminated, owned: free each,
 *     then the array); *path: the trial's PATH value (points into *strs).
 * RET the NULL-terminated envp (the array is owned, its strings are
 *     borrowed from base, sp and *strs), or NULL on OOM. */
char **agent_spawn_env(char *const *base, const char *self_dir, const agent_spec *sp, const char *ckpt,
                       const char *control, const char *hostfile, const agent_spawn_sbenv *sbe, char ***strs,
                       const char **path);

#endif
