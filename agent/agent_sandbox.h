/*
 * agent_sandbox.h — the trial sandbox (docs/agent.md, "Sandbox"): each
 * trial runs under bubblewrap (bwrap) in its own mount and pid namespaces
 * (and a user namespace when the agent is not root), where the system is
 * read-only, the trial's own directory is writable, and the agent's work
 * directory, token file and configuration are absent or empty. A trial
 * thus holds no farm secret and sees no other trial's files.
 *
 * What runs (argv built by agent_sandbox_argv, never a shell):
 *
 *     bwrap --die-with-parent --unshare-pid [--unshare-user | --cap-drop ALL
 *           --cap-add CAP_SETUID --cap-add CAP_SETGID] <binds> --chdir DIR --
 *       <agent binary> --sandbox-exec UID GID PROG ARGV0 ARGS...
 *
 * with the options before "--" passed in a memfd (bwrap --args FD,
 * agent_sandbox_argv_fd), so pid 1's command line names no host path.
 *
 * The agent binary's --sandbox-exec mode (agent_sandbox_exec_main) runs
 * inside, as the trial's parent's only child: it unblocks the signals the
 * agent blocked for bwrap (bwrap does not forward signals, so the outer
 * bwrap must survive the SIGTERM sent to the trial's process group; the
 * trial must not inherit the block), drops to the trial user when the
 * agent is root, sets no_new_privs, closes every descriptor above 2 and
 * execs the program.
 *
 * Invariants: every path in an agent_sandbox is absolute and resolved
 * (realpath); no operator bind lies inside the work directory; the work
 * directory is not inside the agent's program directory or the data cache.
 */
#ifndef AGENT_SANDBOX_H
#define AGENT_SANDBOX_H

#include "agent_fs.h"

#include <stddef.h>
#include <sys/types.h>

#define AGENT_SANDBOX_MAX_BINDS 32

typedef struct agent_sandbox_bind {
    char path[AGENT_PATH_MAX];
    int  ro;
} agent_sandbox_bind;

typedef struct agent_sandbox {
    char  bwrap[AGENT_PATH_MAX];      /* the bwrap program */
    char  helper[AGENT_PATH_MAX];     /* the agent's own binary (--sandbox-exec) */
    char  self_dir[AGENT_PATH_MAX];   /* bound read-only ("" = none) */
    char  workdir[AGENT_PATH_MAX];    /* hidden (tmpfs) but for the trial's own directory */
    char  hide[2][AGENT_PATH_MAX];    /* token file, config file: /dev/null over them ("" = none) */
    char  cache[AGENT_PATH_MAX];      /* the data cache, bound writable ("" = none) */
    int   userns;                     /* agent not root: --unshare-user */
    int   drop;                       /* agent root: the trial runs as uid/gid */
    uid_t uid;
    gid_t gid;
    char  user[64];                   /* the trial user's name ("" when !drop) */
    int   nbinds;
    agent_sandbox_bind binds[AGENT_SANDBOX_MAX_BINDS];
} agent_sandbox;

typedef struct agent_sandbox_cfg {
    const char *workdir;     /* absolute, resolved */
    const char *self_exe;    /* the agent binary, absolute */
    const char *token_file;  /* NULL = none */
    const char *config;      /* NULL = none */
    const char *binds;       /* "PATH[:ro|:rw],..." or NULL */
    const char *trial_user;  /* used when root; NULL = "nobody" */
    const char *bwrap;       /* NULL = "bwrap" on PATH, else /usr/bin/bwrap */
    const char *cache;       /* data cache dir; NULL = from the environment as the trainer does; "" = none */
} agent_sandbox_cfg;

/* Fill sb from cfg: resolve and check the binds, find bwrap, look up the
 * trial user (root only), create the data cache (owned by the trial user
 * when root). Does not run anything (see agent_sandbox_probe).
 * RET 0 or HF_EINVAL / HF_ENOTFOUND / HF_EIO with a message in err naming
 * the option at fault. */
int agent_sandbox_init(agent_sandbox *sb, const agent_sandbox_cfg *cfg, char *err, size_t errlen);

/* Start /bin/true in a sandbox like a trial's (in the work directory) and
 * wait for it: the start-up check that bwrap and the namespaces work here.
 * RET 0 or HF_ECHILD with bwrap's own message in err. Call before threads
 * start. */
int agent_sandbox_probe(const agent_sandbox *sb, char *err, size_t errlen);

/* The bwrap argv that runs prog (absolute, resolved on the host: the
 * sandbox shows the same paths) with argv in the trial directory dir.
 * RET a NULL-terminated argv whose strings are owned (free with
 * agent_sandbox_argv_free), or NULL on OOM. */
char **agent_sandbox_argv(const agent_sandbox *sb, const char *dir, const char *prog, char *const *argv);
void   agent_sandbox_argv_free(char **v);

/* The same argv with bwrap's options moved into a memfd: {bwrap, "--args",
 * FD, "--", helper...}, so that the sandbox's pid 1 (bwrap, whose command
 * line every trial can read) names no host path: not the token file it
 * hides, not the work directory. *fd (close-on-exec: the child must clear
 * the flag) holds the options, NUL-separated, at offset 0. RET the short
 * argv (owned, free with agent_sandbox_argv_free) or NULL (OOM, no "--",
 * memfd failed; *fd is then -1). */
char **agent_sandbox_argv_fd(char **full, int *fd);

/* Is the host path (absolute; relative: the trial's directory) at the
 * same place inside the sandbox of the trial directory dir? Used to look
 * a program up only where the trial can run it. RET 1 or 0. */
int agent_sandbox_visible(const agent_sandbox *sb, const char *path, const char *dir);

/* Give the trial its directory dir before a start: every hard-linked
 * regular file in it (a restored checkpoint shares its inode with the
 * agent's object cache) is replaced by a private copy, so the trial cannot
 * write into the cache; when the agent is root, the tree is lchown'ed to
 * the trial user (links not followed). RET 0 or HF_EIO with err. */
int agent_sandbox_own(const agent_sandbox *sb, const char *dir, char *err, size_t errlen);

/* The agent binary's --sandbox-exec mode (see the header comment):
 * argv = {prog, "--sandbox-exec", UID|"-", GID|"-", PROG, ARGV0, ARGS...}.
 * Never returns on success; RET 127 after printing why on stderr. */
int agent_sandbox_exec_main(int argc, char **argv);

#endif
