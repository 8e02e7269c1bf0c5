/*
 * test_cli_context.c — packing a code context (cli/cli_context.c) and the
 * .hyperfarmignore rules (cli/cli_ignore.c): a table of patterns against
 * paths, then real directory trees packed into real archives that are read
 * back with libarchive: what is in them (ignore rules, links, special
 * files), determinism (the same tree packed twice, and a copy of it with
 * other times and permissions, give the same SHA-256), and the cap (an
 * error naming the size and the biggest files, no temp file left).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "cli/cli_context.h"
#include "cli/cli_ignore.h"
#include "hf_err.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

static char root[256], tmpdir[300];

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st; (void)flag; (void)f;
    return remove(p);
}

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof root, "/tmp/hf-ctx-pack-XXXXXX");
    if (!mkdtemp(root)) return -1;
    snprintf(tmpdir, sizeof tmpdir, "%s/tmp", root);
    return mkdir(tmpdir, 0755);
}

static int teardown(void **state)
{
    (void)state;
    return nftw(root, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---------- ignore rules ---------- */

static void test_ignore_table(void **state)
{
    (void)state;
    static const char rules[] =
        "# comment\n"
        "\n"
        "*.pyc\n"
        "__pycache__/\n"
        "/build\n"
        "docs/*.pdf\n"
        "logs/**\n"
        "!logs/keep.txt\n"
        "a/**/z\n"
        "data/\n"
        "!data/\n"            /* re-included: the last match wins */
        "*.log\n"
        "!important.log\n"
        "\\#literal\n"
        "\\!bang\n"
        "trailing   \n"
        "crlf\r\n"
        "sp\\ \n";
    static const struct { const char *path; int is_dir, want; } cases[] = {
        {"x.pyc", 0, 1}, {"deep/down/x.pyc", 0, 1}, {"x.py", 0, 0},
        {"__pycache__", 1, 1}, {"pkg/__pycache__", 1, 1}, {"__pycache__", 0, 0},   /* dir only */
        {"build", 1, 1}, {"build", 0, 1}, {"src/build", 1, 0},                      /* anchored */
        {"docs/a.pdf", 0, 1}, {"docs/sub/a.pdf", 0, 0}, {"other/docs/a.pdf", 0, 0},
        {"logs/a.txt", 0, 1}, {"logs/x/y", 0, 1}, {"logs", 1, 0}, {"logs/keep.txt", 0, 0},
        {"a/z", 0, 1}, {"a/b/z", 0, 1}, {"a/b/c/z", 1, 1}, {"b/a/z", 0, 0}, {"a/zz", 0, 0},
        {"data", 1, 0},
        {"run.log", 0, 1}, {"important.log", 0, 0}, {"sub/important.log", 0, 0},
        {"#literal", 0, 1}, {"!bang", 0, 1}, {"trailing", 0, 1}, {"crlf", 0, 1}, {"sp ", 0, 1}, {"sp", 0, 0},
        {"comment", 0, 0}, {"# comment", 0, 0},
    };
    cli_ignore *ig = NULL;
    char err[256];
    assert_int_equal(cli_ignore_parse(rules, sizeof rules - 1, ".hyperfarmignore", &ig, err, sizeof err), 0);
    assert_int_equal(cli_ignore_count(ig), 16);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (cli_ignore_match(ig, cases[i].path, cases[i].is_dir) != cases[i].want)
            fail_msg("\"%s\" (%s): want %s", cases[i].path, cases[i].is_dir ? "dir" : "file",
                     cases[i].want ? "excluded" : "included");
    cli_ignore_free(ig);
    assert_int_equal(cli_ignore_match(NULL, "x", 0), 0);
}

