/*
 * hf_http.c — the one libcurl client stack (see hf_http.h): every request
 * of the agent and the CLI, JSON or streamed, gets its TLS, CA file,
 * bearer token, protocols and connect timeout from prepare() here, and
 * the streamed transfers of hf_xfer.h go through hf_http_stream_run.
 */
#include "hf_http.h"
#include "hf_buf.h"
#include "hf_err.h"
#include "hf_follow.h"
#include "hf_json.h"
#include "hf_time.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define STREAM_ANSWER_MAX (64u << 10)   /* bytes of a non-2xx answer kept when a sink takes the body */

struct hf_http {
    CURL *curl;
    char *base;
    char *auth;      /* "Authorization: Bearer ..." or NULL */
    char *cafile;
    long  timeout_ms;
    int   retries;
    const atomic_int *cancel;
    hf_follow *follow;        /* several scheduler URLs (hf_follow.h), else NULL */
    int64_t    ans_term;      /* X-Hyperfarm-Term of the last answer, 0 = none */
    char       ans_role[16];  /* X-Hyperfarm-Role of the last answer, "" = none */
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

hf_http *hf_http_new(const char *base_url, const char *token, long timeout_ms, int retries)
{
    pthread_once(&curl_once, curl_init_once);
    hf_http *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->curl = curl_easy_init();
    if (hf_follow_is_list(base_url)) {
        char cur[HF_FOLLOW_URL_MAX + 1];
        if ((c->follow = hf_follow_open(base_url))) {
            hf_follow_current(c->follow, cur, sizeof cur);
            c->base = strdup(cur);
        }
    } else {
        size_t n = strlen(base_url);
        while (n > 0 && base_url[n - 1] == '/') n--;
        c->base = strndup(base_url, n);
    }
    if (token && *token) {
        size_t alen = strlen(token) + 32;
        c->auth = malloc(alen);
        if (c->auth) snprintf(c->auth, alen, "Authorization: Bearer %s", token);
    }
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : 10000;
    c->retries = retries < 0 ? 0 : retries;
    if (!c->curl || !c->base || (token && *token && !c->auth)) {
        hf_http_free(c);
        return NULL;
    }
    return c;
}

void hf_http_free(hf_http *c)
{
    if (!c) return;
    if (c->curl) curl_easy_cleanup(c->curl);
    free(c->base);
    if (c->auth) memset(c->auth, 0, strlen(c->auth));
    free(c->auth);
    free(c->cafile);
    hf_follow_close(c->follow);
    free(c);
}

void hf_http_set_cafile(hf_http *c, const char *cafile)
{
    free(c->cafile);
    c->cafile = cafile ? strdup(cafile) : NULL;
}

void hf_http_set_retries(hf_http *c, int retries) { c->retries = retries < 0 ? 0 : retries; }
void hf_http_set_cancel(hf_http *c, const atomic_int *flag) { c->cancel = flag; }
const char *hf_http_base(const hf_http *c) { return c->base; }
struct hf_follow *hf_http_follow(const hf_http *c) { return c->follow; }

static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt; (void)dn; (void)ut; (void)un;
    const atomic_int *flag = ud;
    return atomic_load(flag) ? 1 : 0;
}

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
    hf_buf *b = ud;
    if (hf_buf_add(b, p, size * n)) return 0;   /* over the bound: abort transfer */
    return size * n;
}

/* base + path into url; with several URLs, base is first set to the one
 * in use. RET 0 or HF_EINVAL (too long, with err). */
static int make_url(hf_http *c, const char *path, char *url, size_t len, char *err, size_t errlen)
{
    char cur[HF_FOLLOW_URL_MAX + 1];
    if (c->follow) {
        hf_follow_current(c->follow, cur, sizeof cur);
        char *b = strcmp(cur, c->base) ? strdup(cur) : NULL;
        if (b) {
            free(c->base);
            c->base = b;
        }
    }
    if (snprintf(url, len, "%s%s", c->base, path) < (int)len) return 0;
    snprintf(err, errlen, "URL too long");
    return HF_EINVAL;
}

