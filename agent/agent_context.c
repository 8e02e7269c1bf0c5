/*
 * agent_context.c — unpacking a trial's code context (see
 * agent_context.h); the fetch before it is agent_prep.c's.
 *
 * Names: an entry's name is normalised before anything else ("./a//b/"
 * -> "a/b"; "." components dropped); the normalised name is what every
 * rule is checked against and what is written, under the destination.
 * libarchive's disk writer resolves names against the process's working
 * directory, which the agent's threads share (chdir is not an option), so
 * the name handed to it is dest + "/" + name: dest is the agent's work
 * directory resolved by realpath at start-up plus relative parts it
 * checked (agent_fs_check_rel), so ARCHIVE_EXTRACT_SECURE_SYMLINKS and
 * SECURE_NODOTDOT still guard the whole path. SECURE_NOABSOLUTEPATHS would
 * refuse that prefix: its rule (no absolute name in the archive) is
 * enforced on the archive's names here instead, in both passes.
 */
#include "agent_context.h"

#include "hf_err.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CTX_EXTRACT_FLAGS (ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_UNLINK)

/* Names in the trial directory the agent owns (agent_spawn.h). */
static const char *const reserved_top[] = {"checkpoints", "control.json", "hostfile", NULL};

/* ---------- names ---------- */

/* Normalise raw into out ("./a//b/" -> "a/b"). RET 0 (out may be "": the
 * archive's root entry), or HF_EINVAL with why. */
static int name_normalise(const char *raw, char *out, size_t outlen, char *why, size_t whylen)
{
    size_t n = 0;
    if (!raw || !*raw) return snprintf(why, whylen, "an entry without a name"), HF_EINVAL;
    if (strlen(raw) > AGENT_CONTEXT_MAX_NAME)
        return snprintf(why, whylen, "a name longer than %d bytes", AGENT_CONTEXT_MAX_NAME), HF_EINVAL;
    if (raw[0] == '/') return snprintf(why, whylen, "an absolute name"), HF_EINVAL;
    for (const char *p = raw; *p;) {
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 2 && p[0] == '.' && p[1] == '.') return snprintf(why, whylen, "a \"..\" component"), HF_EINVAL;
        if (len && !(len == 1 && p[0] == '.')) {
            if (n + len + 2 > outlen) return snprintf(why, whylen, "a name too long"), HF_EINVAL;
            if (n) out[n++] = '/';
            memcpy(out + n, p, len);
            n += len;
        }
        p += len + (e ? 1 : 0);
    }
    out[n] = '\0';
    size_t top = strcspn(out, "/");
    for (const char *const *r = reserved_top; *r; r++)
        if (strlen(*r) == top && strncmp(out, *r, top) == 0)
            return snprintf(why, whylen, "%s belongs to the agent (the trial's checkpoint directory and control "
                            "files are never taken from a context)", *r), HF_EINVAL;
    return 0;
}

/* The checks of one header. RET 0 (*skip: the root entry), or HF_E* with err. */
static int entry_check(struct archive_entry *ae, char *name, size_t namelen, int *skip, char *err, size_t errlen)
{
    char why[200];
    const char *raw = archive_entry_pathname(ae);
    *skip = 0;
    if (name_normalise(raw, name, namelen, why, sizeof why)) {
        snprintf(err, errlen, "context entry \"%.200s\": %s", raw ? raw : "", why);
        return HF_EINVAL;
    }
    mode_t type = archive_entry_filetype(ae);
    const char *what = archive_entry_hardlink(ae) ? "a hard link"
                       : archive_entry_symlink(ae) || type == AE_IFLNK ? "a symbolic link"
                       : type == AE_IFREG || type == AE_IFDIR ? NULL
                       : type == AE_IFCHR || type == AE_IFBLK ? "a device"
                       : type == AE_IFIFO ? "a FIFO"
                       : type == AE_IFSOCK ? "a socket" : "not a regular file or directory";
    if (what) {
        snprintf(err, errlen, "context entry \"%.200s\": %s: only regular files and directories are unpacked", raw,
                 what);
        return HF_EINVAL;
    }
    if (!name[0]) {
        if (type != AE_IFDIR) {
            snprintf(err, errlen, "context entry \"%.200s\": a file without a name", raw);
            return HF_EINVAL;
        }
        *skip = 1;
    }
    if (type == AE_IFREG && (!archive_entry_size_is_set(ae) || archive_entry_size(ae) < 0)) {
        snprintf(err, errlen, "context entry \"%.200s\": no size", raw);
        return HF_EINVAL;
    }
    return 0;
}

