/*
 * data.c — IDX files (through zlib), dataset views, normalisation and the
 * seeded, sharded mini-batch loader (data.h).
 *
 * The decoded-file cache: every trial is a new process that loads the
 * data set again, and gunzipping Fashion-MNIST's 26 MB of training images
 * took 0.23 s of CPU — a third of a one-epoch trial's start-up, paid by
 * every rung-0 trial of an ASHA sweep (docs/search.md, the head-to-head
 * with Optuna). tr_file_read_gz keeps the decompressed bytes of a .gz
 * file in a cache directory (tr_data_cache_dir) under a name made of the
 * source's device, inode, size and mtime, so an edited or replaced source
 * never meets a stale copy. A cached copy is used only when its length and
 * CRC-32 equal the ISIZE and CRC-32 in the source's own gzip trailer: a
 * torn or corrupted cache file is ignored (and rewritten), never trusted.
 * The cache is written best effort (a temp file, then rename); any failure
 * there only costs the speed-up. A training set read from the cache stays
 * in the file's read-only mapping (cache_map); tr_dataset_free unmaps it.
 */
#include "data.h"

#include "hf_err.h"
#include "hf_log.h"
#include "layer.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define IDX_MAX_BYTES ((size_t)1 << 31)

/* Validate an IDX file held in memory; RET 0 with dims and *hdr (the
 * payload's offset), or an HF_E code with err (tr_idx_parse's contract). */
static int idx_check(const uint8_t *buf, size_t len, int want_dims, int *dims, size_t *hdr_out, char *err, size_t el)
{
    if (len < 4) return snprintf(err, el, "truncated: %zu bytes, no IDX header", len), HF_ECORRUPT;
    if (buf[0] != 0 || buf[1] != 0)
        return snprintf(err, el, "wrong magic %02x%02x%02x%02x (not an IDX file)", buf[0], buf[1], buf[2], buf[3]),
               HF_EPARSE;
    if (buf[2] != 0x08)
        return snprintf(err, el, "IDX element type 0x%02x unsupported (want 0x08, unsigned byte)", buf[2]), HF_EPARSE;
    if (buf[3] != want_dims)
        return snprintf(err, el, "IDX has %d dimensions, want %d", buf[3], want_dims), HF_EPARSE;
    size_t hdr = 4 + 4 * (size_t)want_dims;
    if (len < hdr) return snprintf(err, el, "truncated header (%zu of %zu bytes)", len, hdr), HF_ECORRUPT;
    uint64_t total = 1;
    for (int i = 0; i < want_dims; i++) {
        const uint8_t *p = buf + 4 + 4 * i;
        uint32_t d = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
        if (d == 0 || d > (1u << 30)) return snprintf(err, el, "dimension %d is %u", i, d), HF_EPARSE;
        total *= d;
        if (total > IDX_MAX_BYTES) return snprintf(err, el, "IDX payload over 2 GiB"), HF_ETOOBIG;
        dims[i] = (int)d;
    }
    if (len - hdr < total)
        return snprintf(err, el, "truncated: header says %llu data bytes, file has %zu", (unsigned long long)total,
                        len - hdr), HF_ECORRUPT;
    if (len - hdr > total)
        return snprintf(err, el, "%zu bytes after the %llu the header declares", len - hdr - (size_t)total,
                        (unsigned long long)total), HF_ECORRUPT;
    *hdr_out = hdr;
    return 0;
}

int tr_idx_parse(const uint8_t *buf, size_t len, int want_dims, uint8_t **data, int *dims, char *err, size_t el)
{
    size_t hdr;
    *data = NULL;
    int rc = idx_check(buf, len, want_dims, dims, &hdr, err, el);
    if (rc) return rc;
    *data = malloc(len - hdr);
    if (!*data) return snprintf(err, el, "out of memory"), HF_ENOMEM;
    memcpy(*data, buf + hdr, len - hdr);
    return 0;
}

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

/* The cached decoded copy of path, mapped read-only, if it matches path's
 * gzip trailer. Mapped, not read: the pages come straight from the page
 * cache, with no copy and no fresh anonymous memory to fault in (a 47 MB
 * read cost a one-epoch trial 40 ms). Cache files are only ever replaced
 * by rename (cache_put), never rewritten in place, so a mapping cannot
 * change under its reader. RET 0 with *map (munmap(*map, *len) to free)
 * and *len, or -1 (no usable copy). */
