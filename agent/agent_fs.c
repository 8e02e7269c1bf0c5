/*
 * agent_fs.c — path checks and file operations for trial directories
 * (see agent_fs.h).
 */
#include "agent_fs.h"
#include "hf_err.h"
#include "hf_time.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int agent_fs_check_rel(const char *rel, char *err, size_t errlen)
{
    size_t n = rel ? strlen(rel) : 0;
    if (n == 0) {
        snprintf(err, errlen, "empty path");
        return HF_EINVAL;
    }
    if (n > AGENT_PATH_MAX / 2) {
        snprintf(err, errlen, "path longer than %d bytes", AGENT_PATH_MAX / 2);
        return HF_EINVAL;
    }
    if (rel[0] == '/') {
        snprintf(err, errlen, "absolute path not allowed");
        return HF_EINVAL;
    }
    if (rel[n - 1] == '/') {
        snprintf(err, errlen, "trailing '/' not allowed");
        return HF_EINVAL;
    }
    const char *p = rel;
    while (*p) {
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 0) {     /* "a//b" */
            snprintf(err, errlen, "empty path component");
            return HF_EINVAL;
        }
        if ((len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.')) {
            snprintf(err, errlen, "'.' and '..' components not allowed");
            return HF_EINVAL;
        }
        for (size_t i = 0; i < len; i++) {
            unsigned char c = (unsigned char)p[i];
            if (c < 0x20 || c == 0x7f) {
                snprintf(err, errlen, "control character in path");
                return HF_EINVAL;
            }
        }
        if (!e) break;
        p = e + 1;
    }
    return HF_OK;
}

int agent_fs_mkdirs(const char *path)
{
    char buf[AGENT_PATH_MAX];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) return HF_EINVAL;
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0755) && errno != EEXIST) return hf_err_from_errno(errno);
        *p = '/';
    }
    if (mkdir(buf, 0755) && errno != EEXIST) return hf_err_from_errno(errno);
    struct stat st;
    if (stat(buf, &st) || !S_ISDIR(st.st_mode)) return HF_EIO;
    return HF_OK;
}

static int copy_file(const char *src, const char *dst, char *err, size_t errlen)
{
    char tmp[AGENT_PATH_MAX + 8], buf[65536];
    int in = -1, out = -1, rc = HF_OK;
    ssize_t r;

    if (snprintf(tmp, sizeof tmp, "%s.tmp", dst) >= (int)sizeof tmp) {
        snprintf(err, errlen, "%s: path too long", dst);
        return HF_EINVAL;
    }
    if ((in = open(src, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0
        || (out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0) {
        rc = hf_err_from_errno(errno);
        snprintf(err, errlen, "%s: %s", in < 0 ? src : tmp, strerror(errno));
        goto end;
    }
    while ((r = read(in, buf, sizeof buf)) != 0) {
        if (r < 0) {
            if (errno == EINTR) continue;
            rc = hf_err_from_errno(errno);
            snprintf(err, errlen, "read %s: %s", src, strerror(errno));
            goto end;
        }
        for (ssize_t off = 0; off < r;) {
            ssize_t w = write(out, buf + off, (size_t)(r - off));
            if (w < 0) {
                if (errno == EINTR) continue;
                rc = hf_err_from_errno(errno);
                snprintf(err, errlen, "write %s: %s", tmp, strerror(errno));
                goto end;
            }
            off += w;
        }
    }
    if (fsync(out)) {
        rc = hf_err_from_errno(errno);
        snprintf(err, errlen, "fsync %s: %s", tmp, strerror(errno));
        goto end;
    }
    close(out);
    out = -1;
    if (rename(tmp, dst)) {
        rc = hf_err_from_errno(errno);
        snprintf(err, errlen, "rename %s: %s", dst, strerror(errno));
    }
end:
    if (in >= 0) close(in);
    if (out >= 0) {
        close(out);
        unlink(tmp);
    }
    return rc;
}

static int copy_tree(const char *src, const char *dst, int depth, int *files, char *err, size_t errlen)
{
    char s[AGENT_PATH_MAX], d[AGENT_PATH_MAX];
    struct dirent *de;
    struct stat st;
    int rc;
    DIR *dir;

    if (depth > AGENT_COPY_MAX_DEPTH) {
        snprintf(err, errlen, "%s: deeper than %d levels", src, AGENT_COPY_MAX_DEPTH);
        return HF_ETOOBIG;
    }
    if ((rc = agent_fs_mkdirs(dst))) {
        snprintf(err, errlen, "mkdir %s: %s", dst, hf_strerror(rc));
        return rc;
    }
    if (!(dir = opendir(src))) {
        snprintf(err, errlen, "%s: %s", src, strerror(errno));
        return hf_err_from_errno(errno);
    }
    while ((de = readdir(dir))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        if (snprintf(s, sizeof s, "%s/%s", src, de->d_name) >= (int)sizeof s
            || snprintf(d, sizeof d, "%s/%s", dst, de->d_name) >= (int)sizeof d) {
            snprintf(err, errlen, "%s: path too long", src);
            rc = HF_ETOOBIG;
            break;
        }
        if (lstat(s, &st)) continue;            /* vanished meanwhile */
        if (S_ISDIR(st.st_mode)) rc = copy_tree(s, d, depth + 1, files, err, errlen);
        else if (S_ISREG(st.st_mode)) {
            if (++*files > AGENT_COPY_MAX_FILES) {
                snprintf(err, errlen, "%s: more than %d files", src, AGENT_COPY_MAX_FILES);
                rc = HF_ETOOBIG;
            } else rc = copy_file(s, d, err, errlen);
        }
        if (rc) break;
    }
    closedir(dir);
    return rc;
}

int agent_fs_copy_tree(const char *src, const char *dst, char *err, size_t errlen)
{
    int files = 0;
    struct stat st;
    if (lstat(src, &st) || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s: not a directory", src);
        return HF_ENOTFOUND;
    }
    return copy_tree(src, dst, 0, &files, err, errlen);
}

int agent_fs_write_file(const char *path, const char *text, size_t len)
{
    char tmp[AGENT_PATH_MAX + 8];
    int rc = HF_OK, fd = -1;
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) return HF_EINVAL;
    if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0) return hf_err_from_errno(errno);
    if ((len && write(fd, text, len) != (ssize_t)len) || fsync(fd)) {
        rc = hf_err_from_errno(errno);
        goto end;
    }
    close(fd);
    fd = -1;
    if (rename(tmp, path)) rc = hf_err_from_errno(errno);
end:
    if (fd >= 0) {
        close(fd);
        unlink(tmp);
    }
    return rc;
}

int agent_fs_write_control(const char *path, int should_stop, const char *reason)
{
    int rc;
    char *text = NULL, *line = NULL;
    json_t *o = json_pack("{s:b, s:s?, s:I}", "should_stop", should_stop, "reason", reason,
                          "time", (json_int_t)hf_wall_ms());

    if (!o || !(text = json_dumps(o, JSON_COMPACT)) || asprintf(&line, "%s\n", text) < 0) {
        line = NULL;
        rc = HF_ENOMEM;
        goto end;
    }
    rc = agent_fs_write_file(path, line, strlen(line));
end:
    free(line);
    free(text);
    json_decref(o);
    return rc;
}
