/*
 * test_trainer_options.c — flags, HYPERFARM_HPARAMS (types, unknown and
 * ill-typed keys named in the error) and the trial environment.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "hf_err.h"
#include "trainer/options.h"

#include <stdlib.h>
#include <string.h>

static int parse(tr_options *o, const char *hp, char *err, int argc, ...)
{
    char *argv[32] = {"hyperfarm-train"};
    va_list ap;
    va_start(ap, argc);
    for (int i = 0; i < argc; i++) argv[i + 1] = va_arg(ap, char *);
    va_end(ap);
    tr_options_defaults(o);
    return tr_options_parse(o, argc + 1, argv, hp, err, 512);
}

static void test_flags(void **state)
{
    (void)state;
    tr_options o;
    char err[512];
    assert_int_equal(parse(&o, NULL, err, 9, "--model", "cnn", "--lr=0.05", "--hidden", "64,32,16", "--nesterov",
                           "--batch_size", "64", "--no-flip"), 0);
    assert_string_equal(o.model, "cnn");
    assert_float_equal(o.lr, 0.05, 0);
    assert_int_equal(o.n_hidden, 3);
    assert_int_equal(o.hidden[2], 16);
    assert_true(o.nesterov);
    assert_int_equal(o.batch_size, 64);
    assert_int_equal(parse(&o, NULL, err, 1, "--help"), 1);
    /* errors name the flag */
    static const struct { const char *a, *b, *needle; } bad[] = {
        {"--bogus", "1", "--bogus"},        {"--lr", "fast", "'lr'"},
        {"--epochs", "2.5", "'epochs'"},    {"--model", "resnet", "mlp|cnn"},
        {"--batch-size", "0", "outside"},   {"--hidden", "256,x", "'hidden'"},
        {"--optimizer", "lbfgs", "sgd|adam|adamw"}, {"--nesterov=maybe", NULL, "'nesterov'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = bad[i].b ? parse(&o, NULL, err, 2, bad[i].a, bad[i].b) : parse(&o, NULL, err, 1, bad[i].a);
        assert_int_equal(rc, HF_EINVAL);
        if (!strstr(err, bad[i].needle)) fprintf(stderr, "'%s' not in '%s'\n", bad[i].needle, err);
        assert_non_null(strstr(err, bad[i].needle));
    }
    assert_int_equal(parse(&o, NULL, err, 1, "--lr"), HF_EINVAL);   /* missing value */
}