/* Takes one header line of an answer: keeps the replication term and
 * role (docs/scheduler.md, standby) for hf_follow_observe. */
static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
    hf_http *c = ud;
    size_t len = size * n;
    char line[128];
    if (len >= sizeof line) return len;
    memcpy(line, p, len);
    line[len] = 0;
    line[strcspn(line, "\r\n")] = 0;
    if (!strncasecmp(line, "X-Hyperfarm-Term:", 17)) c->ans_term = strtoll(line + 17, NULL, 10);
    else if (!strncasecmp(line, "X-Hyperfarm-Role:", 17)) {
        const char *v = line + 17;
        while (*v == ' ' || *v == '\t') v++;
        size_t vl = strlen(v) < sizeof c->ans_role - 1 ? strlen(v) : sizeof c->ans_role - 1;
        memcpy(c->ans_role, v, vl);
        c->ans_role[vl] = 0;
    }
    return len;
}

/* With several URLs: the term and lost-primary headers of this request,
 * and the capture of the answer's term and role. */
static void follow_prepare(hf_http *c, struct curl_slist **hdr)
{
    char term[64], lost[80];
    c->ans_term = 0;
    c->ans_role[0] = 0;
    hf_follow_headers(c->follow, term, sizeof term, lost, sizeof lost);
    if (term[0]) *hdr = curl_slist_append(*hdr, term);
    if (lost[0]) *hdr = curl_slist_append(*hdr, lost);
    curl_easy_setopt(c->curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c->curl, CURLOPT_HEADERDATA, c);
}

/* With several URLs: tell the follow set what the request to c->base
 * saw. RET 1 when it should be sent again at once to the URL now in use. */
static int follow_observe(hf_http *c, int failed, long status, const char *body, size_t len)
{
    if (!c->follow) return 0;
    hf_follow_answer a = {.transport_failed = failed, .status = status, .term = c->ans_term,
                          .role = c->ans_role, .body = body, .body_len = len};
    return hf_follow_observe(c->follow, c->base, &a);
}

/* The one place that sets what every request of this client shares: the
 * URL, the bearer token, the CA file, protocols, the connect timeout,
 * keep-alive and the cancel flag. Resets the handle first. *hdr gets the
 * shared header lines (the caller appends its own, sets them, frees).
 * expect100: ask for "100 Continue" before a body is sent (streamed
 * uploads: a server that refuses the request at its headers then answers
 * before a byte of the body travels, instead of closing on a body half
 * sent, which curl may report as a send error before it read the status);
 * else no Expect header (JSON bodies are small). */
static void prepare(hf_http *c, const char *method, const char *url, struct curl_slist **hdr, int expect100)
{
    CURL *h = c->curl;
    curl_easy_reset(h);
    if (c->follow) follow_prepare(c, hdr);
    *hdr = curl_slist_append(*hdr, "Accept: application/json");
    if (c->auth) *hdr = curl_slist_append(*hdr, c->auth);
    *hdr = curl_slist_append(*hdr, expect100 ? "Expect: 100-continue" : "Expect:");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    /* with several URLs a dead one (a power cut: no RST, no SYN-ACK) must
     * cost little, the others are waiting (hf_follow.h) */
    long cto = c->follow ? HF_FOLLOW_CONNECT_MS : 5000L;
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, c->timeout_ms < cto ? c->timeout_ms : cto);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    if (c->cafile) curl_easy_setopt(h, CURLOPT_CAINFO, c->cafile);
    if (c->cancel) {
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, (void *)c->cancel);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    }
}

