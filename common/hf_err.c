/*
 * hf_err.c — messages for the error codes of hf_err.h.
 */
#include "hf_err.h"

#include <errno.h>

static const char *const messages[] = {
    [0] = "success",
    [1] = "invalid argument",
    [2] = "out of memory",
    [3] = "I/O error",
    [4] = "not found",
    [5] = "already exists",
    [6] = "too large",
    [7] = "parse error",
    [8] = "timed out",
    [9] = "connection failed",
    [10] = "unexpected HTTP status",
    [11] = "database error",
    [12] = "not allowed in the current state",
    [13] = "authentication required",
    [14] = "permission denied",
    [15] = "no space left on device",
    [16] = "corrupt data",
    [17] = "not supported",
    [18] = "child process failed",
    [19] = "peer disagreement",
};

const char *hf_strerror(int code)
{
    if (code > 0 || code <= HF_E_LAST)
        return "unknown error";
    return messages[-code];
}

int hf_err_from_errno(int errnum)
{
    switch (errnum) {
    case 0: return HF_OK;
    case ENOMEM: return HF_ENOMEM;
    case ENOENT: return HF_ENOTFOUND;
    case EEXIST: return HF_EEXIST;
    case ENOSPC: case EDQUOT: return HF_ENOSPC;
    case EACCES: case EPERM: return HF_EPERM;
    case ETIMEDOUT: case EAGAIN: return HF_ETIMEOUT;
    case ECONNREFUSED: case ECONNRESET: case EPIPE: case EHOSTUNREACH: case ENETUNREACH: return HF_ECONN;
    case EINVAL: return HF_EINVAL;
    case E2BIG: case EFBIG: case EOVERFLOW: return HF_ETOOBIG;
    default: return HF_EIO;
    }
}
