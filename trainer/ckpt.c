/*
 * ckpt.c — checkpoint encoding and atomic files (ckpt.h).
 *
 * Layout (little-endian; this trainer only runs on little-endian hosts):
 *   0   "HFCKPT01"
 *   8   u64 arch_hash
 *   16  i64 epoch, batch, step
 *   40  f64 loss_sum; i64 loss_count, correct, seen
 *   72  u64 rng[4]
 *   104 i64 optim_t
 *   112 u64 n_params, n_bufs, n_state
 *   136 f32 params[n_params], bufs[n_bufs], state[n_state]
 *   ..  u32 crc32 of every byte before it, then "HFCKEND\n"
 * The size must be exactly 136 + 4*(counts) + 12.
 */
#include "ckpt.h"

#include "hf_err.h"
#include "hf_log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define CK_MAGIC  "HFCKPT01"
#define CK_END    "HFCKEND\n"
#define CK_HDR    136
#define CK_TRAIL  12
#define CK_MAX_FLOATS ((uint64_t)1 << 32)   /* 16 GiB of floats: beyond any model here */

static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

int tr_ckpt_encode(const tr_ckpt *c, uint8_t **out, size_t *len)
{
    size_t nf = c->n_params + c->n_bufs + c->n_state;
    size_t n = CK_HDR + 4 * nf + CK_TRAIL;
    uint8_t *b = malloc(n);
    if (!b) return HF_ENOMEM;
    memcpy(b, CK_MAGIC, 8);
    put64(b + 8, c->arch_hash);
    put64(b + 16, (uint64_t)c->epoch);
    put64(b + 24, (uint64_t)c->batch);
    put64(b + 32, (uint64_t)c->step);
    memcpy(b + 40, &c->loss_sum, 8);
    put64(b + 48, (uint64_t)c->loss_count);
    put64(b + 56, (uint64_t)c->correct);
    put64(b + 64, (uint64_t)c->seen);
    for (int i = 0; i < 4; i++) put64(b + 72 + 8 * i, c->rng[i]);
    put64(b + 104, (uint64_t)c->optim_t);
    put64(b + 112, c->n_params);
    put64(b + 120, c->n_bufs);
    put64(b + 128, c->n_state);
    uint8_t *p = b + CK_HDR;
    if (c->n_params) memcpy(p, c->params, 4 * c->n_params);
    p += 4 * c->n_params;
    if (c->n_bufs) memcpy(p, c->bufs, 4 * c->n_bufs);
    p += 4 * c->n_bufs;
    if (c->n_state) memcpy(p, c->state, 4 * c->n_state);
    p += 4 * c->n_state;
    uint32_t crc = (uint32_t)crc32(0L, b, (uInt)0);
    size_t done = 0, upto = (size_t)(p - b);
    while (done < upto) {   /* crc32() takes uInt lengths */
        size_t chunk = upto - done > (1u << 30) ? (1u << 30) : upto - done;
        crc = (uint32_t)crc32(crc, b + done, (uInt)chunk);
        done += chunk;
    }
    memcpy(p, &crc, 4);
    memcpy(p + 4, CK_END, 8);
    *out = b;
    *len = n;
    return 0;
}

void tr_ckpt_clear(tr_ckpt *c)
{
    if (c && c->owned) {
        free(c->params);
        free(c->bufs);
        free(c->state);
    }
    if (c) memset(c, 0, sizeof *c);
}

