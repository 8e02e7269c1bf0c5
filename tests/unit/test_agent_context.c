/*
 * test_agent_context.c — the safe unpacking of a code context
 * (agent/agent_context.c): crafted archives, written here with libarchive
 * (every entry kind a hostile archive can hold), are unpacked into a
 * fresh directory that sits next to an "outside" directory; each hostile
 * one must be refused with an error naming the entry and leave both
 * directories exactly as they were (nothing written at all: the checks
 * run before the first write). A good archive unpacks with its files,
 * modes and directories, replaces files of the same name, and keeps the
 * agent-owned checkpoints/ and control.json. The assignment's "context" field
 * is validated, and the preparation pool (agent/agent_prep.c; fetch
 * through the object cache in shared_fs mode: no scheduler needed)
 * unpacks, refuses, reports fetch failures, drops duplicates and honours
 * a kill before the start (its concurrency: test_agent_prep.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "agent/agent_context.h"
#include "agent/agent_prep.h"
#include "hf_err.h"
#include "hf_json.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

static char root[256], dest[300], outside[300], arch[300];

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st; (void)flag; (void)f;
    return remove(p);
}

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof root, "/tmp/hf-ctx-unpack-XXXXXX");
    if (!mkdtemp(root)) return -1;
    snprintf(dest, sizeof dest, "%s/trial", root);
    snprintf(outside, sizeof outside, "%s/outside", root);
    snprintf(arch, sizeof arch, "%s/a.tar.gz", root);
    return mkdir(dest, 0755) || mkdir(outside, 0755);
}

static int teardown(void **state)
{
    (void)state;
    return nftw(root, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

/* One entry of a crafted archive. */
typedef struct ent {
    const char *name;
    int         type;       /* AE_IFREG, AE_IFDIR, AE_IFLNK, AE_IFCHR, AE_IFIFO; 'h' = hard link */
    const char *data;       /* file content; link target */
    int64_t     size;       /* -1: strlen(data) */
    int         mode;
} ent;

/* Write ents as a gzip'd (gz) or plain tar to arch. */
static void craft(const ent *e, size_t n, int gz)
{
    struct archive *a = archive_write_new();
    struct archive_entry *ae = archive_entry_new();
    if (gz) archive_write_add_filter_gzip(a);
    archive_write_set_format_pax_restricted(a);
    assert_int_equal(archive_write_open_filename(a, arch), ARCHIVE_OK);
    for (size_t i = 0; i < n; i++) {
        archive_entry_clear(ae);
        archive_entry_set_pathname(ae, e[i].name);
        int64_t size = e[i].size >= 0 ? e[i].size : e[i].data ? (int64_t)strlen(e[i].data) : 0;
        if (e[i].type == 'h') {
            archive_entry_set_filetype(ae, AE_IFREG);
            archive_entry_set_hardlink(ae, e[i].data);
            size = 0;
        } else {
            archive_entry_set_filetype(ae, (mode_t)e[i].type);
        }
        if (e[i].type == AE_IFLNK) archive_entry_set_symlink(ae, e[i].data);
        if (e[i].type == AE_IFCHR) archive_entry_set_rdev(ae, makedev(1, 3));
        archive_entry_set_perm(ae, (mode_t)(e[i].mode ? e[i].mode : 0644));
        archive_entry_set_size(ae, e[i].type == AE_IFREG ? size : 0);
        assert_true(archive_write_header(a, ae) >= ARCHIVE_WARN);
        if (e[i].type == AE_IFREG && e[i].data) archive_write_data(a, e[i].data, (size_t)size);
        else if (e[i].type == AE_IFREG && size > 0) {
            static char zeros[65536];
            for (int64_t left = size; left > 0; left -= (int64_t)sizeof zeros)
                archive_write_data(a, zeros, left < (int64_t)sizeof zeros ? (size_t)left : sizeof zeros);
        }
    }
    archive_write_close(a);
    archive_write_free(a);
    archive_entry_free(ae);
}

/* Entries in dir (not recursive), "." and ".." excluded. */
static int count(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;
    if (!d) return -1;
    while ((de = readdir(d)) != NULL) n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
    closedir(d);
    return n;
}

