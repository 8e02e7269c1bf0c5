/*
 * hf_file.c — durable-file helpers (see hf_file.h).
 */
#include "hf_file.h"

#include "hf_err.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

int hf_file_write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return w < 0 ? hf_err_from_errno(errno) : HF_EIO;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

int hf_file_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return hf_err_from_errno(errno);
    int rc = fsync(fd) == 0 ? 0 : hf_err_from_errno(errno);
    close(fd);
    return rc;
}
