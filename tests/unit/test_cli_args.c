/*
 * test_cli_args.c — the CLI's argument handling (cli/cli_args.c,
 * cli/cli_main.c, cli/cli_up.c helpers): id and kill-target parsing, global
 * flags before the command, exit codes of usage errors, --help for every
 * command, and the "unreachable scheduler" message against a real closed
 * loopback port.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "cli/cli.h"
#include "hf_err.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <unistd.h>

static void test_parse_id(void **state)
{
    (void)state;
    static const struct { const char *s; char kind; int rc; int64_t want; } cases[] = {
        {"7", 'e', 0, 7}, {"e7", 'e', 0, 7}, {"exp7", 'e', 0, 7}, {"exp:12", 'e', 0, 12},
        {"experiment3", 'e', 0, 3}, {"E9", 'e', 0, 9}, {"t5", 't', 0, 5}, {"trial5", 't', 0, 5},
        {"5", 't', 0, 5}, {"t5", 'e', HF_EINVAL, 0}, {"e5", 't', HF_EINVAL, 0}, {"0", 'e', HF_EINVAL, 0},
        {"-3", 'e', HF_EINVAL, 0}, {"7x", 'e', HF_EINVAL, 0}, {"", 'e', HF_EINVAL, 0},
        {"abc", 'e', HF_EINVAL, 0}, {"99999999999999999999", 'e', HF_EINVAL, 0}, {"e", 'e', HF_EINVAL, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t id = -1;
        int rc = cli_parse_id(cases[i].s, cases[i].kind, &id);
        assert_int_equal(rc, cases[i].rc);
        if (!rc) assert_int_equal(id, cases[i].want);
    }
}

static void test_kill_target(void **state)
{
    (void)state;
    char kind = 0, err[256];
    int64_t id = 0;
    int used = 0;
    char *a1[] = {"exp", "3"}, *a2[] = {"trial", "17"}, *a3[] = {"t4"}, *a4[] = {"e2"};
    char *a5[] = {"3"}, *a6[] = {"trial", "x"}, *a7[] = {"trial"}, *a8[] = {"job", "3"};
    char *a9[] = {"experiment", "8"};
    assert_int_equal(cli_parse_kill_target(2, a1, &kind, &id, &used, err, sizeof err), 0);
    assert_int_equal(kind, 'e'); assert_int_equal(id, 3); assert_int_equal(used, 2);
    assert_int_equal(cli_parse_kill_target(2, a2, &kind, &id, &used, err, sizeof err), 0);
    assert_int_equal(kind, 't'); assert_int_equal(id, 17);
    assert_int_equal(cli_parse_kill_target(1, a3, &kind, &id, &used, err, sizeof err), 0);
    assert_int_equal(kind, 't'); assert_int_equal(id, 4); assert_int_equal(used, 1);
    assert_int_equal(cli_parse_kill_target(1, a4, &kind, &id, &used, err, sizeof err), 0);
    assert_int_equal(kind, 'e'); assert_int_equal(id, 2);
    assert_int_equal(cli_parse_kill_target(2, a9, &kind, &id, &used, err, sizeof err), 0);
    assert_int_equal(kind, 'e'); assert_int_equal(id, 8);
    /* a bare number is ambiguous and the message says what to write */
    assert_int_equal(cli_parse_kill_target(1, a5, &kind, &id, &used, err, sizeof err), HF_EINVAL);
    assert_non_null(strstr(err, "kill exp 3"));
    assert_non_null(strstr(err, "kill trial 3"));
    assert_int_equal(cli_parse_kill_target(2, a6, &kind, &id, &used, err, sizeof err), HF_EINVAL);
    assert_int_equal(cli_parse_kill_target(1, a7, &kind, &id, &used, err, sizeof err), HF_EINVAL);
    assert_int_equal(cli_parse_kill_target(2, a8, &kind, &id, &used, err, sizeof err), HF_EINVAL);
    assert_int_equal(cli_parse_kill_target(0, NULL, &kind, &id, &used, err, sizeof err), HF_EINVAL);
}