static int cache_map(const char *path, size_t max, uint8_t **map, size_t *len)
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
    if (cache_map(path, max, &m, &n) == 0) {
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

int tr_file_read_gunzip(const char *path, size_t max, uint8_t **out, size_t *len, char *err, size_t el)
{
    *out = NULL;
    *len = 0;
    int rc = 0;
    uint8_t *buf = NULL;
    size_t cap = 0, n = 0;
    gzFile f = gzopen(path, "rb");
    if (!f) {
        int e = errno;
        snprintf(err, el, "%s: %s", path, strerror(e ? e : ENOMEM));
        return e == ENOENT ? HF_ENOTFOUND : HF_EIO;
    }
    for (;;) {
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : (1 << 20);
            if (ncap > max + 1) ncap = max + 1;
            if (ncap <= cap) { snprintf(err, el, "%s: larger than %zu bytes", path, max); rc = HF_ETOOBIG; goto end; }
            uint8_t *nb = realloc(buf, ncap);
            if (!nb) { snprintf(err, el, "%s: out of memory", path); rc = HF_ENOMEM; goto end; }
            buf = nb;
            cap = ncap;
        }
        size_t want = cap - n;
        if (want > (1u << 30)) want = 1u << 30;
        int r = gzread(f, buf + n, (unsigned)want);
        if (r < 0) {
            int zerr;
            const char *m = gzerror(f, &zerr);
            snprintf(err, el, "%s: corrupt gzip data (%s)", path, m ? m : "?");
            rc = zerr == Z_ERRNO ? HF_EIO : HF_ECORRUPT;
            goto end;
        }
        if (r == 0) break;
        n += (size_t)r;
        if (n > max) { snprintf(err, el, "%s: larger than %zu bytes", path, max); rc = HF_ETOOBIG; goto end; }
    }
    /* gzread stops quietly at a gzip stream cut short; zlib reports it via gzerror */
    {
        int zerr = Z_OK;
        gzerror(f, &zerr);
        if (zerr != Z_OK && zerr != Z_STREAM_END) {
            snprintf(err, el, "%s: truncated or corrupt gzip stream", path);
            rc = HF_ECORRUPT;
            goto end;
        }
    }
    *out = buf;
    *len = n;
    buf = NULL;
end:
    gzclose(f);
    free(buf);
    return rc;
}

int tr_dataset_load(const char *ipath, const char *lpath, tr_dataset *ds, char *err, size_t el)
{
    memset(ds, 0, sizeof *ds);
    uint8_t *raw = NULL, *img = NULL, *lab = NULL;
    size_t len;
    int dims[3], ldim[1], rc;
    char e2[256];
    uint8_t *map = NULL;
    size_t map_len = 0, hdr;
    if (cache_map(ipath, IDX_MAX_BYTES, &map, &map_len) == 0) {
        /* the images stay in the cache file's mapping */
        if (idx_check(map, map_len, 3, dims, &hdr, e2, sizeof e2) == 0) {
            ds->map = map;
            ds->map_len = map_len;
            ds->images = map + hdr;
        } else {
            munmap(map, map_len);
        }
    }
    if (!ds->map) {
        if ((rc = tr_file_read_gz(ipath, IDX_MAX_BYTES, &raw, &len, err, el))) goto end;
        rc = tr_idx_parse(raw, len, 3, &img, dims, e2, sizeof e2);
        free(raw);
        raw = NULL;
        if (rc) { snprintf(err, el, "%s: %s", ipath, e2); goto end; }
        ds->images = img;
        img = NULL;
    }
    if ((rc = tr_file_read_gz(lpath, IDX_MAX_BYTES, &raw, &len, err, el))) goto end;
    rc = tr_idx_parse(raw, len, 1, &lab, ldim, e2, sizeof e2);
    if (rc) { snprintf(err, el, "%s: %s", lpath, e2); goto end; }
    if (ldim[0] != dims[0]) {
        snprintf(err, el, "mismatched counts: %s has %d images, %s has %d labels", ipath, dims[0], lpath, ldim[0]);
        rc = HF_ECORRUPT;
        goto end;
    }
    ds->n = dims[0];
    ds->c = 1;
    ds->h = dims[1];
    ds->w = dims[2];
    ds->labels = malloc((size_t)ds->n * sizeof(int32_t));
    if (!ds->labels) { snprintf(err, el, "out of memory"); rc = HF_ENOMEM; goto end; }
    int mx = 1;
    for (int i = 0; i < ds->n; i++) {
        ds->labels[i] = lab[i];
        if (lab[i] > mx) mx = lab[i];
    }
    ds->n_classes = mx + 1;
    ds->mean = 0.0f;
    ds->std = 1.0f;
end:
    free(raw);
    free(img);
    free(lab);
    if (rc) tr_dataset_free(ds);
    return rc;
}

