/*
 * ckpt_upload.c — the checkpoint-upload figures of issue 15 ("Numbers";
 * docs/scheduler.md, "The checkpoint store"): the agent's own upload code
 * (agent_objects_upload: a streamed PUT with the SHA-256 header, which the
 * scheduler hashes, writes, fsyncs and renames before answering 201)
 * against a running hyperfarm-scheduler, beside a raw loopback TCP copy of
 * the same bytes from the same run (the baseline: no HTTP, no hashing, no
 * disk on the receiving side), and the ratio. Then STREAMS uploads of
 * other checkpoints of the same size at once, with the scheduler's peak
 * RSS growth (VmHWM in /proc/PID/status, reset first through
 * /proc/PID/clear_refs) against the target < 32 MiB.
 *
 * Not a test: it prints figures. bench/ckpt/run.sh starts the scheduler,
 * an agent and a trial to upload to, and calls this program:
 *
 *   ckpt_upload --url URL --trial ID --sched-pid PID --dir DIR [--size-mib 256] [--streams 4]
 *
 * DIR receives STREAMS+1 files of SIZE MiB (distinct pseudo-random bytes,
 * so the store cannot deduplicate them) and the agent-side object cache.
 */
#include "agent/agent_objects.h"
#include "hf_err.h"
#include "hf_time.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define CHUNK (1 << 20)
#define MAX_STREAMS 16

typedef struct up_arg {
    agent_objects *ao;
    const char    *sha;
    int64_t        trial, step;
    int64_t        ms;
    int            rc;
    char           err[512];
} up_arg;

/* SIZE MiB of xorshift64 bytes seeded by seed, into path. RET 0 or -1. */
static int make_file(const char *path, int64_t mib, uint64_t seed)
{
    uint64_t *buf = malloc(CHUNK), x = seed * 0x9E3779B97F4A7C15ull + 1;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644), rc = -1;
    if (!buf || fd < 0) goto end;
    for (int64_t m = 0; m < mib; m++) {
        for (size_t i = 0; i < CHUNK / 8; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf[i] = x;
        }
        if (write(fd, buf, CHUNK) != CHUNK) goto end;
    }
    rc = 0;
end:
    if (fd >= 0) close(fd);
    free(buf);
    return rc;
}

/* ---------- baseline: a raw loopback TCP copy ---------- */

static void *sink(void *arg)
{
    int ls = *(int *)arg, c = accept(ls, NULL, NULL);
    char *buf = malloc(CHUNK);
    if (c >= 0 && buf)
        while (read(c, buf, CHUNK) > 0) {}
    if (c >= 0) close(c);
    free(buf);
    return NULL;
}

/* Copy the file at path over a loopback TCP connection to a reader that
 * discards it. RET milliseconds, or -1. */
static int64_t raw_copy(const char *path)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    int ls = socket(AF_INET, SOCK_STREAM, 0), cs = -1, fd = open(path, O_RDONLY);
    char *buf = malloc(CHUNK);
    int64_t ms = -1, t0;
    pthread_t th;
    if (ls < 0 || fd < 0 || !buf || bind(ls, (struct sockaddr *)&sa, sizeof sa) || listen(ls, 1) ||
        getsockname(ls, (struct sockaddr *)&sa, &sl))
        goto end;
    if (pthread_create(&th, NULL, sink, &ls)) goto end;
    t0 = hf_mono_ms();
    cs = socket(AF_INET, SOCK_STREAM, 0);
    if (cs >= 0 && connect(cs, (struct sockaddr *)&sa, sizeof sa) == 0) {
        ssize_t n;
        while ((n = read(fd, buf, CHUNK)) > 0)
            for (ssize_t off = 0; off < n;) {
                ssize_t w = write(cs, buf + off, (size_t)(n - off));
                if (w <= 0) { n = -1; break; }
                off += w;
            }
        if (n == 0) ms = 0;
    }
    if (cs >= 0) close(cs);
    cs = -1;
    pthread_join(th, NULL);
    if (ms == 0) ms = hf_mono_ms() - t0;
end:
    if (cs >= 0) close(cs);
    if (ls >= 0) close(ls);
    if (fd >= 0) close(fd);
    free(buf);
    return ms;
}

/* ---------- ours: the agent's upload ---------- */

static void *upload(void *arg)
{
    up_arg *a = arg;
    int64_t t0 = hf_mono_ms();
    a->rc = agent_objects_upload(a->ao, a->sha, a->trial, a->step, 1, "bench.hfck", a->err, sizeof a->err);
    a->ms = hf_mono_ms() - t0;
    return NULL;
}

/* VmHWM or VmRSS of pid in KiB, or -1. */
static long proc_kb(long pid, const char *key)
{
    char path[64], line[256];
    long kb = -1;
    snprintf(path, sizeof path, "/proc/%ld/status", pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, strlen(key)) && line[strlen(key)] == ':') kb = atol(line + strlen(key) + 1);
    fclose(f);
    return kb;
}

/* CPU time (user + system) pid has used, in ms, from /proc/PID/stat; -1 if
 * unreadable. */
static long proc_cpu_ms(long pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');   /* the command name may hold spaces */
    unsigned long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2) return -1;
    return (long)((ut + st) * 1000 / (unsigned long)sysconf(_SC_CLK_TCK));
}

/* CPU time this process has used, in ms. */
static long self_cpu_ms(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec * 1000L + ru.ru_utime.tv_usec / 1000 + ru.ru_stime.tv_sec * 1000L +
           ru.ru_stime.tv_usec / 1000;
}

/* Reset pid's peak RSS to its current RSS (clear_refs 5). RET 0 or -1. */
static int reset_hwm(long pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/clear_refs", pid);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    int rc = fputs("5", f) < 0;
    return fclose(f) || rc ? -1 : 0;
}