/* ---------- the two passes ---------- */

static struct archive *reader_open(const char *path, char *err, size_t errlen)
{
    struct archive *a = archive_read_new();
    if (!a) return snprintf(err, errlen, "out of memory"), NULL;
    archive_read_support_filter_gzip(a);
    archive_read_support_filter_none(a);
    archive_read_support_format_tar(a);
    if (archive_read_open_filename(a, path, 1 << 16) != ARCHIVE_OK) {
        snprintf(err, errlen, "context archive: %s", archive_error_string(a));
        archive_read_free(a);
        return NULL;
    }
    return a;
}

/* The header reader's verdict: 1 next entry, 0 end, or HF_ECORRUPT. */
static int next_header(struct archive *a, struct archive_entry **ae, char *err, size_t errlen)
{
    int r = archive_read_next_header(a, ae);
    if (r == ARCHIVE_EOF) return 0;
    if (r == ARCHIVE_OK) return 1;
    snprintf(err, errlen, "context archive: not a readable gzip'd tar (%s)",
             archive_error_string(a) ? archive_error_string(a) : "bad header");
    return HF_ECORRUPT;
}

/* Pass 1: every header checked, nothing written. */
static int pass_check(const char *path, const agent_context_limits *lim, int64_t *want_bytes, char *err, size_t errlen)
{
    struct archive *a = reader_open(path, err, errlen);
    struct archive_entry *ae;
    char name[AGENT_CONTEXT_MAX_NAME + 2];
    int64_t entries = 0, bytes = 0;
    int rc, skip;
    if (!a) return HF_ECORRUPT;
    while ((rc = next_header(a, &ae, err, errlen)) == 1) {
        if ((rc = entry_check(ae, name, sizeof name, &skip, err, errlen))) break;
        if (++entries > lim->max_entries) {
            snprintf(err, errlen, "context archive: more than %lld entries", (long long)lim->max_entries);
            rc = HF_ETOOBIG;
            break;
        }
        if (archive_entry_filetype(ae) == AE_IFREG) bytes += archive_entry_size(ae);
        if (bytes > lim->max_bytes) {
            snprintf(err, errlen, "context archive: more than %lld bytes unpacked (at \"%.200s\")",
                     (long long)lim->max_bytes, name);
            rc = HF_ETOOBIG;
            break;
        }
        if (archive_read_data_skip(a) != ARCHIVE_OK) {
            snprintf(err, errlen, "context archive: truncated or corrupt (%s)", archive_error_string(a));
            rc = HF_ECORRUPT;
            break;
        }
    }
    archive_read_free(a);
    *want_bytes = bytes;
    return rc;
}

/* Copy one entry's data from r to w; total bounds what all entries may
 * write (the sizes pass 1 added up). */
static int copy_data(struct archive *r, struct archive *w, const char *name, int64_t *written, int64_t total,
                     char *err, size_t errlen)
{
    const void *buf;
    size_t len;
    la_int64_t off;
    for (;;) {
        int x = archive_read_data_block(r, &buf, &len, &off);
        if (x == ARCHIVE_EOF) return 0;
        if (x != ARCHIVE_OK) {
            snprintf(err, errlen, "context archive: \"%.200s\": truncated or corrupt (%s)", name,
                     archive_error_string(r));
            return HF_ECORRUPT;
        }
        if ((*written += (int64_t)len) > total) {
            snprintf(err, errlen, "context archive: \"%.200s\": more data than its header said", name);
            return HF_ECORRUPT;
        }
        if (archive_write_data_block(w, buf, len, off) != ARCHIVE_OK) {
            int e = archive_errno(w);
            snprintf(err, errlen, "writing \"%.200s\": %s", name, archive_error_string(w));
            return e == ENOSPC ? HF_ENOSPC : HF_EIO;
        }
    }
}

