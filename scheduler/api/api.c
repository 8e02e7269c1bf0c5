/*
 * api.c — the scheduler's HTTP server (api.h): start and stop
 * libmicrohttpd, the request callbacks, and static files for what is no
 * route. The routes are in api_routes.c, the answers in api_http.c, the
 * SSE stream and the agents' long-poll in api_stream.c (api_int.h says
 * how they fit).
 *
 * A request goes: first call (headers) -> allocate a request context with
 * a body buffer bounded by the route's limit; body chunks -> appended to
 * it (beyond the limit they are read and discarded, and the answer is
 * 413); last call -> api_route_serve, or, for a URL that is no route and
 * not under /api, a static file (GET and HEAD only, else 405). A streamed
 * route (a checkpoint upload) is not buffered: api_route_begin opens its
 * upload at the first call, chunks are written to it, and on_completed
 * aborts it (removing its temp file) when the request ended before the
 * last call committed it. Each step also tells the guard (api_guard.h)
 * where the connection is — headers complete, body bytes, request done —
 * for its header deadline, body rate and half-open share; a request with
 * ambiguous framing (two Content-Length headers, or one beside
 * Transfer-Encoding) is refused at the first call.
 */
#include "scheduler/api/api_int.h"

#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"
#include "scheduler/api/api_guard.h"
#include "scheduler/api/logpool.h"
#include "scheduler/api/metrics.h"
#include "scheduler/api/webfs.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define API_ABSURD_BODY  (64u << 20)   /* refuse before reading */

/* ---------- static files ---------- */

/* A dashboard file (r, NULL -> MHD_NO) as the type of its name; the
 * browser revalidates it on every load. */
static enum MHD_Result send_asset(struct MHD_Connection *c, struct MHD_Response *r, const char *name)
{
    const api_hdr h[] = {
        {"Content-Type", webfs_mime(name)},
        {"X-Content-Type-Options", "nosniff"},
        {"Cache-Control", "no-cache"},
        {NULL, NULL},
    };
    return api_queue(c, 200, r, h);
}

/* The dashboard built into the binary (no --web DIR): served from memory. */
static enum MHD_Result serve_embedded(struct MHD_Connection *c, const char *url)
{
    const webfs_asset *f;
    int rc = webfs_embedded(url, &f);
    if (rc == HF_EINVAL) return api_send_err(c, 400, NULL, "forbidden path");
    if (rc) return api_send_err(c, 404, NULL, "no such route: %s", url);
    return send_asset(c, MHD_create_response_from_buffer(f->size, (void *)f->data, MHD_RESPMEM_PERSISTENT), f->path);
}

static enum MHD_Result serve_static(api *a, struct MHD_Connection *c, const char *url)
{
    char path[PATH_MAX];
    if (!a->web_root) return serve_embedded(c, url);
    int rc = webfs_resolve(a->web_root, url, path, sizeof path);
    if (rc == HF_EINVAL) return api_send_err(c, 400, NULL, "forbidden path");
    if (rc) return api_send_err(c, 404, NULL, "not found");
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        if (fd >= 0) close(fd);
        return api_send_err(c, 404, NULL, "not found");
    }
    struct MHD_Response *r = MHD_create_response_from_fd((uint64_t)sb.st_size, fd);
    if (!r) { close(fd); return MHD_NO; }
    return send_asset(c, r, path);
}

/* ---------- libmicrohttpd callbacks ---------- */

typedef struct hdr_count {
    int content_length, transfer_encoding;
} hdr_count;

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    (void)value;
    hdr_count *n = cls;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) n->content_length++;
    else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) n->transfer_encoding++;
    return MHD_YES;
}

/* A request whose framing two parsers could read differently (two
 * Content-Length headers, or Content-Length beside Transfer-Encoding) is
 * refused before its body: libmicrohttpd would take the first length and
 * a proxy in front might take another (request smuggling). RET 1 with
 * the 400 queued in *ret. */
