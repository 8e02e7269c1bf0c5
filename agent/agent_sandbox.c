/*
 * agent_sandbox.c — the trial sandbox: bwrap's argv, the start-up probe,
 * the trial directory's owner, and the --sandbox-exec helper (see
 * agent_sandbox.h and docs/agent.md "Sandbox").
 *
 * Why bwrap rather than clone flags of our own: it is the Debian-packaged,
 * audited tool for exactly this (mount, pid and user namespaces, a fresh
 * /proc and /dev, binds in order), and it needs no privilege where
 * unprivileged user namespaces are allowed. What it lacks — forwarding a
 * SIGTERM to the trial — the helper covers (agent_sandbox.h).
 *
 * The mounts, in this order (a later one covers an earlier one):
 *   /usr, /etc, /opt, /sys/{devices,bus,class} read-only; /bin, /lib... as on the host (merged
 *   /usr: symbolic links); a new /proc; a minimal /dev with /dev/shm and
 *   every /dev/nvidia*; an empty /tmp; the operator's --sandbox-bind paths;
 *   an empty tmpfs over the work directory; the agent's program directory
 *   (read-only) and the data cache; /dev/null over the token file and the
 *   config file; last, the trial's own directory, writable.
 */
#include "agent_sandbox.h"
#include "hf_err.h"
#include "hf_log.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Is p the path root or inside it? Both absolute and resolved. */
static int path_under(const char *p, const char *root)
{
    size_t n = strlen(root);
    if (!root[0]) return 0;
    if (n == 1 && root[0] == '/') return 1;
    return strncmp(p, root, n) == 0 && (p[n] == '\0' || p[n] == '/');
}

/* realpath of path into out (AGENT_PATH_MAX). RET 0 or errno. */
static int resolve(const char *path, char *out)
{
    char tmp[PATH_MAX];
    if (!realpath(path, tmp)) return errno;
    if (strlen(tmp) >= AGENT_PATH_MAX) return ENAMETOOLONG;
    strcpy(out, tmp);
    return 0;
}

/* Parse "PATH[:ro|:rw],..." into sb->binds. */
static int parse_binds(agent_sandbox *sb, const char *list, char *err, size_t errlen)
{
    const char *p = list;
    while (p && *p) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char item[AGENT_PATH_MAX];
        int ro = 0;
        if (len == 0) { p = e ? e + 1 : p + len; continue; }
        if (len >= sizeof item) {
            snprintf(err, errlen, "--sandbox-bind: path too long: %.60s...", p);
            return HF_EINVAL;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        if (len > 3 && !strcmp(item + len - 3, ":ro")) { ro = 1; item[len - 3] = '\0'; }
        else if (len > 3 && !strcmp(item + len - 3, ":rw")) item[len - 3] = '\0';
        if (item[0] != '/') {
            snprintf(err, errlen, "--sandbox-bind %s: expected an absolute path, optionally with :ro or :rw", item);
            return HF_EINVAL;
        }
        if (sb->nbinds >= AGENT_SANDBOX_MAX_BINDS) {
            snprintf(err, errlen, "--sandbox-bind: more than %d paths", AGENT_SANDBOX_MAX_BINDS);
            return HF_EINVAL;
        }
        agent_sandbox_bind *b = &sb->binds[sb->nbinds];
        int rc = resolve(item, b->path);
        if (rc) {
            snprintf(err, errlen, "--sandbox-bind %s: %s", item, strerror(rc));
            return HF_ENOTFOUND;
        }
        if (path_under(b->path, sb->workdir)) {
            snprintf(err, errlen, "--sandbox-bind %s: inside the agent's work directory %s (trials must not see it)",
                     item, sb->workdir);
            return HF_EINVAL;
        }
        b->ro = ro;
        sb->nbinds++;
        p = e ? e + 1 : p + len;
    }
    return HF_OK;
}

