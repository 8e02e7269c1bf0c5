/*
 * hf_err.h — the one table of error codes shared by every hyperfarm program.
 *
 * Functions return int: 0 (HF_OK) on success or a negative HF_E* code.
 * hf_strerror() turns a code into a short English message; it never
 * returns NULL. Codes are stable: they may appear in logs and tests.
 */
#ifndef HF_ERR_H
#define HF_ERR_H

enum {
    HF_OK        = 0,
    HF_EINVAL    = -1,  /* invalid argument or input */
    HF_ENOMEM    = -2,  /* out of memory */
    HF_EIO       = -3,  /* I/O error (file, socket) */
    HF_ENOTFOUND = -4,  /* no such object */
    HF_EEXIST    = -5,  /* object already exists */
    HF_ETOOBIG   = -6,  /* input exceeds a configured bound */
    HF_EPARSE    = -7,  /* malformed input (JSON, metric line, file format) */
    HF_ETIMEOUT  = -8,  /* an operation did not finish in time */
    HF_ECONN     = -9,  /* cannot connect / connection lost */
    HF_EHTTP     = -10, /* unexpected HTTP status */
    HF_EDB       = -11, /* database error */
    HF_ESTATE    = -12, /* operation not allowed in the current state */
    HF_EAUTH     = -13, /* missing or wrong credentials */
    HF_EPERM     = -14, /* credentials valid but not allowed */
    HF_ENOSPC    = -15, /* no space left on device */
    HF_ECORRUPT  = -16, /* checksum mismatch, truncated or corrupt data */
    HF_EUNSUP    = -17, /* not supported on this build or machine */
    HF_ECHILD    = -18, /* child process failed */
    HF_EPEER     = -19, /* a peer disagreed or misbehaved (collectives) */
    HF_E_LAST    = -20
};

/* Message for code (0 or negative); "unknown error" for unknown codes. */
const char *hf_strerror(int code);

/* Map an errno value to the closest HF_E* code. */
int hf_err_from_errno(int errnum);

#endif
