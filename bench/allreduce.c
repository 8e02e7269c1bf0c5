/*
 * bench/allreduce.c — allreduce bandwidth of our tcp ring beside Open MPI's
 * MPI_Allreduce over its TCP transport and Gloo through PyTorch, in one run.
 *
 *   bin/bench/allreduce [--np 2,4] [--sizes 4K,...,256M] [--impl tcp,mpi,gloo]
 *                       [--min-bytes N] [--min-iters N]
 *
 * For every rank count and size each implementation runs warm-up
 * iterations, then enough timed iterations to move about --min-bytes
 * (default 1 GiB, at least --min-iters), starting after a barrier; the time
 * is the slowest rank's. Printed per line, nccl-tests convention:
 * algbw = size / time, busbw = algbw * 2(p-1)/p (the bytes each link
 * carries in a ring). Then a correctness check: every rank fills the
 * buffer with small integers, allreduces once, and compares every element
 * with the exact sum. Ratios of busbw close each (p, size) group.
 *
 * tcp ranks are forked here; mpi ranks are this same program in --worker
 * mode under mpirun (--mca btl tcp,self, loopback only, so Open MPI cannot
 * use shared memory); gloo ranks are bench/allreduce_gloo.py under Debian's
 * python3-torch. A missing peer is reported and skipped, never faked.
 */
#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"
#include "trainer/coll.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>


#define MAX_SIZES 32
#define MAX_NP    8

typedef struct bench_cfg {
    size_t sizes[MAX_SIZES];
    int    nsizes;
    int    nps[MAX_NP];
    int    nnp;
    int    want_tcp, want_mpi, want_gloo;
    double min_bytes;
    int    min_iters;
    int    rounds;        /* repetitions, interleaved; best time kept */
    char   self[PATH_MAX];
} bench_cfg;

typedef struct result {
    int    have;
    double secs;      /* per allreduce */
    int    ok;
} result;

static int parse_size(const char *s, size_t *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || v <= 0) return HF_EINVAL;
    switch (*end) {
    case 'k': case 'K': v *= 1024; end++; break;
    case 'm': case 'M': v *= 1024 * 1024; end++; break;
    case 'g': case 'G': v *= 1024.0 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'B') end++;
    if (*end == 'B') end++;
    if (*end) return HF_EINVAL;
    *out = ((size_t)v + 3) & ~(size_t)3;
    return 0;
}

static int parse_sizes(const char *s, bench_cfg *b)
{
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s", s);
    b->nsizes = 0;
    for (char *save = NULL, *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (b->nsizes == MAX_SIZES || parse_size(t, &b->sizes[b->nsizes])) return HF_EINVAL;
        b->nsizes++;
    }
    return b->nsizes ? 0 : HF_EINVAL;
}

static void fmt_size(size_t b, char *out, size_t len)
{
    if (b >= (1u << 20) && b % (1u << 20) == 0) snprintf(out, len, "%zuMiB", b >> 20);
    else if (b >= 1024 && b % 1024 == 0) snprintf(out, len, "%zuKiB", b >> 10);
    else snprintf(out, len, "%zuB", b);
}

static int iters_for(const bench_cfg *b, size_t bytes)
{
    double it = b->min_bytes / (double)bytes;
    if (it < b->min_iters) it = b->min_iters;
    if (it > 2000) it = 2000;
    return (int)it;
}

/* One rank's work for every size: returns per-size seconds (slowest rank)
 * and the check in secs[] / ok[] on rank 0. */
