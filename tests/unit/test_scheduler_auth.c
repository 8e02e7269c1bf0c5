/*
 * test_scheduler_auth.c — token file parsing and role checks, and the
 * static-file path checks (traversal: "..", encoded forms left after
 * unescaping, absolute paths, symlinks out of the root) on a real
 * temporary directory.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "hf_err.h"
#include "scheduler/api/auth.h"
#include "scheduler/api/webfs.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void test_tokens(void **state)
{
    (void)state;
    const char *txt = "# users\nuser:u-secret-0001\n\n  agent:a-secret-0001  \nuser:u-secret-0002\r\n";
    auth *a = NULL;
    char err[200];
    assert_int_equal(auth_parse(txt, strlen(txt), &a, err, sizeof err), 0);
    assert_int_equal(auth_count(a), 3);
    assert_int_equal(auth_check(a, "u-secret-0001"), AUTH_USER);
    assert_int_equal(auth_check(a, "u-secret-0002"), AUTH_USER);
    assert_int_equal(auth_check(a, "a-secret-0001"), AUTH_AGENT);
    assert_int_equal(auth_check(a, "u-secret-000"), AUTH_NONE);     /* prefix */
    assert_int_equal(auth_check(a, "u-secret-00011"), AUTH_NONE);   /* longer */
    assert_int_equal(auth_check(a, ""), AUTH_NONE);
    assert_int_equal(auth_check(a, NULL), AUTH_NONE);
    auth_free(a);
}

static void test_token_file_errors(void **state)
{
    (void)state;
    static const char *bad[] = {"", "# only comments\n", "root:abcdefghij\n", "user:short\n", "userabcdefghij\n",
                                "user:abc def ghij\n", "user:samesame1\nagent:samesame1\n",
                                /* a token under two roles, or one role for two names, is ambiguous */
                                "admin:boss samesame1\nuser:boss samesame1\n", "viewer:samesame1\nuser:samesame1\n",
                                "user:alice samesame1\nuser:bob samesame1\n", "Admin:abcdefghij\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        auth *a = NULL;
        char err[200] = "";
        if (auth_parse(bad[i], strlen(bad[i]), &a, err, sizeof err) == 0) fail_msg("case %zu accepted", i);
        assert_null(a);
        assert_true(err[0] != 0);
    }
    auth *a = NULL;
    char err[200];
    assert_int_not_equal(auth_load("/nonexistent/tokens", &a, err, sizeof err), 0);
}

/* The four roles, the old and the named forms, and who holds each token. */
static void test_roles(void **state)
{
    (void)state;
    const char *txt = "admin:root admin-secret-1\nuser:alice alice-secret-1\nviewer:wall wall-secret-1\n"
                      "agent:gpu1 agent-secret-1\nadmin:old-admin-secret\nviewer:old-viewer-secret\n"
                      "user:old-user-secret\nuser:alice alice-secret-1\n";   /* a repeated line is harmless */
    auth *a = NULL;
    char err[200];
    assert_int_equal(auth_parse(txt, strlen(txt), &a, err, sizeof err), 0);
    static const struct { const char *token; int role; const char *user; } want[] = {
        {"admin-secret-1", AUTH_ADMIN, "root"},        {"alice-secret-1", AUTH_USER, "alice"},
        {"wall-secret-1", AUTH_VIEWER, "wall"},        {"agent-secret-1", AUTH_AGENT, "gpu1"},
        {"old-admin-secret", AUTH_ADMIN, "admin"},     {"old-viewer-secret", AUTH_VIEWER, "viewer"},
        {"old-user-secret", AUTH_USER, "default"},     {"admin-secret-", AUTH_NONE, ""},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        const char *u = "?";
        assert_int_equal(auth_check_user(a, want[i].token, &u), want[i].role);
        assert_string_equal(u, want[i].user);
    }
    auth_free(a);
    assert_int_equal(auth_role_parse("admin"), AUTH_ADMIN);
    assert_int_equal(auth_role_parse("viewer"), AUTH_VIEWER);
    assert_int_equal(auth_role_parse("root"), AUTH_NONE);
    assert_string_equal(auth_role_name(AUTH_VIEWER), "viewer");
    assert_string_equal(auth_role_name(AUTH_USER | AUTH_ADMIN), "none");
    /* The error names the line and the roles. */
    const char *bad = "user:alice alice-secret-1\nroot:abcdefghij\n";
    assert_int_not_equal(auth_parse(bad, strlen(bad), &a, err, sizeof err), 0);
    assert_non_null(strstr(err, "line 2"));
    assert_non_null(strstr(err, "admin, user, viewer or agent"));
}

