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
const char *hf_http_base(const hf_http *c);

/* Send method to base_url+path with body serialised as JSON (NULL = no body).
 * RET 0 when any HTTP response arrived: *status is set and *resp is the
 * parsed JSON body or NULL when the body is empty or not JSON (caller
 * decrefs). RET HF_ECONN / HF_ETIMEOUT / HF_ETOOBIG with a message in err. */
int hf_http_request(hf_http *c, const char *method, const char *path, const json_t *body,
                    long *status, json_t **resp, char *err, size_t errlen);

/* Same, but the raw response body is returned (caller frees *body_out). */
int hf_http_request_raw(hf_http *c, const char *method, const char *path, const char *body,
                        long *status, char **body_out, size_t *len_out, char *err, size_t errlen);

/* Progress of a streamed upload: sent of total bytes (from libcurl's
 * progress callback, about once a second and at each chunk). */
typedef void hf_http_progress_fn(void *ud, int64_t sent, int64_t total);

/* Send method (PUT) to base_url+path with a body of size bytes read from
 * fd (at its current offset), streamed: never held in memory. headers:
 * extra "Name: value" lines, NULL-terminated (may be NULL); progress may
 * be NULL. Not retried (the body is read once); no total timeout, but a
 * transfer stalled for the client's timeout is aborted.
 * RET as hf_http_request: 0 when a response arrived (*status, *resp: the
 * JSON body or NULL), HF_ECONN / HF_ETIMEOUT / HF_EIO (reading fd) with a
 * message in err. */
int hf_http_upload(hf_http *c, const char *method, const char *path, int fd, int64_t size,
                   const char *const *headers, hf_http_progress_fn *progress, void *ud,
                   long *status, json_t **resp, char *err, size_t errlen);

#endif