/* Find bwrap: cfg's name, else "bwrap" on PATH, else /usr/bin/bwrap. */
static int find_bwrap(const char *name, char *out)
{
    if (name && strchr(name, '/')) return access(name, X_OK) ? errno : resolve(name, out);
    const char *path = getenv("PATH");
    const char *prog = name && *name ? name : "bwrap";
    for (const char *p = path ? path : ""; p && *p;) {
        const char *e = strchr(p, ':');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char cand[AGENT_PATH_MAX];
        if (len && snprintf(cand, sizeof cand, "%.*s/%s", (int)len, p, prog) < (int)sizeof cand &&
            access(cand, X_OK) == 0 && cand[0] == '/')
            return resolve(cand, out);
        p = e ? e + 1 : NULL;
    }
    if (access("/usr/bin/bwrap", X_OK) == 0) return resolve("/usr/bin/bwrap", out);
    return ENOENT;
}

/* The data cache the trainer would use (trainer/data.h, tr_data_cache_dir):
 * $HYPERFARM_DATA_CACHE ("" or "off": none), $XDG_CACHE_HOME/hyperfarm/data,
 * $HOME/.cache/hyperfarm/data. RET 0 with out set, or -1 (none). */
static int default_cache(char *out, size_t outlen)
{
    const char *v = getenv("HYPERFARM_DATA_CACHE");
    int n;
    if (v) {
        if (!v[0] || !strcmp(v, "off")) return -1;
        n = snprintf(out, outlen, "%s", v);
    } else if ((v = getenv("XDG_CACHE_HOME")) && v[0] == '/') n = snprintf(out, outlen, "%s/hyperfarm/data", v);
    else if ((v = getenv("HOME")) && v[0] == '/') n = snprintf(out, outlen, "%s/.cache/hyperfarm/data", v);
    else return -1;
    return n > 0 && (size_t)n < outlen && out[0] == '/' ? 0 : -1;
}

int agent_sandbox_init(agent_sandbox *sb, const agent_sandbox_cfg *cfg, char *err, size_t errlen)
{
    int rc;
    memset(sb, 0, sizeof *sb);
    err[0] = '\0';
    if (!cfg->workdir || cfg->workdir[0] != '/' || strlen(cfg->workdir) >= AGENT_PATH_MAX || !cfg->self_exe ||
        cfg->self_exe[0] != '/' || strlen(cfg->self_exe) >= AGENT_PATH_MAX) {
        snprintf(err, errlen, "sandbox: the work directory and the agent binary must be absolute paths");
        return HF_EINVAL;
    }
    strcpy(sb->workdir, cfg->workdir);
    strcpy(sb->helper, cfg->self_exe);
    strcpy(sb->self_dir, cfg->self_exe);
    *strrchr(sb->self_dir, '/') = '\0';
    if (!sb->self_dir[0]) strcpy(sb->self_dir, "/");
    if (path_under(sb->workdir, sb->self_dir)) {
        snprintf(err, errlen, "sandbox: the work directory %s is inside the agent's program directory %s, which "
                 "trials see: choose another --workdir", sb->workdir, sb->self_dir);
        return HF_EINVAL;
    }
    const char *hide[2] = {cfg->token_file, cfg->config};
    for (int i = 0; i < 2; i++)
        if (hide[i] && hide[i][0] && resolve(hide[i], sb->hide[i])) sb->hide[i][0] = '\0';
    if ((rc = parse_binds(sb, cfg->binds, err, errlen))) return rc;
    if ((rc = find_bwrap(cfg->bwrap, sb->bwrap))) {
        snprintf(err, errlen, "--sandbox on: %s: %s (install the Debian package bubblewrap, or run trials "
                 "without a sandbox: --sandbox off)", cfg->bwrap && *cfg->bwrap ? cfg->bwrap : "bwrap", strerror(rc));
        return HF_ENOTFOUND;
    }
    if (geteuid() == 0) {
        const char *u = cfg->trial_user && *cfg->trial_user ? cfg->trial_user : "nobody";
        struct passwd *pw = getpwnam(u);
        if (!pw) {
            snprintf(err, errlen, "--trial-user %s: no such user", u);
            return HF_ENOTFOUND;
        }
        if (pw->pw_uid == 0 || pw->pw_gid == 0) {
            snprintf(err, errlen, "--trial-user %s: has uid or gid 0; trials must run as an unprivileged user", u);
            return HF_EINVAL;
        }
        sb->drop = 1;
        sb->uid = pw->pw_uid;
        sb->gid = pw->pw_gid;
        snprintf(sb->user, sizeof sb->user, "%s", pw->pw_name);
    } else sb->userns = 1;

    char cache[AGENT_PATH_MAX];
    int have = cfg->cache ? (cfg->cache[0] ? snprintf(cache, sizeof cache, "%s", cfg->cache) < (int)sizeof cache : 0)
                          : default_cache(cache, sizeof cache) == 0;
    if (have && cache[0] == '/' && agent_fs_mkdirs(cache) == 0 && resolve(cache, sb->cache) == 0) {
        if (path_under(sb->workdir, sb->cache)) {
            snprintf(err, errlen, "sandbox: the work directory %s is inside the data cache %s, which trials see",
                     sb->workdir, sb->cache);
            return HF_EINVAL;
        }
        if (sb->drop && chown(sb->cache, sb->uid, sb->gid)) {
            hf_warn("sandbox: chown %s to %s: %s; the trials' data cache stays read-only", sb->cache, sb->user,
                    strerror(errno));
        }
    } else sb->cache[0] = '\0';
    return HF_OK;
}