static int rank_run(tr_coll *c, const bench_cfg *b, double *secs, int *ok)
{
    int r = tr_coll_rank(c), p = tr_coll_world(c), rc = 0;
    for (int k = 0; k < b->nsizes; k++) {
        size_t n = b->sizes[k] / 4;
        float *buf = malloc(n * 4);
        if (!buf) return HF_ENOMEM;
        for (size_t i = 0; i < n; i++) buf[i] = 0.001f * (float)(i % 1000);
        int iters = iters_for(b, b->sizes[k]);
        for (int w = 0; w < 2 && !rc; w++) rc = tr_coll_allreduce(c, buf, n, TR_COLL_SUM);
        if (!rc) rc = tr_coll_barrier(c);
        double t0 = hf_mono_s();
        for (int it = 0; it < iters && !rc; it++) rc = tr_coll_allreduce(c, buf, n, TR_COLL_SUM);
        float dt = (float)((hf_mono_s() - t0) / iters);
        /* slowest rank's time: allgather the elapsed times */
        float all[MAX_NP * 8];
        if (!rc) rc = tr_coll_allgather(c, &dt, all, sizeof dt);
        float worst = dt;
        for (int q = 0; !rc && q < p; q++) if (all[q] > worst) worst = all[q];
        /* correctness: integers, exact in any order */
        for (size_t i = 0; i < n; i++) buf[i] = (float)((i + (size_t)r * 3) % 17);
        if (!rc) rc = tr_coll_allreduce(c, buf, n, TR_COLL_SUM);
        int good = 1;
        for (size_t i = 0; !rc && i < n; i++) {
            float want = 0;
            for (int q = 0; q < p; q++) want += (float)((i + (size_t)q * 3) % 17);
            if (buf[i] != want) { good = 0; break; }
        }
        float g = (float)good;
        if (!rc) rc = tr_coll_allreduce(c, &g, 1, TR_COLL_SUM);
        free(buf);
        if (rc) {
            fprintf(stderr, "rank %d: %s\n", r, tr_coll_errmsg(c));
            return rc;
        }
        secs[k] = worst;
        ok[k] = g == (float)p;
    }
    return 0;
}

/* ---- tcp: fork p ranks ----------------------------------------------------- */

static int run_tcp(const bench_cfg *b, int p, result *res)
{
    int fds[2];
    if (pipe(fds)) return HF_EIO;
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) || listen(lfd, 64) ||
        getsockname(lfd, (struct sockaddr *)&a, &al)) {
        close(fds[0]); close(fds[1]);
        return HF_EIO;
    }
    char master[64];
    snprintf(master, sizeof master, "127.0.0.1:%d", ntohs(a.sin_port));
    pid_t pids[MAX_NP * 8];
    for (int r = 0; r < p; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            close(fds[0]);
            tr_coll_config cfg;
            tr_coll_config_init(&cfg);
            cfg.rank = r;
            cfg.world = p;
            cfg.master = master;
            cfg.master_fd = r == 0 ? lfd : -1;
            cfg.timeout_ms = 60000;
            tr_coll *c;
            char err[320];
            if (tr_coll_open(&cfg, &c, err, sizeof err)) { fprintf(stderr, "tcp rank %d: %s\n", r, err); _exit(1); }
            double secs[MAX_SIZES];
            int ok[MAX_SIZES];
            int rc = rank_run(c, b, secs, ok);
            if (!rc && r == 0)
                for (int k = 0; k < b->nsizes; k++) dprintf(fds[1], "%d %.9f %d\n", k, secs[k], ok[k]);
            tr_coll_close(c);
            _exit(rc ? 1 : 0);
        }
    }
    close(lfd);
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    int k, okv;
    double s;
    while (f && fscanf(f, "%d %lf %d", &k, &s, &okv) == 3)
        if (k >= 0 && k < b->nsizes) res[k] = (result){.have = 1, .secs = s, .ok = okv};
    if (f) fclose(f);
    int bad = 0;
    for (int r = 0; r < p; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st)) bad = 1;
    }
    return bad ? HF_ECHILD : 0;
}

/* ---- mpi and gloo: read "RESULT k secs ok" lines from a launched job ----- */

static int run_cmd(const char *cmd, const bench_cfg *b, result *res)
{
    FILE *f = popen(cmd, "r");
    if (!f) return HF_ECHILD;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        int k, okv;
        double s;
        if (sscanf(line, "RESULT %d %lf %d", &k, &s, &okv) == 3 && k >= 0 && k < b->nsizes)
            res[k] = (result){.have = 1, .secs = s, .ok = okv};
        else
            fputs(line, stderr);
    }
    int st = pclose(f);
    return st == 0 ? 0 : HF_ECHILD;
}

static void sizes_arg(const bench_cfg *b, char *out, size_t len)
{
    size_t l = 0;
    out[0] = 0;
    for (int k = 0; k < b->nsizes && l + 24 < len; k++)
        l += (size_t)snprintf(out + l, len - l, "%s%zu", k ? "," : "", b->sizes[k]);
}