static void test_ignore_errors(void **state)
{
    (void)state;
    cli_ignore *ig = NULL;
    char err[256], long_line[CLI_IGNORE_MAX_LINE + 10];
    assert_int_equal(cli_ignore_parse("ok\n!\n", 5, "f", &ig, err, sizeof err), HF_EINVAL);
    assert_string_equal(err, "f:2: empty pattern");
    assert_null(ig);
    assert_int_equal(cli_ignore_parse("a\0b", 3, "f", &ig, err, sizeof err), HF_EINVAL);
    assert_non_null(strstr(err, "NUL"));
    assert_int_equal(cli_ignore_parse("//\n", 3, "f", &ig, err, sizeof err), HF_EINVAL);
    memset(long_line, 'a', sizeof long_line);
    assert_int_equal(cli_ignore_parse(long_line, sizeof long_line, "f", &ig, err, sizeof err), HF_EINVAL);
    assert_non_null(strstr(err, "f:1: line longer than"));
    /* many "**": still quick (dynamic programming) */
    static const char stars[] = "**/**/**/**/**/**/**/**/**/**/**/**/**/**/**/**/x\n";
    assert_int_equal(cli_ignore_parse(stars, sizeof stars - 1, "f", &ig, err, sizeof err), 0);
    assert_int_equal(cli_ignore_match(ig, "a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/q/r/s/t/u/v/w/y", 0), 0);
    assert_int_equal(cli_ignore_match(ig, "a/b/c/x", 0), 1);
    cli_ignore_free(ig);
    /* an empty file: no rules */
    assert_int_equal(cli_ignore_parse("", 0, "f", &ig, err, sizeof err), 0);
    assert_int_equal(cli_ignore_count(ig), 0);
    cli_ignore_free(ig);
}

/* ---------- packing ---------- */

static void put(const char *rel, const char *text, int mode)
{
    char p[600];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    chmod(p, (mode_t)mode);
}

static void mk(const char *rel)
{
    char p[600];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    assert_int_equal(mkdir(p, 0755), 0);
}

/* The archive's entries as "name mode size\n" lines (mode in octal). */
static char *listing(const char *path)
{
    static char out[8192];
    struct archive *a = archive_read_new();
    struct archive_entry *ae;
    size_t n = 0;
    archive_read_support_filter_gzip(a);
    archive_read_support_format_tar(a);
    assert_int_equal(archive_read_open_filename(a, path, 1 << 16), ARCHIVE_OK);
    out[0] = '\0';
    while (archive_read_next_header(a, &ae) == ARCHIVE_OK) {
        assert_int_equal(archive_entry_mtime(ae), 0);
        assert_int_equal(archive_entry_uid(ae), 0);
        n += (size_t)snprintf(out + n, sizeof out - n, "%s %o %lld\n", archive_entry_pathname(ae),
                              (unsigned)archive_entry_mode(ae) & 07777, (long long)archive_entry_size(ae));
    }
    archive_read_free(a);
    return out;
}

/* The same small project under root/dir: sources, an executable, a
 * cache directory and a log that its .hyperfarmignore leaves out. */
static void tree(const char *dir)
{
    static const struct { const char *rel, *text; int mode; } files[] = {
        {"train.py", "print('train')\n", 0644}, {"run.sh", "#!/bin/sh\n", 0700},
        {"pkg/b.py", "b = 2\n", 0600},       {"pkg/a.py", "a = 1\n", 0664},
        {"__pycache__/x.pyc", "junk", 0644},   {"out.log", "log", 0644},
        {".hyperfarmignore", "__pycache__/\n*.log\n", 0644},
    };
    static const char *const dirs[] = {"", "/pkg", "/__pycache__"};
    char p[300];
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        snprintf(p, sizeof p, "%s%s", dir, dirs[i]);
        mk(p);
    }
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i].rel);
        put(p, files[i].text, files[i].mode);
    }
}

static void test_pack_content_and_determinism(void **state)
{
    (void)state;
    cli_context_result r1, r2, r3;
    char err[2048], d1[300], d2[300], p[400], fifo[400];
    cli_context_opts o = {.max_bytes = 1 << 20, .tmpdir = tmpdir};
    tree("one");
    snprintf(d1, sizeof d1, "%s/one", root);
    /* a link to a file inside is packed as a copy; a FIFO is skipped */
    snprintf(p, sizeof p, "%s/one/alias.py", root);
    assert_int_equal(symlink("train.py", p), 0);
    snprintf(fifo, sizeof fifo, "%s/one/pipe", root);
    assert_int_equal(mkfifo(fifo, 0644), 0);
    assert_int_equal(cli_context_pack(d1, &o, &r1, err, sizeof err), 0);
    assert_string_equal(listing(r1.path),
                        ".hyperfarmignore 644 19\n"
                        "alias.py 644 15\n"
                        "pkg/ 755 0\n"
                        "pkg/a.py 644 6\n"
                        "pkg/b.py 644 6\n"
                        "run.sh 755 10\n"
                        "train.py 644 15\n");
    assert_int_equal(r1.files, 6);
    assert_int_equal(r1.dirs, 1);
    assert_int_equal(strlen(r1.sha256), 64);
    /* packed again: the same bytes */
    assert_int_equal(cli_context_pack(d1, &o, &r2, err, sizeof err), 0);
    assert_string_equal(r1.sha256, r2.sha256);
    /* a copy made later, other times, other read/write bits: the same hash */
    sleep(1);
    tree("two");
    snprintf(d2, sizeof d2, "%s/two", root);
    snprintf(p, sizeof p, "%s/two/alias.py", root);
    put("two/alias.py", "print('train')\n", 0600);
    snprintf(p, sizeof p, "%s/two/pkg/a.py", root);
    chmod(p, 0444);
    struct timeval tv[2] = {{1000, 0}, {1000, 0}};
    utimes(p, tv);
    assert_int_equal(cli_context_pack(d2, &o, &r3, err, sizeof err), 0);
    assert_string_equal(r1.sha256, r3.sha256);
    assert_int_equal(r1.size, r3.size);
    unlink(r1.path);
    unlink(r2.path);
    unlink(r3.path);
}

