/*
 * test_common_trial.c — the trial contract (common/hf_trial.c):
 *   - the table of variables and docs/design.md §4 agree row for row (name
 *     and meaning), and docs/guide.md's table names every variable and no
 *     other contract name: a variable added to one and not the other fails
 *     here;
 *   - hf_trial_env writes exactly the table's names, each once, with the
 *     values trials have always seen; with only the required fields, only
 *     the always-set ones;
 *   - an assignment's typed fields survive encode + decode, the
 *     hyperparameters' text byte for byte (it travels as a string so the
 *     reply's number formatting cannot change a digit);
 *   - hf_trial_env_reserved covers every name of the table.
 * The docs are read from $HF_ROOT (tests/run sets it), else the current
 * directory (the repository root under make).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "hf_err.h"
#include "hf_trial.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The file docs/NAME of the repository, whole (malloc'd). */
static char *read_doc(const char *name)
{
    char path[1024];
    const char *root = getenv("HF_ROOT");
    snprintf(path, sizeof path, "%s/docs/%s", root && *root ? root : ".", name);
    FILE *f = fopen(path, "rb");
    if (!f) fprintf(stderr, "cannot open %s\n", path);
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    assert_non_null(s);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = '\0';
    fclose(f);
    return s;
}

/* The section of doc that starts with the line head, up to the next "## ". */
static char *section(char *doc, const char *head)
{
    char *s = strstr(doc, head);
    if (!s) fprintf(stderr, "no section '%s'\n", head);
    assert_non_null(s);
    char *end = strstr(s + strlen(head), "\n## ");
    if (end) *end = '\0';
    return s;
}

static int table_index(const char *name)
{
    for (int i = 0; hf_trial_var_table[i].name; i++)
        if (!strcmp(hf_trial_var_table[i].name, name)) return i;
    return -1;
}

static int table_len(void)
{
    int n = 0;
    while (hf_trial_var_table[n].name) n++;
    return n;
}

/* docs/design.md §4: one row "| `NAME` | meaning |" per variable, in the
 * table's order, the same words. */
static void test_design_md_agrees(void **state)
{
    (void)state;
    char *doc = read_doc("design.md");
    char *sec = section(doc, "## 4. Trial contract");
    int k = 0;
    for (char *line = strtok(sec, "\n"); line; line = strtok(NULL, "\n")) {
        char name[128], meaning[512];
        if (strncmp(line, "| `", 3)) continue;
        const char *q = strchr(line + 3, '`');
        assert_non_null(q);
        snprintf(name, sizeof name, "%.*s", (int)(q - line - 3), line + 3);
        const char *m = strstr(q, "| ");
        assert_non_null(m);
        snprintf(meaning, sizeof meaning, "%s", m + 2);
        size_t l = strlen(meaning);
        while (l && (meaning[l - 1] == ' ' || meaning[l - 1] == '|')) meaning[--l] = '\0';
        if (k >= table_len()) fprintf(stderr, "docs/design.md names %s, the code's table does not\n", name);
        assert_true(k < table_len());
        if (strcmp(name, hf_trial_var_table[k].name) || strcmp(meaning, hf_trial_var_table[k].meaning))
            fprintf(stderr, "row %d: docs/design.md has '%s' | '%s', hf_trial_var_table '%s' | '%s'\n", k, name,
                    meaning, hf_trial_var_table[k].name, hf_trial_var_table[k].meaning);
        assert_string_equal(name, hf_trial_var_table[k].name);
        assert_string_equal(meaning, hf_trial_var_table[k].meaning);
        k++;
    }
    if (k != table_len()) fprintf(stderr, "docs/design.md has %d rows, the code's table %d\n", k, table_len());
    assert_int_equal(k, table_len());
    free(doc);
}

/* docs/guide.md "Writing a trial in any language": its table (rows may
 * group names) names every variable, and each contract-looking name it
 * shows is one of the table's. */
static void test_guide_md_agrees(void **state)
{
    (void)state;
    char *doc = read_doc("guide.md");
    char *sec = section(doc, "## 3. Writing a trial in any language");
    int seen[64] = {0};
    for (char *line = strtok(sec, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "| `", 3)) continue;
        char *cell_end = strstr(line + 2, " |");
        assert_non_null(cell_end);
        *cell_end = '\0';
        for (char *p = strchr(line, '`'); p; p = strchr(p, '`')) {
            char *q = strchr(p + 1, '`');
            assert_non_null(q);
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)(q - p - 1), p + 1);
            int i = table_index(name);
            if (hf_trial_env_reserved(name) && i < 0)
                fprintf(stderr, "docs/guide.md names %s, the contract does not\n", name);
            if (hf_trial_env_reserved(name)) assert_true(i >= 0);
            if (i >= 0) seen[i]++;
            p = q + 1;
        }
    }
    for (int i = 0; i < table_len(); i++) {
        if (seen[i] != 1) fprintf(stderr, "docs/guide.md names %s %d times\n", hf_trial_var_table[i].name, seen[i]);
        assert_int_equal(seen[i], 1);
    }
    free(doc);
}

