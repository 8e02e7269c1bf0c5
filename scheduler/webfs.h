/*
 * webfs.h — mapping a request path to a file under the --web root without
 * path traversal. Rejected: anything not starting with '/', backslashes,
 * '%' left after MHD's unescaping (double encoding), "." and ".."
 * segments, control bytes, over-long paths; then the joined path is
 * resolved with realpath(3) (which follows symlinks) and must still lie
 * inside the resolved root, and be a regular file.
 */
#ifndef HF_WEBFS_H
#define HF_WEBFS_H

#include <stddef.h>

#define WEBFS_PATH_MAX 1024

/* root_real: realpath of the web root. url: the decoded request path.
 * RET 0 with the resolved file in out; HF_EINVAL for a forbidden path
 * (400); HF_ENOTFOUND when missing or outside the root (404). */
int webfs_resolve(const char *root_real, const char *url, char *out, size_t outlen);
/* Content-Type for a file name. */
const char *webfs_mime(const char *path);

#endif
