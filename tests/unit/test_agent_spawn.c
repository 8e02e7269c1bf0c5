/*
 * test_agent_spawn.c — one trial process, without the supervisor:
 * agent_spawn_env's environment contract (table-driven), and agent_spawn
 * starting real programs (/bin/sh is only a convenient trial here: the
 * agent itself never runs a shell) to check what spawn_child_init sets up
 * in the child: its own process group, the working directory, stdin from
 * /dev/null, the files prepared before the start; and that a missing or
 * non-executable program is an error of the spawn, not a trial that exits
 * 127. Needs /bin/sh and /proc.
 *
 * The sandbox (agent_sandbox.h): the bwrap argv built for a trial (what is
 * bound, masked, and run), the checks of agent_sandbox_init, and — where
 * bwrap works here — a real sandboxed trial: it sees no agent file, no
 * extra descriptor, runs as nobody when the test is root, and still gets
 * the SIGTERM of a stop and its grace period (bwrap itself must survive
 * it). The helper is $HF_BIN/hyperfarm-agent (default bin/).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "agent/agent_assign.h"
#include "agent/agent_sandbox.h"
#include "agent/agent_spawn.h"
#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char workdir[256];

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st; (void)flag; (void)f;
    return remove(p);
}

/* One work directory for the group: each test uses its own checkpoint_dir. */
static int group_setup(void **state)
{
    (void)state;
    hf_log_init("test_agent_spawn");
    hf_log_set_level(HF_LOG_WARN);
    snprintf(workdir, sizeof workdir, "/tmp/hf-agent-spawn-XXXXXX");
    return mkdtemp(workdir) ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    return nftw(workdir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static agent_spec *spec_from(const char *text)
{
    json_t *j = json_loads(text, 0, NULL);
    hf_jerr e;
    assert_non_null(j);
    agent_spec *s = agent_spec_parse(j, "assign[0]", &e);
    if (!s) fprintf(stderr, "spec rejected: %s: %s\n", e.field, e.msg);
    json_decref(j);
    assert_non_null(s);
    return s;
}

/* How many entries of envp have name n; *val = the last one's value. */
static int env_count(char **envp, const char *n, const char **val)
{
    int c = 0;
    size_t l = strlen(n);
    for (size_t i = 0; envp[i]; i++)
        if (!strncmp(envp[i], n, l) && envp[i][l] == '=') {
            c++;
            if (val) *val = envp[i] + l + 1;
        }
    return c;
}

/* ------------------------------------------------------------------ */

static void test_env_contract(void **state)
{
    (void)state;
    static const struct {
        const char *name, *want;   /* want NULL: absent */
    } with_self[] = {
        {"LANG", "C.UTF-8"},                            /* the agent's own environment: allowed names */
        {"NCCL_SOCKET_IFNAME", "lo"},
        {"OMP_NUM_THREADS", "2"},
        {"KEEP", NULL},                                 /* ... only (docs/agent.md "Sandbox") */
        {"HYPERFARM_AGENT_TOKEN_FILE", NULL},           /* never a secret of the agent's */
        {"HYPERFARM_TOKEN", NULL},
        {"NCCL_API_TOKEN", NULL},                       /* a secret's name under an allowed prefix */
        {"HOME", "/root"},                              /* no sandbox: the agent's HOME */
        {"HYPERFARM_DATA_CACHE", NULL},
        {"FOO", "spec"},                                /* the experiment's env wins over the agent's */
        {"HYPERFARM_TRIAL_ID", "5"},                    /* the contract: from the typed fields */
        {"HYPERFARM_EXPERIMENT_ID", "7"},
        {"HYPERFARM_ATTEMPT", "3"},
        {"HYPERFARM_HPARAMS", "{\"lr\": 0.1000000000000000055511151231257827}"},   /* as sent, digit for digit */
        {"HYPERFARM_SEED", "11"},
        {"HYPERFARM_RANK", "1"},
        {"HYPERFARM_WORLD_SIZE", "2"},
        {"HYPERFARM_LOCAL_RANK", "0"},
        {"HYPERFARM_MASTER", "node-a:29500"},
        {"HYPERFARM_MAX_EPOCHS", "27"},
        {"HYPERFARM_BUDGET", "27"},
        {"HYPERFARM_DIST_MODE", "sync"},                /* the contract's wins over the agent's own */
        {"HYPERFARM_DIST_BACKEND", "tcp"},
        {"HYPERFARM_DIST_PS", NULL},                    /* not given: neither */
        {"HYPERFARM_DIST_STALENESS", "4"},              /* not given: the agent's own passes */
        {"HYPERFARM_CHECKPOINT_DIR", "/w/ck"},          /* the agent's: the agent's own cannot override */
        {"HYPERFARM_CONTROL_FILE", "/w/control.json"},
        {"CUDA_VISIBLE_DEVICES", "0,2"},
        {"PATH", "/opt/hf:/usr/bin"},                   /* the agent's directory first */
        {"HYPERFARM_HOSTFILE", NULL},                   /* only for an mpirun launcher */
    };
    char *base[] = {"PATH=/usr/bin", "FOO=base", "HYPERFARM_CHECKPOINT_DIR=/evil", "KEEP=1",
                    "CUDA_VISIBLE_DEVICES=9", "LANG=C.UTF-8", "NCCL_SOCKET_IFNAME=lo", "OMP_NUM_THREADS=2",
                    "HYPERFARM_AGENT_TOKEN_FILE=/etc/hf/token", "HYPERFARM_TOKEN=t0k", "NCCL_API_TOKEN=t1k",
                    "HOME=/root", "HYPERFARM_DIST_MODE=async", "HYPERFARM_DIST_STALENESS=4", NULL};
    agent_spec *sp = spec_from("{\"trial_id\": 5, \"attempt\": 3, \"experiment_id\": 7, \"rank\": 1,"
                               " \"world_size\": 2, \"local_rank\": 0, \"seed\": 11, \"budget\": 27,"
                               " \"master\": \"node-a:29500\","
                               " \"hparams\": \"{\\\"lr\\\": 0.1000000000000000055511151231257827}\","
                               " \"distributed\": {\"mode\": \"sync\", \"backend\": \"tcp\"},"
                               " \"argv\": [\"x\"], \"checkpoint_dir\": \"a/ck\","
                               " \"gpus\": [0, 2], \"env\": {\"FOO\": \"spec\"}}");
    char **strs = NULL;
    const char *path = NULL, *v = NULL;
    char **envp = agent_spawn_env(base, "/opt/hf", sp, "/w/ck", "/w/control.json", NULL, NULL, &strs, &path);
    assert_non_null(envp);
    for (size_t i = 0; i < sizeof with_self / sizeof with_self[0]; i++) {
        int n = env_count(envp, with_self[i].name, &v);
        if (!with_self[i].want) {
            assert_int_equal(n, 0);
            continue;
        }
        if (n != 1) fprintf(stderr, "%s: %d entries\n", with_self[i].name, n);
        assert_int_equal(n, 1);
        assert_string_equal(v, with_self[i].want);
    }
    assert_string_equal(path, "/opt/hf:/usr/bin");
    for (int i = 0; strs[i]; i++) free(strs[i]);
    free(strs);
    free(envp);

    /* no agent directory and no PATH of its own: the default PATH; a host file */
    char *bare[] = {"KEEP=1", NULL};
    envp = agent_spawn_env(bare, NULL, sp, "/w/ck", "/w/control.json", "/w/hostfile", NULL, &strs, &path);
    assert_non_null(envp);
    assert_int_equal(env_count(envp, "PATH", &v), 1);
    assert_string_equal(v, "/usr/local/bin:/usr/bin:/bin");
    assert_string_equal(path, v);
    assert_int_equal(env_count(envp, "HYPERFARM_HOSTFILE", &v), 1);
    assert_string_equal(v, "/w/hostfile");
    assert_int_equal(env_count(envp, "KEEP", NULL), 0);
    for (int i = 0; strs[i]; i++) free(strs[i]);
    free(strs);
    free(envp);
    agent_spec_free(sp);
}

/* In a sandbox: HOME is the trial's directory, USER the trial user, the
 * data cache the agent's; the experiment's env may still set HOME. */
static void test_env_sandbox(void **state)
{
    (void)state;
    char *base[] = {"PATH=/usr/bin", "HYPERFARM_CHECKPOINT_DIR=/evil", "LANG=C.UTF-8", "HOME=/root",
                    "HYPERFARM_AGENT_TOKEN_FILE=/etc/hf/token", "HYPERFARM_TOKEN=t0k",
                    "HYPERFARM_DATA_CACHE=/agent/cache", NULL};
    char **strs = NULL, **envp;
    const char *path = NULL, *v = NULL;
    agent_spec *sp;
    static const struct {
        const char *name, *want;
    } in_sandbox[] = {
        {"HOME", "/w"}, {"USER", "nobody"}, {"LOGNAME", "nobody"}, {"HYPERFARM_DATA_CACHE", "/var/cache/hf"},
        {"TMPDIR", "/tmp"}, {"LANG", "C.UTF-8"}, {"HYPERFARM_TOKEN", NULL}, {"HYPERFARM_AGENT_TOKEN_FILE", NULL},
        {"HYPERFARM_CHECKPOINT_DIR", "/w/ck"},
    };
    agent_spawn_sbenv sbe = {.home = "/w", .user = "nobody", .cache = "/var/cache/hf"};
    sp = spec_from("{\"trial_id\": 5, \"attempt\": 3, \"argv\": [\"x\"], \"checkpoint_dir\": \"a/ck\"}");
    envp = agent_spawn_env(base, NULL, sp, "/w/ck", "/w/control.json", NULL, &sbe, &strs, &path);
    assert_non_null(envp);
    for (size_t i = 0; i < sizeof in_sandbox / sizeof in_sandbox[0]; i++) {
        int n = env_count(envp, in_sandbox[i].name, &v);
        if (n != (in_sandbox[i].want ? 1 : 0)) fprintf(stderr, "%s: %d entries\n", in_sandbox[i].name, n);
        assert_int_equal(n, in_sandbox[i].want ? 1 : 0);
        if (in_sandbox[i].want) assert_string_equal(v, in_sandbox[i].want);
    }
    for (int i = 0; strs[i]; i++) free(strs[i]);
    free(strs);
    free(envp);
    agent_spec_free(sp);
    sp = spec_from("{\"trial_id\": 5, \"attempt\": 3, \"argv\": [\"x\"], \"checkpoint_dir\": \"a/ck\","
                   " \"env\": {\"HOME\": \"/w/home\"}}");
    sbe.cache = NULL;
    envp = agent_spawn_env(base, NULL, sp, "/w/ck", "/w/control.json", NULL, &sbe, &strs, &path);
    assert_non_null(envp);
    assert_int_equal(env_count(envp, "HOME", &v), 1);
    assert_string_equal(v, "/w/home");
    assert_int_equal(env_count(envp, "HYPERFARM_DATA_CACHE", &v), 1);
    assert_string_equal(v, "off");
    for (int i = 0; strs[i]; i++) free(strs[i]);
    free(strs);
    free(envp);
    agent_spec_free(sp);
}

/* Nothing is overridden silently: an assignment whose "env" names a
 * contract variable is refused (a start_failed naming the entry), and so
 * is a bad typed field. */
static void test_env_reserved_refused(void **state)
{
    (void)state;
    static const struct {
        const char *member, *field;
    } bad[] = {
        {"\"env\": {\"HYPERFARM_TRIAL_ID\": \"5\"}", "assign[0].env.HYPERFARM_TRIAL_ID"},
        {"\"env\": {\"HYPERFARM_ATTEMPT\": \"99\"}", "assign[0].env.HYPERFARM_ATTEMPT"},
        {"\"env\": {\"HYPERFARM_ANY\": \"1\"}", "assign[0].env.HYPERFARM_ANY"},
        {"\"env\": {\"CUDA_VISIBLE_DEVICES\": \"9\"}", "assign[0].env.CUDA_VISIBLE_DEVICES"},
        {"\"env\": {\"PATH\": \"/evil\"}", "assign[0].env.PATH"},
        {"\"hparams\": \"[1]\"", "assign[0].hparams"},
        {"\"hparams\": {\"lr\": 1}", "assign[0].hparams"},
        {"\"master\": \"no-port\"", "assign[0].master"},
        {"\"master\": \"a:1\\nB=2\"", "assign[0].master"},
        {"\"world_size\": 0", "assign[0].world_size"},
        {"\"seed\": -1", "assign[0].seed"},
        {"\"budget\": 0", "assign[0].budget"},
        {"\"distributed\": {\"mode\": \"a b\"}", "assign[0].distributed.mode"},
        {"\"distributed\": {\"ps\": \"2\"}", "assign[0].distributed.ps"},
        {"\"gpus\": [64]", "assign[0].gpus[0]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[512];
        hf_jerr e;
        snprintf(text, sizeof text, "{\"trial_id\": 5, \"attempt\": 1, \"argv\": [\"x\"], \"checkpoint_dir\": \"a/ck\", %s}",
                 bad[i].member);
        json_t *j = json_loads(text, 0, NULL);
        assert_non_null(j);
        agent_spec *s = agent_spec_parse(j, "assign[0]", &e);
        if (s || strcmp(e.field, bad[i].field)) fprintf(stderr, "case %zu: got '%s' (%s)\n", i, s ? "" : e.field, e.msg);
        assert_null(s);
        assert_string_equal(e.field, bad[i].field);
        json_decref(j);
    }
}

/* Read fd (non-blocking) until EOF or 10 s into buf. */
static void read_all(int fd, char *buf, size_t len)
{
    size_t n = 0;
    int64_t t0 = hf_mono_ms();
    while (n + 1 < len && hf_mono_ms() - t0 < 10000) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        poll(&pf, 1, 100);
        ssize_t r = read(fd, buf + n, len - 1 - n);
        if (r == 0) break;
        if (r > 0) n += (size_t)r;
        else if (errno != EAGAIN && errno != EINTR) break;
    }
    buf[n] = '\0';
}

/* The thread-pool defaults: cpus / slots (at least 1), only where the
 * agent's environment leaves the variable unset. */
static void test_default_threads(void **state)
{
    (void)state;
    unsetenv("OMP_NUM_THREADS");
    unsetenv("OPENBLAS_NUM_THREADS");
    assert_int_equal(agent_spawn_default_threads(16, 2), 0);
    assert_string_equal(getenv("OMP_NUM_THREADS"), "8");
    assert_string_equal(getenv("OPENBLAS_NUM_THREADS"), "8");
    unsetenv("OMP_NUM_THREADS");
    setenv("OPENBLAS_NUM_THREADS", "3", 1);                /* the operator's choice stands */
    assert_int_equal(agent_spawn_default_threads(2, 4), 0);
    assert_string_equal(getenv("OMP_NUM_THREADS"), "1");   /* more slots than CPUs: 1, never 0 */
    assert_string_equal(getenv("OPENBLAS_NUM_THREADS"), "3");
    unsetenv("OMP_NUM_THREADS");
    unsetenv("OPENBLAS_NUM_THREADS");
    assert_int_equal(agent_spawn_default_threads(7, 2), 0);
    assert_string_equal(getenv("OMP_NUM_THREADS"), "3");
    unsetenv("OMP_NUM_THREADS");
    unsetenv("OPENBLAS_NUM_THREADS");
}

static void test_child_init(void **state)
{
    (void)state;
    agent_child c;
    char err[512], out[4096], want[1024];
    int st;
    struct stat sb;
    /* field 5 of /proc/PID/stat is the process group; "cat" sees stdin */
    agent_spec *sp = spec_from("{\"trial_id\": 1, \"attempt\": 1, \"checkpoint_dir\": \"e/1/ck\", \"argv\": [\"sh\","
                               " \"-c\", \"cut -d' ' -f5 /proc/$$/stat; pwd; cat; echo \\\"$HYPERFARM_ATTEMPT\\\"\"]}");
    assert_int_equal(agent_spawn(workdir, NULL, NULL, sp, &c, err, sizeof err), 0);
    assert_true(c.pid > 0);
    read_all(c.fd[0], out, sizeof out);
    assert_int_equal(waitpid(c.pid, &st, 0), c.pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    snprintf(want, sizeof want, "%d\n%s/e/1\n1\n", (int)c.pid, workdir);   /* own group, cwd, empty stdin */
    assert_string_equal(out, want);
    snprintf(want, sizeof want, "%s/e/1", workdir);
    assert_string_equal(c.dir, want);
    json_t *ctl = json_load_file(c.control, 0, NULL);
    assert_non_null(ctl);
    assert_true(json_is_false(json_object_get(ctl, "should_stop")));
    json_decref(ctl);
    snprintf(want, sizeof want, "%s/e/1/ck", workdir);
    assert_int_equal(stat(want, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    assert_string_equal(c.hostfile, "");
    assert_int_equal(c.copy_rc, 0);
    close(c.fd[0]);
    close(c.fd[1]);
    agent_spec_free(sp);
}

static void test_exec_errors(void **state)
{
    (void)state;
    agent_child c;
    char err[512], text[1024];
    agent_spec *sp = spec_from("{\"trial_id\": 2, \"attempt\": 1, \"checkpoint_dir\": \"e/2/ck\","
                               " \"argv\": [\"hf-no-such-program\"]}");
    assert_int_equal(agent_spawn(workdir, NULL, NULL, sp, &c, err, sizeof err), HF_ECHILD);
    assert_non_null(strstr(err, "execvp hf-no-such-program: No such file"));
    assert_int_equal(c.pid, -1);
    assert_int_equal(c.fd[0], -1);
    agent_spec_free(sp);

    /* found (a name with a slash is used as is) but not executable: the
     * child's execve fails and its errno comes back over the pipe */
    char plain[512];
    snprintf(plain, sizeof plain, "%s/plain.txt", workdir);
    FILE *f = fopen(plain, "w");
    assert_non_null(f);
    fputs("not a program\n", f);
    fclose(f);
    snprintf(text, sizeof text, "{\"trial_id\": 3, \"attempt\": 1, \"checkpoint_dir\": \"e/3/ck\", \"argv\": [\"%s\"]}",
             plain);
    sp = spec_from(text);
    assert_int_equal(agent_spawn(workdir, NULL, NULL, sp, &c, err, sizeof err), HF_ECHILD);
    assert_non_null(strstr(err, "Permission denied"));
    assert_int_equal(c.pid, -1);
    agent_spec_free(sp);
}

static void test_holder(void **state)
{
    (void)state;
    agent_child c;
    char err[512];
    int st;
    agent_spec *sp = spec_from("{\"trial_id\": 4, \"attempt\": 1, \"rank\": 1, \"checkpoint_dir\": \"e/4/ck\","
                               " \"argv\": [\"hf-not-run-on-this-rank\"], \"launcher\": \"mpirun\", \"hold\": true}");
    assert_int_equal(agent_spawn(workdir, NULL, NULL, sp, &c, err, sizeof err), 0);
    assert_non_null(strstr(c.prog, "holding"));
    hf_sleep_ms(100);
    assert_int_equal(waitpid(c.pid, &st, WNOHANG), 0);   /* still holding */
    assert_int_equal(kill(-c.pid, SIGTERM), 0);          /* its own process group */
    assert_int_equal(waitpid(c.pid, &st, 0), c.pid);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM);
    close(c.fd[0]);
    close(c.fd[1]);
    agent_spec_free(sp);
}

/* ------------------------------------------------------------ sandbox */

/* Index of the first i >= from with v[i..i+n) == want[0..n), or -1. */
static int argv_find(char **v, int from, const char *const *want, int n)
{
    for (int i = from; v[i]; i++) {
        int j = 0;
        while (j < n && v[i + j] && !strcmp(v[i + j], want[j])) j++;
        if (j == n) return i;
    }
    return -1;
}
#define FIND(v, from, ...) argv_find(v, from, (const char *const[]){__VA_ARGS__}, \
                                     (int)(sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *)))

/* A sandbox described by hand (no file of it needs to exist). */
static void fake_sandbox(agent_sandbox *sb, int root)
{
    memset(sb, 0, sizeof *sb);
    strcpy(sb->bwrap, "/usr/bin/bwrap");
    strcpy(sb->helper, "/opt/hf/bin/hyperfarm-agent");
    strcpy(sb->self_dir, "/opt/hf/bin");
    strcpy(sb->workdir, "/srv/hf/work");
    strcpy(sb->hide[0], "/srv/hf/agent.token");
    strcpy(sb->hide[1], "/home/op/agent.conf");       /* under nothing bound: not mentioned */
    strcpy(sb->cache, "/var/cache/hf");
    sb->nbinds = 2;
    strcpy(sb->binds[0].path, "/data");
    sb->binds[0].ro = 1;
    strcpy(sb->binds[1].path, "/srv/hf");
    if (root) {
        sb->drop = 1;
        sb->uid = 65534;
        sb->gid = 65534;
        strcpy(sb->user, "nobody");
    } else sb->userns = 1;
}

static void test_sandbox_argv(void **state)
{
    (void)state;
    agent_sandbox sb;
    char *const targv[] = {"train", "--lr", "0.1", NULL};
    const char *dir = "/srv/hf/work/experiments/7/trials/5";
    fake_sandbox(&sb, 1);
    char **v = agent_sandbox_argv(&sb, dir, "/opt/hf/bin/train", targv);
    assert_non_null(v);
    assert_string_equal(v[0], "/usr/bin/bwrap");
    assert_true(FIND(v, 0, "--die-with-parent") > 0);
    assert_true(FIND(v, 0, "--unshare-pid") > 0);
    assert_int_equal(FIND(v, 0, "--unshare-net"), -1);       /* gangs need the host network */
    assert_int_equal(FIND(v, 0, "--unshare-user"), -1);      /* root: a trial user instead */
    assert_true(FIND(v, 0, "--cap-drop", "ALL") > 0);
    assert_true(FIND(v, 0, "--ro-bind", "/usr", "/usr") > 0);
    assert_true(FIND(v, 0, "--ro-bind", "/etc", "/etc") > 0);
    assert_true(FIND(v, 0, "--proc", "/proc") > 0);
    assert_true(FIND(v, 0, "--dev", "/dev") > 0);
    assert_true(FIND(v, 0, "--perms", "01777", "--tmpfs", "/tmp") > 0);
    assert_true(FIND(v, 0, "--perms", "01777", "--tmpfs", "/dev/shm") > 0);
    assert_true(FIND(v, 0, "--ro-bind", "/data", "/data") > 0);
    int srv = FIND(v, 0, "--bind", "/srv/hf", "/srv/hf");
    int mask = FIND(v, 0, "--tmpfs", "/srv/hf/work");           /* the work dir, inside a bind: hidden */
    int tok = FIND(v, 0, "--ro-bind", "/dev/null", "/srv/hf/agent.token");
    int own = FIND(v, 0, "--bind", dir, dir);
    int chd = FIND(v, 0, "--chdir", dir, "--");
    assert_true(srv > 0 && mask > srv && tok > mask && own > tok && chd > own);
    assert_true(FIND(v, 0, "--ro-bind", "/opt/hf/bin", "/opt/hf/bin") > mask);
    assert_true(FIND(v, 0, "--bind", "/var/cache/hf", "/var/cache/hf") > mask);
    assert_int_equal(FIND(v, 0, "/home/op/agent.conf"), -1);
    /* the parents of the trial's directory inside the tmpfs: crossable */
    assert_true(FIND(v, mask, "--perms", "0755", "--dir", "/srv/hf/work/experiments/7/trials") > mask);
    /* nothing else of the work directory is bound */
    for (int i = 0; v[i]; i++)
        if (!strcmp(v[i], "--bind") || !strcmp(v[i], "--ro-bind"))
            assert_false(!strncmp(v[i + 1], "/srv/hf/work/", 13) && strcmp(v[i + 1], dir));
    assert_true(FIND(v, chd, "--", "/opt/hf/bin/hyperfarm-agent", "--sandbox-exec", "65534", "65534",
                     "/opt/hf/bin/train", "train", "--lr", "0.1") > 0);
    int n = 0;
    while (v[n]) n++;
    assert_string_equal(v[n - 1], "0.1");
    agent_sandbox_argv_free(v);

    /* the options travel in a memfd: pid 1's command line names no path */
    char **full = agent_sandbox_argv(&sb, dir, "/opt/hf/bin/train", targv);
    int afd = -1;
    char **shortv = agent_sandbox_argv_fd(full, &afd);
    assert_non_null(shortv);
    assert_true(afd > 2);
    assert_true(fcntl(afd, F_GETFD) & FD_CLOEXEC);
    char fdnum[16];
    snprintf(fdnum, sizeof fdnum, "%d", afd);
    assert_int_equal(FIND(shortv, 0, "/usr/bin/bwrap", "--args", fdnum, "--", "/opt/hf/bin/hyperfarm-agent"), 0);
    for (int i = 0; shortv[i]; i++) assert_null(strstr(shortv[i], "/srv/hf"));
    char opts[16384];
    size_t on = 0, want = 0;
    ssize_t r;
    while ((r = read(afd, opts + on, sizeof opts - on)) > 0) on += (size_t)r;
    int dd = FIND(full, 0, "--");
    for (int i = 1; i < dd; i++) {
        assert_true(want + strlen(full[i]) < on);
        assert_string_equal(opts + want, full[i]);
        want += strlen(full[i]) + 1;
    }
    assert_int_equal(on, want);
    close(afd);
    agent_sandbox_argv_free(shortv);
    agent_sandbox_argv_free(full);

    /* where a program may be looked up: only what the sandbox shows */
    static const struct {
        const char *path;
        int visible;
    } where[] = {
        {"/usr/bin/python3", 1}, {"/bin/sh", 1}, {"/opt/hf/bin/train", 1}, {"/data/run.sh", 1},
        {"/srv/hf/work/experiments/7/trials/5/run.sh", 1}, {"./run.sh", 1},
        {"/root/.pyenv/shims/python3", 0}, {"/home/op/train.py", 0},
        {"/srv/hf/work/experiments/7/trials/6/run.sh", 0},   /* another trial's */
        {"/srv/hf/work/objects/ab", 0}, {"/srv/hf/other", 1},
    };
    for (size_t i = 0; i < sizeof where / sizeof where[0]; i++) {
        if (agent_sandbox_visible(&sb, where[i].path, dir) != where[i].visible) fprintf(stderr, "%s\n", where[i].path);
        assert_int_equal(agent_sandbox_visible(&sb, where[i].path, dir), where[i].visible);
    }

    /* not root: a user namespace, no capabilities to keep, no uid change */
    fake_sandbox(&sb, 0);
    sb.nbinds = 0;
    v = agent_sandbox_argv(&sb, dir, "/opt/hf/bin/train", targv);
    assert_non_null(v);
    assert_true(FIND(v, 0, "--unshare-user") > 0);
    assert_int_equal(FIND(v, 0, "--cap-add"), -1);
    assert_int_equal(FIND(v, 0, "--tmpfs", "/srv/hf/work"), -1);   /* under nothing bound: absent anyway */
    assert_int_equal(FIND(v, 0, "/srv/hf/agent.token"), -1);
    assert_true(FIND(v, 0, "--sandbox-exec", "-1", "-1", "/opt/hf/bin/train", "train") > 0);
    agent_sandbox_argv_free(v);
}

static const char *helper_path(char *buf, size_t len)
{
    const char *b = getenv("HF_BIN");
    char rel[600];
    snprintf(rel, sizeof rel, "%s/hyperfarm-agent", b && *b ? b : "bin");
    if (!realpath(rel, buf) || strlen(buf) >= len) return NULL;
    return buf;
}

static void test_sandbox_init_errors(void **state)
{
    (void)state;
    agent_sandbox sb;
    char err[1024], exe[4096], inside[600];
    if (!helper_path(exe, sizeof exe)) skip();
    snprintf(inside, sizeof inside, "%s/e", workdir);
    mkdir(inside, 0755);
    static const struct {
        const char *binds, *bwrap;
        int rc;
        const char *msg;
    } cases[] = {
        {"data", NULL, HF_EINVAL, "--sandbox-bind data: expected an absolute path"},
        {"/hf-no-such-dir:ro", NULL, HF_ENOTFOUND, "--sandbox-bind /hf-no-such-dir: No such file"},
        {"INSIDE", NULL, HF_EINVAL, "inside the agent's work directory"},
        {"/usr:ro,/tmp", "/hf/no/bwrap", HF_ENOTFOUND, "--sandbox on: /hf/no/bwrap: No such file or directory (install the "
                                                       "Debian package bubblewrap, or run trials without a sandbox: "
                                                       "--sandbox off)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        agent_sandbox_cfg cfg = {.workdir = workdir, .self_exe = exe, .bwrap = cases[i].bwrap, .cache = "",
                                 .binds = strcmp(cases[i].binds, "INSIDE") ? cases[i].binds : inside};
        assert_int_equal(agent_sandbox_init(&sb, &cfg, err, sizeof err), cases[i].rc);
        if (!strstr(err, cases[i].msg)) fprintf(stderr, "case %zu: %s\n", i, err);
        assert_non_null(strstr(err, cases[i].msg));
    }
    agent_sandbox_cfg ok = {.workdir = workdir, .self_exe = exe, .binds = "/usr:ro,,/tmp:rw", .cache = ""};
    if (agent_sandbox_init(&sb, &ok, err, sizeof err) == HF_ENOTFOUND) skip();   /* no bwrap here */
    assert_int_equal(sb.nbinds, 2);
    assert_true(sb.binds[0].ro && !sb.binds[1].ro);
    assert_string_equal(sb.cache, "");
    if (geteuid() != 0) return;
    assert_true(sb.drop && sb.uid != 0 && !strcmp(sb.user, "nobody"));
    ok.trial_user = "root";
    assert_int_equal(agent_sandbox_init(&sb, &ok, err, sizeof err), HF_EINVAL);
    assert_non_null(strstr(err, "--trial-user root: has uid or gid 0"));
    ok.trial_user = "hf-no-such-user";
    assert_int_equal(agent_sandbox_init(&sb, &ok, err, sizeof err), HF_ENOTFOUND);
    assert_non_null(strstr(err, "--trial-user hf-no-such-user: no such user"));
}

/* A real trial in a real sandbox (skipped where bwrap cannot run). */
static void test_sandbox_trial(void **state)
{
    (void)state;
    agent_sandbox sb;
    agent_child c;
    char err[1024], exe[4096], token[600], out[8192], text[4096];
    int st;
    if (!helper_path(exe, sizeof exe)) skip();
    snprintf(token, sizeof token, "%s/agent.token", workdir);
    FILE *f = fopen(token, "w");
    assert_non_null(f);
    fputs("agent-secret-unit\n", f);
    fclose(f);
    /* another trial's checkpoint on the same agent */
    snprintf(text, sizeof text, "%s/e/other/ck", workdir);
    assert_int_equal(agent_fs_mkdirs(text), 0);
    snprintf(text, sizeof text, "%s/e/other/ck/state", workdir);
    assert_int_equal(agent_fs_write_file(text, "victim", 6), 0);

    agent_sandbox_cfg cfg = {.workdir = workdir, .self_exe = exe, .token_file = token, .cache = ""};
    if (agent_sandbox_init(&sb, &cfg, err, sizeof err) || agent_sandbox_probe(&sb, err, sizeof err)) {
        fprintf(stderr, "skip: %s\n", err);
        skip();
    }
    snprintf(text, sizeof text,
             "{\"trial_id\": 9, \"attempt\": 1, \"checkpoint_dir\": \"e/9/ck\", \"argv\": [\"sh\", \"-c\","
             " \"id -u; cat %s 2>&1 | head -c 200; echo; ls %s 2>&1 | head -c 80; echo; ls /proc/self/fd | wc -l;"
             " echo x > $HYPERFARM_CHECKPOINT_DIR/ok && echo wrote; echo $$ $HOME;"
             " trap 'echo got TERM; sleep 0.3; echo bye; exit 3' TERM; echo ready; while :; do sleep 0.05; done\"]}",
             token, workdir);
    agent_spec *sp = spec_from(text);
    /* a restored checkpoint: a hard link to an object of the agent's cache */
    char obj[700], restored[700];
    struct stat so, sr;
    snprintf(obj, sizeof obj, "%s/cache-object", workdir);
    snprintf(restored, sizeof restored, "%s/e/9/ck/restored", workdir);
    assert_int_equal(agent_fs_write_file(obj, "object bytes", 12), 0);
    assert_int_equal(agent_fs_mkdirs(restored), 0);
    assert_int_equal(rmdir(restored), 0);
    assert_int_equal(link(obj, restored), 0);
    assert_int_equal(agent_spawn(workdir, NULL, &sb, sp, &c, err, sizeof err), 0);
    assert_true(c.sandboxed);
    /* the trial got a private copy: the cache's inode is not its to write */
    assert_int_equal(stat(obj, &so), 0);
    assert_int_equal(stat(restored, &sr), 0);
    assert_true(so.st_ino != sr.st_ino && so.st_nlink == 1 && sr.st_size == 12);
    assert_int_equal((int)so.st_uid, (int)geteuid());
    /* wait for "ready", then stop it as agent_sup does */
    size_t n = 0;
    int64_t t0 = hf_mono_ms();
    out[0] = '\0';
    while (!strstr(out, "ready") && hf_mono_ms() - t0 < 10000) {
        struct pollfd pf = {.fd = c.fd[0], .events = POLLIN};
        poll(&pf, 1, 100);
        ssize_t r = read(c.fd[0], out + n, sizeof out - 1 - n);
        if (r > 0) out[n += (size_t)r] = '\0';
    }
    assert_non_null(strstr(out, "ready"));
    assert_int_equal(kill(-c.pid, SIGTERM), 0);
    read_all(c.fd[0], out + n, sizeof out - n);
    assert_int_equal(waitpid(c.pid, &st, 0), c.pid);
    fprintf(stderr, "sandboxed trial said:\n%s", out);
    /* bwrap outlived the SIGTERM and reports the trial's own exit */
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 3);
    assert_non_null(strstr(out, "got TERM\nbye\n"));
    char uid[32];
    snprintf(uid, sizeof uid, "%d\n", geteuid() == 0 ? 65534 : (int)geteuid());
    assert_true(!strncmp(out, uid, strlen(uid)));                 /* nobody when root */
    assert_null(strstr(out, "agent-secret-unit"));                /* the token file is absent */
    assert_non_null(strstr(out, "No such file"));
    assert_null(strstr(out, "other"));                            /* the work dir shows only its own */
    assert_non_null(strstr(out, "\n4\n"));                        /* fds 0 1 2 + ls's own directory */
    assert_non_null(strstr(out, "wrote\n2 "));                    /* pid 2 of its own namespace */
    snprintf(text, sizeof text, "%s/e/9/ck/ok", workdir);
    struct stat stt;
    assert_int_equal(stat(text, &stt), 0);                        /* its checkpoint is on the host */
    close(c.fd[0]);
    close(c.fd[1]);
    agent_spec_free(sp);

    /* a program outside the sandbox: an error of the start naming the fix */
    sp = spec_from("{\"trial_id\": 10, \"attempt\": 1, \"checkpoint_dir\": \"e/10/ck\","
                   " \"argv\": [\"/hf-outside/train\"]}");
    assert_int_equal(agent_spawn(workdir, NULL, &sb, sp, &c, err, sizeof err), HF_ECHILD);
    assert_non_null(strstr(err, "execvp /hf-outside/train: outside the trial sandbox"));
    assert_int_equal(c.pid, -1);
    agent_spec_free(sp);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_env_contract),
    cmocka_unit_test(test_env_sandbox),
    cmocka_unit_test(test_env_reserved_refused),
    cmocka_unit_test(test_default_threads),
    cmocka_unit_test(test_child_init),
    cmocka_unit_test(test_exec_errors),
    cmocka_unit_test(test_holder),
    cmocka_unit_test(test_sandbox_argv),
    cmocka_unit_test(test_sandbox_init_errors),
    cmocka_unit_test(test_sandbox_trial),
};

int main(void) { return cmocka_run_group_tests(tests, group_setup, group_teardown); }