static int framing_refused(struct MHD_Connection *c, enum MHD_Result *ret)
{
    hdr_count n = {0, 0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, count_header, &n);
    if (n.content_length > 1)
        *ret = api_send_err(c, 400, "Content-Length", "more than one Content-Length header: send exactly one");
    else if (n.content_length && n.transfer_encoding)
        *ret = api_send_err(c, 400, "Content-Length",
                            "Content-Length together with Transfer-Encoding: send one or the other");
    else
        return 0;
    return 1;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    api *a = cls;
    req *rq = *con_cls;
    if (!rq) {
        rq = calloc(1, sizeof *rq);
        if (!rq) return MHD_NO;
        rq->t0_us = hf_mono_us();
        *con_cls = rq;
        enum MHD_Result ret;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        const char *te = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
        api_guard_headers(a->guard, c, te || (cl && strtoull(cl, NULL, 10) > 0));
        if (framing_refused(c, &ret)) {
            rq->answered = 1;
            return ret;
        }
        if (api_route_begin(a, c, url, method, rq, &ret)) return ret;
        unsigned max = api_route_body_max(url, method);
        hf_buf_init(&rq->body, max);
        if (cl && strtoull(cl, NULL, 10) > API_ABSURD_BODY)
            return api_send_err(c, 413, NULL, "request body larger than %u bytes", max);
        return MHD_YES;
    }
    if (rq->held && !*upload_size) return api_queue_held(c, rq);   /* the standby acknowledged it (or gave up) */
    if (*upload_size) api_guard_body(a->guard, c, *upload_size);
    else api_guard_body_done(a->guard, c);
    if (*upload_size && rq->streamed) {
        /* A failed write keeps its error for the last call (507) and
         * reads the rest of the body into nothing. */
        if (rq->up) ckstore_upload_write(rq->up, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    if (rq->answered) {
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!rq->too_big && hf_buf_add(&rq->body, upload, *upload_size) != 0) {
            rq->too_big = 1;
            hf_buf_free(&rq->body);
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (strlen(url) > 2048) return api_send_err(c, 414, NULL, "URL too long");
    enum MHD_Result ret;
    if (api_route_serve(a, c, url, method, rq, &ret) == 0) return ret;
    if (strcmp(method, "GET") && strcmp(method, "HEAD")) return api_send_405(c, "GET, HEAD", 0);
    return serve_static(a, c, url);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    api *a = cls;
    req *rq = *con_cls;
    api_guard_request_done(a->guard, c);
    if (!rq) return;
    if (rq->parked) doorbell_unpark(a->bell, &rq->w);
    repl_unpark(&rq->rw);
    if (rq->held) MHD_destroy_response(rq->held);
    logjob_release(rq->search);   /* cancels a search not yet answered */
    repl_snap_release(rq->snap);  /* and a snapshot copy (its file closed) */
    if (!rq->is_wait && !rq->streamed) metrics_observe(&metrics.request_latency, hf_mono_us() - rq->t0_us);
    if (rq->up && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
        hf_info("checkpoint upload interrupted (libmicrohttpd termination code %d): its temp file is removed", (int)toe);
    ckstore_upload_abort(rq->up);
    hf_buf_free(&rq->body);
    free(rq);
    *con_cls = NULL;
}

/* ---------- set-up ---------- */

/* The replication log's operator events (REPLICATION_DEGRADED, FENCED;
 * repl.h) go to the SSE stream like the core's (the dashboard shows
 * them), and become events rows written by the core's next tick
 * (sched_post_event: this may run under the replication log's locks, so
 * it must not take the core lock). */
static void repl_event(void *ctx, const char *type, const char *detail)
{
    api *a = ctx;
    json_t *d = json_pack("{ssss}", "type", type, "detail", detail);
    if (d && a->ev) events_publish(a->ev, type, d);
    json_decref(d);
    if (a->s) sched_post_event(a->s, type, detail);
}

int api_parse_listen(const char *s, char *host, size_t hostlen, int *port)
{
    const char *colon;
    if (!s || !*s) return HF_EINVAL;
    if (s[0] == '[') {
        const char *rb = strchr(s, ']');
        if (!rb || rb[1] != ':') return HF_EINVAL;
        if ((size_t)(rb - s - 1) >= hostlen) return HF_EINVAL;
        memcpy(host, s + 1, (size_t)(rb - s - 1));
        host[rb - s - 1] = 0;
        colon = rb + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon || (size_t)(colon - s) >= hostlen) return HF_EINVAL;
        memcpy(host, s, (size_t)(colon - s));
        host[colon - s] = 0;
    }
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || p < 0 || p > 65535) return HF_EINVAL;
    if (!host[0]) snprintf(host, hostlen, "0.0.0.0");
    *port = (int)p;
    return 0;
}

int api_is_loopback(const char *host)
{
    return strncmp(host, "127.", 4) == 0 || strcmp(host, "::1") == 0 || strcmp(host, "localhost") == 0;
}

static char *read_file(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(err, errlen, "%s: %s", path, strerror(errno)); return NULL; }
    hf_buf b;
    hf_buf_init(&b, 1u << 20);
    char chunk[4096];
    size_t n;
    int rc = 0;
    while (rc == 0 && (n = fread(chunk, 1, sizeof chunk, f)) > 0) rc = hf_buf_add(&b, chunk, n);
    fclose(f);
    if (rc || !b.data) { snprintf(err, errlen, "%s: unreadable or larger than 1 MiB", path); hf_buf_free(&b); return NULL; }
    return hf_buf_take(&b, &n);
}

/* API_MAX_CONNS, or fewer when the open-files limit cannot hold them (64
 * descriptors kept for the database, logs and the listening socket). The
 * soft limit is first raised as far as the hard limit allows. */
static unsigned conn_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 1000;
    rlim_t want = API_MAX_CONNS + 64;
    if (rl.rlim_cur < want && rl.rlim_cur != RLIM_INFINITY) {
        rlim_t cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
        if (cur > rl.rlim_cur) {
            rl.rlim_cur = cur;
            if (setrlimit(RLIMIT_NOFILE, &rl) != 0) getrlimit(RLIMIT_NOFILE, &rl);
        }
    }
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= want) return API_MAX_CONNS;
    unsigned n = rl.rlim_cur > 128 ? (unsigned)(rl.rlim_cur - 64) : 64;
    hf_warn("open-files limit %llu: serving at most %u connections (raise it with ulimit -n / LimitNOFILE)",
            (unsigned long long)rl.rlim_cur, n);
    return n;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n') msg[--n] = 0;
    hf_debug("libmicrohttpd: %s", msg);
}