/* Pass 2: the same checks again (the file is ours and verified, but the
 * checks are cheap), then extraction under dest. */
static int pass_extract(const char *path, const char *dest, int64_t total, int64_t *files, char *err, size_t errlen)
{
    struct archive *r = reader_open(path, err, errlen), *w = archive_write_disk_new();
    struct archive_entry *ae;
    char name[AGENT_CONTEXT_MAX_NAME + 2], full[PATH_MAX];
    int64_t written = 0;
    int rc = HF_ENOMEM, skip;
    if (!r) { rc = HF_ECORRUPT; goto end; }
    if (!w || archive_write_disk_set_options(w, CTX_EXTRACT_FLAGS) != ARCHIVE_OK) goto end;
    while ((rc = next_header(r, &ae, err, errlen)) == 1) {
        if ((rc = entry_check(ae, name, sizeof name, &skip, err, errlen))) break;
        if (skip) continue;
        if (snprintf(full, sizeof full, "%s/%s", dest, name) >= (int)sizeof full) {
            snprintf(err, errlen, "context entry \"%.200s\": path too long under %s", name, dest);
            rc = HF_EINVAL;
            break;
        }
        archive_entry_copy_pathname(ae, full);
        archive_entry_set_perm(ae, archive_entry_filetype(ae) == AE_IFDIR || (archive_entry_perm(ae) & 0111) ? 0755
                                                                                                             : 0644);
        if (archive_write_header(w, ae) != ARCHIVE_OK) {
            int e = archive_errno(w);
            snprintf(err, errlen, "context entry \"%.200s\": %s", name, archive_error_string(w));
            rc = e == ENOSPC ? HF_ENOSPC : HF_EINVAL;   /* a refused path (link in the way) or I/O */
            break;
        }
        if (archive_entry_filetype(ae) == AE_IFREG) {
            if ((rc = copy_data(r, w, name, &written, total, err, errlen))) break;
            (*files)++;
        }
        if (archive_write_finish_entry(w) != ARCHIVE_OK) {
            snprintf(err, errlen, "writing \"%.200s\": %s", name, archive_error_string(w));
            rc = archive_errno(w) == ENOSPC ? HF_ENOSPC : HF_EIO;
            break;
        }
    }
    if (rc == 0 && archive_write_close(w) != ARCHIVE_OK) {
        snprintf(err, errlen, "finishing the extraction: %s", archive_error_string(w));
        rc = HF_EIO;
    }
end:
    if (rc == HF_ENOMEM) snprintf(err, errlen, "out of memory");
    if (r) archive_read_free(r);
    if (w) archive_write_free(w);
    return rc;
}

int agent_context_unpack(const char *archive, const char *dest, const agent_context_limits *lim, int64_t *files,
                         int64_t *bytes, char *err, size_t errlen)
{
    static const agent_context_limits dflt = {AGENT_CONTEXT_MAX_ENTRIES, AGENT_CONTEXT_MAX_BYTES};
    int64_t want = 0, nfiles = 0;
    struct stat st;
    err[0] = '\0';
    if (!lim) lim = &dflt;
    if (stat(dest, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s: not a directory", dest);
        return HF_EINVAL;
    }
    int rc = pass_check(archive, lim, &want, err, errlen);
    if (rc == 0) rc = pass_extract(archive, dest, want, &nfiles, err, errlen);
    if (files) *files = nfiles;
    if (bytes) *bytes = want;
    return rc;
}