static void test_bearer_and_equal(void **state)
{
    (void)state;
    assert_string_equal(auth_bearer("Bearer abc"), "abc");
    assert_string_equal(auth_bearer("bearer  abc"), "abc");
    assert_null(auth_bearer("Basic abc"));
    assert_null(auth_bearer("Bearer "));
    assert_null(auth_bearer(NULL));
    assert_true(auth_equal("abc", "abc"));
    assert_false(auth_equal("abc", "abd"));
    assert_false(auth_equal("abc", "ab"));
    assert_false(auth_equal("", "a"));
}

static char root[PATH_MAX], outside[PATH_MAX];

static void write_file(const char *p, const char *s)
{
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(s, f);
    fclose(f);
}

static void test_paths(void **state)
{
    (void)state;
    char base[] = "/tmp/hf_web_XXXXXX", p[PATH_MAX + 64], got[PATH_MAX];
    assert_non_null(mkdtemp(base));
    snprintf(p, sizeof p, "%s/web", base);
    assert_int_equal(mkdir(p, 0755), 0);
    assert_non_null(realpath(p, root));
    snprintf(outside, sizeof outside, "%s/secret.txt", base);
    write_file(outside, "secret");
    snprintf(p, sizeof p, "%s/index.html", root); write_file(p, "<html>");
    snprintf(p, sizeof p, "%s/js", root); assert_int_equal(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/js/app.js", root); write_file(p, "1");
    snprintf(p, sizeof p, "%s/escape.txt", root); assert_int_equal(symlink(outside, p), 0);
    snprintf(p, sizeof p, "%s/up", root); assert_int_equal(symlink("..", p), 0);

    assert_int_equal(webfs_resolve(root, "/", got, sizeof got), 0);
    assert_non_null(strstr(got, "/index.html"));
    assert_int_equal(webfs_resolve(root, "/js/app.js", got, sizeof got), 0);
    assert_int_equal(webfs_resolve(root, "/js", got, sizeof got), HF_ENOTFOUND);   /* no js/index.html */
    assert_int_equal(webfs_resolve(root, "/missing.js", got, sizeof got), HF_ENOTFOUND);
    static const char *forbidden[] = {"/../secret.txt", "/js/../../secret.txt", "/..", "/./index.html",
                                      "/%2e%2e/secret.txt", "/js\\..\\..\\secret.txt", "relative", "",
                                      "/a\x01b"};
    for (size_t i = 0; i < sizeof forbidden / sizeof forbidden[0]; i++)
        if (webfs_resolve(root, forbidden[i], got, sizeof got) != HF_EINVAL) fail_msg("'%s' not refused", forbidden[i]);
    /* Symlinks that lead out of the root are not served. */
    assert_int_equal(webfs_resolve(root, "/escape.txt", got, sizeof got), HF_ENOTFOUND);
    assert_int_equal(webfs_resolve(root, "/up/secret.txt", got, sizeof got), HF_ENOTFOUND);
    /* An absolute path is taken relative to the root, never as itself. */
    char absurl[PATH_MAX + 8];
    snprintf(absurl, sizeof absurl, "%s", outside);
    assert_int_equal(webfs_resolve(root, absurl, got, sizeof got), HF_ENOTFOUND);
    assert_string_equal(webfs_mime("a/b.js"), "text/javascript; charset=utf-8");
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokens),
        cmocka_unit_test(test_token_file_errors),
        cmocka_unit_test(test_roles),
        cmocka_unit_test(test_bearer_and_equal),
        cmocka_unit_test(test_paths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