/* The value of name among the n entries of env, or NULL; *count = how
 * many entries have it. */
static const char *env_find(char **env, int n, const char *name, int *count)
{
    const char *v = NULL;
    size_t l = strlen(name);
    *count = 0;
    for (int i = 0; i < n; i++)
        if (!strncmp(env[i], name, l) && env[i][l] == '=') {
            (*count)++;
            v = env[i] + l + 1;
        }
    return v;
}

static void full_vars(hf_trial_vars *v)
{
    hf_trial_vars_init(v);
    v->trial_id = 42;
    v->experiment_id = 7;
    v->attempt = 3;
    v->rank = 1;
    v->world_size = 4;
    v->local_rank = 1;
    v->seed = 123456;
    v->budget = 27;
    snprintf(v->master, sizeof v->master, "10.0.0.1:29500");
    v->hparams = "{\"lr\":0.00012345678901234567,\"opt\":\"adam\"}";
    snprintf(v->dist_mode, sizeof v->dist_mode, "async");
    snprintf(v->dist_backend, sizeof v->dist_backend, "tcp");
    v->dist_ps = 2;
    v->dist_staleness = 0;
    v->gpus[0] = 3;
    v->gpus[1] = 0;
    v->ngpus = 2;
}

/* All fields given: exactly the table's names, once each, with the
 * values below. */
static void test_env_writes_the_table(void **state)
{
    (void)state;
    static const struct {
        const char *name, *want;
    } want[] = {
        {"HYPERFARM_TRIAL_ID", "42"}, {"HYPERFARM_EXPERIMENT_ID", "7"}, {"HYPERFARM_ATTEMPT", "3"},
        {"HYPERFARM_HPARAMS", "{\"lr\":0.00012345678901234567,\"opt\":\"adam\"}"},
        {"HYPERFARM_SEED", "123456"}, {"HYPERFARM_RANK", "1"}, {"HYPERFARM_WORLD_SIZE", "4"},
        {"HYPERFARM_LOCAL_RANK", "1"}, {"HYPERFARM_MASTER", "10.0.0.1:29500"}, {"HYPERFARM_MAX_EPOCHS", "27"},
        {"HYPERFARM_BUDGET", "27"}, {"HYPERFARM_DIST_MODE", "async"}, {"HYPERFARM_DIST_BACKEND", "tcp"},
        {"HYPERFARM_DIST_PS", "2"}, {"HYPERFARM_DIST_STALENESS", "0"}, {"HYPERFARM_CHECKPOINT_DIR", "/w/ck"},
        {"HYPERFARM_CONTROL_FILE", "/w/control.json"}, {"HYPERFARM_HOSTFILE", "/w/hostfile"},
        {"HYPERFARM_DATA_CACHE", "off"}, {"CUDA_VISIBLE_DEVICES", "3,0"}, {"PATH", "/opt/hf:/usr/bin"},
    };
    hf_trial_vars v;
    hf_trial_local l = {"/w/ck", "/w/control.json", "/w/hostfile", "off", "/opt/hf:/usr/bin"};
    char *env[HF_TRIAL_MAX_ENV];
    full_vars(&v);
    int n = hf_trial_env(&v, &l, env);
    assert_int_equal(n, table_len());
    assert_int_equal((int)(sizeof want / sizeof want[0]), table_len());
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        int c;
        const char *got = env_find(env, n, want[i].name, &c);
        assert_true(table_index(want[i].name) >= 0);
        assert_int_equal(c, 1);
        assert_string_equal(got, want[i].want);
    }
    for (int i = 0; i < n; i++) {
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)strcspn(env[i], "="), env[i]);
        assert_true(table_index(name) >= 0);   /* nothing outside the table */
        free(env[i]);
    }
}