int tr_ckpt_decode(const uint8_t *b, size_t len, tr_ckpt *c, char *err, size_t el)
{
    memset(c, 0, sizeof *c);
    if (len < CK_HDR + CK_TRAIL) return snprintf(err, el, "truncated (%zu bytes)", len), HF_ECORRUPT;
    if (memcmp(b, CK_MAGIC, 8) != 0) return snprintf(err, el, "not a hyperfarm checkpoint (bad magic)"), HF_EPARSE;
    uint64_t np = get64(b + 112), nb = get64(b + 120), ns = get64(b + 128);
    if (np > CK_MAX_FLOATS || nb > CK_MAX_FLOATS || ns > CK_MAX_FLOATS)
        return snprintf(err, el, "implausible array sizes"), HF_ECORRUPT;
    uint64_t want = CK_HDR + 4 * (np + nb + ns) + CK_TRAIL;
    if (want != len)
        return snprintf(err, el, "size %zu, header implies %llu (truncated or padded)", len, (unsigned long long)want),
               HF_ECORRUPT;
    if (memcmp(b + len - 8, CK_END, 8) != 0) return snprintf(err, el, "missing end marker"), HF_ECORRUPT;
    uint32_t crc = (uint32_t)crc32(0L, NULL, 0), stored;
    size_t done = 0, upto = len - CK_TRAIL;
    while (done < upto) {
        size_t chunk = upto - done > (1u << 30) ? (1u << 30) : upto - done;
        crc = (uint32_t)crc32(crc, b + done, (uInt)chunk);
        done += chunk;
    }
    memcpy(&stored, b + upto, 4);
    if (crc != stored) return snprintf(err, el, "checksum mismatch (%08x != %08x)", crc, stored), HF_ECORRUPT;
    c->arch_hash = get64(b + 8);
    c->epoch = (int64_t)get64(b + 16);
    c->batch = (int64_t)get64(b + 24);
    c->step = (int64_t)get64(b + 32);
    memcpy(&c->loss_sum, b + 40, 8);
    c->loss_count = (int64_t)get64(b + 48);
    c->correct = (int64_t)get64(b + 56);
    c->seen = (int64_t)get64(b + 64);
    for (int i = 0; i < 4; i++) c->rng[i] = get64(b + 72 + 8 * i);
    c->optim_t = (int64_t)get64(b + 104);
    if (c->epoch < 0 || c->batch < 0 || c->step < 0 || c->optim_t < 0)
        return snprintf(err, el, "negative position"), HF_ECORRUPT;
    c->n_params = np;
    c->n_bufs = nb;
    c->n_state = ns;
    c->owned = 1;
    c->params = malloc(4 * np + 4);
    c->bufs = malloc(4 * nb + 4);
    c->state = malloc(4 * ns + 4);
    if (!c->params || !c->bufs || !c->state) {
        tr_ckpt_clear(c);
        return snprintf(err, el, "out of memory"), HF_ENOMEM;
    }
    const uint8_t *p = b + CK_HDR;
    memcpy(c->params, p, 4 * np);
    memcpy(c->bufs, p + 4 * np, 4 * nb);
    memcpy(c->state, p + 4 * (np + nb), 4 * ns);
    return 0;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int mkdir_p(const char *dir)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s", dir) >= (int)sizeof tmp) return -1;
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(tmp, 0755) && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(tmp, 0755) && errno != EEXIST) return -1;
    return 0;
}

/* Checkpoint files in dir sorted newest (highest step) first. */
static int list_ckpts(const char *dir, char ***names, int *n)
{
    *names = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? HF_ENOTFOUND : HF_EIO;
    struct dirent *e;
    int cap = 0;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len != 5 + 12 + 5 || strncmp(e->d_name, "ckpt-", 5) || strcmp(e->d_name + 17, ".hfck")) continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nn = realloc(*names, cap * sizeof(char *));
            if (!nn) break;
            *names = nn;
        }
        (*names)[(*n)++] = strdup(e->d_name);
    }
    closedir(d);
    /* fixed-width step: reverse lexicographic order = newest first */
    for (int i = 1; i < *n; i++)
        for (int j = i; j > 0 && strcmp((*names)[j - 1], (*names)[j]) < 0; j--) {
            char *t = (*names)[j];
            (*names)[j] = (*names)[j - 1];
            (*names)[j - 1] = t;
        }
    return 0;
}