static void test_pack_refusals(void **state)
{
    (void)state;
    cli_context_result r;
    char err[2048], d[300], p[400];
    cli_context_opts o = {.max_bytes = 1000, .tmpdir = tmpdir};
    tree("big");
    snprintf(d, sizeof d, "%s/big", root);
    /* over the cap: the total and the biggest files, nothing left in tmp */
    char *blob = malloc(5000);
    memset(blob, 'x', 4999);
    blob[4999] = '\0';
    put("big/pkg/weights.bin", blob, 0644);
    blob[3000] = '\0';
    put("big/data.csv", blob, 0644);
    free(blob);
    assert_int_equal(cli_context_pack(d, &o, &r, err, sizeof err), HF_ETOOBIG);
    assert_non_null(strstr(err, "more than the cap of 1000 B"));
    assert_non_null(strstr(err, "4.9 KiB  pkg/weights.bin"));
    assert_non_null(strstr(err, "2.9 KiB  data.csv"));
    assert_true(strstr(err, "pkg/weights.bin") < strstr(err, "data.csv"));   /* biggest first */
    assert_int_equal(r.path[0], '\0');
    DIR *dd = opendir(tmpdir);
    struct dirent *de;
    int n = 0;
    while ((de = readdir(dd)) != NULL) n += de->d_name[0] != '.';
    closedir(dd);
    assert_int_equal(n, 0);
    /* the same tree with those files ignored fits */
    put("big/.hyperfarmignore", "*.bin\n/data.csv\n", 0644);
    assert_int_equal(cli_context_pack(d, &o, &r, err, sizeof err), 0);
    unlink(r.path);
    /* a link leaving the directory, a dangling one, a link to a directory */
    o.max_bytes = 0;
    const struct { const char *target, *want; } links[] = {
        {"/etc/hostname", "outside the context directory"},
        {"../big/../../", "outside the context directory"},
        {"nowhere", "cannot be resolved"},
        {"pkg", "a symbolic link to the directory pkg"},
    };
    snprintf(p, sizeof p, "%s/big/link", root);
    for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
        unlink(p);
        assert_int_equal(symlink(links[i].target, p), 0);
        assert_int_equal(cli_context_pack(d, &o, &r, err, sizeof err), HF_EINVAL);
        if (!strstr(err, links[i].want) || strncmp(err, "link: ", 6)) fail_msg("link to %s: %s", links[i].target, err);
    }
    /* ... unless .hyperfarmignore leaves it out */
    put("big/.hyperfarmignore", "/link\n", 0644);
    assert_int_equal(cli_context_pack(d, &o, &r, err, sizeof err), 0);
    unlink(r.path);
    /* a bad .hyperfarmignore names its line */
    put("big/.hyperfarmignore", "ok\n\n!\n", 0644);
    assert_int_equal(cli_context_pack(d, &o, &r, err, sizeof err), HF_EINVAL);
    assert_non_null(strstr(err, ".hyperfarmignore:3: empty pattern"));
    /* not a directory, no such directory */
    snprintf(p, sizeof p, "%s/big/data.csv", root);
    assert_int_equal(cli_context_pack(p, &o, &r, err, sizeof err), HF_EINVAL);
    assert_int_equal(cli_context_pack("/nonexistent/dir", &o, &r, err, sizeof err), HF_ENOTFOUND);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ignore_table),
        cmocka_unit_test(test_ignore_errors),
        cmocka_unit_test_setup_teardown(test_pack_content_and_determinism, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pack_refusals, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