static int attempt(hf_http *c, const char *method, const char *url, const char *body,
                   long *status, hf_buf *out, CURLcode *cc)
{
    struct curl_slist *hdr = NULL;
    CURL *h = c->curl;

    prepare(c, method, url, &hdr, 0);
    if (body) hdr = curl_slist_append(hdr, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, c->timeout_ms);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
    if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    } else if (strcmp(method, "HEAD") == 0) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);   /* no body will follow the headers */
    } else if (strcmp(method, "GET") != 0) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, 0L);
    }
    if (strcmp(method, "GET") == 0) curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    *cc = curl_easy_perform(h);
    curl_slist_free_all(hdr);
    if (*cc != CURLE_OK) return -1;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    return 0;
}

/* A connect timeout (a dead host that drops packets) sent nothing either:
 * curl says "timed out" for it as for a slow answer; the connect time
 * tells them apart. */
static int never_connected(hf_http *c, CURLcode cc)
{
    curl_off_t ct = 1;
    if (cc != CURLE_OPERATION_TIMEDOUT) return 0;
    return curl_easy_getinfo(c->curl, CURLINFO_CONNECT_TIME_T, &ct) == CURLE_OK && ct == 0;
}

int hf_http_request_raw(hf_http *c, const char *method, const char *path, const char *body,
                        long *status, char **body_out, size_t *len_out, char *err, size_t errlen)
{
    char url[4096];
    hf_buf out;
    CURLcode cc = CURLE_OK;
    int64_t backoff = 100;
    int is_get = strcmp(method, "GET") == 0;

    *status = 0;
    *body_out = NULL;
    if (len_out) *len_out = 0;
    hf_buf_init(&out, HF_HTTP_MAX_BODY);
    /* with several URLs, a request that met no primary goes at once to the
     * next one in use, at most once per URL (hf_follow.h) */
    size_t moves = 0, nurls = c->follow ? hf_follow_count(c->follow) : 1;
    for (int i = 0;; i++) {
        if (make_url(c, path, url, sizeof url, err, errlen)) {
            hf_buf_free(&out);
            return HF_EINVAL;
        }
        hf_buf_reset(&out);
        int rc = attempt(c, method, url, body, status, &out, &cc);
        int retriable = 0;
        if (rc) retriable = cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST
                            || (is_get && cc != CURLE_WRITE_ERROR && cc != CURLE_PEER_FAILED_VERIFICATION);
        else retriable = is_get && (*status == 502 || *status == 503 || *status == 504);
        /* a 503 from a standby, or a connection never made, did nothing:
         * safe to send again elsewhere whatever the method */
        int moved = follow_observe(c, rc != 0 && cc != CURLE_WRITE_ERROR, *status, out.data, out.len);
        if (moved && (rc == 0 || retriable || never_connected(c, cc)) && ++moves < nurls) {
            i--;
            continue;
        }
        if (!retriable || i >= c->retries) break;
        hf_sleep_ms(backoff + (int64_t)(rand() % (int)(backoff / 4 + 1)));
        backoff = backoff * 2 > 5000 ? 5000 : backoff * 2;
    }
    if (cc != CURLE_OK) {
        hf_buf_free(&out);
        if (cc == CURLE_WRITE_ERROR) {
            snprintf(err, errlen, "%s %s: response larger than %u bytes", method, url, HF_HTTP_MAX_BODY);
            return HF_ETOOBIG;
        }
        snprintf(err, errlen, "%s %s: %s", method, url, curl_easy_strerror(cc));
        return cc == CURLE_OPERATION_TIMEDOUT ? HF_ETIMEOUT : HF_ECONN;
    }
    *body_out = hf_buf_take(&out, len_out);
    return HF_OK;
}

