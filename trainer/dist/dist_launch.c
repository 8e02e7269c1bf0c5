/*
 * dist_launch.c — the launcher of a distributed job on one host
 * (torchrun-like): --nproc N without a rank in the environment.
 *
 * It binds the rendezvous listener itself (127.0.0.1, a free port) and
 * hands the open socket to rank 0 (HYPERFARM_MASTER_FD), so no port can be
 * stolen between choosing and binding it; then fork/execs this program N
 * times (plus --ps servers in async mode) with HYPERFARM_RANK, _WORLD_SIZE,
 * _LOCAL_RANK and _MASTER set. It forwards SIGTERM/SIGINT to its children
 * and, as soon as one of them dies or fails, stops the others (SIGTERM,
 * then SIGKILL after a grace) and exits non-zero, naming the rank: a broken
 * job never lingers. Its exit status is rank 0's when all ranks finish.
 */
#include "trainer/dist/dist_modes.h"

#include "hf_log.h"
#include "hf_time.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t launcher_sig;
static void launcher_on_signal(int sig) { launcher_sig = sig; }

/* argv of this process from /proc/self/cmdline. RET count or -1. */
static int self_argv(char *buf, size_t len, char **argv, int max)
{
    FILE *f = fopen("/proc/self/cmdline", "rb");
    if (!f) return -1;
    size_t n = fread(buf, 1, len - 1, f);
    fclose(f);
    buf[n] = 0;
    int argc = 0;
    for (size_t i = 0; i < n && argc < max - 1; i += strlen(buf + i) + 1) argv[argc++] = buf + i;
    argv[argc] = NULL;
    return argc;
}

static void describe_status(int st, char *out, size_t len)
{
    if (WIFSIGNALED(st)) snprintf(out, len, "was killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else snprintf(out, len, "exited with status %d", WEXITSTATUS(st));
}

/* The environment a rank starts with, shared by all ranks but its number. */
typedef struct launch_env {
    char  master[64], wstr[16], lfdstr[16];
    int   lfd;                /* rendezvous listener, inherited by rank 0 */
    char **argv;              /* this program's argv */
} launch_env;

/* In the child: become rank r and exec this program again. */
static void exec_rank(const launch_env *e, int r)
{
    char rs[16];
    snprintf(rs, sizeof rs, "%d", r);
    setenv("HYPERFARM_RANK", rs, 1);
    setenv("HYPERFARM_LOCAL_RANK", rs, 1);
    setenv("HYPERFARM_WORLD_SIZE", e->wstr, 1);
    setenv("HYPERFARM_MASTER", e->master, 1);
    if (r == 0) setenv("HYPERFARM_MASTER_FD", e->lfdstr, 1);
    else { close(e->lfd); unsetenv("HYPERFARM_MASTER_FD"); }
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    execv("/proc/self/exe", e->argv);
    fprintf(stderr, "hyperfarm-train: exec: %s\n", strerror(errno));
    _exit(127);
}

/* Where supervision stands. */
typedef struct launch_state {
    pid_t  *pids;
    int    *done;
    int     world;            /* ranks started */
    int     failed;
    int64_t kill_at;          /* SIGKILL the rest at this time (0: not yet planned) */
    int     rank0_status;
    int    *batch_r, *batch_st;   /* ranks reaped together (supervise) */
} launch_state;

/* Fork every rank. A failed fork stops those already started. */
static void spawn_ranks(const launch_env *e, launch_state *ls)
{
    for (int r = 0; r < ls->world; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "hyperfarm-train: fork: %s\n", strerror(errno));
            ls->world = r;
            ls->failed = 1;
            for (int q = 0; q < r; q++) kill(ls->pids[q], SIGTERM);
            ls->kill_at = hf_mono_ms() + 5000;
            return;
        }
        if (pid == 0) exec_rank(e, r);
        ls->pids[r] = pid;
    }
}

/* Wait status st is a rank's normal end (done, or stopped as asked). */
static int rank_ok(int st)
{
    return WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == TR_EXIT_SIGTERM);
}

/* Rank r (pid p) ended with wait status st: a failure stops the job. */
static void on_rank_exit(launch_state *ls, int r, pid_t p, int st)
{
    ls->done[r] = 1;
    if (r == 0) ls->rank0_status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (rank_ok(st) || ls->failed) return;
    char why[96];
    describe_status(st, why, sizeof why);
    fprintf(stderr, "hyperfarm-train: rank %d (pid %d) %s: stopping the job\n", r, (int)p, why);
    ls->failed = 1;
    /* the job is broken: a short grace (a stopped rank only dies by SIGKILL) */
    for (int q = 0; q < ls->world; q++) if (!ls->done[q] && ls->pids[q] > 0) kill(ls->pids[q], SIGTERM);
    ls->kill_at = hf_mono_ms() + 2000;
}

static int rank_of(const launch_state *ls, pid_t p)
{
    int r = 0;
    while (r < ls->world && ls->pids[r] != p) r++;
    return r;
}

/* Add pid p's wait status st to the batch of n reaped ranks (a pid that
 * is not a rank is left out). RET the new n. */