static void test_split_command(void **state)
{
    (void)state;
    char *argv[] = {"hyperfarm", "--url", "http://x:1", "--json", "ls", "--tsv", NULL};
    char *out[8];
    int outc = 0;
    assert_int_equal(cli_split_command(6, argv, out, &outc), 4);
    assert_int_equal(outc, 5);
    assert_string_equal(out[0], "ls");
    assert_string_equal(out[1], "--url");
    assert_string_equal(out[2], "http://x:1");
    assert_string_equal(out[3], "--json");
    assert_string_equal(out[4], "--tsv");
    char *argv2[] = {"hyperfarm", "--json", NULL};
    assert_int_equal(cli_split_command(2, argv2, out, &outc), -1);
    char *argv3[] = {"hyperfarm", "--url=http://y:2", "show", "3", NULL};
    assert_int_equal(cli_split_command(4, argv3, out, &outc), 2);
    assert_string_equal(out[0], "show");
    assert_string_equal(out[2], "3");
}

static void test_listen_url(void **state)
{
    (void)state;
    char buf[128];
    assert_int_equal(cli_up_listen_from_url("http://127.0.0.1:9090", buf, sizeof buf), 0);
    assert_string_equal(buf, "127.0.0.1:9090");
    assert_int_equal(cli_up_listen_from_url("http://localhost/api", buf, sizeof buf), 0);
    assert_string_equal(buf, "localhost:8080");
    assert_int_equal(cli_up_listen_from_url("https://h:1/", buf, sizeof buf), 0);
    assert_string_equal(buf, "h:1");
    assert_int_equal(cli_up_listen_from_url("ftp://h:1", buf, sizeof buf), HF_EINVAL);
    assert_int_equal(cli_up_listen_from_url("http://", buf, sizeof buf), HF_EINVAL);
    assert_int_equal(cli_up_url_from_listen("0.0.0.0:8080", buf, sizeof buf), 0);
    assert_string_equal(buf, "http://127.0.0.1:8080");
    assert_int_equal(cli_up_url_from_listen("10.0.0.2:81", buf, sizeof buf), 0);
    assert_string_equal(buf, "http://10.0.0.2:81");
    assert_int_equal(cli_up_url_from_listen("8080", buf, sizeof buf), HF_EINVAL);
    assert_int_equal(cli_up_url_from_listen("host:", buf, sizeof buf), HF_EINVAL);
}

/* Run cli_main on a NULL-terminated argv; capture both streams. */
typedef struct { int rc; char *out, *err; } run_res;

static run_res run(char **argv)
{
    run_res r;
    size_t ol = 0, el = 0;
    int argc = 0;
    while (argv[argc]) argc++;
    FILE *o = open_memstream(&r.out, &ol), *e = open_memstream(&r.err, &el);
    r.rc = cli_main(argc, argv, o, e);
    fclose(o);
    fclose(e);
    return r;
}

static void run_free(run_res *r) { free(r->out); free(r->err); }

