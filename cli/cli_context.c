/*
 * cli_context.c — packing a code context (see cli_context.h).
 *
 * Two passes. The walk lists what goes in (names, types, sizes, where to
 * read each file from) in archive order, applying .hyperfarmignore and the
 * link rules, and checks the caps before anything is written. The write
 * streams the list through libarchive (pax restricted tar, gzip) into a
 * temp file; its write callback hashes every byte on the way (GnuTLS
 * SHA-256), so the file is read once. A file whose size changed between
 * the two passes fails the pack: the hash must describe what was meant.
 */
#include "cli_context.h"
#include "cli.h"
#include "cli_ignore.h"

#include "hf_err.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <gnutls/crypto.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define IGNORE_FILE     ".hyperfarmignore"
#define IGNORE_MAX_SIZE (1 << 20)
#define TOP_N           5            /* biggest files named in a cap error */

typedef struct pack_entry {
    char   *rel;       /* name in the archive (owned) */
    char   *src;       /* file to read: NULL for a directory (owned) */
    int     is_dir;
    int     mode;      /* 0755 or 0644 */
    int64_t size;
} pack_entry;

typedef struct pack_list {
    pack_entry *e;
    size_t      n, cap;
    int64_t     bytes;
} pack_list;

typedef struct walk {
    const char       *root;       /* realpath of dir */
    size_t            rootlen;
    const cli_ignore *ig;
    const cli_context_opts *o;
    pack_list        *l;
    char             *err;
    size_t            errlen;
} walk;

/* n bytes for people: "512 B", "12.3 KiB", "4.0 MiB" (buf of 32). */
static const char *human(char *buf, int64_t n)
{
    if (n < 1024) snprintf(buf, 32, "%lld B", (long long)n);
    else if (n < 1048576) snprintf(buf, 32, "%.1f KiB", n / 1024.0);
    else snprintf(buf, 32, "%.1f MiB", n / 1048576.0);
    return buf;
}

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return rc;
}

static void list_free(pack_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->e[i].rel);
        free(l->e[i].src);
    }
    free(l->e);
    memset(l, 0, sizeof *l);
}

static int list_add(walk *w, const char *rel, const char *src, int is_dir, mode_t mode, int64_t size)
{
    pack_list *l = w->l;
    if (l->n >= CLI_CONTEXT_MAX_ENTRIES)
        return fail(w->err, w->errlen, HF_ETOOBIG, "%s: more than %d files and directories (a context is code, not "
                    "data: list what the trials do not need in %s/" IGNORE_FILE ")", w->root,
                    CLI_CONTEXT_MAX_ENTRIES, w->root);
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 64;
        pack_entry *ne = realloc(l->e, nc * sizeof *ne);
        if (!ne) return fail(w->err, w->errlen, HF_ENOMEM, "out of memory");
        l->e = ne;
        l->cap = nc;
    }
    pack_entry *e = &l->e[l->n];
    memset(e, 0, sizeof *e);
    e->rel = strdup(rel);
    e->src = src ? strdup(src) : NULL;
    if (!e->rel || (src && !e->src)) {
        free(e->rel);
        free(e->src);
        return fail(w->err, w->errlen, HF_ENOMEM, "out of memory");
    }
    e->is_dir = is_dir;
    e->mode = is_dir || (mode & 0111) ? 0755 : 0644;
    e->size = size;
    l->n++;
    l->bytes += size;
    return 0;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The sorted names in the directory path (without . and ..). RET 0 with
 * *names (each and the array to free) and *n. */
static int read_names(walk *w, const char *path, char ***names, size_t *n)
{
    DIR *d = opendir(path);
    struct dirent *de;
    size_t cap = 0;
    *names = NULL;
    *n = 0;
    if (!d) return fail(w->err, w->errlen, hf_err_from_errno(errno), "%s: %s", path, strerror(errno));
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        if (*n == cap) {
            size_t nc = cap ? cap * 2 : 32;
            char **nn = realloc(*names, nc * sizeof *nn);
            if (!nn) goto oom;
            *names = nn;
            cap = nc;
        }
        if (!((*names)[*n] = strdup(de->d_name))) goto oom;
        (*n)++;
    }
    closedir(d);
    if (*n) qsort(*names, *n, sizeof **names, cmp_names);
    return 0;