/* ------------------------------------------------------------- argv */

typedef struct vec {
    char  **v;
    size_t  n, cap;
    int     oom;
} vec;

static void vadd(vec *a, const char *s)
{
    if (a->oom) return;
    if (a->n + 2 > a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        char **v = realloc(a->v, cap * sizeof *v);
        if (!v) { a->oom = 1; return; }
        a->v = v;
        a->cap = cap;
    }
    if (!(a->v[a->n] = strdup(s))) { a->oom = 1; return; }
    a->v[++a->n] = NULL;
}

static void vadd3(vec *a, const char *x, const char *y, const char *z)
{
    vadd(a, x);
    vadd(a, y);
    if (z) vadd(a, z);
}

/* Is p under a path the sandbox binds from the host? */
static int bound(const agent_sandbox *sb, const char *p)
{
    static const char *const sys[] = {"/usr", "/etc", "/opt", "/sys", NULL};
    for (int i = 0; sys[i]; i++)
        if (path_under(p, sys[i])) return 1;
    for (int i = 0; i < sb->nbinds; i++)
        if (path_under(p, sb->binds[i].path)) return 1;
    return path_under(p, sb->self_dir) || path_under(p, sb->cache);
}

/* The directories above a mount point that bwrap would create itself
 * (mode 0700, which a trial user could not cross), made 0755 first.
 * Those inside a tree already mounted are left alone. */
static void vparents(vec *a, const char *path)
{
    static const char *const mounted[] = {"/usr", "/etc", "/opt", "/sys", "/proc", "/dev", NULL};
    char p[AGENT_PATH_MAX];
    snprintf(p, sizeof p, "%s", path);
    for (char *q = strchr(p + 1, '/'); q; q = strchr(q + 1, '/')) {
        *q = '\0';
        int skip = !strcmp(p, "/tmp");
        for (int i = 0; mounted[i] && !skip; i++) skip = path_under(p, mounted[i]);
        if (!skip) {
            vadd3(a, "--perms", "0755", NULL);
            vadd3(a, "--dir", p, NULL);
        }
        *q = '/';
    }
}