static void test_usage_exit_codes(void **state)
{
    (void)state;
    static const struct { char *argv[6]; int rc; const char *err_has; } cases[] = {
        {{"hyperfarm", NULL}, CLI_USAGE, "usage:"},
        {{"hyperfarm", "frobnicate", NULL}, CLI_USAGE, "unknown command 'frobnicate'"},
        {{"hyperfarm", "ls", "--bogus", NULL}, CLI_USAGE, "unknown option '--bogus'"},
        {{"hyperfarm", "show", NULL}, CLI_USAGE, "expected 1 argument"},
        {{"hyperfarm", "show", "1", "2", NULL}, CLI_USAGE, "expected 1 argument"},
        {{"hyperfarm", "show", "abc", NULL}, CLI_USAGE, "not an experiment id"},
        {{"hyperfarm", "logs", "e3", NULL}, CLI_USAGE, "not a trial id"},
        {{"hyperfarm", "kill", "3", NULL}, CLI_USAGE, "ambiguous"},
        {{"hyperfarm", "kill", "exp", "3", "4", NULL}, CLI_USAGE, "expected at most 2"},
        {{"hyperfarm", "ls", "--json", "--tsv", NULL}, CLI_USAGE, "exclude each other"},
        {{"hyperfarm", "ls", "--url", "localhost:8080", NULL}, CLI_USAGE, "must start with http://"},
        {{"hyperfarm", "ls", "--timeout-ms", "0", NULL}, CLI_USAGE, "--timeout-ms"},
        {{"hyperfarm", "completion", "zsh", NULL}, CLI_USAGE, "only 'bash'"},
        {{"hyperfarm", "help", "nope", NULL}, CLI_USAGE, "unknown command"},
        {{"hyperfarm", "extend", "3", NULL}, CLI_USAGE, "exactly one of --add-trials"},
        {{"hyperfarm", "extend", "3", "--add-trials=2", "--max-trials=9", NULL}, CLI_USAGE, "exactly one of"},
        {{"hyperfarm", "extend", "t3", "--add-trials", "2", NULL}, CLI_USAGE, "not an experiment id"},
        {{"hyperfarm", "fork", "3", NULL}, CLI_USAGE, "expected 2 arguments"},
        {{"hyperfarm", "tag", "3", NULL}, CLI_USAGE, "at least one +TAG"},
        {{"hyperfarm", "tag", "3", "+", NULL}, CLI_USAGE, "expected +TAG, -TAG or TAG"},
        {{"hyperfarm", "note", "e3", "x", NULL}, CLI_USAGE, "not a trial id"},
        {{"hyperfarm", "describe", "3", NULL}, CLI_USAGE, "expected 2 arguments"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_res r = run((char **)cases[i].argv);
        if (r.rc != cases[i].rc || !strstr(r.err, cases[i].err_has))
            fail_msg("case %zu (%s %s): rc %d, stderr: %s", i, cases[i].argv[1] ? cases[i].argv[1] : "",
                     cases[i].argv[2] ? cases[i].argv[2] : "", r.rc, r.err);
        run_free(&r);
    }
}

static void test_help_for_every_command(void **state)
{
    (void)state;
    for (int i = 0; cli_command_names[i]; i++) {
        const char *name = cli_command_names[i];
        if (!strcmp(name, "help") || !strcmp(name, "version")) continue;
        char *argv[] = {"hyperfarm", (char *)name, "--help", NULL};
        run_res r = run(argv);
        assert_int_equal(r.rc, CLI_OK);
        if (!strstr(r.out, "usage: hyperfarm") || !strstr(r.out, "examples:"))
            fail_msg("%s --help lacks usage or examples:\n%s", name, r.out);
        run_free(&r);
        char *argv2[] = {"hyperfarm", "help", (char *)name, NULL};
        r = run(argv2);
        assert_int_equal(r.rc, CLI_OK);
        assert_non_null(strstr(r.out, "examples:"));
        run_free(&r);
    }
    char *argv[] = {"hyperfarm", "--help", NULL};
    run_res r = run(argv);
    assert_int_equal(r.rc, CLI_OK);
    assert_non_null(strstr(r.out, "exit codes:"));
    assert_non_null(strstr(r.out, "HYPERFARM_URL"));
    run_free(&r);
    char *argv2[] = {"hyperfarm", "version", NULL};
    r = run(argv2);
    assert_int_equal(r.rc, CLI_OK);
    assert_non_null(strstr(r.out, "hyperfarm "));
    run_free(&r);
}

/* tag's words and the query escaping of ls --tag (cli_flow.c). */
static void test_tag_words(void **state)
{
    (void)state;
    char *words[] = {"+a", "-b", "c", "-d:e"}, err[128];
    json_t *add = NULL, *rm = NULL;
    assert_int_equal(cli_tag_args(4, words, &add, &rm, err, sizeof err), 0);
    char *a = json_dumps(add, JSON_COMPACT), *r = json_dumps(rm, JSON_COMPACT);
    assert_string_equal(a, "[\"a\",\"c\"]");
    assert_string_equal(r, "[\"b\",\"d:e\"]");
    free(a);
    free(r);
    json_decref(add);
    json_decref(rm);
    char *bad[] = {"ok", "-"};
    assert_int_equal(cli_tag_args(2, bad, &add, &rm, err, sizeof err), HF_EINVAL);
    assert_null(add);
    assert_non_null(strstr(err, "'-'"));
    char q[64];
    cli_query_escape(q, sizeof q, "c++/lr:x=1 y");
    assert_string_equal(q, "c%2B%2B%2Flr%3Ax%3D1%20y");
    cli_query_escape(q, 8, "abcdefghij");
    assert_true(strlen(q) < 8);
}

static void test_completion_lists_commands(void **state)
{
    (void)state;
    char *argv[] = {"hyperfarm", "completion", "bash", NULL};
    run_res r = run(argv);
    assert_int_equal(r.rc, CLI_OK);
    assert_non_null(strstr(r.out, "complete -F _hyperfarm hyperfarm"));
    assert_non_null(strstr(r.out, "up submit ls show watch logs kill pause resume agents export"));
    assert_null(strstr(r.out, "%COMMANDS%"));
    run_free(&r);
}

/* A loopback port on which nothing listens: bind, note, close. */
static int closed_port(void)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    getsockname(fd, (struct sockaddr *)&a, &len);
    close(fd);
    return ntohs(a.sin_port);
}