oom:
    closedir(d);
    for (size_t i = 0; i < *n; i++) free((*names)[i]);
    free(*names);
    *names = NULL;
    return fail(w->err, w->errlen, HF_ENOMEM, "out of memory");
}

/* A symbolic link at full (named rel): packed as a copy of a regular
 * file inside the root, else refused. */
static int walk_link(walk *w, const char *full, const char *rel)
{
    char tgt[PATH_MAX];
    struct stat st;
    if (!realpath(full, tgt))
        return fail(w->err, w->errlen, HF_EINVAL, "%s: a symbolic link whose target cannot be resolved (%s); "
                    "remove it or list it in " IGNORE_FILE, rel, strerror(errno));
    if (strncmp(tgt, w->root, w->rootlen) != 0 || tgt[w->rootlen] != '/')
        return fail(w->err, w->errlen, HF_EINVAL, "%s: a symbolic link to %s, outside the context directory %s "
                    "(its target would not travel); copy the file in or list the link in " IGNORE_FILE,
                    rel, tgt, w->root);
    if (stat(tgt, &st) != 0) return fail(w->err, w->errlen, hf_err_from_errno(errno), "%s: %s", tgt, strerror(errno));
    if (S_ISDIR(st.st_mode))
        return fail(w->err, w->errlen, HF_EINVAL, "%s: a symbolic link to the directory %s: only links to files are "
                    "packed (as copies); list it in " IGNORE_FILE, rel, tgt + w->rootlen + 1);
    if (!S_ISREG(st.st_mode)) {
        if (w->o->warn) fprintf(w->o->warn, "warning: %s: a link to a special file: skipped\n", rel);
        return 0;
    }
    return list_add(w, rel, tgt, 0, st.st_mode, st.st_size);
}