static void test_hparams(void **state)
{
    (void)state;
    tr_options o;
    char err[512];
    assert_int_equal(parse(&o, "{\"lr\": 0.01, \"batch_size\": 256, \"optimizer\": \"sgd\", \"hidden\": [512, 64],"
                               " \"nesterov\": true, \"weight-decay\": 1e-4, \"epochs\": 3.0, \"seed\": 7}",
                           err, 2, "--lr", "0.5"), 0);
    assert_float_equal(o.lr, 0.01, 0);   /* HPARAMS win over the fixed command */
    assert_int_equal(o.batch_size, 256);
    assert_string_equal(o.optimizer, "sgd");
    assert_int_equal(o.n_hidden, 2);
    assert_int_equal(o.hidden[0], 512);
    assert_true(o.nesterov);
    assert_float_equal(o.weight_decay, 1e-4, 0);
    assert_int_equal(o.epochs, 3);
    assert_int_equal(o.seed, 7);
    assert_int_equal(parse(&o, "{\"hidden\": 100}", err, 0), 0);
    assert_int_equal(o.n_hidden, 1);
    assert_int_equal(parse(&o, "{\"hidden\": \"300,20\"}", err, 0), 0);
    assert_int_equal(o.hidden[1], 20);
    static const struct { const char *json, *needle; } bad[] = {
        {"{\"learning_rate\": 0.1}", "'learning_rate': unknown"},
        {"{\"lr\": \"0.1\"}", "'lr': expected a number, got a string"},
        {"{\"batch_size\": 12.5}", "'batch_size': expected an integer"},
        {"{\"batch_size\": -3}", "'batch_size'"},
        {"{\"optimizer\": 3}", "'optimizer': expected a string"},
        {"{\"optimizer\": \"adagrad\"}", "'optimizer'"},
        {"{\"nesterov\": 1}", "'nesterov': expected a boolean"},
        {"{\"hidden\": [1, \"a\"]}", "'hidden'[1]"},
        {"{\"hidden\": {}}", "'hidden'"},
        {"{\"seed\": -1}", "'seed'"},
        {"[1, 2]", "not a JSON object"},
        {"{\"lr\": ", "not a JSON object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(parse(&o, bad[i].json, err, 0), HF_EINVAL);
        if (!strstr(err, bad[i].needle)) fprintf(stderr, "'%s' not in '%s'\n", bad[i].needle, err);
        assert_non_null(strstr(err, bad[i].needle));
        assert_non_null(strstr(err, "HYPERFARM_HPARAMS"));
    }
}

static void test_env(void **state)
{
    (void)state;
    tr_options o;
    char err[512];
    char *argv[] = {"hyperfarm-train", "--epochs", "30"};
    setenv("HYPERFARM_HPARAMS", "{\"lr\": 0.002}", 1);
    setenv("HYPERFARM_MAX_EPOCHS", "9", 1);
    setenv("HYPERFARM_CHECKPOINT_DIR", "/tmp/x/ckpts", 1);
    setenv("HYPERFARM_TRIAL_ID", "5", 1);
    setenv("HYPERFARM_WORLD_SIZE", "1", 1);
    assert_int_equal(tr_options_load(&o, 3, argv, err, sizeof err), 0);
    assert_float_equal(o.lr, 0.002, 0);
    assert_int_equal(tr_options_target_epochs(&o), 9);
    assert_int_equal(o.epochs, 30);   /* schedule horizon stays */
    assert_string_equal(o.checkpoint_dir, "/tmp/x/ckpts");
    assert_true(o.resume);            /* under an agent: resume automatically */
    assert_false(tr_options_is_distributed(&o));
    setenv("HYPERFARM_WORLD_SIZE", "4", 1);
    setenv("HYPERFARM_RANK", "2", 1);
    assert_int_equal(tr_options_load(&o, 3, argv, err, sizeof err), 0);
    assert_int_equal(o.world, 4);
    assert_int_equal(o.rank, 2);
    assert_true(tr_options_is_distributed(&o));
    setenv("HYPERFARM_MAX_EPOCHS", "lots", 1);
    assert_int_equal(tr_options_load(&o, 3, argv, err, sizeof err), HF_EINVAL);
    assert_non_null(strstr(err, "HYPERFARM_MAX_EPOCHS"));
    unsetenv("HYPERFARM_MAX_EPOCHS");
    unsetenv("HYPERFARM_TRIAL_ID");
    unsetenv("HYPERFARM_WORLD_SIZE");
    unsetenv("HYPERFARM_RANK");
    assert_int_equal(tr_options_load(&o, 3, argv, err, sizeof err), 0);
    assert_false(o.resume);           /* not under an agent: resume only on request */
    assert_int_equal(tr_options_target_epochs(&o), 30);
    unsetenv("HYPERFARM_HPARAMS");
    unsetenv("HYPERFARM_CHECKPOINT_DIR");
}

/* HYPERFARM_SEED (docs/trainer.md): the seed when neither --seed nor
 * HYPERFARM_HPARAMS gives one; a malformed value is an error naming it. */
static void test_env_seed(void **state)
{
    (void)state;
    tr_options o;
    char err[512];
    char *plain[] = {"hyperfarm-train"}, *flag[] = {"hyperfarm-train", "--seed", "9"};
    assert_int_equal(tr_options_load(&o, 1, plain, err, sizeof err), 0);
    assert_int_equal(o.seed, 1);   /* the default without the variable */
    setenv("HYPERFARM_SEED", "1234567", 1);
    assert_int_equal(tr_options_load(&o, 1, plain, err, sizeof err), 0);
    assert_int_equal(o.seed, 1234567);
    assert_int_equal(tr_options_load(&o, 3, flag, err, sizeof err), 0);
    assert_int_equal(o.seed, 9);
    setenv("HYPERFARM_HPARAMS", "{\"seed\": 11}", 1);
    assert_int_equal(tr_options_load(&o, 1, plain, err, sizeof err), 0);
    assert_int_equal(o.seed, 11);
    unsetenv("HYPERFARM_HPARAMS");
    setenv("HYPERFARM_SEED", "-3", 1);
    assert_int_equal(tr_options_load(&o, 1, plain, err, sizeof err), HF_EINVAL);
    assert_non_null(strstr(err, "HYPERFARM_SEED"));
    unsetenv("HYPERFARM_SEED");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flags),
        cmocka_unit_test(test_hparams),
        cmocka_unit_test(test_env),
        cmocka_unit_test(test_env_seed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