char **agent_sandbox_argv(const agent_sandbox *sb, const char *dir, const char *prog, char *const *argv)
{
    static const char *const top[] = {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", NULL};
    vec a = {0};
    char num[2][24];
    struct stat st;

    vadd(&a, sb->bwrap);
    vadd(&a, "--die-with-parent");
    vadd(&a, "--unshare-pid");
    if (sb->userns) vadd(&a, "--unshare-user");
    else {
        /* bwrap run by root keeps every capability unless told: keep only
         * what the helper needs to become the trial user (setuid to a
         * non-zero uid then clears them all). */
        vadd3(&a, "--cap-drop", "ALL", NULL);
        vadd3(&a, "--cap-add", "CAP_SETUID", NULL);
        vadd3(&a, "--cap-add", "CAP_SETGID", NULL);
    }
    vadd3(&a, "--ro-bind", "/usr", "/usr");
    for (int i = 0; top[i]; i++) {
        char link[AGENT_PATH_MAX];
        if (lstat(top[i], &st)) continue;
        if (S_ISLNK(st.st_mode)) {
            ssize_t n = readlink(top[i], link, sizeof link - 1);
            if (n <= 0) continue;
            link[n] = '\0';
            vadd3(&a, "--symlink", link, top[i]);
        } else if (S_ISDIR(st.st_mode)) vadd3(&a, "--ro-bind", top[i], top[i]);
    }
    vadd3(&a, "--ro-bind", "/etc", "/etc");
    vadd3(&a, "--ro-bind-try", "/opt", "/opt");
    /* /sys for NCCL's and hwloc's topology (PCI devices, CPUs, network
     * and InfiniBand classes), not its cgroup and kernel mounts: binding
     * all of /sys (13 submounts here) doubled bwrap's start-up time. */
    vadd3(&a, "--ro-bind-try", "/sys/devices", "/sys/devices");
    vadd3(&a, "--ro-bind-try", "/sys/bus", "/sys/bus");
    vadd3(&a, "--ro-bind-try", "/sys/class", "/sys/class");
    vadd3(&a, "--proc", "/proc", NULL);
    vadd3(&a, "--dev", "/dev", NULL);
    vadd3(&a, "--perms", "01777", NULL);
    vadd3(&a, "--tmpfs", "/dev/shm", NULL);
    glob_t g;
    if (glob("/dev/nvidia*", 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++) vadd3(&a, "--dev-bind", g.gl_pathv[i], g.gl_pathv[i]);
        globfree(&g);
    }
    vadd3(&a, "--perms", "01777", NULL);
    vadd3(&a, "--tmpfs", "/tmp", NULL);
    for (int i = 0; i < sb->nbinds; i++) {
        vparents(&a, sb->binds[i].path);
        vadd3(&a, sb->binds[i].ro ? "--ro-bind" : "--bind", sb->binds[i].path, sb->binds[i].path);
    }
    if (bound(sb, sb->workdir)) {
        vparents(&a, sb->workdir);
        vadd3(&a, "--perms", "0755", NULL);
        vadd3(&a, "--tmpfs", sb->workdir, NULL);
    }
    if (sb->self_dir[0]) {
        vparents(&a, sb->self_dir);
        vadd3(&a, "--ro-bind", sb->self_dir, sb->self_dir);
    }
    if (sb->cache[0]) {
        vparents(&a, sb->cache);
        vadd3(&a, "--bind", sb->cache, sb->cache);
    }
    for (int i = 0; i < 2; i++)
        if (sb->hide[i][0] && bound(sb, sb->hide[i]) && !path_under(sb->hide[i], dir))
            vadd3(&a, "--ro-bind", "/dev/null", sb->hide[i]);
    vparents(&a, dir);
    vadd3(&a, "--bind", dir, dir);
    vadd3(&a, "--chdir", dir, NULL);
    vadd(&a, "--");
    snprintf(num[0], sizeof num[0], "%ld", sb->drop ? (long)sb->uid : -1L);
    snprintf(num[1], sizeof num[1], "%ld", sb->drop ? (long)sb->gid : -1L);
    vadd(&a, sb->helper);
    vadd(&a, "--sandbox-exec");
    vadd3(&a, num[0], num[1], prog);
    for (size_t i = 0; argv[i]; i++) vadd(&a, argv[i]);
    if (a.oom) {
        agent_sandbox_argv_free(a.v);
        return NULL;
    }
    return a.v;
}

char **agent_sandbox_argv_fd(char **full, int *fd)
{
    size_t n = 0, dd = 0;
    *fd = -1;
    while (full[n]) n++;
    while (dd < n && strcmp(full[dd], "--")) dd++;
    if (dd == n) return NULL;
    int m = memfd_create("hyperfarm-bwrap-args", MFD_CLOEXEC);
    if (m < 0) return NULL;
    for (size_t i = 1; i < dd; i++) {
        size_t len = strlen(full[i]) + 1;          /* each with its NUL */
        for (size_t off = 0; off < len;) {
            ssize_t w = write(m, full[i] + off, len - off);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) { close(m); return NULL; }
            off += (size_t)w;
        }
    }
    char num[16];
    snprintf(num, sizeof num, "%d", m);
    vec a = {0};
    vadd(&a, full[0]);
    vadd3(&a, "--args", num, NULL);
    for (size_t i = dd; i < n; i++) vadd(&a, full[i]);
    if (a.oom || lseek(m, 0, SEEK_SET) != 0) {
        agent_sandbox_argv_free(a.v);
        close(m);
        return NULL;
    }
    *fd = m;
    return a.v;
}