static char *slurp(const char *path)
{
    static char buf[4096];
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void test_good_archive(void **state)
{
    (void)state;
    char err[512], p[400];
    int64_t files = 0, bytes = 0;
    struct stat st;
    const ent e[] = {
        {"./", AE_IFDIR, NULL, 0, 0755},
        {"./train.py", AE_IFREG, "print('hi')\n", -1, 0644},
        {"./run.sh", AE_IFREG, "#!/bin/sh\necho ok\n", -1, 0755},
        {"pkg/", AE_IFDIR, NULL, 0, 0700},
        {"pkg//mod.py", AE_IFREG, "x = 1\n", -1, 0600},
        {"pkg/./sub/deep.txt", AE_IFREG, "deep", -1, 0644},   /* parent made implicitly */
    };
    /* the agent's files and a stale copy of train.py are there already */
    snprintf(p, sizeof p, "%s/checkpoints", dest);
    assert_int_equal(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/control.json", dest);
    FILE *f = fopen(p, "w");
    fputs("{\"should_stop\": false}", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/train.py", dest);
    f = fopen(p, "w");
    fputs("old", f);
    fclose(f);
    craft(e, sizeof e / sizeof e[0], 1);
    assert_int_equal(agent_context_unpack(arch, dest, NULL, &files, &bytes, err, sizeof err), 0);
    assert_int_equal(files, 4);
    assert_int_equal(bytes, 12 + 18 + 6 + 4);
    snprintf(p, sizeof p, "%s/train.py", dest);
    assert_string_equal(slurp(p), "print('hi')\n");
    snprintf(p, sizeof p, "%s/run.sh", dest);
    assert_int_equal(stat(p, &st), 0);
    assert_true(st.st_mode & S_IXUSR);
    snprintf(p, sizeof p, "%s/pkg/mod.py", dest);
    assert_int_equal(stat(p, &st), 0);
    assert_false(st.st_mode & S_IXUSR);
    snprintf(p, sizeof p, "%s/pkg/sub/deep.txt", dest);
    assert_string_equal(slurp(p), "deep");
    snprintf(p, sizeof p, "%s/control.json", dest);
    assert_string_equal(slurp(p), "{\"should_stop\": false}");
    assert_int_equal(count(outside), 0);
    /* plain (not gzip'd) tar too; a second unpack over the first is fine */
    craft(e, sizeof e / sizeof e[0], 0);
    assert_int_equal(agent_context_unpack(arch, dest, NULL, NULL, NULL, err, sizeof err), 0);
}

/* Each case: one hostile entry after a harmless one; refused with want in
 * the message, and nothing written anywhere. */
static void test_hostile_archives(void **state)
{
    (void)state;
    char dotdot[400], abs[400], linkto[400];
    snprintf(dotdot, sizeof dotdot, "../outside/x");
    snprintf(abs, sizeof abs, "%s/x", outside);
    snprintf(linkto, sizeof linkto, "%s", outside);
    const struct {
        ent         e;
        int         rc;
        const char *want;
    } cases[] = {
        {{dotdot, AE_IFREG, "evil", -1, 0}, HF_EINVAL, "\"..\" component"},
        {{"a/../../outside/x", AE_IFREG, "evil", -1, 0}, HF_EINVAL, "\"..\" component"},
        {{"..", AE_IFDIR, NULL, 0, 0}, HF_EINVAL, "\"..\" component"},
        {{abs, AE_IFREG, "evil", -1, 0}, HF_EINVAL, "absolute name"},
        {{"esc", AE_IFLNK, linkto, 0, 0}, HF_EINVAL, "symbolic link"},
        {{"rel", AE_IFLNK, "../outside", 0, 0}, HF_EINVAL, "symbolic link"},
        {{"hard", 'h', "a.txt", 0, 0}, HF_EINVAL, "hard link"},
        {{"null", AE_IFCHR, NULL, 0, 0}, HF_EINVAL, "a device"},
        {{"fifo", AE_IFIFO, NULL, 0, 0}, HF_EINVAL, "a FIFO"},
        {{"checkpoints/ckpt-1.hfck", AE_IFREG, "fake", -1, 0}, HF_EINVAL, "checkpoints belongs to the agent"},
        {{"./checkpoints", AE_IFDIR, NULL, 0, 0}, HF_EINVAL, "checkpoints belongs to the agent"},
        {{"control.json", AE_IFREG, "{\"should_stop\":true}", -1, 0}, HF_EINVAL, "control.json belongs"},
        {{"hostfile", AE_IFREG, "evil slots=1", -1, 0}, HF_EINVAL, "hostfile belongs"},
        {{"huge.bin", AE_IFREG, NULL, 3 << 20, 0}, HF_ETOOBIG, "more than 1048576 bytes"},
    };
    const agent_context_limits lim = {.max_entries = 100, .max_bytes = 1 << 20};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[512] = "";
        ent e[2] = {{"a.txt", AE_IFREG, "fine", -1, 0}, cases[i].e};
        craft(e, 2, 1);
        int rc = agent_context_unpack(arch, dest, &lim, NULL, NULL, err, sizeof err);
        if (rc != cases[i].rc || !strstr(err, cases[i].want))
            fail_msg("case %zu (%s): rc %d, err \"%s\"; want %d and \"%s\"", i, cases[i].e.name, rc, err,
                     cases[i].rc, cases[i].want);
        assert_int_equal(count(dest), 0);      /* not even a.txt: refused before any write */
        assert_int_equal(count(outside), 0);
    }
}

static void test_limits_and_corruption(void **state)
{
    (void)state;
    char err[512];
    ent many[12];
    char names[12][16];
    for (int i = 0; i < 12; i++) {
        snprintf(names[i], sizeof names[i], "f%02d", i);
        many[i] = (ent){names[i], AE_IFREG, "x", -1, 0};
    }
    craft(many, 12, 1);
    const agent_context_limits lim = {.max_entries = 10, .max_bytes = 1 << 20};
    assert_int_equal(agent_context_unpack(arch, dest, &lim, NULL, NULL, err, sizeof err), HF_ETOOBIG);
    assert_non_null(strstr(err, "more than 10 entries"));
    assert_int_equal(count(dest), 0);

    /* a truncated archive: refused as corrupt, nothing written */
    ent one[] = {{"big.txt", AE_IFREG, NULL, 200000, 0}, {"after.txt", AE_IFREG, "after", -1, 0}};
    craft(one, 2, 0);
    assert_int_equal(truncate(arch, 100000), 0);
    assert_int_equal(agent_context_unpack(arch, dest, NULL, NULL, NULL, err, sizeof err), HF_ECORRUPT);
    assert_int_equal(count(dest), 0);
    /* not an archive at all */
    FILE *f = fopen(arch, "w");
    fputs("this is not a tar file, not even gzip'd, just text that goes on for a while\n", f);
    fclose(f);
    assert_int_equal(agent_context_unpack(arch, dest, NULL, NULL, NULL, err, sizeof err), HF_ECORRUPT);
    assert_non_null(strstr(err, "context archive"));
    assert_int_equal(count(dest), 0);
    /* no such file */
    assert_int_equal(agent_context_unpack("/nonexistent/ctx.tar.gz", dest, NULL, NULL, NULL, err, sizeof err),
                     HF_ECORRUPT);
}

/* A symbolic link the trial itself left in its directory (an earlier
 * attempt) is not followed by a later unpack: it is replaced. */
static void test_existing_link_not_followed(void **state)
{
    (void)state;
    char err[512], p[400];
    snprintf(p, sizeof p, "%s/data", dest);
    assert_int_equal(symlink(outside, p), 0);
    ent e[] = {{"data/x.txt", AE_IFREG, "evil", -1, 0}};
    craft(e, 1, 1);
    /* ARCHIVE_EXTRACT_SECURE_SYMLINKS with ARCHIVE_EXTRACT_UNLINK: the
     * link in the way is removed and a real directory made in its place */
    assert_int_equal(agent_context_unpack(arch, dest, NULL, NULL, NULL, err, sizeof err), 0);
    assert_int_equal(count(outside), 0);
    struct stat st;
    assert_int_equal(lstat(p, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    snprintf(p, sizeof p, "%s/data/x.txt", dest);
    assert_string_equal(slurp(p), "evil");
    /* a link where a file goes is replaced, not written through */
    char target[400];
    snprintf(target, sizeof target, "%s/secret", outside);
    FILE *f = fopen(target, "w");
    fputs("secret", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/train.py", dest);
    assert_int_equal(symlink(target, p), 0);
    ent e2[] = {{"train.py", AE_IFREG, "code", -1, 0}};
    craft(e2, 1, 1);
    assert_int_equal(agent_context_unpack(arch, dest, NULL, NULL, NULL, err, sizeof err), 0);
    assert_string_equal(slurp(target), "secret");
    assert_string_equal(slurp(p), "code");
    assert_int_equal(lstat(p, &st), 0);
    assert_true(S_ISREG(st.st_mode));
}

/* ---------- the assignment's "context" and the preparation pool ---------- */

/* An assignment of trial tid with context (sha, size) — or NULL: none. */
static agent_spec *spec_with(int64_t tid, const char *sha, int64_t size)
{
    json_t *a = json_pack("{sIsIsIs[s]ss}", "trial_id", (json_int_t)tid, "attempt", (json_int_t)1,
                          "experiment_id", (json_int_t)3, "argv", "./run.sh", "checkpoint_dir",
                          "experiments/3/trials/1/checkpoints");
    char cd[64];
    snprintf(cd, sizeof cd, "experiments/3/trials/%lld/checkpoints", (long long)tid);
    json_object_set_new(a, "checkpoint_dir", json_string(cd));
    if (sha) json_object_set_new(a, "context", json_pack("{sssI}", "sha256", sha, "size", (json_int_t)size));
    hf_jerr e;
    agent_spec *sp = agent_spec_parse(a, "assign[0]", &e);
    json_decref(a);
    return sp;
}

static void test_assignment_context_field(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "{\"context\": \"abc\"}", "{\"context\": {\"sha256\": \"ABC\", \"size\": 1}}",
        "{\"context\": {\"sha256\": \"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdeF\", \"size\": 1}}",
        "{\"context\": {\"sha256\": \"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"}}",
        "{\"context\": {\"sha256\": \"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\", \"size\": -1}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *a = json_pack("{sIsIs[s]ss}", "trial_id", (json_int_t)1, "attempt", (json_int_t)1, "argv", "x",
                              "checkpoint_dir", "e/1/t/1/checkpoints");
        json_t *extra = json_loads(bad[i], 0, NULL);
        json_object_update(a, extra);
        hf_jerr e;
        agent_spec *sp = agent_spec_parse(a, "assign[0]", &e);
        if (sp || !strstr(e.field, "context")) fail_msg("case %zu accepted or field '%s'", i, e.field);
        json_decref(extra);
        json_decref(a);
    }
    agent_spec *sp = spec_with(1, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", 42);
    assert_non_null(sp);
    assert_string_equal(sp->context_sha, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
    assert_int_equal(sp->context_size, 42);
    assert_true(agent_prep_needed(sp));
    agent_spec_free(sp);
    sp = spec_with(1, NULL, 0);
    assert_false(agent_prep_needed(sp));
    agent_spec_free(sp);
}

/* Put the file arch into the shared_fs store dir as an object; its hash
 * into sha, its size into *size. */
static void share(const char *store, char sha[65], int64_t *size)
{
    char err[256], dir[400], obj[500];
    assert_int_equal(agent_objects_hash_file(arch, sha, size, err, sizeof err), 0);
    snprintf(dir, sizeof dir, "%s/objects", store);
    mkdir(store, 0755);
    mkdir(dir, 0755);
    snprintf(dir, sizeof dir, "%s/objects/%.2s", store, sha);
    mkdir(dir, 0755);
    snprintf(obj, sizeof obj, "%s/%s", dir, sha);
    assert_int_equal(rename(arch, obj), 0);       /* the next craft() writes a new file */
}

/* Wait (up to 10 s) for n prepared assignments. */
static agent_prep_done *take_n(agent_prep *p, size_t n)
{
    agent_prep_done *all = calloc(n, sizeof *all), *d = NULL;
    size_t got = 0, k = 0;
    for (int i = 0; i < 1000 && got < n; i++) {
        agent_prep_take(p, &d, &k);
        for (size_t j = 0; j < k && got < n; j++) all[got++] = d[j];
        free(d);
        if (got < n) usleep(10000);
    }
    assert_int_equal(got, n);
    return all;
}

static void test_prep_pool(void **state)
{
    (void)state;
    char err[256], work[400], store[400], good[65], evil[65], p[600];
    int64_t gsize, esize;
    agent_objects *ao = NULL;
    int wake[2];
    snprintf(work, sizeof work, "%s/work", root);
    snprintf(store, sizeof store, "%s/store", root);
    mkdir(work, 0755);
    ent e1[] = {{"run.sh", AE_IFREG, "#!/bin/sh\n", -1, 0755}, {"lib/x.py", AE_IFREG, "x", -1, 0}};
    craft(e1, 2, 1);
    share(store, good, &gsize);
    ent e2[] = {{"../../../../evil", AE_IFREG, "evil", -1, 0}};
    craft(e2, 1, 1);
    share(store, evil, &esize);
    assert_int_equal(agent_objects_open(work, "http://127.0.0.1:9", NULL, 0, &ao, err, sizeof err), 0);
    assert_int_equal(agent_objects_set_shared(ao, store), 0);
    assert_int_equal(pipe(wake), 0);
    agent_prep *prep = agent_prep_new(work, ao, wake[1]);
    assert_non_null(prep);

    /* a good context, a duplicate of it, a hostile one, an unknown one */
    assert_int_equal(agent_prep_submit(prep, spec_with(1, good, gsize), AGENT_PREP_CONTEXT), 0);
    assert_int_equal(agent_prep_submit(prep, spec_with(1, good, gsize), AGENT_PREP_CONTEXT), HF_EEXIST);
    assert_int_equal(agent_prep_submit(prep, spec_with(2, evil, esize), AGENT_PREP_CONTEXT), 0);
    assert_int_equal(agent_prep_submit(prep, spec_with(3, "00000000000000000000000000000000000000000000000000000000"
                                                          "00000000", 5), AGENT_PREP_CONTEXT), 0);
    agent_prep_done *d = take_n(prep, 3);
    char c;
    assert_int_equal(read(wake[0], &c, 1), 1);           /* the main loop was woken */
    for (int i = 0; i < 3; i++) {
        int64_t t = d[i].spec->trial_id;
        if (t == 1) {
            assert_int_equal(d[i].rc, 0);
            assert_non_null(strstr(d[i].note, "2 files"));
            snprintf(p, sizeof p, "%s/experiments/3/trials/1/lib/x.py", work);
            assert_int_equal(access(p, R_OK), 0);
        } else if (t == 2) {
            assert_int_equal(d[i].rc, HF_EINVAL);
            assert_non_null(strstr(d[i].err, "refused: context entry \"../../../../evil\": a \"..\" component"));
        } else {
            assert_int_not_equal(d[i].rc, 0);
            assert_non_null(strstr(d[i].err, "cannot fetch it"));
        }
        agent_spec_free(d[i].spec);
    }
    free(d);
    assert_int_equal(count(outside), 0);
    snprintf(p, sizeof p, "%s/context-tmp", work);
    assert_int_equal(count(p), 0);                        /* no temp archive left */

    /* a kill before the start: the assignment comes back refused */
    assert_int_equal(agent_prep_submit(prep, spec_with(4, good, gsize), AGENT_PREP_CONTEXT), 0);
    agent_prep_cancel(prep, 4, 0, "pause");
    d = take_n(prep, 1);
    assert_int_equal(d[0].rc, HF_ESTATE);
    assert_non_null(strstr(d[0].err, "stopped before it started (pause)"));
    agent_spec_free(d[0].spec);
    free(d);
    assert_int_equal(agent_prep_pending(prep), 0);
    /* freed with work queued: nothing leaks, the workers stop */
    assert_int_equal(agent_prep_submit(prep, spec_with(5, good, gsize), AGENT_PREP_CONTEXT), 0);
    agent_prep_free(prep);
    agent_objects_close(ao);
    close(wake[0]);
    close(wake[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_good_archive, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hostile_archives, setup, teardown),
        cmocka_unit_test_setup_teardown(test_limits_and_corruption, setup, teardown),
        cmocka_unit_test_setup_teardown(test_existing_link_not_followed, setup, teardown),
        cmocka_unit_test(test_assignment_context_field),
        cmocka_unit_test_setup_teardown(test_prep_pool, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
