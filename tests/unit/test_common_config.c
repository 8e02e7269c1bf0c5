/*
 * test_common_config.c — settings table: defaults, config file,
 * environment, flags, precedence, bounds and error messages; and logging
 * levels.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "hf_config.h"
#include "hf_err.h"
#include "hf_log.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *listen_addr, *db, *config;
static int64_t slots;
static double lr;
static int verbose;

static hf_cfg_opt opts[] = {
    {"listen", "HFT_LISTEN", HF_CFG_STR, &listen_addr, "127.0.0.1:8080", 0, -1, "address"},
    {"db", NULL, HF_CFG_STR, &db, NULL, 0, -1, "database"},
    {"slots", "HFT_SLOTS", HF_CFG_INT, &slots, "1", 1, 1024, "slots"},
    {"lr", NULL, HF_CFG_DOUBLE, &lr, "0.1", 0, 10, "learning rate"},
    {"verbose", NULL, HF_CFG_BOOL, &verbose, "false", 0, -1, "chatty"},
    {"config", "HFT_CONFIG", HF_CFG_STR, &config, NULL, 0, -1, "config file"},
    HF_CFG_END,
};

static int parse(int argc, char **argv, int *npos, char *err)
{
    return hf_config_parse(opts, argc, argv, npos, err, 256);
}

static void test_defaults_flags_env(void **state)
{
    (void)state;
    char err[256];
    int np;
    unsetenv("HFT_SLOTS");
    char *a1[] = {"prog", NULL};
    assert_int_equal(parse(1, a1, &np, err), 0);
    assert_string_equal(listen_addr, "127.0.0.1:8080");
    assert_null(db);
    assert_int_equal(slots, 1);
    assert_false(verbose);

    setenv("HFT_SLOTS", "4", 1);
    char *a2[] = {"prog", "submit", "--slots=8", "--verbose", "--lr", "0.5", "file.json", "--", "--not-a-flag", NULL};
    assert_int_equal(parse(9, a2, &np, err), 0);
    assert_int_equal(slots, 8);                /* flag beats environment */
    assert_true(verbose);
    assert_true(lr == 0.5);
    assert_int_equal(np, 3);
    assert_string_equal(a2[1], "submit");
    assert_string_equal(a2[2], "file.json");
    assert_string_equal(a2[3], "--not-a-flag");

    char *a3[] = {"prog", NULL};
    assert_int_equal(parse(1, a3, &np, err), 0);
    assert_int_equal(slots, 4);                /* environment beats default */
    unsetenv("HFT_SLOTS");
}

struct bad { const char *arg; const char *msg; };

static void test_errors(void **state)
{
    (void)state;
    static const struct bad cases[] = {
        {"--slots=0", "--slots: must be between 1 and 1024, got 0"},
        {"--slots=abc", "--slots: expected an integer, got 'abc'"},
        {"--lr=nan", "--lr: expected a number"},
        {"--verbose=maybe", "--verbose: expected true or false"},
        {"--nope", "unknown option '--nope'"},
        {"--no-slots", "unknown option '--no-slots'"},
        {"--db", "--db needs a value"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char err[256] = "";
        char *argv[] = {"prog", (char *)cases[i].arg, NULL};
        int np;
        assert_int_equal(parse(2, argv, &np, err), HF_EINVAL);
        if (!strstr(err, cases[i].msg)) fail_msg("case %s: got '%s'", cases[i].arg, err);
    }
    char err[256];
    int np;
    setenv("HFT_SLOTS", "-3", 1);
    char *argv[] = {"prog", NULL};
    assert_int_equal(parse(1, argv, &np, err), HF_EINVAL);
    assert_non_null(strstr(err, "environment HFT_SLOTS"));
    unsetenv("HFT_SLOTS");
    char *h[] = {"prog", "--help", NULL};
    assert_int_equal(parse(2, h, &np, err), 1);
}

static void test_config_file(void **state)
{
    (void)state;
    char path[] = "/tmp/hf-test-config-XXXXXX";
    int fd = mkstemp(path);
    const char *text = "# comment\n  listen = 0.0.0.0:9000  \nslots=16\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    char err[256];
    int np;
    char *a[] = {"prog", "--config", path, "--slots", "2", NULL};
    assert_int_equal(parse(5, a, &np, err), 0);
    assert_string_equal(listen_addr, "0.0.0.0:9000");
    assert_int_equal(slots, 2);                /* flag beats file */
    hf_config_free(opts);

    FILE *f = fopen(path, "w");
    fputs("bogus = 1\n", f);
    fclose(f);
    char *b[] = {"prog", "--config", path, NULL};
    assert_int_equal(parse(3, b, &np, err), HF_EINVAL);
    assert_non_null(strstr(err, ":1: unknown setting 'bogus'"));
    hf_config_free(opts);
    unlink(path);
    char *c[] = {"prog", "--config=/nonexistent/x.conf", NULL};
    assert_int_equal(parse(2, c, &np, err), HF_EINVAL);
    assert_non_null(strstr(err, "No such file"));
}

static void test_log_levels(void **state)
{
    (void)state;
    int lvl;
    assert_int_equal(hf_log_parse_level("debug", &lvl), 0);
    assert_int_equal(lvl, HF_LOG_DEBUG);
    assert_int_equal(hf_log_parse_level("WARNING", &lvl), 0);
    assert_int_equal(lvl, HF_LOG_WARN);
    assert_int_equal(hf_log_parse_level("loud", &lvl), HF_EINVAL);
    /* a line is written to the given fd with program, level and function */
    int p[2];
    assert_int_equal(pipe(p), 0);
    hf_log_init("unit");
    hf_log_set_fd(p[1]);
    hf_log_set_level(HF_LOG_INFO);
    hf_debug("hidden %d", 1);
    hf_warn("shown %d", 2);
    hf_log_set_format(HF_LOG_JSON);
    hf_error("json %s", "line");
    hf_log_set_format(HF_LOG_TEXT);
    hf_log_set_fd(2);
    close(p[1]);
    char buf[1024] = "";
    ssize_t n = read(p[0], buf, sizeof buf - 1);
    close(p[0]);
    assert_true(n > 0);
    assert_null(strstr(buf, "hidden"));
    assert_non_null(strstr(buf, "unit WARN test_log_levels: shown 2\n"));
    assert_non_null(strstr(buf, "\"level\":\"ERROR\""));
    assert_non_null(strstr(buf, "\"msg\":\"json line\""));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_flags_env),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_config_file),
        cmocka_unit_test(test_log_levels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