void agent_sandbox_argv_free(char **v)
{
    for (char **p = v; p && *p; p++) free(*p);
    free(v);
}

int agent_sandbox_visible(const agent_sandbox *sb, const char *path, const char *dir)
{
    static const char *const top[] = {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", NULL};
    if (path[0] != '/' || path_under(path, dir)) return 1;
    for (int i = 0; top[i]; i++)
        if (path_under(path, top[i])) return 1;
    if (path_under(path, sb->workdir)) return 0;
    return bound(sb, path);
}

/* ------------------------------------------------------------- owner */

static const agent_sandbox *own_sb;
static int own_err;

/* Replace the hard-linked regular file p by a private copy (same mode):
 * a restored checkpoint shares its inode with the agent's object cache,
 * which a trial must not be able to write into. RET 0 or errno. */
static int unshare_file(const char *p, const struct stat *st)
{
    char tmp[PATH_MAX + 16], buf[65536];
    int in = -1, out = -1, rc = 0;
    ssize_t r;
    if (snprintf(tmp, sizeof tmp, "%s.hf-own", p) >= (int)sizeof tmp) return ENAMETOOLONG;
    if ((in = open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0) return errno;
    if ((out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, st->st_mode & 07777)) < 0) {
        rc = errno;
        close(in);
        return rc;
    }
    while ((r = read(in, buf, sizeof buf)) > 0 || (r < 0 && errno == EINTR))
        for (ssize_t off = 0; r > 0 && off < r && !rc;) {
            ssize_t w = write(out, buf + off, (size_t)(r - off));
            if (w < 0 && errno != EINTR) rc = errno;
            else if (w > 0) off += w;
        }
    if (r < 0 && !rc) rc = errno;
    if (close(out) && !rc) rc = errno;
    close(in);
    if (!rc && rename(tmp, p)) rc = errno;
    if (rc) unlink(tmp);
    return rc;
}

static int own_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)flag; (void)ftw;
    int rc = 0;
    if (S_ISREG(st->st_mode) && st->st_nlink > 1) rc = unshare_file(p, st);
    if (!rc && own_sb->drop && lchown(p, own_sb->uid, own_sb->gid)) rc = errno;
    if (rc && !own_err) own_err = rc;
    return 0;
}

int agent_sandbox_own(const agent_sandbox *sb, const char *dir, char *err, size_t errlen)
{
    if (!sb) return HF_OK;
    /* only the main thread starts trials (agent.h), so the statics are safe */
    own_sb = sb;
    own_err = 0;
    if (nftw(dir, own_one, 16, FTW_PHYS | FTW_MOUNT) || own_err) {
        snprintf(err, errlen, "giving %s to the trial%s%s: %s", dir, sb->drop ? " user " : "", sb->user,
                 strerror(own_err ? own_err : errno));
        return HF_EIO;
    }
    return HF_OK;
}

