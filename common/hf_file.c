/*
 * hf_file.c — durable-file helpers (see hf_file.h).
 */
#include "hf_file.h"

#include "hf_err.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
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

int hf_file_fsync_parent(const char *path)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    return hf_file_fsync_dir(dir);
}

int hf_file_mkdir_durable(const char *path)
{
    if (mkdir(path, 0755) != 0) return errno == EEXIST ? 0 : hf_err_from_errno(errno);
    return hf_file_fsync_parent(path);
}