static double mbps(int64_t bytes, int64_t ms) { return ms > 0 ? (double)bytes / 1e6 / ((double)ms / 1e3) : 0; }

int main(int argc, char **argv)
{
    const char *url = NULL, *dir = NULL;
    int64_t trial = 0, mib = 256;
    long pid = 0;
    int streams = 4, rc = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--url")) url = argv[i + 1];
        else if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
        else if (!strcmp(argv[i], "--trial")) trial = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--sched-pid")) pid = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--size-mib")) mib = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--streams")) streams = atoi(argv[i + 1]);
        else { fprintf(stderr, "ckpt_upload: unknown option %s\n", argv[i]); return 2; }
    }
    if (!url || !dir || trial <= 0 || pid <= 0 || mib <= 0 || streams < 1 || streams > MAX_STREAMS) {
        fprintf(stderr, "usage: ckpt_upload --url URL --trial ID --sched-pid PID --dir DIR [--size-mib 256] "
                        "[--streams 1-%d]\n", MAX_STREAMS);
        return 2;
    }
    char path[MAX_STREAMS + 1][4096], sha[MAX_STREAMS + 1][65], err[1024];
    int64_t size = 0, bytes = mib << 20;
    agent_objects *ao = NULL;
    memset(path, 0, sizeof path);
    up_arg args[MAX_STREAMS + 1];
    pthread_t th[MAX_STREAMS];
    if (agent_objects_open(dir, url, NULL, 0, &ao, err, sizeof err)) { fprintf(stderr, "ckpt_upload: %s\n", err); return 1; }
    int64_t t0 = hf_mono_ms();
    for (int i = 0; i <= streams; i++) {
        snprintf(path[i], sizeof path[i], "%s/ckpt-%d.bin", dir, i);
        if (make_file(path[i], mib, (uint64_t)i + 1)) { fprintf(stderr, "ckpt_upload: writing %s: %s\n", path[i], strerror(errno)); goto end; }
        if (agent_objects_add(ao, path[i], sha[i], &size, err, sizeof err)) { fprintf(stderr, "ckpt_upload: %s\n", err); goto end; }
    }
    printf("prepared %d checkpoints of %lld MiB (written and hashed into the agent cache) in %lld ms\n", streams + 1,
           (long long)mib, (long long)(hf_mono_ms() - t0));

    int64_t raw_ms = raw_copy(path[0]);
    if (raw_ms < 0) { fprintf(stderr, "ckpt_upload: raw loopback copy failed: %s\n", strerror(errno)); goto end; }
    args[0] = (up_arg){.ao = ao, .sha = sha[0], .trial = trial, .step = 1};
    long sched_cpu0 = proc_cpu_ms(pid), self_cpu0 = self_cpu_ms();
    upload(&args[0]);
    long sched_cpu = proc_cpu_ms(pid) - sched_cpu0, self_cpu = self_cpu_ms() - self_cpu0;
    if (args[0].rc) { fprintf(stderr, "ckpt_upload: upload: %s\n", args[0].err); goto end; }
    double ours = mbps(bytes, args[0].ms), raw = mbps(bytes, raw_ms);
    printf("upload %lld MiB, agent -> scheduler store (HTTP PUT, SHA-256 verified, fsynced): %6.0f MB/s (%lld ms)\n",
           (long long)mib, ours, (long long)args[0].ms);
    printf("  CPU time during it: scheduler %ld ms, agent side (this process) %ld ms\n", sched_cpu, self_cpu);
    printf("raw loopback TCP copy of the same bytes (baseline, no hash, no disk):         %6.0f MB/s (%lld ms)\n", raw,
           (long long)raw_ms);
    printf("ratio upload/raw copy: %.2f; target >= 500 MB/s: %s\n", raw > 0 ? ours / raw : 0,
           ours >= 500 ? "met" : "MISSED");

    long rss0 = proc_kb(pid, "VmRSS");
    int reset = reset_hwm(pid);
    long hwm0 = proc_kb(pid, reset ? "VmHWM" : "VmRSS");
    t0 = hf_mono_ms();
    for (int i = 0; i < streams; i++) {
        args[i + 1] = (up_arg){.ao = ao, .sha = sha[i + 1], .trial = trial, .step = 2 + i};
        if (pthread_create(&th[i], NULL, upload, &args[i + 1])) { fprintf(stderr, "ckpt_upload: thread\n"); goto end; }
    }
    for (int i = 0; i < streams; i++) pthread_join(th[i], NULL);
    int64_t all_ms = hf_mono_ms() - t0;
    for (int i = 1; i <= streams; i++)
        if (args[i].rc) { fprintf(stderr, "ckpt_upload: concurrent upload %d: %s\n", i, args[i].err); goto end; }
    long hwm1 = proc_kb(pid, "VmHWM");
    double grow = (double)(hwm1 - hwm0) / 1024.0;
    printf("%d concurrent uploads of %lld MiB: %.0f MB/s together (%lld ms); scheduler RSS %ld MiB before, peak %ld MiB"
           "%s\n", streams, (long long)mib, mbps(bytes * streams, all_ms), (long long)all_ms, rss0 / 1024, hwm1 / 1024,
           reset ? " (VmHWM not resettable here: growth measured from VmRSS before)" : "");
    printf("scheduler peak RSS growth during %d concurrent uploads: %.1f MiB; target < 32 MiB: %s\n", streams, grow,
           grow < 32 ? "met" : "MISSED");
    rc = 0;
end:
    for (int i = 0; i <= streams; i++) unlink(path[i]);
    agent_objects_close(ao);
    return rc;
}