/* ------------------------------------------------------------- probe */

int agent_sandbox_probe(const agent_sandbox *sb, char *err, size_t errlen)
{
    char *const targv[] = {"true", NULL};
    char prog[] = "/bin/true";
    char dir[AGENT_PATH_MAX + 32], out[1024] = "";
    int pfd[2], st = 0, rc = HF_OK;
    char **argv = NULL;

    if (snprintf(dir, sizeof dir, "%s/sandbox-probe", sb->workdir) >= (int)sizeof dir || agent_fs_mkdirs(dir) ||
        agent_sandbox_own(sb, dir, err, errlen)) {
        if (!err[0]) snprintf(err, errlen, "sandbox: cannot create %s", dir);
        return HF_EIO;
    }
    if (!(argv = agent_sandbox_argv(sb, dir, prog, targv)) || pipe2(pfd, O_CLOEXEC)) {
        agent_sandbox_argv_free(argv);
        snprintf(err, errlen, "sandbox: out of memory or descriptors");
        return HF_ENOMEM;
    }
    pid_t pid = fork();
    if (pid == 0) {
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0) dup2(nul, 0);
        dup2(pfd[1], 1);
        dup2(pfd[1], 2);
        execve(argv[0], argv, environ);
        _exit(127);
    }
    close(pfd[1]);
    size_t n = 0;
    ssize_t r;
    while (pid > 0 && n < sizeof out - 1 && ((r = read(pfd[0], out + n, sizeof out - 1 - n)) > 0 ||
                                             (r < 0 && errno == EINTR)))
        if (r > 0) n += (size_t)r;
    out[n] = '\0';
    close(pfd[0]);
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        out[strcspn(out, "\n")] = '\0';
        snprintf(err, errlen, "--sandbox on: %s cannot start a trial sandbox here (%s%s); check that %s "
                 "(or run trials without a sandbox: --sandbox off)", sb->bwrap,
                 out[0] ? out : "no message", pid < 0 ? ", fork failed" : "",
                 sb->userns ? "unprivileged user namespaces are allowed (sysctl kernel.unprivileged_userns_clone, "
                              "user.max_user_namespaces) or bwrap is setuid"
                            : "the agent may create mount and pid namespaces");
        rc = HF_ECHILD;
    }
    rmdir(dir);
    agent_sandbox_argv_free(argv);
    return rc;
}

/* ------------------------------------------------------------- helper */

int agent_sandbox_exec_main(int argc, char **argv)
{
    sigset_t none;
    struct sigaction dfl;
    if (argc < 6 || strcmp(argv[1], "--sandbox-exec") != 0) {
        fprintf(stderr, "hyperfarm-agent --sandbox-exec UID GID PROG ARGV0 [ARGS...]: internal use by the agent\n");
        return 127;
    }
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < 65; sig++) sigaction(sig, &dfl, NULL);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    long uid = strtol(argv[2], NULL, 10), gid = strtol(argv[3], NULL, 10);
    if (uid >= 0 && gid >= 0) {
        if (setgroups(0, NULL) || setgid((gid_t)gid) || setuid((uid_t)uid)) {
            fprintf(stderr, "hyperfarm-agent: sandbox: cannot become uid %ld gid %ld: %s\n", uid, gid,
                    strerror(errno));
            return 127;
        }
        if (getuid() != (uid_t)uid || geteuid() != (uid_t)uid || setuid(0) == 0) {
            fprintf(stderr, "hyperfarm-agent: sandbox: still privileged after setuid(%ld)\n", uid);
            return 127;
        }
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) {
        fprintf(stderr, "hyperfarm-agent: sandbox: no_new_privs: %s\n", strerror(errno));
        return 127;
    }
#ifdef SYS_close_range
    if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
#endif
        for (int fd = 3; fd < 65536; fd++) close(fd);
    execve(argv[4], argv + 5, environ);
    fprintf(stderr, "hyperfarm-agent: cannot run %s in the trial sandbox: %s\n", argv[4], strerror(errno));
    return 127;
}