static int run_mpi(const bench_cfg *b, int p, result *res)
{
    char sz[512], cmd[PATH_MAX + 1024];
    sizes_arg(b, sz, sizeof sz);
    snprintf(cmd, sizeof cmd,
             "mpirun %s -np %d --oversubscribe --bind-to none --mca btl tcp,self "
             "--mca btl_tcp_if_include lo --mca pml ob1 '%s' --worker-mpi --sizes %s "
             "--min-bytes %.0f --min-iters %d",
             geteuid() == 0 ? "--allow-run-as-root" : "", p, b->self, sz, b->min_bytes, b->min_iters);
    return run_cmd(cmd, b, res);
}

static int run_gloo(const bench_cfg *b, int p, result *res)
{
    char sz[512], cmd[2 * PATH_MAX + 1024], script[PATH_MAX];
    sizes_arg(b, sz, sizeof sz);
    /* bin/bench/allreduce -> ../../bench/allreduce_gloo.py, or HF_ROOT */
    const char *root = getenv("HF_ROOT");
    if (root) snprintf(script, sizeof script, "%s/bench/allreduce_gloo.py", root);
    else {
        snprintf(script, sizeof script, "%s", b->self);
        char *sl = strrchr(script, '/');
        for (int up = 0; up < 2 && sl; up++) { *sl = 0; sl = strrchr(script, '/'); }
        if (sl) *sl = 0;
        size_t l = strlen(script);
        snprintf(script + l, sizeof script - l, "/bench/allreduce_gloo.py");
    }
    if (access(script, R_OK)) {
        fprintf(stderr, "gloo: %s not found (set HF_ROOT)\n", script);
        return HF_ENOTFOUND;
    }
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' --np %d --sizes %s --min-bytes %.0f --min-iters %d",
             script, p, sz, b->min_bytes, b->min_iters);
    return run_cmd(cmd, b, res);
}

static int have_torch(void)
{
    return system("/usr/bin/python3 -c 'import torch.distributed as d; assert d.is_gloo_available()' "
                  ">/dev/null 2>&1") == 0;
}

/* ---- mpi worker mode ----------------------------------------------------------- */

static int worker_mpi(const bench_cfg *b)
{
    tr_coll_config cfg;
    tr_coll_config_init(&cfg);
    cfg.backend = TR_COLL_MPI;
    tr_coll *c;
    char err[320];
    if (tr_coll_open(&cfg, &c, err, sizeof err)) { fprintf(stderr, "mpi: %s\n", err); return 1; }
    double secs[MAX_SIZES];
    int ok[MAX_SIZES];
    int rc = rank_run(c, b, secs, ok);
    if (!rc && tr_coll_rank(c) == 0)
        for (int k = 0; k < b->nsizes; k++) printf("RESULT %d %.9f %d\n", k, secs[k], ok[k]);
    fflush(stdout);
    tr_coll_close(c);   /* finalises MPI */
    return rc ? 1 : 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: allreduce [--np 2,4] [--sizes 4K,64M,...] [--impl tcp,mpi,gloo]\n"
                    "                 [--min-bytes N] [--min-iters N] [--rounds N]\n");
}

int main(int argc, char **argv)
{
    hf_log_init("bench-allreduce");
    hf_log_set_level(HF_LOG_WARN);
    signal(SIGPIPE, SIG_IGN);
    bench_cfg b = {.want_tcp = 1, .want_mpi = 1, .want_gloo = 1, .min_bytes = 1 << 30, .min_iters = 5,
                   .rounds = 1};
    parse_sizes("4K,16K,64K,256K,1M,4M,16M,64M,256M", &b);
    b.nps[0] = 2; b.nps[1] = 4; b.nnp = 2;
    int worker = 0;
    ssize_t sl = readlink("/proc/self/exe", b.self, sizeof b.self - 1);
    if (sl > 0) b.self[sl] = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--worker-mpi")) { worker = 1; continue; }
        if (!v) { usage(); return 2; }
        i++;
        if (!strcmp(a, "--sizes")) {
            if (parse_sizes(v, &b)) { fprintf(stderr, "bad --sizes '%s'\n", v); return 2; }
        } else if (!strcmp(a, "--np")) {
            b.nnp = 0;
            char tmp[128];
            snprintf(tmp, sizeof tmp, "%s", v);
            for (char *save = NULL, *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                int p = atoi(t);
                if (p < 1 || p > 32 || b.nnp == MAX_NP) { fprintf(stderr, "bad --np '%s'\n", v); return 2; }
                b.nps[b.nnp++] = p;
            }
        } else if (!strcmp(a, "--impl")) {
            b.want_tcp = strstr(v, "tcp") != NULL;
            b.want_mpi = strstr(v, "mpi") != NULL;
            b.want_gloo = strstr(v, "gloo") != NULL;
        } else if (!strcmp(a, "--min-bytes")) {
            b.min_bytes = atof(v);
        } else if (!strcmp(a, "--rounds")) {
            b.rounds = atoi(v) > 0 ? atoi(v) : 1;
        } else if (!strcmp(a, "--min-iters")) {
            b.min_iters = atoi(v) > 0 ? atoi(v) : 1;
        } else { usage(); return 2; }
    }
    if (worker) return worker_mpi(&b);

    int mpi_ok = system("command -v mpirun >/dev/null 2>&1") == 0;