/* host (an IPv4 or IPv6 literal, or "localhost") and port into *ss; an
 * IPv6 address adds MHD_USE_IPv6 to *flags. RET 0 or HF_EINVAL with err. */
static int listen_addr(char *host, size_t hostlen, int port, struct sockaddr_storage *ss, unsigned *flags, char *err,
                       size_t errlen)
{
    memset(ss, 0, sizeof *ss);
    if (strchr(host, ':')) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        if (inet_pton(AF_INET6, host, &s6->sin6_addr) != 1) { snprintf(err, errlen, "bad address %s", host); return HF_EINVAL; }
        *flags |= MHD_USE_IPv6;
        return 0;
    }
    struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
    s4->sin_family = AF_INET;
    s4->sin_port = htons((uint16_t)port);
    if (strcmp(host, "localhost") == 0) snprintf(host, hostlen, "127.0.0.1");
    if (inet_pton(AF_INET, host, &s4->sin_addr) != 1) { snprintf(err, errlen, "bad address %s", host); return HF_EINVAL; }
    return 0;
}

/* --tls-cert/--tls-key into a->cert, a->key (PEM in memory for MHD) and
 * MHD_USE_TLS into *flags; neither given: nothing. RET 0, HF_EINVAL (one
 * without the other), HF_EUNSUP (no TLS in libmicrohttpd), HF_EIO; err
 * says which. */
static int tls_load(api *a, const api_config *cfg, unsigned *flags, char *err, size_t errlen)
{
    if (!cfg->tls_cert && !cfg->tls_key) return 0;
    if (!cfg->tls_cert || !cfg->tls_key) { snprintf(err, errlen, "--tls-cert and --tls-key go together"); return HF_EINVAL; }
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
        snprintf(err, errlen, "this libmicrohttpd was built without TLS (GnuTLS)");
        return HF_EUNSUP;
    }
    if (!(a->cert = read_file(cfg->tls_cert, err, errlen)) || !(a->key = read_file(cfg->tls_key, err, errlen)))
        return HF_EIO;
    *flags |= MHD_USE_TLS;
    return 0;
}

