/*
 * hf_http.h — a small JSON-over-HTTP client on libcurl for the agent and
 * the CLI. One hf_http holds one curl easy handle, so connections are kept
 * alive between requests; it is not thread-safe (use one per thread).
 *
 * Timeouts: connect and total per attempt. Retries with exponential
 * backoff (100 ms doubling, capped at 5 s, with jitter) happen when the
 * connection could not be made at all (any method: nothing was sent), and
 * for GET also on other transport errors and on 502/503/504.
 * Response bodies are bounded (HF_HTTP_MAX_BODY).
 *
 * Several schedulers: a base_url that is a comma-separated list
 * "URL1,URL2,..." makes the client follow the primary (hf_follow.h): every
 * request goes to the URL in use, carries X-Hyperfarm-Term (and
 * X-Hyperfarm-Lost-Primary when no primary answered lately), and after a
 * connection never made (refused, or its connect timed out) or a 503 from
 * a standby/fenced scheduler the set moves on and the request is sent
 * again at once to the new URL (once per
 * URL; streamed transfers are not sent again: the caller's next try goes
 * there). All clients made with the same list share one set.
 *
 * This is the one curl stack of the agent and the CLI: one function in
 * hf_http.c sets the TLS CA file, the bearer token, the protocols and the
 * connect timeout of every request, JSON or streamed; the SHA-256-verified
 * file transfers (hf_xfer.h) are built on hf_http_stream_run.
 */
#ifndef HF_HTTP_H
#define HF_HTTP_H

#include <jansson.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define HF_HTTP_MAX_BODY (64u << 20)

typedef struct hf_http hf_http;

/* base_url like "http://127.0.0.1:8080" (no trailing slash needed).
 * token may be NULL (no Authorization header). RET NULL on OOM. */
hf_http *hf_http_new(const char *base_url, const char *token, long timeout_ms, int retries);
void     hf_http_free(hf_http *c);
/* Verify TLS against this CA file instead of the system store (NULL = system). */
void     hf_http_set_cafile(hf_http *c, const char *cafile);
void     hf_http_set_retries(hf_http *c, int retries);
/* Abort a request in progress (HF_ECONN, "aborted") soon after *flag
 * becomes non-zero (within about a second: libcurl's progress callback),
 * so another thread can stop a long-poll. flag NULL = never. */
void     hf_http_set_cancel(hf_http *c, const atomic_int *flag);
/* The base URL requests go to now (with several URLs: the one in use). */
const char *hf_http_base(const hf_http *c);
/* The follow set of a client made with several URLs (borrowed), else NULL. */
struct hf_follow *hf_http_follow(const hf_http *c);

/* Send method to base_url+path with body serialised as JSON (NULL = no body).
 * RET 0 when any HTTP response arrived: *status is set and *resp is the
 * parsed JSON body or NULL when the body is empty or not JSON (caller
 * decrefs). RET HF_ECONN / HF_ETIMEOUT / HF_ETOOBIG with a message in err. */
int hf_http_request(hf_http *c, const char *method, const char *path, const json_t *body,
                    long *status, json_t **resp, char *err, size_t errlen);

/* Same, but the raw response body is returned (caller frees *body_out). */
int hf_http_request_raw(hf_http *c, const char *method, const char *path, const char *body,
                        long *status, char **body_out, size_t *len_out, char *err, size_t errlen);

/* Progress of a streamed transfer: moved of total bytes (uploads: from
 * libcurl's progress callback, many times a second; downloads through
 * hf_xfer.h: at each chunk). */
typedef void hf_http_progress_fn(void *ud, int64_t sent, int64_t total);

/* ---------- streamed transfers (the base of hf_xfer.h) ---------- */

/* Takes one chunk of a 2xx response body. RET 0, or an HF_E* code (with
 * the message in the sink's own state) that aborts the transfer. */
typedef int hf_http_sink_fn(void *ud, const void *p, size_t n);

/* Takes one header line of the answer, without its CR LF and
 * NUL-terminated: the status line ("HTTP/1.1 200 OK") first, so a line
 * starting "HTTP/" begins a new answer's headers (an interim 100 Continue
 * comes before the final one), then each "Name: value". Lines of
 * HF_HTTP_HEADER_MAX bytes or more are not passed. */
#define HF_HTTP_HEADER_MAX 1024
typedef void hf_http_header_fn(void *ud, const char *line);

typedef struct hf_http_stream {
    /* IN */
    const char          *method;        /* "GET", "PUT", ... */
    const char          *path;          /* appended to the base URL */
    const char *const   *headers;       /* extra "Name: value" lines, NULL-terminated; may be NULL */
    int                  body_fd;       /* request body: body_size bytes read from here; -1 = none */
    int64_t              body_size;
    hf_http_sink_fn     *sink;          /* a 2xx body, chunk by chunk; NULL: kept in answer */
    void                *sink_ud;
    hf_http_progress_fn *progress;      /* upload progress (may be NULL) */
    void                *progress_ud;
    hf_http_header_fn   *header;        /* the answer's header lines (may be NULL) */
    void                *header_ud;
    int64_t              stall_bytes;   /* a transfer below stall_bytes per second ... */
    long                 stall_s;       /* ... for stall_s seconds is aborted (0: 1 B/s for the client's timeout) */
    /* OUT */
    long                 status;        /* the final HTTP status; 0 = none arrived */
    char                *answer;        /* the body the sink did not take (caller frees; NUL-terminated) */
    size_t               answer_len;
} hf_http_stream;

/* Run one streamed transfer: the body is read from body_fd through a
 * fixed buffer, never held in memory; a 2xx answer goes to the sink, any
 * other answer is kept (its first 64 KiB) in s->answer, and without a
 * sink every answer is kept (at most HF_HTTP_MAX_BODY). No total timeout
 * (a large body takes its time), a stall aborts; not retried (the body is
 * read once). A server that answers before it has read the whole body
 * and closes (an early refusal) is that answer, not a connection error.
 * RET 0 when a final status arrived (s->status, s->answer set, even when
 * it is an error status); the sink's code; HF_EIO (reading body_fd, or it
 * ended before body_size); HF_ETOOBIG (answer over its bound);
 * HF_ECONN / HF_ETIMEOUT; err says which. */
int hf_http_stream_run(hf_http *c, hf_http_stream *s, char *err, size_t errlen);

/* Send method (PUT) to base_url+path with a body of size bytes read from
 * fd (at its current offset), streamed: hf_http_stream_run without a sink.
 * headers: extra "Name: value" lines, NULL-terminated (may be NULL);
 * progress may be NULL.
 * RET as hf_http_request: 0 when a response arrived (*status, *resp: the
 * JSON body or NULL), HF_ECONN / HF_ETIMEOUT / HF_EIO (reading fd) with a
 * message in err. */
int hf_http_upload(hf_http *c, const char *method, const char *path, int fd, int64_t size,
                   const char *const *headers, hf_http_progress_fn *progress, void *ud,
                   long *status, json_t **resp, char *err, size_t errlen);

#endif