int hf_http_request(hf_http *c, const char *method, const char *path, const json_t *body,
                    long *status, json_t **resp, char *err, size_t errlen)
{
    char *text = NULL, *rbody = NULL;
    size_t rlen = 0;
    *resp = NULL;
    if (body && !(text = hf_json_dump(body))) {
        snprintf(err, errlen, "cannot serialise request body");
        return HF_ENOMEM;
    }
    int rc = hf_http_request_raw(c, method, path, text, status, &rbody, &rlen, err, errlen);
    free(text);
    if (rc) return rc;
    if (rlen > 0) *resp = json_loadb(rbody, rlen, JSON_DECODE_ANY, NULL);
    free(rbody);
    return HF_OK;
}

/* ---------- streamed transfers ---------- */

typedef struct stream_io {
    hf_http_stream   *s;
    hf_http          *c;
    CURL             *h;
    int64_t           sent;
    int               read_errno;
    int               sink_rc;          /* the sink's refusal */
    int               over;             /* the kept answer went over its bound */
    hf_buf            answer;
    const atomic_int *cancel;
} stream_io;

static size_t on_stream_read(char *buf, size_t size, size_t n, void *ud)
{
    stream_io *io = ud;
    size_t want = size * n;
    if ((int64_t)want > io->s->body_size - io->sent) want = (size_t)(io->s->body_size - io->sent);
    for (;;) {
        ssize_t r = read(io->s->body_fd, buf, want);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { io->read_errno = errno; return CURL_READFUNC_ABORT; }
        if (r == 0 && want > 0) { io->read_errno = EIO; return CURL_READFUNC_ABORT; }   /* shorter than said */
        io->sent += r;
        return (size_t)r;
    }
}

/* A 2xx body goes to the sink (when there is one); any other answer is
 * kept, bounded, for the caller's message. */
static size_t on_stream_write(char *p, size_t size, size_t n, void *ud)
{
    stream_io *io = ud;
    size_t len = size * n;
    if (!io->s->status) curl_easy_getinfo(io->h, CURLINFO_RESPONSE_CODE, &io->s->status);
    if (io->s->sink && io->s->status >= 200 && io->s->status < 300) {
        if ((io->sink_rc = io->s->sink(io->s->sink_ud, p, len))) return 0;
        return len;
    }
    if (hf_buf_add(&io->answer, p, len)) {
        if (io->s->sink) return len;            /* an error answer: its start is enough */
        io->over = 1;
        return 0;
    }
    return len;
}

static int on_stream_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    stream_io *io = ud;
    (void)dt; (void)dn; (void)ut;
    if (io->s->progress && io->s->body_fd >= 0) io->s->progress(io->s->progress_ud, (int64_t)un, io->s->body_size);
    return io->cancel && atomic_load(io->cancel) ? 1 : 0;
}

/* A header line of a streamed answer: the follow set's capture (when the
 * client has one, as prepare() set it up) and the caller's s->header. */
static size_t on_stream_header(char *p, size_t size, size_t n, void *ud)
{
    stream_io *io = ud;
    size_t len = size * n;
    char line[HF_HTTP_HEADER_MAX];
    if (io->c->follow) on_header(p, size, n, io->c);
    if (len >= sizeof line) return len;
    memcpy(line, p, len);
    line[len] = 0;
    line[strcspn(line, "\r\n")] = 0;
    if (line[0]) io->s->header(io->s->header_ud, line);
    return len;
}

/* The options of a streamed transfer on top of prepare(). */
static void stream_setup(hf_http *c, stream_io *io, struct curl_slist *hdr)
{
    hf_http_stream *s = io->s;
    CURL *h = c->curl;
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    if (s->body_fd >= 0) {
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)s->body_size);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, on_stream_read);
        curl_easy_setopt(h, CURLOPT_READDATA, io);
        curl_easy_setopt(h, CURLOPT_UPLOAD_BUFFERSIZE, 2L * 1024 * 1024);
    } else if (strcmp(s->method, "GET") == 0) {
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    }
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, s->method);
    /* No total timeout (a large body takes its time): a stall below
     * stall_bytes/s for stall_s aborts instead. */
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, s->stall_s > 0 ? (long)s->stall_bytes : 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, s->stall_s > 0 ? s->stall_s : (long)(c->timeout_ms + 999) / 1000);
    curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 512L * 1024);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_stream_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, io);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_stream_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, io);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    if (s->header) {
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_stream_header);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, io);
    }
}