/* Only the required fields: the always-set variables, HPARAMS "{}". */
static void test_env_minimal(void **state)
{
    (void)state;
    static const char *const absent[] = {"HYPERFARM_SEED", "HYPERFARM_MASTER", "HYPERFARM_MAX_EPOCHS",
                                         "HYPERFARM_BUDGET", "HYPERFARM_DIST_MODE", "HYPERFARM_DIST_BACKEND",
                                         "HYPERFARM_DIST_PS", "HYPERFARM_DIST_STALENESS", "HYPERFARM_HOSTFILE",
                                         "HYPERFARM_DATA_CACHE"};
    hf_trial_vars v;
    hf_jerr e;
    json_t *a = json_loads("{\"trial_id\": 5, \"attempt\": 1}", 0, NULL);
    assert_int_equal(hf_trial_decode(a, "assign[0]", &v, &e), 0);
    hf_trial_local l = {"/w/ck", "/w/control.json", NULL, NULL, "/usr/bin"};
    char *env[HF_TRIAL_MAX_ENV];
    int n = hf_trial_env(&v, &l, env), c;
    assert_int_equal(n, table_len() - (int)(sizeof absent / sizeof absent[0]));
    assert_string_equal(env_find(env, n, "HYPERFARM_HPARAMS", &c), "{}");
    assert_string_equal(env_find(env, n, "HYPERFARM_WORLD_SIZE", &c), "1");
    assert_string_equal(env_find(env, n, "HYPERFARM_EXPERIMENT_ID", &c), "0");
    assert_string_equal(env_find(env, n, "CUDA_VISIBLE_DEVICES", &c), "");
    for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++) {
        assert_null(env_find(env, n, absent[i], &c));
        assert_int_equal(c, 0);
    }
    for (int i = 0; i < n; i++) free(env[i]);
    hf_trial_vars_free(&v);
    json_decref(a);
}

/* encode, through the reply's own number formatting, then decode. */
static void test_encode_decode(void **state)
{
    (void)state;
    hf_trial_vars v, w;
    hf_jerr e;
    full_vars(&v);
    json_t *as = json_object();
    assert_int_equal(hf_trial_encode(&v, as), 0);
    /* no variable's name on the wire */
    char *text = json_dumps(as, JSON_COMPACT | JSON_REAL_PRECISION(15));
    assert_null(strstr(text, "HYPERFARM_"));
    json_t *back = json_loads(text, 0, NULL);
    assert_non_null(back);
    assert_int_equal(hf_trial_decode(back, "assign[0]", &w, &e), 0);
    assert_int_equal(w.trial_id, 42);
    assert_int_equal(w.experiment_id, 7);
    assert_int_equal(w.attempt, 3);
    assert_int_equal(w.rank, 1);
    assert_int_equal(w.world_size, 4);
    assert_int_equal(w.local_rank, 1);
    assert_int_equal(w.seed, 123456);
    assert_int_equal(w.budget, 27);
    assert_string_equal(w.master, "10.0.0.1:29500");
    assert_string_equal(w.hparams, v.hparams);   /* byte for byte */
    assert_string_equal(w.dist_mode, "async");
    assert_string_equal(w.dist_backend, "tcp");
    assert_int_equal(w.dist_ps, 2);
    assert_int_equal(w.dist_staleness, 0);
    assert_int_equal(w.ngpus, 2);
    assert_int_equal(w.gpus[0], 3);
    assert_int_equal(w.gpus[1], 0);
    hf_trial_vars_free(&w);
    json_decref(back);
    free(text);
    json_decref(as);

    /* not given stays not given */
    hf_trial_vars_init(&v);
    v.trial_id = 1;
    as = json_object();
    assert_int_equal(hf_trial_encode(&v, as), 0);
    assert_null(json_object_get(as, "seed"));
    assert_null(json_object_get(as, "budget"));
    assert_null(json_object_get(as, "master"));
    assert_null(json_object_get(as, "distributed"));
    assert_string_equal(json_string_value(json_object_get(as, "hparams")), "{}");
    json_decref(as);
}

static void test_reserved(void **state)
{
    (void)state;
    static const char *const free_names[] = {"FOO", "HYPERFARM", "HYPERFARMX", "PATHS", "CUDA_HOME", "OMP_NUM_THREADS"};
    for (int i = 0; hf_trial_var_table[i].name; i++) assert_non_null(hf_trial_env_reserved(hf_trial_var_table[i].name));
    assert_non_null(hf_trial_env_reserved("HYPERFARM_ANYTHING"));
    for (size_t i = 0; i < sizeof free_names / sizeof free_names[0]; i++)
        assert_null(hf_trial_env_reserved(free_names[i]));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_design_md_agrees),
        cmocka_unit_test(test_guide_md_agrees),
        cmocka_unit_test(test_env_writes_the_table),
        cmocka_unit_test(test_env_minimal),
        cmocka_unit_test(test_encode_decode),
        cmocka_unit_test(test_reserved),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