static int batch_add(launch_state *ls, int n, pid_t p, int st)
{
    int r = rank_of(ls, p);
    if (r < ls->world) { ls->batch_r[n] = r; ls->batch_st[n++] = st; }
    return n;
}

/* Wait for every rank, forwarding signals and enforcing kill_at. */
static void supervise(launch_state *ls)
{
    int alive = ls->world;
    while (alive > 0) {
        if (launcher_sig) {
            hf_info("launcher: got signal %d, forwarding to the ranks", (int)launcher_sig);
            for (int r = 0; r < ls->world; r++) if (!ls->done[r]) kill(ls->pids[r], SIGTERM);
            launcher_sig = 0;
        }
        int st;
        pid_t p = waitpid(-1, &st, ls->kill_at ? WNOHANG : 0);
        if (p < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (p == 0) {
            if (hf_mono_ms() >= ls->kill_at) {
                for (int r = 0; r < ls->world; r++) if (!ls->done[r]) kill(ls->pids[r], SIGKILL);
                ls->kill_at = 0;
            } else {
                hf_sleep_ms(20);
            }
            continue;
        }
        /* Take every rank already dead with this one, and report those a
         * signal killed first: a killed rank is the cause, the peers that
         * then lost their connection to it exit with status 1, and
         * waitpid returns zombies in fork order, not in order of death. */
        int n = 0;
        do n = batch_add(ls, n, p, st);
        while (n < ls->world && (p = waitpid(-1, &st, WNOHANG)) > 0);
        /* The first failure is a peer's error exit and no rank was killed:
         * the killed one may not be reapable yet. Its sockets close before
         * its exit completes, and a loaded machine can run the peer that
         * saw them close through its whole exit first. So wait up to
         * 200 ms for a killed rank before naming the cause. */
        int sig = 0, bad = 0;
        for (int i = 0; i < n; i++) {
            sig |= WIFSIGNALED(ls->batch_st[i]) != 0;
            bad |= !rank_ok(ls->batch_st[i]);
        }
        for (int64_t until = hf_mono_ms() + 200; bad && !sig && !ls->failed && n < alive && hf_mono_ms() < until;) {
            p = waitpid(-1, &st, WNOHANG);
            if (p <= 0) { hf_sleep_ms(5); continue; }
            int m = batch_add(ls, n, p, st);
            if (m > n) sig |= WIFSIGNALED(st) != 0;
            n = m;
        }
        for (int pass = 0; pass < 2; pass++)
            for (int i = 0; i < n; i++)
                if ((pass == 0) == (WIFSIGNALED(ls->batch_st[i]) != 0)) {
                    alive--;
                    on_rank_exit(ls, ls->batch_r[i], ls->pids[ls->batch_r[i]], ls->batch_st[i]);
                }
    }
}

int dist_launch(const tr_options *o, int mode)
{
    int nps = mode == TR_MODE_ASYNC ? (o->ps > 0 ? o->ps : 1) : 0;
    int world = o->nproc + nps;
    static char cmdline[65536];
    char *argv[1024];
    launch_env e = {.argv = argv};
    if (self_argv(cmdline, sizeof cmdline, argv, 1024) < 1) {
        fprintf(stderr, "hyperfarm-train: cannot read /proc/self/cmdline\n");
        return TR_EXIT_ERROR;
    }
    e.lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (e.lfd < 0 || bind(e.lfd, (struct sockaddr *)&a, sizeof a) || listen(e.lfd, 256) ||
        getsockname(e.lfd, (struct sockaddr *)&a, &al)) {
        fprintf(stderr, "hyperfarm-train: launcher cannot listen on 127.0.0.1: %s\n", strerror(errno));
        return TR_EXIT_ERROR;
    }
    snprintf(e.master, sizeof e.master, "127.0.0.1:%d", ntohs(a.sin_port));
    snprintf(e.wstr, sizeof e.wstr, "%d", world);
    snprintf(e.lfdstr, sizeof e.lfdstr, "%d", e.lfd);
    hf_info("launching %d workers%s%.0d%s (mode %s), rendezvous at %s", o->nproc, nps ? " + " : "", nps,
            nps ? " parameter servers" : "", tr_options_mode_name(mode), e.master);

    struct sigaction sa = {0};
    sa.sa_handler = launcher_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    launch_state ls = {.world = world, .rank0_status = -1};
    ls.pids = calloc((size_t)world, sizeof *ls.pids);
    ls.done = calloc((size_t)world, sizeof *ls.done);
    ls.batch_r = calloc((size_t)world, sizeof *ls.batch_r);
    ls.batch_st = calloc((size_t)world, sizeof *ls.batch_st);
    int status = TR_EXIT_ERROR;
    if (!ls.pids || !ls.done || !ls.batch_r || !ls.batch_st) goto end;
    fflush(stdout);
    fflush(stderr);
    spawn_ranks(&e, &ls);
    close(e.lfd);
    e.lfd = -1;
    supervise(&ls);
    status = ls.failed ? TR_EXIT_ERROR : ls.rank0_status >= 0 ? ls.rank0_status : TR_EXIT_ERROR;
end:
    if (e.lfd >= 0) close(e.lfd);
    free(ls.pids);
    free(ls.done);
    free(ls.batch_r);
    free(ls.batch_st);
    return status;
}