static void test_unreachable(void **state)
{
    (void)state;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", closed_port());
    static const char *const cmds[][3] = {{"ls", NULL, NULL}, {"show", "1", NULL}, {"agents", NULL, NULL},
                                          {"watch", "1", NULL}, {"kill", "t1", NULL}, {"logs", "1", NULL}};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char *argv[] = {"hyperfarm", "--url", url, (char *)cmds[i][0], (char *)cmds[i][1], NULL};
        run_res r = run(argv);
        assert_int_equal(r.rc, CLI_UNREACHABLE);
        assert_non_null(strstr(r.err, url));
        assert_non_null(strstr(r.err, "hyperfarm up"));
        assert_non_null(strstr(r.err, "HYPERFARM_URL"));
        run_free(&r);
    }
    /* HYPERFARM_URL is read when no --url is given */
    setenv("HYPERFARM_URL", url, 1);
    char *argv[] = {"hyperfarm", "ls", NULL};
    run_res r = run(argv);
    assert_int_equal(r.rc, CLI_UNREACHABLE);
    assert_non_null(strstr(r.err, url));
    run_free(&r);
    unsetenv("HYPERFARM_URL");
}

static void test_submit_bad_files(void **state)
{
    (void)state;
    char path[] = "/tmp/hf-test-cli-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "{\"name\": ", 9), 9);
    close(fd);
    char *argv[] = {"hyperfarm", "--url", "http://127.0.0.1:9", "submit", path, NULL};
    run_res r = run(argv);   /* parsed locally: the scheduler is never asked */
    assert_int_equal(r.rc, CLI_USAGE);
    assert_non_null(strstr(r.err, "malformed JSON at line 1"));
    run_free(&r);
    fd = open(path, O_WRONLY | O_TRUNC);
    assert_int_equal(write(fd, "[1, 2]", 6), 6);
    close(fd);
    r = run(argv);
    assert_int_equal(r.rc, CLI_USAGE);
    assert_non_null(strstr(r.err, "expected a JSON object"));
    run_free(&r);
    unlink(path);
    r = run(argv);   /* now missing */
    assert_int_equal(r.rc, CLI_NOTFOUND);
    assert_non_null(strstr(r.err, "cannot open"));
    run_free(&r);
}

static void test_exit_for_status(void **state)
{
    (void)state;
    assert_int_equal(cli_exit_for_status(200), CLI_OK);
    assert_int_equal(cli_exit_for_status(201), CLI_OK);
    assert_int_equal(cli_exit_for_status(400), CLI_USAGE);
    assert_int_equal(cli_exit_for_status(413), CLI_USAGE);
    assert_int_equal(cli_exit_for_status(401), CLI_AUTH);
    assert_int_equal(cli_exit_for_status(403), CLI_AUTH);
    assert_int_equal(cli_exit_for_status(404), CLI_NOTFOUND);
    assert_int_equal(cli_exit_for_status(409), CLI_STATE);
    assert_int_equal(cli_exit_for_status(500), CLI_ERR);
    assert_int_equal(cli_exit_for_status(503), CLI_UNREACHABLE);
}