int tr_data_load(const char *dir, tr_dataset *train, tr_dataset *test, char *err, size_t el)
{
    static const char *names[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                                   "t10k-labels-idx1-ubyte"};
    char p[4][1100];
    memset(test, 0, sizeof *test);
    for (int i = 0; i < 4; i++) {
        /* prefer NAME.gz, accept the uncompressed NAME */
        snprintf(p[i], sizeof p[i], "%s/%s.gz", dir, names[i]);
        FILE *f = fopen(p[i], "rb");
        if (f) { fclose(f); continue; }
        snprintf(p[i], sizeof p[i], "%s/%s", dir, names[i]);
        f = fopen(p[i], "rb");
        if (f) { fclose(f); continue; }
        snprintf(err, el, "%s/%s.gz: missing (install dataset-fashion-mnist or pass --data DIR)", dir, names[i]);
        memset(train, 0, sizeof *train);
        return HF_ENOTFOUND;
    }
    int rc = tr_dataset_load(p[0], p[1], train, err, el);
    if (rc) return rc;
    rc = tr_dataset_load(p[2], p[3], test, err, el);
    if (rc) { tr_dataset_free(train); return rc; }
    if (train->h != test->h || train->w != test->w) {
        snprintf(err, el, "train images are %dx%d, test images %dx%d", train->h, train->w, test->h, test->w);
        tr_dataset_free(train);
        tr_dataset_free(test);
        return HF_ECORRUPT;
    }
    /* Mean and variance from a histogram of the byte values: one increment
     * per pixel instead of a chain of double additions (72 ms -> ~15 ms
     * for Fashion-MNIST's 47 M pixels); four tables so that runs of equal
     * pixels do not serialise on one counter. */
    uint64_t hist[4][256] = {{0}};
    size_t n = (size_t)train->n * train->c * train->h * train->w, i = 0;
    const uint8_t *px = train->images;
    for (; i + 4 <= n; i += 4) {
        hist[0][px[i]]++;
        hist[1][px[i + 1]]++;
        hist[2][px[i + 2]]++;
        hist[3][px[i + 3]]++;
    }
    for (; i < n; i++) hist[0][px[i]]++;
    double s = 0, ss = 0;
    for (int b = 0; b < 256; b++) {
        double cnt = (double)(hist[0][b] + hist[1][b] + hist[2][b] + hist[3][b]), v = b / 255.0;
        s += cnt * v;
        ss += cnt * v * v;
    }
    double mean = s / n, var = ss / n - mean * mean;
    train->mean = test->mean = (float)mean;
    train->std = test->std = (float)sqrt(var > 1e-12 ? var : 1e-12);
    if (test->n_classes > train->n_classes) train->n_classes = test->n_classes;
    test->n_classes = train->n_classes;
    return 0;
}

void tr_dataset_head(const tr_dataset *all, int n, tr_dataset *out)
{
    *out = *all;
    out->view = 1;
    if (n > 0 && n < all->n) out->n = n;
}

void tr_dataset_split(const tr_dataset *all, int val, tr_dataset *train, tr_dataset *valset)
{
    if (val < 0) val = 0;
    if (val >= all->n) val = all->n - 1;
    *train = *all;
    train->view = 1;
    train->n = all->n - val;
    *valset = *all;
    valset->view = 1;
    valset->n = val;
    size_t per = (size_t)all->c * all->h * all->w;
    valset->images = all->images + (size_t)train->n * per;
    valset->labels = all->labels + train->n;
}

void tr_dataset_free(tr_dataset *ds)
{
    if (!ds) return;
    if (!ds->view) {
        if (ds->map)
            munmap(ds->map, ds->map_len);
        else
            free(ds->images);
        free(ds->labels);
    }
    memset(ds, 0, sizeof *ds);
}