/* Walk the directory full (named rel, "" for the root), depth levels deep. */
static int walk_dir(walk *w, const char *full, const char *rel, int depth)
{
    char **names = NULL;
    size_t n = 0;
    int rc;
    if (depth > CLI_CONTEXT_MAX_DEPTH)
        return fail(w->err, w->errlen, HF_ETOOBIG, "%s: more than %d directory levels", rel, CLI_CONTEXT_MAX_DEPTH);
    if ((rc = read_names(w, full, &names, &n))) return rc;
    for (size_t i = 0; i < n && !rc; i++) {
        char cfull[PATH_MAX], crel[PATH_MAX];
        struct stat st;
        if (snprintf(cfull, sizeof cfull, "%s/%s", full, names[i]) >= (int)sizeof cfull ||
            snprintf(crel, sizeof crel, "%s%s%s", rel, *rel ? "/" : "", names[i]) >= (int)sizeof crel) {
            rc = fail(w->err, w->errlen, HF_EINVAL, "%s/%s: path too long", full, names[i]);
            break;
        }
        if (lstat(cfull, &st) != 0) {
            rc = fail(w->err, w->errlen, hf_err_from_errno(errno), "%s: %s", cfull, strerror(errno));
            break;
        }
        int is_dir = S_ISDIR(st.st_mode);
        if (cli_ignore_match(w->ig, crel, is_dir)) continue;
        if (is_dir) {
            if (!(rc = list_add(w, crel, NULL, 1, st.st_mode, 0))) rc = walk_dir(w, cfull, crel, depth + 1);
        } else if (S_ISREG(st.st_mode)) {
            rc = list_add(w, crel, cfull, 0, st.st_mode, st.st_size);
        } else if (S_ISLNK(st.st_mode)) {
            rc = walk_link(w, cfull, crel);
        } else if (w->o->warn) {
            fprintf(w->o->warn, "warning: %s: not a regular file, directory or link (socket, FIFO or device): "
                    "skipped\n", crel);
        }
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

/* The cap error: the total and the TOP_N biggest files. */
static int too_big(walk *w, int64_t max)
{
    size_t top[TOP_N], ntop = 0;
    for (size_t i = 0; i < w->l->n; i++) {
        if (w->l->e[i].is_dir) continue;
        size_t k = ntop < TOP_N ? ntop++ : TOP_N;
        if (k == TOP_N && w->l->e[i].size <= w->l->e[top[TOP_N - 1]].size) continue;
        if (k == TOP_N) k = TOP_N - 1;
        while (k > 0 && w->l->e[top[k - 1]].size < w->l->e[i].size) {
            top[k] = top[k - 1];
            k--;
        }
        top[k] = i;
    }
    char h1[32], h2[32];
    int n = snprintf(w->err, w->errlen, "%s holds %s (%lld bytes) to pack, more than the cap of %s "
                     "(--max-context-mb); the biggest files:", w->root, human(h1, w->l->bytes),
                     (long long)w->l->bytes, human(h2, max));
    for (size_t k = 0; k < ntop && n > 0 && (size_t)n < w->errlen; k++)
        n += snprintf(w->err + n, w->errlen - (size_t)n, "\n  %12s  %s", human(h1, w->l->e[top[k]].size),
                      w->l->e[top[k]].rel);
    if (n > 0 && (size_t)n < w->errlen)
        snprintf(w->err + n, w->errlen - (size_t)n, "\nexclude what the trials do not need in %s/" IGNORE_FILE
                 " (gitignore-like patterns), or raise --max-context-mb", w->root);
    return HF_ETOOBIG;
}

/* The root's .hyperfarmignore, if any (a regular file up to 1 MiB). */
static int load_ignore(walk *w, cli_ignore **ig)
{
    char path[PATH_MAX], *text = NULL;
    struct stat st;
    int rc = 0;
    *ig = NULL;
    if (snprintf(path, sizeof path, "%s/" IGNORE_FILE, w->root) >= (int)sizeof path)
        return fail(w->err, w->errlen, HF_EINVAL, "%s: path too long", w->root);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return errno == ENOENT ? 0 : fail(w->err, w->errlen, HF_EINVAL, "%s: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > IGNORE_MAX_SIZE) {
        rc = fail(w->err, w->errlen, HF_EINVAL, "%s: not a regular file of at most %d bytes", path, IGNORE_MAX_SIZE);
        goto end;
    }
    if (!(text = malloc((size_t)st.st_size + 1))) { rc = fail(w->err, w->errlen, HF_ENOMEM, "out of memory"); goto end; }
    ssize_t got = 0;
    while (got < st.st_size) {
        ssize_t r = read(fd, text + got, (size_t)(st.st_size - got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) { rc = fail(w->err, w->errlen, HF_EIO, "%s: cannot read", path); goto end; }
        got += r;
    }
    rc = cli_ignore_parse(text, (size_t)got, path, ig, w->err, w->errlen);
end:
    free(text);
    close(fd);
    return rc;
}

/* ---------- writing ---------- */

typedef struct pack_out {
    int              fd;
    gnutls_hash_hd_t h;
    int64_t          n;
    int              err;   /* errno of a failed write */
} pack_out;

static la_ssize_t out_write(struct archive *a, void *ud, const void *buf, size_t len)
{
    pack_out *po = ud;
    const char *p = buf;
    size_t left = len;
    (void)a;
    while (left) {
        ssize_t w = write(po->fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            po->err = w < 0 ? errno : EIO;
            archive_set_error(a, po->err, "writing the context archive: %s", strerror(po->err));
            return -1;
        }
        p += w;
        left -= (size_t)w;
    }
    gnutls_hash(po->h, buf, len);
    po->n += (int64_t)len;
    return (la_ssize_t)len;
}

static void progress(const cli_context_opts *o, size_t i, size_t n, int64_t done, int64_t total)
{
    if (!o->progress) return;
    char h1[32], h2[32];
    fprintf(o->progress, "\rpacking %zu/%zu entries, %s of %s  ", i, n, human(h1, done), human(h2, total));
    fflush(o->progress);
}

/* Copy entry e's data (e->size bytes of e->src) into the archive. */
static int write_data(struct archive *a, const pack_entry *e, char *buf, size_t buflen, char *err, size_t errlen)
{
    int fd = open(e->src, O_RDONLY | O_CLOEXEC);
    int64_t left = e->size;
    int rc = 0;
    if (fd < 0) return fail(err, errlen, hf_err_from_errno(errno), "%s: %s", e->src, strerror(errno));
    while (left > 0) {
        ssize_t r = read(fd, buf, (size_t)left < buflen ? (size_t)left : buflen);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { rc = fail(err, errlen, HF_EIO, "%s: %s", e->src, strerror(errno)); break; }
        if (r == 0) { rc = fail(err, errlen, HF_EINVAL, "%s: shrank while being packed", e->rel); break; }
        if (archive_write_data(a, buf, (size_t)r) != r) {
            rc = fail(err, errlen, HF_EIO, "%s: %s", e->rel, archive_error_string(a));
            break;
        }
        left -= r;
    }
    if (!rc && read(fd, buf, 1) > 0) rc = fail(err, errlen, HF_EINVAL, "%s: grew while being packed", e->rel);
    close(fd);
    return rc;
}

static int write_archive(const pack_list *l, const cli_context_opts *o, pack_out *po, char *err, size_t errlen)
{
    struct archive *a = archive_write_new();
    struct archive_entry *ae = archive_entry_new();
    size_t buflen = 1 << 16;
    char *buf = malloc(buflen);
    int64_t done = 0;
    int rc = HF_EIO;
    if (!a || !ae || !buf) { rc = fail(err, errlen, HF_ENOMEM, "out of memory"); goto end; }
    if (archive_write_add_filter_gzip(a) != ARCHIVE_OK ||
        archive_write_set_filter_option(a, "gzip", "timestamp", NULL) != ARCHIVE_OK ||   /* "!timestamp" */
        archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
        archive_write_set_bytes_in_last_block(a, 1) != ARCHIVE_OK ||
        archive_write_open2(a, po, NULL, out_write, NULL, NULL) != ARCHIVE_OK) {
        rc = fail(err, errlen, HF_EIO, "cannot start the archive: %s", archive_error_string(a));
        goto end;
    }
    for (size_t i = 0; i < l->n; i++) {
        const pack_entry *e = &l->e[i];
        archive_entry_clear(ae);
        archive_entry_set_pathname(ae, e->rel);
        archive_entry_set_filetype(ae, e->is_dir ? AE_IFDIR : AE_IFREG);
        archive_entry_set_perm(ae, (mode_t)e->mode);
        archive_entry_set_size(ae, e->is_dir ? 0 : e->size);
        archive_entry_set_mtime(ae, 0, 0);
        archive_entry_set_uid(ae, 0);
        archive_entry_set_gid(ae, 0);
        int w = archive_write_header(a, ae);
        if (w < ARCHIVE_WARN) {
            rc = fail(err, errlen, HF_EIO, "%s: %s", e->rel, archive_error_string(a));
            goto end;
        }
        if (!e->is_dir && (rc = write_data(a, e, buf, buflen, err, errlen))) goto end;
        done += e->size;
        if ((i & 63) == 63 || i + 1 == l->n) progress(o, i + 1, l->n, done, l->bytes);
    }
    if (archive_write_close(a) != ARCHIVE_OK) {
        rc = fail(err, errlen, HF_EIO, "finishing the archive: %s", archive_error_string(a));
        goto end;
    }
    rc = 0;
end:
    if (rc == HF_EIO && po->err == ENOSPC) rc = HF_ENOSPC;
    if (o->progress) fputc('\n', o->progress);
    archive_entry_free(ae);
    if (a) archive_write_free(a);
    free(buf);
    return rc;
}

int cli_context_pack(const char *dir, const cli_context_opts *o, cli_context_result *res, char *err, size_t errlen)
{
    char root[PATH_MAX];
    struct stat st;
    pack_list l = {0};
    cli_ignore *ig = NULL;
    pack_out po = {.fd = -1};
    int h_live = 0, rc;
    memset(res, 0, sizeof *res);
    if (!realpath(dir, root) || stat(root, &st) != 0)
        return fail(err, errlen, errno == ENOENT ? HF_ENOTFOUND : HF_EINVAL, "--context %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return fail(err, errlen, HF_EINVAL, "--context %s: not a directory", dir);
    walk w = {.root = root, .rootlen = strlen(root), .o = o, .l = &l, .err = err, .errlen = errlen};
    if ((rc = load_ignore(&w, &ig))) goto end;
    w.ig = ig;
    if ((rc = walk_dir(&w, root, "", 0))) goto end;
    if (o->max_bytes > 0 && l.bytes > o->max_bytes) { rc = too_big(&w, o->max_bytes); goto end; }

    const char *tmp = o->tmpdir ? o->tmpdir : getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = "/tmp";
    if (snprintf(res->path, sizeof res->path, "%s/hyperfarm-context-XXXXXX.tar.gz", tmp) >= (int)sizeof res->path) {
        rc = fail(err, errlen, HF_EINVAL, "TMPDIR %s: path too long", tmp);
        goto end;
    }
    if ((po.fd = mkostemps(res->path, 7, O_CLOEXEC)) < 0) {
        rc = fail(err, errlen, hf_err_from_errno(errno), "cannot create a temp file in %s: %s", tmp, strerror(errno));
        res->path[0] = '\0';
        goto end;
    }
    if (gnutls_hash_init(&po.h, GNUTLS_DIG_SHA256) != 0) { rc = fail(err, errlen, HF_ENOMEM, "out of memory"); goto end; }
    h_live = 1;
    if ((rc = write_archive(&l, o, &po, err, errlen))) goto end;
    if (fsync(po.fd) != 0 && errno != EINVAL) {
        rc = fail(err, errlen, hf_err_from_errno(errno), "%s: %s", res->path, strerror(errno));
        goto end;
    }
    unsigned char dig[32];
    gnutls_hash_deinit(po.h, dig);
    h_live = 0;
    for (int i = 0; i < 32; i++) snprintf(res->sha256 + 2 * i, 3, "%02x", dig[i]);
    res->size = po.n;
    res->bytes = l.bytes;
    for (size_t i = 0; i < l.n; i++) {
        if (l.e[i].is_dir) res->dirs++;
        else res->files++;
    }
end:
    if (h_live) gnutls_hash_deinit(po.h, NULL);
    if (po.fd >= 0) close(po.fd);
    if (rc && res->path[0]) {
        unlink(res->path);
        res->path[0] = '\0';
    }
    cli_ignore_free(ig);
    list_free(&l);
    return rc;
}

/* ---------- shipping (submit --context) ---------- */

static void upload_progress(void *ud, int64_t sent, int64_t total)
{
    FILE *f = ud;
    fprintf(f, "\ruploading context: %3d%% %.1f/%.1f MiB  ", total ? (int)(sent * 100 / total) : 100,
            sent / 1048576.0, total / 1048576.0);
    fflush(f);
}

/* PUT the archive res->path. RET a CLI exit code. */
static int upload(cli_ctx *ctx, const cli_context_result *res, FILE *prog)
{
    char err[512], hsha[128], path[128];
    const char *const hdrs[] = {hsha, NULL};
    long status = 0;
    json_t *r = NULL, *ok = NULL;
    int fd = open(res->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(ctx->err, "error: %s: %s\n", res->path, strerror(errno));
        return CLI_ERR;
    }
    snprintf(hsha, sizeof hsha, "X-Hyperfarm-Sha256: %s", res->sha256);
    snprintf(path, sizeof path, "/api/v1/contexts");
    int rc = hf_http_upload(ctx->http, "PUT", path, fd, res->size, hdrs, prog ? upload_progress : NULL, prog,
                            &status, &r, err, sizeof err);
    close(fd);
    if (prog) fputc('\n', prog);
    if (rc) return cli_transport_error(ctx, rc, err);
    if ((rc = cli_api_answer(ctx, "PUT", path, status, r, &ok))) return rc;
    const char *got = json_string_value(json_object_get(ok, "sha256"));
    if (!got || strcmp(got, res->sha256)) {
        fprintf(ctx->err, "error: PUT %s: the scheduler stored %s, not %s\n", path, got ? got : "nothing",
                res->sha256);
        rc = CLI_ERR;
    }
    json_decref(ok);
    return rc;
}

int cli_context_ship(cli_ctx *ctx, const char *dir, int64_t max_bytes, char sha256[65])
{
    cli_context_result res;
    char err[2048], path[128];
    long status = 0;
    char *body = NULL;
    FILE *prog = !ctx->o.json && ctx->err == stderr && isatty(STDERR_FILENO) ? ctx->err : NULL;
    cli_context_opts o = {.max_bytes = max_bytes, .progress = prog, .warn = ctx->err};
    int rc = cli_context_pack(dir, &o, &res, err, sizeof err);
    if (rc) {
        fprintf(ctx->err, "error: %s\n", err);
        return rc == HF_ETOOBIG || rc == HF_EINVAL || rc == HF_ENOTFOUND ? CLI_USAGE : CLI_ERR;
    }
    snprintf(path, sizeof path, "/api/v1/contexts/%s", res.sha256);
    rc = hf_http_request_raw(ctx->http, "HEAD", path, NULL, &status, &body, NULL, err, sizeof err);
    free(body);
    const char *how = "already on the scheduler";
    if (rc) rc = cli_transport_error(ctx, rc, err);
    else if (status == 404) {
        rc = upload(ctx, &res, prog);
        how = "uploaded";
    } else if (status != 200) {
        json_t *none = NULL;
        rc = cli_api_answer(ctx, "HEAD", path, status, NULL, &none);
        json_decref(none);
    }
    unlink(res.path);
    if (rc) return rc;
    memcpy(sha256, res.sha256, 65);
    char h1[32], h2[32];
    if (!ctx->o.json)
        fprintf(ctx->err, "context %s: %lld files, %s -> %s gzip'd, sha256 %.12s..., %s\n", dir,
                (long long)res.files, human(h1, res.bytes), human(h2, res.size), res.sha256, how);
    return CLI_OK;
}

/* ---------- "context": DIR in the experiment file ---------- */

static int is_sha256(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++)
        if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f'))) return 0;
    return n == 64;
}

int cli_context_from_file(struct cli_ctx *ctx, const char *file, json_t *doc)
{
    json_t *c = json_object_get(doc, "context");
    const char *v = json_string_value(c);
    if (!c || json_is_null(c) || (v && is_sha256(v))) return CLI_OK;   /* none, or already shipped */
    if (!v || !*v) {
        fprintf(ctx->err, "error: %s: context: must be a directory (relative to the file) or a SHA-256\n", file);
        return CLI_USAGE;
    }
    /* DIR must lie inside the file's own directory: a file handed to you
     * must not make `submit` pack and upload ~/.ssh or / (a context is
     * readable by every user of the farm). --context DIR stays the way to
     * ship any other folder, named by you. */
    char dir[4096], base[4096], real[PATH_MAX], real_base[PATH_MAX];
    const char *slash = strcmp(file, "-") ? strrchr(file, '/') : NULL;
    int bn = slash ? snprintf(base, sizeof base, "%.*s", (int)(slash - file) + (slash == file), file)
                   : snprintf(base, sizeof base, ".");
    int n = snprintf(dir, sizeof dir, "%s/%s", base, v);
    struct stat st;
    const char *why = n < 0 || n >= (int)sizeof dir || bn < 0 || bn >= (int)sizeof base ? "path too long"
                    : v[0] == '/' ? "must be relative to the experiment file's directory (or use --context DIR)"
                    : stat(dir, &st) != 0 ? strerror(errno) : !S_ISDIR(st.st_mode) ? "not a directory"
                    : !realpath(dir, real) || !realpath(base, real_base) ? strerror(errno)
                    : strncmp(real, real_base, strlen(real_base)) != 0 ||
                              (real[strlen(real_base)] != '/' && real[strlen(real_base)] != '\0' && strcmp(real_base, "/") != 0)
                          ? "lies outside the experiment file's directory (or use --context DIR)"
                          : NULL;
    if (why) {
        fprintf(ctx->err, "error: %s: context: \"%s\" (%s): %s\n", file, v, dir, why);
        return CLI_USAGE;
    }
    char sha[65];
    int rc = cli_context_ship(ctx, dir, ctx->o.max_context_mb << 20, sha);
    if (rc) return rc;
    json_object_set_new(doc, "context", json_string(sha));
    return CLI_OK;
}