#ifndef HF_HAVE_MPI
    mpi_ok = 0;
#endif
    int gloo_ok = b.want_gloo && have_torch();
    if (b.want_mpi && !mpi_ok) printf("# mpi: skipped (no mpirun or built without MPI)\n");
    if (b.want_gloo && !gloo_ok) printf("# gloo: skipped (python3-torch with gloo not installed)\n");
    printf("# allreduce float32 sum on loopback; busbw = algbw * 2(p-1)/p; GB = 1e9 bytes; best of %d round(s)\n",
           b.rounds);
    int failures = 0;
    for (int pi = 0; pi < b.nnp; pi++) {
        int p = b.nps[pi];
        result rt[MAX_SIZES] = {0}, rm[MAX_SIZES] = {0}, rg[MAX_SIZES] = {0};
        /* rounds interleave the implementations; each keeps its best time
         * (a shared machine's load then hurts them alike), and all rounds'
         * checks must pass */
        for (int round = 0; round < b.rounds; round++) {
            result t[MAX_SIZES] = {0}, mm[MAX_SIZES] = {0}, g[MAX_SIZES] = {0};
            if (b.want_tcp && run_tcp(&b, p, t)) { printf("# tcp np=%d: a rank failed\n", p); failures++; }
            if (b.want_mpi && mpi_ok && run_mpi(&b, p, mm)) { printf("# mpi np=%d: mpirun failed\n", p); failures++; }
            if (gloo_ok && run_gloo(&b, p, g)) { printf("# gloo np=%d: failed\n", p); failures++; }
            result *dst[3] = {rt, rm, rg}, *src[3] = {t, mm, g};
            for (int m = 0; m < 3; m++)
                for (int k = 0; k < b.nsizes; k++) {
                    if (!src[m][k].have) continue;
                    int ok = src[m][k].ok && (!dst[m][k].have || dst[m][k].ok);
                    if (!dst[m][k].have || src[m][k].secs < dst[m][k].secs) dst[m][k] = src[m][k];
                    dst[m][k].ok = ok;
                }
        }
        for (int k = 0; k < b.nsizes; k++) {
            char sz[32];
            fmt_size(b.sizes[k], sz, sizeof sz);
            const char *names[3] = {"tcp", "mpi", "gloo"};
            result *rs[3] = {&rt[k], &rm[k], &rg[k]};
            double bus[3] = {0, 0, 0};
            for (int m = 0; m < 3; m++) {
                if (!rs[m]->have) continue;
                double alg = (double)b.sizes[k] / rs[m]->secs / 1e9;
                bus[m] = alg * 2.0 * (p - 1) / p;
                if (p == 1) bus[m] = alg;
                printf("%s np=%d size=%s time_us %.1f algbw %.3f busbw %.3f check %s\n", names[m], p, sz,
                       rs[m]->secs * 1e6, alg, bus[m], rs[m]->ok ? "ok" : "WRONG");
                if (!rs[m]->ok) failures++;
            }
            if (bus[0] > 0 && (bus[1] > 0 || bus[2] > 0)) {
                printf("ratio np=%d size=%s", p, sz);
                if (bus[1] > 0) printf(" tcp/mpi %.2f", bus[0] / bus[1]);
                if (bus[2] > 0) printf(" tcp/gloo %.2f", bus[0] / bus[2]);
                printf("\n");
            }
            fflush(stdout);
        }
    }
    return failures ? 1 : 0;
}
