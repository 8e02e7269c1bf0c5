/*
 * data_cache.c — the decoded-file cache (data.h, tr_file_read_gz).
 *
 * Every trial is a new process that loads the data set again, and
 * gunzipping Fashion-MNIST's 26 MB of training images took 0.23 s of CPU
 * — a third of a one-epoch trial's start-up, paid by every rung-0 trial of
 * an ASHA sweep (docs/search.md, the head-to-head with Optuna).
 * tr_file_read_gz keeps the decompressed bytes of a .gz file in a cache
 * directory (tr_data_cache_dir) under a name made of the source's device,
 * inode, size and mtime, so an edited or replaced source never meets a
 * stale copy. A cached copy is used only when its length and CRC-32 equal
 * the ISIZE and CRC-32 in the source's own gzip trailer: a torn or
 * corrupted cache file is ignored (and rewritten), never trusted. The
 * cache is written best effort (a temp file, then rename); any failure
 * there only costs the speed-up. A training set read from the cache stays
 * in the file's read-only mapping (tr_data_cache_map); tr_dataset_free
 * unmaps it.
 */
#include "data.h"

#include "hf_log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

int tr_data_cache_dir(char *out, size_t outlen)
{
    const char *v = getenv("HYPERFARM_DATA_CACHE");
    int n;
    if (v) {
        if (!v[0] || !strcmp(v, "off")) return -1;
        n = snprintf(out, outlen, "%s", v);
    } else if ((v = getenv("XDG_CACHE_HOME")) && v[0] == '/') {
        n = snprintf(out, outlen, "%s/hyperfarm/data", v);
    } else if ((v = getenv("HOME")) && v[0] == '/') {
        n = snprintf(out, outlen, "%s/.cache/hyperfarm/data", v);
    } else {
        return -1;
    }
    return n > 0 && (size_t)n < outlen ? 0 : -1;
}

/* mkdir -p of dir (0755). RET 0 or -1. */
static int mkdirs(const char *dir)
{
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) return -1;
    for (char *q = p + 1; *q; q++) {
        if (*q != '/') continue;
        *q = 0;
        if (mkdir(p, 0755) && errno != EEXIST) return -1;
        *q = '/';
    }
    return mkdir(p, 0755) && errno != EEXIST ? -1 : 0;
}

/* The gzip trailer of path (single-member files): CRC-32 and ISIZE (the
 * uncompressed length mod 2^32). RET 0 or -1 (not gzip, unreadable). */
static int gz_trailer(const char *path, uint32_t *crc, uint32_t *isize)
{
    uint8_t b[8], m[2];
    int fd = open(path, O_RDONLY | O_CLOEXEC), rc = -1;
    if (fd < 0) return -1;
    off_t end = lseek(fd, 0, SEEK_END);
    if (end >= 18 && pread(fd, m, 2, 0) == 2 && m[0] == 0x1f && m[1] == 0x8b && pread(fd, b, 8, end - 8) == 8) {
        *crc = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
        *isize = (uint32_t)b[4] | (uint32_t)b[5] << 8 | (uint32_t)b[6] << 16 | (uint32_t)b[7] << 24;
        rc = 0;
    }
    close(fd);
    return rc;
}

/* The cache file's name for path (see the header comment). RET 0 or -1. */
static int cache_name(const char *path, char *out, size_t outlen)
{
    char dir[PATH_MAX];
    struct stat sb;
    if (tr_data_cache_dir(dir, sizeof dir) || stat(path, &sb) || !S_ISREG(sb.st_mode)) return -1;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    int n = snprintf(out, outlen, "%s/%.100s-%llx-%llx-%lld-%lld.%09ld.raw", dir, base, (unsigned long long)sb.st_dev,
                     (unsigned long long)sb.st_ino, (long long)sb.st_size, (long long)sb.st_mtim.tv_sec,
                     (long)sb.st_mtim.tv_nsec);
    return n > 0 && (size_t)n < outlen ? 0 : -1;
}

/* Mapped, not read: the pages come straight from the page cache, with no
 * copy and no fresh anonymous memory to fault in (a 47 MB read cost a
 * one-epoch trial 40 ms). Cache files are only ever replaced by rename
 * (cache_put), never rewritten in place, so a mapping cannot change under
 * its reader. */
int tr_data_cache_map(const char *path, size_t max, uint8_t **map, size_t *len)
{
    char name[PATH_MAX];
    uint32_t crc, isize;
    struct stat sb;
    if (cache_name(path, name, sizeof name) || gz_trailer(path, &crc, &isize)) return -1;
    int fd = open(name, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    if (fstat(fd, &sb) || sb.st_size <= 0 || (uint64_t)sb.st_size > max || (uint32_t)sb.st_size != isize) {
        close(fd);
        return -1;
    }
    size_t n = (size_t)sb.st_size;
    uint8_t *m = mmap(NULL, n, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return -1;
    uLong c = crc32(0L, Z_NULL, 0);
    for (size_t off = 0; off < n; off += 1u << 30) {
        size_t k = n - off < (1u << 30) ? n - off : (1u << 30);
        c = crc32(c, m + off, (uInt)k);
    }
    if ((uint32_t)c != crc) {
        hf_warn("data cache: %s does not match %s's checksum; decompressing again", name, path);
        munmap(m, n);
        return -1;
    }
    *map = m;
    *len = n;
    return 0;
}

/* Store buf as path's cached copy (best effort). */
static void cache_put(const char *path, const uint8_t *buf, size_t len)
{
    char name[PATH_MAX], dir[PATH_MAX], tmp[PATH_MAX + 16];
    if (cache_name(path, name, sizeof name) || tr_data_cache_dir(dir, sizeof dir) || mkdirs(dir)) return;
    snprintf(tmp, sizeof tmp, "%s.XXXXXX", name);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) return;
    size_t n = 0;
    while (n < len) {
        ssize_t w = write(fd, buf + n, len - n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        n += (size_t)w;
    }
    if (close(fd) == 0 && n == len && rename(tmp, name) == 0) {
        hf_debug("data cache: %s -> %s", path, name);
        return;
    }
    unlink(tmp);
}

int tr_file_read_gz(const char *path, size_t max, uint8_t **out, size_t *len, char *err, size_t el)
{
    uint8_t *m;
    size_t n;
    if (tr_data_cache_map(path, max, &m, &n) == 0) {
        *out = malloc(n);
        if (*out) {
            memcpy(*out, m, n);
            *len = n;
        }
        munmap(m, n);
        if (*out) return 0;
    }
    int rc = tr_file_read_gunzip(path, max, out, len, err, el);
    uint32_t crc, isize;
    if (rc == 0 && gz_trailer(path, &crc, &isize) == 0) cache_put(path, *out, *len);
    return rc;
}