int api_start(const api_config *cfg, sched *s, store *st, events_hub *ev, const auth *au, api **out,
              char *err, size_t errlen)
{
    char host[256];
    int port, rc = HF_EINVAL;
    *out = NULL;
    api *a = calloc(1, sizeof *a);
    if (!a) return HF_ENOMEM;
    a->s = s;
    a->st = st;
    a->ev = ev;
    repl_set_event_hook(repl_event, a);
    a->au = au;
    a->bell = cfg->bell;
    a->ck = cfg->ck;
    a->cr = cfg->cr;
    a->wh = cfg->wh;
    a->imp = importance_cache_new();
    a->lp = logpool_new(st);
    repl_snap_start();
    if (!a->lp) { rc = HF_ENOMEM; goto fail; }
    if (!a->imp) { rc = HF_ENOMEM; goto fail; }
    if (api_parse_listen(cfg->listen, host, sizeof host, &port)) {
        snprintf(err, errlen, "--listen %s: expected ADDR:PORT", cfg->listen ? cfg->listen : "");
        goto fail;
    }
    if (cfg->web_dir) {
        char real[PATH_MAX];
        if (!realpath(cfg->web_dir, real)) { snprintf(err, errlen, "--web %s: %s", cfg->web_dir, strerror(errno)); goto fail; }
        a->web_root = strdup(real);
    }
    struct sockaddr_storage ss;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME;
    if (listen_addr(host, sizeof host, port, &ss, &flags, err, errlen)) goto fail;
    if (MHD_is_feature_supported(MHD_FEATURE_EPOLL) == MHD_YES) flags |= MHD_USE_EPOLL;
    if ((rc = tls_load(a, cfg, &flags, err, errlen))) goto fail;
    rc = HF_EINVAL;
    struct MHD_OptionItem tls_opts[] = {
        {MHD_OPTION_HTTPS_MEM_CERT, 0, a->cert},
        {MHD_OPTION_HTTPS_MEM_KEY, 0, a->key},
        {MHD_OPTION_END, 0, NULL},
    };
    /* An idle crowd must not lock agents and users out: one address holds
     * at most max_conns_per_ip connections, and a connection whose request
     * stops arriving is closed after request_timeout_s. Parked /wait
     * long-polls and idle SSE streams are suspended connections, which
     * libmicrohttpd does not time out. A trickling crowd is the guard's
     * (api_guard.h): header deadline, body rate, half-open share. */
    unsigned max_conns = conn_limit();
    api_guard_config gc = {.max_conns = max_conns,
                           .header_timeout_s = cfg->header_timeout_s > 0 ? cfg->header_timeout_s : API_HEADER_TIMEOUT_S,
                           .min_body_rate = cfg->min_body_rate > 0 ? cfg->min_body_rate
                                            : cfg->min_body_rate < 0 ? 0 : API_MIN_BODY_RATE};
    if (!(a->guard = api_guard_new(&gc))) { rc = HF_ENOMEM; goto fail; }
    a->d = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, on_request, a,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                            MHD_OPTION_THREAD_POOL_SIZE, (unsigned)(cfg->threads > 0 ? cfg->threads : 4),
                            MHD_OPTION_CONNECTION_LIMIT, max_conns,
                            MHD_OPTION_NOTIFY_CONNECTION, api_guard_notify, a->guard,
                            MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)4096,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)(cfg->max_conns_per_ip > 0 ? cfg->max_conns_per_ip : 0),
                            MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned)(cfg->request_timeout_s > 0 ? cfg->request_timeout_s : API_REQUEST_TIMEOUT_S),
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
                            MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, a,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                            MHD_OPTION_ARRAY, a->cert ? tls_opts : tls_opts + 2,
                            MHD_OPTION_END);
    if (!a->d) {
        snprintf(err, errlen, "cannot listen on %s (in use, or a bad TLS certificate/key)", cfg->listen);
        rc = HF_EIO;
        goto fail;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(a->d, MHD_DAEMON_INFO_BIND_PORT);
    a->port = di ? di->port : port;
    *out = a;
    return 0;
fail:
    api_stop(a);
    return rc;
}

int api_port(const api *a) { return a->port; }

void api_stop(api *a)
{
    if (!a) return;
    atomic_store(&a->stopping, 1);
    if (a->bell) doorbell_expire(a->bell, INT64_MAX);   /* no suspended /wait left for MHD_stop_daemon */
    logpool_stop(a->lp);   /* every search ends and its connection is resumed */
    repl_stop();           /* every held write answer and stream poll is resumed (repl.h) */
    repl_snap_stop();      /* a snapshot copy ends at its next slice, its connection resumed */
    repl_set_event_hook(NULL, NULL);
    if (a->d) MHD_stop_daemon(a->d);
    logpool_free(a->lp);
    api_guard_free(a->guard);   /* after the daemon: every connection is closed */
    importance_cache_free(a->imp);
    free(a->web_root);
    free(a->cert);
    free(a->key);
    free(a);
}