/* `webhooks` words: the verbs, their one argument, what is refused. */
static void test_webhook_args(void **state)
{
    (void)state;
    static const struct { int argc; const char *argv[3]; int rc; const char *verb; int64_t id; const char *url; } cases[] = {
        {0, {NULL}, 0, "list", 0, NULL},
        {1, {"list"}, 0, "list", 0, NULL},
        {2, {"add", "http://h/x"}, 0, "add", 0, "http://h/x"},
        {2, {"test", "3"}, 0, "test", 3, NULL},
        {2, {"delete", "12"}, 0, "delete", 12, NULL},
        {1, {"add"}, HF_EINVAL, NULL, 0, NULL},
        {1, {"test"}, HF_EINVAL, NULL, 0, NULL},
        {3, {"delete", "1", "2"}, HF_EINVAL, NULL, 0, NULL},
        {2, {"list", "x"}, HF_EINVAL, NULL, 0, NULL},
        {2, {"test", "0"}, HF_EINVAL, NULL, 0, NULL},
        {2, {"delete", "abc"}, HF_EINVAL, NULL, 0, NULL},
        {2, {"test", "e3"}, HF_EINVAL, NULL, 0, NULL},
        {1, {"frob"}, HF_EINVAL, NULL, 0, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char verb[16] = "", err[256] = "";
        int64_t id = -1;
        const char *url = "unset";
        int rc = cli_webhook_args(cases[i].argc, (char **)cases[i].argv, verb, sizeof verb, &id, &url, err, sizeof err);
        assert_int_equal(rc, cases[i].rc);
        if (rc) {
            assert_true(err[0] != '\0');
            continue;
        }
        assert_string_equal(verb, cases[i].verb);
        assert_int_equal(id, cases[i].id);
        if (cases[i].url) assert_string_equal(url, cases[i].url);
        else assert_null(url);
    }
}

static void test_webhook_events(void **state)
{
    (void)state;
    static const struct { const char *in; int rc; const char *want; } cases[] = {
        {"*", 0, "[\"*\"]"},
        {"trial.FAILED,experiment.*", 0, "[\"trial.FAILED\", \"experiment.*\"]"},
        {"trial.FAILED, experiment.COMPLETED ", 0, "[\"trial.FAILED\", \"experiment.COMPLETED\"]"},
        {"a,", 0, "[\"a\"]"},
        {"", HF_EINVAL, NULL},
        {"a,,b", HF_EINVAL, NULL},
        {",a", HF_EINVAL, NULL},
        {"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", HF_EINVAL, NULL},   /* 65 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[256] = "";
        json_t *arr = NULL;
        int rc = cli_webhook_events(cases[i].in, &arr, err, sizeof err);
        assert_int_equal(rc, cases[i].rc);
        if (rc) {
            assert_null(arr);
            assert_non_null(strstr(err, "--events"));
            continue;
        }
        json_t *want = json_loads(cases[i].want, 0, NULL);
        assert_true(json_equal(arr, want));
        json_decref(want);
        json_decref(arr);
    }
}

/* webhooks' add-only flags on another verb, and a bad experiment id: exit 2
 * before any request (the URL is a closed port: a request would exit 4). */
static void test_webhook_usage(void **state)
{
    (void)state;
    static const char *const cases[][6] = {
        {"hyperfarm", "--url", "http://127.0.0.1:1", "webhooks", "test", "1"},
        {"hyperfarm", "--url", "http://127.0.0.1:1", "webhooks", "add", "http://x/y"},
    };
    char *out = NULL, *err = NULL;
    size_t ol, el;
    FILE *o = open_memstream(&out, &ol), *e = open_memstream(&err, &el);
    char *v1[] = {(char *)cases[0][0], (char *)cases[0][1], (char *)cases[0][2], (char *)cases[0][3],
                  (char *)cases[0][4], (char *)cases[0][5], "--format", "slack", NULL};
    assert_int_equal(cli_main(8, v1, o, e), CLI_USAGE);
    char *v2[] = {(char *)cases[1][0], (char *)cases[1][1], (char *)cases[1][2], (char *)cases[1][3],
                  (char *)cases[1][4], (char *)cases[1][5], "--experiment", "t3", NULL};
    assert_int_equal(cli_main(8, v2, o, e), CLI_USAGE);
    fclose(o);
    fclose(e);
    assert_non_null(strstr(err, "go with 'webhooks add'"));
    assert_non_null(strstr(err, "t3"));
    free(out);
    free(err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_id),
        cmocka_unit_test(test_kill_target),
        cmocka_unit_test(test_split_command),
        cmocka_unit_test(test_listen_url),
        cmocka_unit_test(test_usage_exit_codes),
        cmocka_unit_test(test_help_for_every_command),
        cmocka_unit_test(test_completion_lists_commands),
        cmocka_unit_test(test_tag_words),
        cmocka_unit_test(test_unreachable),
        cmocka_unit_test(test_submit_bad_files),
        cmocka_unit_test(test_exit_for_status),
        cmocka_unit_test(test_webhook_args),
        cmocka_unit_test(test_webhook_events),
        cmocka_unit_test(test_webhook_usage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