void tr_dataset_gather(const tr_dataset *ds, const int32_t *idx, int B, float *x, int32_t *y)
{
    size_t per = (size_t)ds->c * ds->h * ds->w;
    float k = 1.0f / (255.0f * ds->std), b = -ds->mean / ds->std;
    for (int r = 0; r < B; r++) {
        const uint8_t *s = ds->images + (size_t)idx[r] * per;
        float *d = x + (size_t)r * per;
        for (size_t i = 0; i < per; i++) d[i] = (float)s[i] * k + b;
        y[r] = ds->labels[idx[r]];
    }
}

/* ---- loader --------------------------------------------------------- */

int tr_loader_init(tr_loader *l, const tr_dataset *ds, int G, int rank, int world, uint64_t seed, int shuffle)
{
    memset(l, 0, sizeof *l);
    if (G <= 0 || world <= 0 || rank < 0 || rank >= world || ds->n <= 0) return HF_EINVAL;
    l->ds = ds;
    l->global_batch = G;
    l->rank = rank;
    l->world = world;
    l->seed = seed;
    l->shuffle = shuffle;
    l->perm = malloc((size_t)ds->n * sizeof(int32_t));
    if (!l->perm) return HF_ENOMEM;
    tr_loader_seek(l, 0, 0);
    return 0;
}

void tr_loader_free(tr_loader *l)
{
    if (!l) return;
    free(l->perm);
    l->perm = NULL;
}

void tr_loader_seek(tr_loader *l, int epoch, int64_t batch)
{
    int n = l->ds->n;
    for (int i = 0; i < n; i++) l->perm[i] = i;
    if (l->shuffle) {
        /* Fisher-Yates from a counter-based stream: depends on (seed, epoch) only */
        for (int i = n - 1; i > 0; i--) {
            uint64_t h = tr_hash64(l->seed, 0xDA7A, (uint64_t)epoch, (uint64_t)i);
            int j = (int)(h % (uint64_t)(i + 1));
            int32_t t = l->perm[i];
            l->perm[i] = l->perm[j];
            l->perm[j] = t;
        }
    }
    l->epoch = epoch;
    l->batch = batch;
}

int64_t tr_loader_batches(const tr_loader *l)
{
    return ((int64_t)l->ds->n + l->global_batch - 1) / l->global_batch;
}

static void augment_row(const tr_loader *l, float *x, int64_t pos)
{
    const tr_dataset *ds = l->ds;
    int H = ds->h, W = ds->w;
    uint64_t h = tr_hash64(l->seed, 0xA06, (uint64_t)l->epoch, (uint64_t)pos);
    int flip = l->flip && (h & 1);
    int dy = 0, dx = 0;
    if (l->shift > 0) {
        int span = 2 * l->shift + 1;
        dy = (int)((h >> 8) % (uint64_t)span) - l->shift;
        dx = (int)((h >> 24) % (uint64_t)span) - l->shift;
    }
    if (!flip && !dy && !dx) return;
    float bg = -ds->mean / ds->std, tmp[64 * 64];
    if ((size_t)H * W > sizeof tmp / sizeof tmp[0]) return;
    for (int c = 0; c < ds->c; c++) {
        float *p = x + (size_t)c * H * W;
        memcpy(tmp, p, (size_t)H * W * sizeof(float));
        for (int yy = 0; yy < H; yy++)
            for (int xx = 0; xx < W; xx++) {
                int sy = yy - dy, sx = xx - dx;
                if (flip) sx = W - 1 - sx;
                p[yy * W + xx] = (sy >= 0 && sy < H && sx >= 0 && sx < W) ? tmp[sy * W + sx] : bg;
            }
    }
}

int tr_loader_next(tr_loader *l, float *x, int32_t *y, int *rows, int *gb, int64_t *row_base)
{
    int64_t nb = tr_loader_batches(l);
    if (l->batch >= nb) return 0;
    int64_t start = l->batch * l->global_batch, end = start + l->global_batch;
    if (end > l->ds->n) end = l->ds->n;
    int g = (int)(end - start);
    int lo = (int)((int64_t)g * l->rank / l->world), hi = (int)((int64_t)g * (l->rank + 1) / l->world);
    tr_dataset_gather(l->ds, l->perm + start + lo, hi - lo, x, y);
    if (l->flip || l->shift) {
        size_t per = (size_t)l->ds->c * l->ds->h * l->ds->w;
        for (int r = 0; r < hi - lo; r++) augment_row(l, x + (size_t)r * per, start + lo + r);
    }
    *rows = hi - lo;
    if (gb) *gb = g;
    if (row_base) *row_base = lo;
    l->batch++;
    return 1;
}
