/*
 * test_agent_client.c — common/hf_client.h, the header C trials include:
 * hparam scanning, the budget, stop requests (SIGTERM and control file),
 * and that what hf_report prints is accepted by the agent's parser.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "hf_client.h"
#include "hf_err.h"
#include "hf_metric.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void test_hparams(void **state)
{
    (void)state;
    static const struct { const char *json, *name; double def, want; } cases[] = {
        {"{\"lr\": 0.01, \"hidden\": 128}", "lr", 1, 0.01},
        {"{\"lr\": 0.01, \"hidden\": 128}", "hidden", 1, 128},
        {"{\"lr\":1e-3}", "lr", 1, 1e-3},
        {"{\"a\": {\"lr\": 5}, \"lr\": 2}", "lr", 1, 2},          /* nested key is not top level */
        {"{\"name\": \"lr\", \"x\": 3}", "lr", 7, 7},            /* a string value equal to the key */
        {"{\"s\": \"a\\\"lr\\\": 9\", \"lr\": 4}", "lr", 1, 4},   /* escaped quotes inside a string */
        {"{\"flag\": true, \"off\": false}", "flag", 0, 1},
        {"{\"flag\": true, \"off\": false}", "off", 5, 0},
        {"{\"opt\": \"adam\"}", "opt", 3, 3},                   /* not a number */
        {"{\"lr2\": 9}", "lr", 1, 1},                            /* prefix of another key */
        {"{}", "lr", 0.5, 0.5},
        {"not json", "lr", 0.5, 0.5},
        {"{\"neg\": -2.5}", "neg", 0, -2.5},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv("HYPERFARM_HPARAMS", cases[i].json, 1);
        double got = hf_hparam_double(cases[i].name, cases[i].def);
        if (got != cases[i].want) fprintf(stderr, "case %zu: got %g want %g\n", i, got, cases[i].want);
        assert_true(got == cases[i].want);
    }
    unsetenv("HYPERFARM_HPARAMS");
    assert_true(hf_hparam_double("lr", 0.25) == 0.25);
    assert_int_equal(hf_hparam_int("lr", 3), 3);
    setenv("HYPERFARM_MAX_EPOCHS", "27", 1);
    assert_int_equal(hf_max_epochs(5), 27);
    setenv("HYPERFARM_MAX_EPOCHS", "junk", 1);
    assert_int_equal(hf_max_epochs(5), 5);
    unsetenv("HYPERFARM_MAX_EPOCHS");
    assert_int_equal(hf_max_epochs(5), 5);
    unsetenv("HYPERFARM_CHECKPOINT_DIR");
    assert_string_equal(hf_checkpoint_dir(), ".");
}

static void test_should_stop(void **state)
{
    (void)state;
    char dir[] = "/tmp/hf-client-XXXXXX", ck[128], ctl[160];
    assert_non_null(mkdtemp(dir));
    snprintf(ck, sizeof ck, "%s/checkpoints", dir);
    snprintf(ctl, sizeof ctl, "%s/control.json", dir);
    mkdir(ck, 0755);
    setenv("HYPERFARM_CHECKPOINT_DIR", ck, 1);
    unsetenv("HYPERFARM_CONTROL_FILE");    /* found as $CKPT/../control.json */
    assert_int_equal(hf_client_init(), 0);
    FILE *f = fopen(ctl, "w");
    fputs("{\"should_stop\":false,\"reason\":null}\n", f);
    fclose(f);
    assert_false(hf_should_stop());
    f = fopen(ctl, "w");
    fputs("{\"should_stop\": true, \"reason\": \"asha\"}\n", f);
    fclose(f);
    int stopped = 0;
    for (int i = 0; i < 150 && !stopped; i++) {   /* re-read within HF_CLIENT_POLL_MS */
        stopped = hf_should_stop();
        usleep(10000);
    }
    assert_true(stopped);
    unlink(ctl);
    rmdir(ck);
    rmdir(dir);
    unsetenv("HYPERFARM_CHECKPOINT_DIR");
}

static void test_sigterm(void **state)
{
    (void)state;
    unsetenv("HYPERFARM_CHECKPOINT_DIR");
    hf_client_term_flag = 0;
    assert_int_equal(hf_client_init(), 0);
    assert_false(hf_client_term_flag);
    raise(SIGTERM);                        /* caught, not fatal */
    assert_true(hf_client_term_flag);
    assert_true(hf_should_stop());
    hf_client_term_flag = 0;               /* for the control-file test */
}

static void test_report_parses(void **state)
{
    (void)state;
    char path[] = "/tmp/hf-client-out-XXXXXX", line[9000];
    int fd = mkstemp(path), saved = dup(1);
    assert_true(fd >= 0);
    fflush(stdout);
    dup2(fd, 1);
    const char *names[] = {"val_acc", "train_loss", "nan_is_skipped"};
    double vals[] = {0.875, 0.31, NAN};
    hf_report(1200, 2, 3, names, vals);
    hf_report_kv(-1, 3.5, "lr", 1e-4);
    hf_report_checkpoint(1300, "/ck/dir \"quoted\"");
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    FILE *f = fdopen(fd, "r");
    rewind(f);
    hf_metric_report r;
    hf_jerr e;
    assert_non_null(fgets(line, sizeof line, f));
    assert_int_equal(hf_metric_parse(line, strlen(line), &r, &e), HF_OK);
    assert_true(r.has_step && r.step == 1200 && r.has_epoch && r.epoch == 2);
    assert_int_equal(r.n, 3);   /* epoch, val_acc, train_loss */
    assert_non_null(fgets(line, sizeof line, f));
    assert_int_equal(hf_metric_parse(line, strlen(line), &r, &e), HF_OK);
    assert_false(r.has_step);
    assert_true(r.epoch == 3.5);
    assert_non_null(fgets(line, sizeof line, f));
    assert_int_equal(hf_metric_parse(line, strlen(line), &r, &e), HF_OK);
    assert_string_equal(r.checkpoint, "/ck/dir \"quoted\"");
    fclose(f);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hparams),
        cmocka_unit_test(test_sigterm),
        cmocka_unit_test(test_should_stop),   /* after: the file's stop is sticky */
        cmocka_unit_test(test_report_parses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
