/*
 * hf_xfer.h — the one way hyperfarm moves a file's bytes over HTTP: a
 * streamed, SHA-256-verified transfer to or from a content-addressed store
 * (the scheduler's checkpoint and context stores, docs/scheduler.md "The
 * checkpoint store"). The agent's checkpoint uploads and object fetches
 * (agent/agent_objects.c) and the CLI's `download` (cli/cli_ckpt.c) use it.
 *
 * Built on hf_http's streamed transfer (hf_http_stream_run), so the TLS CA
 * file, the bearer token and the connect timeout come from the hf_http
 * client like every other request. Neither direction holds a file in
 * memory (a fixed buffer), there is no total timeout (a large object
 * takes what it takes) but a stalled transfer is aborted (hf_xfer_opts),
 * and nothing is retried here: the callers have their own policies.
 *
 * Upload: PUT (or another method) with the file's bytes, its size as the
 * Content-Length and "X-Hyperfarm-Sha256: <hex>" for the server to verify.
 *
 * Download: into a temp file beside the destination (".NAME.part-XXXXXX"),
 * hashed while it arrives and refused as soon as more bytes than expected
 * arrive; only when size and SHA-256 are the expected ones is the file
 * fsynced and renamed to its name (and the directory fsynced), so the
 * destination never holds a partial or wrong object under its real name.
 *
 * Errors: an HTTP status that is not 2xx is an HF_E* code (hf_xfer_status:
 * 400 HF_EINVAL, 401/403 HF_EAUTH, 404/410 HF_ENOTFOUND, 409/422
 * HF_ECORRUPT (the store found other bytes than declared), 413 HF_ETOOBIG,
 * 507 HF_ENOSPC, other HF_EHTTP) with the server's JSON "error" message;
 * a server that refuses early (answers 4xx before it read the body, and
 * closes) is that status, not HF_ECONN. Thread-safe as long as each
 * thread uses its own hf_http client.
 */
#ifndef HF_XFER_H
#define HF_XFER_H

#include "hf_http.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* Options of one transfer; a NULL opts = all defaults. */
typedef struct hf_xfer_opts {
    const char          *what;         /* the errors' prefix, e.g. "uploading checkpoint ab12 of trial 7"
                                        * (NULL: "METHOD URL") */
    const char *const   *headers;      /* extra "Name: value" lines, NULL-terminated (may be NULL) */
    hf_http_progress_fn *progress;     /* bytes moved of the total (may be NULL) */
    void                *progress_ud;
    int64_t              stall_bytes;  /* abort below stall_bytes per second ... */
    long                 stall_s;      /* ... for stall_s seconds (0: 1 B/s for the client's timeout) */
} hf_xfer_opts;

/* The HF_E* code of a non-2xx status (0 for 2xx), with "what: HTTP N:
 * message" in err, message being the "error" string of the JSON answer
 * body (len bytes; may be NULL) when it has one. */
int hf_xfer_status(long status, const char *body, size_t len, const char *what, char *err, size_t errlen);

/* Upload size bytes read from fd (at its current offset) by method to
 * path; sha256: the bytes' lowercase hex SHA-256, sent as
 * X-Hyperfarm-Sha256 (NULL: no header).
 * OUT *status: the HTTP status (0 when none arrived); *resp (may be NULL):
 * the JSON answer, also of an error status (caller decrefs; NULL when
 * none or not JSON). RET 0 (2xx); the status's code (hf_xfer_status);
 * HF_EIO (reading fd); HF_ECONN / HF_ETIMEOUT; err says which. */
int hf_xfer_put(hf_http *c, const char *method, const char *path, int fd, int64_t size, const char *sha256,
                const hf_xfer_opts *o, long *status, json_t **resp, char *err, size_t errlen);

/* Download path into dest (see the file comment): size bytes whose
 * SHA-256 is sha256 (64 lowercase hex). An existing dest is replaced.
 * OUT *status (0 when none arrived); *resp (may be NULL): the JSON answer
 * of an error status (caller decrefs). RET 0; the status's code
 * (hf_xfer_status); HF_ECORRUPT (other bytes, more or fewer than size:
 * err names the hash and size that arrived); HF_EIO / HF_ENOSPC (writing
 * the file); HF_EINVAL (bad arguments); HF_ECONN / HF_ETIMEOUT. On any
 * error nothing is left behind. */
int hf_xfer_get(hf_http *c, const char *path, const char *sha256, int64_t size, const char *dest,
                const hf_xfer_opts *o, long *status, json_t **resp, char *err, size_t errlen);

#endif