/* Map a streamed transfer's curl outcome to HF_E* (0: a status arrived). */
static int stream_outcome(CURLcode cc, stream_io *io, const char *url, char *err, size_t errlen)
{
    const char *m = io->s->method;
    if (io->sink_rc) return io->sink_rc;                 /* the sink wrote err */
    if (io->read_errno) {
        snprintf(err, errlen, "%s %s: reading the body: %s", m, url,
                 io->sent < io->s->body_size && io->read_errno == EIO ? "the file is shorter than its size"
                                                                     : strerror(io->read_errno));
        return HF_EIO;
    }
    if (io->over) {
        snprintf(err, errlen, "%s %s: response larger than %u bytes", m, url, HF_HTTP_MAX_BODY);
        return HF_ETOOBIG;
    }
    /* A server that refuses an upload may answer before it has read the
     * body and close: curl then reports a send (or receive) error although
     * a final status arrived; that status is the answer. */
    if ((cc == CURLE_SEND_ERROR || cc == CURLE_RECV_ERROR) && io->s->status >= 400) return 0;
    if (cc == CURLE_OK) return 0;
    snprintf(err, errlen, "%s %s: %s", m, url, curl_easy_strerror(cc));
    return cc == CURLE_OPERATION_TIMEDOUT ? HF_ETIMEOUT : HF_ECONN;
}

int hf_http_stream_run(hf_http *c, hf_http_stream *s, char *err, size_t errlen)
{
    char url[4096];
    struct curl_slist *hdr = NULL;
    stream_io io = {.s = s, .c = c, .h = c->curl, .cancel = c->cancel};
    s->status = 0;
    s->answer = NULL;
    s->answer_len = 0;
    if (make_url(c, s->path, url, sizeof url, err, errlen)) return HF_EINVAL;
    /* not sent again here (the body is read once): the caller's next try
     * goes to the URL the follow set moved to */
    hf_buf_init(&io.answer, s->sink ? STREAM_ANSWER_MAX : HF_HTTP_MAX_BODY);
    prepare(c, s->method, url, &hdr, s->body_fd >= 0);
    if (s->body_fd >= 0) hdr = curl_slist_append(hdr, "Content-Type: application/octet-stream");
    for (const char *const *p = s->headers; p && *p; p++) hdr = curl_slist_append(hdr, *p);
    stream_setup(c, &io, hdr);
    CURLcode cc = curl_easy_perform(c->curl);
    curl_slist_free_all(hdr);
    if (!s->status) curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &s->status);
    int rc = stream_outcome(cc, &io, url, err, errlen);
    if (rc == 0 || rc == HF_ECONN || rc == HF_ETIMEOUT)
        follow_observe(c, rc != 0, s->status, io.answer.data, io.answer.len);
    if (rc == 0) s->answer = hf_buf_take(&io.answer, &s->answer_len);
    hf_buf_free(&io.answer);
    return rc;
}

int hf_http_upload(hf_http *c, const char *method, const char *path, int fd, int64_t size,
                   const char *const *headers, hf_http_progress_fn *progress, void *ud,
                   long *status, json_t **resp, char *err, size_t errlen)
{
    hf_http_stream s = {.method = method, .path = path, .headers = headers, .body_fd = fd, .body_size = size,
                        .progress = progress, .progress_ud = ud};
    *status = 0;
    *resp = NULL;
    int rc = hf_http_stream_run(c, &s, err, errlen);
    if (rc == 0) {
        *status = s.status;
        if (s.answer_len > 0) *resp = json_loadb(s.answer, s.answer_len, JSON_DECODE_ANY, NULL);
    }
    free(s.answer);
    return rc;
}
