/*
 * idle_crowd.c — an idle crowd for tests/system/test_fault_idle_crowd.sh:
 * opens many TCP connections to a server from one source address, sends
 * each a request that never finishes (half the headers, or the headers and
 * part of a promised body), then only watches which ones the server
 * closes, and when.
 *
 *   idle_crowd --to 127.0.0.1:PORT [--from 127.0.0.2] [--count N] [--hold-s S]
 *
 * Prints, one line each, for the test to read:
 *   connected N refused R            after all connect() calls
 *   open K at T ms                   every 500 ms: connections the server
 *                                    has not closed yet
 *   all closed at T ms               once none is left (then exits 0)
 *   still open K after S s           at --hold-s (then exits 0)
 * Times count from the end of the connect phase. Exit 2 on a usage error.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int parse_addr(const char *s, struct sockaddr_in *sa, int need_port)
{
    char host[64];
    const char *colon = strrchr(s, ':');
    size_t hl = colon ? (size_t)(colon - s) : strlen(s);
    if (hl == 0 || hl >= sizeof host || (need_port && !colon)) return -1;
    memcpy(host, s, hl);
    host[hl] = 0;
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    if (inet_pton(AF_INET, host, &sa->sin_addr) != 1) return -1;
    if (colon) {
        char *end;
        long p = strtol(colon + 1, &end, 10);
        if (*end || p < 0 || p > 65535) return -1;
        sa->sin_port = htons((uint16_t)p);
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *to = NULL, *from = "127.0.0.2";
    int count = 3000, hold_s = 60;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--to") == 0) to = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--from") == 0) from = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--count") == 0) count = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--hold-s") == 0) hold_s = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: idle_crowd --to ADDR:PORT [--from ADDR] [--count N] [--hold-s S]\n");
            return 2;
        }
    }
    struct sockaddr_in dst, src;
    if (!to || parse_addr(to, &dst, 1) || parse_addr(from, &src, 0) || count < 1 || count > 60000 || hold_s < 1) {
        fprintf(stderr, "idle_crowd: bad --to/--from/--count/--hold-s\n");
        return 2;
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)count + 64) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > (rlim_t)count + 64 ? (rlim_t)count + 64 : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    struct pollfd *pf = calloc((size_t)count, sizeof *pf);
    if (!pf) return 1;
    /* Two kinds of stuck request: headers cut off, and a body that stops. */
    static const char half_headers[] = "GET /api/v1/experiments HTTP/1.1\r\nHost: crowd\r\nX-Slow: ";
    static const char half_body[] = "POST /api/v1/experiments HTTP/1.1\r\nHost: crowd\r\n"
                                    "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"name\": ";
    int connected = 0, refused = 0;
    for (int i = 0; i < count; i++) {
        pf[i].fd = -1;
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) { refused++; continue; }
        if (bind(fd, (struct sockaddr *)&src, sizeof src) != 0 || connect(fd, (struct sockaddr *)&dst, sizeof dst) != 0) {
            close(fd);
            refused++;
            continue;
        }
        const char *msg = i % 2 ? half_body : half_headers;
        size_t len = i % 2 ? sizeof half_body - 1 : sizeof half_headers - 1;
        if (send(fd, msg, len, MSG_NOSIGNAL) < 0) { close(fd); refused++; continue; }
        pf[i].fd = fd;
        pf[i].events = POLLIN;   /* EOF, a reset or an answer: the server let go */
        connected++;
    }
    printf("connected %d refused %d\n", connected, refused);
    fflush(stdout);
    long long t0 = now_ms(), next = t0;
    int open = connected;
    while (open > 0 && now_ms() - t0 < (long long)hold_s * 1000) {
        int n = poll(pf, (nfds_t)count, 100);
        if (n < 0 && errno != EINTR) break;
        for (int i = 0; n > 0 && i < count; i++) {
            if (pf[i].fd < 0 || !pf[i].revents) continue;
            char buf[512];
            ssize_t r = recv(pf[i].fd, buf, sizeof buf, MSG_DONTWAIT);
            if (r > 0 && !(pf[i].revents & (POLLHUP | POLLERR))) continue;   /* an answer; wait for the close */
            close(pf[i].fd);
            pf[i].fd = -1;
            open--;
        }
        if (now_ms() >= next) {
            printf("open %d at %lld ms\n", open, now_ms() - t0);
            fflush(stdout);
            next += 500;
        }
    }
    if (open == 0) printf("all closed at %lld ms\n", now_ms() - t0);
    else printf("still open %d after %d s\n", open, hold_s);
    fflush(stdout);
    for (int i = 0; i < count; i++)
        if (pf[i].fd >= 0) close(pf[i].fd);
    free(pf);
    return 0;
}
