/*
 * test_agent_spawn.c — one trial process, without the supervisor:
 * agent_spawn_env's environment contract (table-driven), and agent_spawn
 * starting real programs (/bin/sh is only a convenient trial here: the
 * agent itself never runs a shell) to check what spawn_child_init sets up
 * in the child: its own process group, the working directory, stdin from
 * /dev/null, the files prepared before the start; and that a missing or
 * non-executable program is an error of the spawn, not a trial that exits
 * 127. Needs /bin/sh and /proc.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "agent/agent_assign.h"
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
        {"KEEP", "1"},                                  /* the agent's own environment */
        {"FOO", "spec"},                                /* the scheduler's env wins over the agent's */
        {"HYPERFARM_TRIAL_ID", "5"},
        {"HYPERFARM_CHECKPOINT_DIR", "/w/ck"},          /* agent-owned: neither can override */
        {"HYPERFARM_CONTROL_FILE", "/w/control.json"},
        {"HYPERFARM_ATTEMPT", "3"},
        {"CUDA_VISIBLE_DEVICES", "0,2"},
        {"PATH", "/opt/hf:/usr/bin"},                   /* the agent's directory first */
        {"HYPERFARM_HOSTFILE", NULL},                   /* only for an mpirun launcher */
    };
    char *base[] = {"PATH=/usr/bin", "FOO=base", "HYPERFARM_CHECKPOINT_DIR=/evil", "KEEP=1",
                    "CUDA_VISIBLE_DEVICES=9", NULL};
    agent_spec *sp = spec_from("{\"trial_id\": 5, \"attempt\": 3, \"argv\": [\"x\"], \"checkpoint_dir\": \"a/ck\","
                               " \"gpus\": [0, 2], \"env\": {\"FOO\": \"spec\", \"HYPERFARM_TRIAL_ID\": \"5\","
                               " \"PATH\": \"/evil\", \"HYPERFARM_ATTEMPT\": \"99\", \"HYPERFARM_HOSTFILE\": \"/x\"}}");
    char **strs = NULL;
    const char *path = NULL, *v = NULL;
    char **envp = agent_spawn_env(base, "/opt/hf", sp, "/w/ck", "/w/control.json", NULL, &strs, &path);
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
    envp = agent_spawn_env(bare, NULL, sp, "/w/ck", "/w/control.json", "/w/hostfile", &strs, &path);
    assert_non_null(envp);
    assert_int_equal(env_count(envp, "PATH", &v), 1);
    assert_string_equal(v, "/usr/local/bin:/usr/bin:/bin");
    assert_string_equal(path, v);
    assert_int_equal(env_count(envp, "HYPERFARM_HOSTFILE", &v), 1);
    assert_string_equal(v, "/w/hostfile");
    for (int i = 0; strs[i]; i++) free(strs[i]);
    free(strs);
    free(envp);
    agent_spec_free(sp);
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
    assert_int_equal(agent_spawn(workdir, NULL, sp, &c, err, sizeof err), 0);
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
    assert_int_equal(agent_spawn(workdir, NULL, sp, &c, err, sizeof err), HF_ECHILD);
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
    assert_int_equal(agent_spawn(workdir, NULL, sp, &c, err, sizeof err), HF_ECHILD);
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
    assert_int_equal(agent_spawn(workdir, NULL, sp, &c, err, sizeof err), 0);
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

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_env_contract),
    cmocka_unit_test(test_default_threads),
    cmocka_unit_test(test_child_init),
    cmocka_unit_test(test_exec_errors),
    cmocka_unit_test(test_holder),
};

int main(void) { return cmocka_run_group_tests(tests, group_setup, group_teardown); }