static void free_names(char **names, int n)
{
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

int tr_ckpt_write(const char *dir, const tr_ckpt *c, int keep, char *path, size_t pathlen, char *err, size_t el)
{
    uint8_t *buf = NULL;
    size_t len;
    int fd = -1, rc;
    char tmp[4200], final[4200];
    if (mkdir_p(dir)) return snprintf(err, el, "%s: cannot create: %s", dir, strerror(errno)), HF_EIO;
    if ((rc = tr_ckpt_encode(c, &buf, &len))) return snprintf(err, el, "out of memory"), rc;
    snprintf(final, sizeof final, "%s/ckpt-%012lld.hfck", dir, (long long)c->step);
    snprintf(tmp, sizeof tmp, "%s/.ckpt-%012lld.%d.tmp", dir, (long long)c->step, (int)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) { snprintf(err, el, "%s: %s", tmp, strerror(errno)); rc = hf_err_from_errno(errno); goto end; }
    if (write_all(fd, buf, len) || fsync(fd)) {
        snprintf(err, el, "%s: %s", tmp, strerror(errno));
        rc = hf_err_from_errno(errno);
        goto end;
    }
    close(fd);
    fd = -1;
    if (rename(tmp, final)) {
        snprintf(err, el, "rename to %s: %s", final, strerror(errno));
        rc = HF_EIO;
        goto end;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) { fsync(dfd); close(dfd); }
    if (path) snprintf(path, pathlen, "%s", final);
    if (keep > 0) {
        char **names;
        int n;
        if (list_ckpts(dir, &names, &n) == 0) {
            for (int i = keep; i < n; i++) {
                char p[4200];
                snprintf(p, sizeof p, "%s/%s", dir, names[i]);
                unlink(p);
            }
            free_names(names, n);
        }
    }
    rc = 0;
end:
    if (fd >= 0) close(fd);
    if (rc) unlink(tmp);
    free(buf);
    return rc;
}

int tr_ckpt_save(const char *dir, int keep, const tr_ckpt *c, char *path, size_t pathlen)
{
    if (!dir[0]) return HF_ENOTFOUND;
    char err[512];
    int rc = tr_ckpt_write(dir, c, keep, path, pathlen, err, sizeof err);
    if (rc) hf_error("checkpoint failed: %s", err);
    else hf_info("checkpoint %s (epoch %lld, batch %lld, step %lld)", path ? path : "written", (long long)c->epoch,
                 (long long)c->batch, (long long)c->step);
    return rc;
}

int tr_ckpt_read(const char *path, tr_ckpt *c, char *err, size_t el)
{
    memset(c, 0, sizeof *c);
    int rc = 0;
    uint8_t *buf = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return snprintf(err, el, "%s: %s", path, strerror(errno)), errno == ENOENT ? HF_ENOTFOUND : HF_EIO;
    struct stat st;
    if (fstat(fileno(f), &st) || st.st_size < 0) { snprintf(err, el, "%s: stat failed", path); rc = HF_EIO; goto end; }
    size_t len = (size_t)st.st_size;
    buf = malloc(len ? len : 1);
    if (!buf) { snprintf(err, el, "out of memory"); rc = HF_ENOMEM; goto end; }
    if (fread(buf, 1, len, f) != len) { snprintf(err, el, "%s: short read", path); rc = HF_EIO; goto end; }
    char e2[256];
    if ((rc = tr_ckpt_decode(buf, len, c, e2, sizeof e2))) snprintf(err, el, "%s: %s", path, e2);
end:
    fclose(f);
    free(buf);
    return rc;
}

int tr_ckpt_load_latest(const char *dir, uint64_t arch, size_t np, size_t nb, size_t ns, tr_ckpt *c, char *path,
                        size_t pathlen)
{
    char **names;
    int n, rc = HF_ENOTFOUND;
    memset(c, 0, sizeof *c);
    if (list_ckpts(dir, &names, &n)) return HF_ENOTFOUND;
    for (int i = 0; i < n; i++) {
        char p[4200], err[512];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        if (tr_ckpt_read(p, c, err, sizeof err)) {
            hf_warn("skipping corrupt checkpoint %s", err);
            continue;
        }
        if (c->arch_hash != arch || c->n_params != np || c->n_bufs != nb || c->n_state != ns) {
            hf_warn("skipping checkpoint %s: it is for a different model or optimizer", p);
            tr_ckpt_clear(c);
            continue;
        }
        if (path) snprintf(path, pathlen, "%s", p);
        rc = 0;
        break;
    }
    free_names(names, n);
    return rc;
}
