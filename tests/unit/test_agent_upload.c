/*
 * test_agent_upload.c — the uploader's queue on disk (agent/agent_upload.c,
 * docs/agent.md "Checkpoints travel"), with no scheduler listening (port 1
 * refuses: every upload fails and waits):
 *
 *   - a report becomes N.json (trial, attempt, step, path) plus N.ckpt, a
 *     hard link holding the reported bytes even after the trial replaced
 *     its file;
 *   - nothing is attempted before the agent is registered, and a stop
 *     keeps both files; a new uploader reads them back (pending again);
 *   - once registered, a failed upload rewrites the record durably with
 *     the object's sha256 and size;
 *   - at start, malformed records (not JSON, unknown key, bad hash,
 *     relative path, too large) are removed, and so are half-written
 *     records (*.json.tmp) and links without a record; a record whose
 *     link is gone is kept (read from its path); new records number after
 *     the highest one found.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "agent/agent_objects.h"
#include "agent/agent_upload.h"
#include "hf_log.h"
#include "tests/unit/unit_fixture.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

static int setup(void **st)
{
    (void)st;
    int rc = unit_tmpdir(dir, sizeof dir, "upq");
    hf_log_set_level(HF_LOG_ERROR);   /* the refused records are logged as errors */
    return rc;
}

static int teardown(void **st) { (void)st; return unit_rmtree(dir); }

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int exists(const char *sub)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, sub);
    return access(p, F_OK) == 0;
}

static json_t *record(const char *sub)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, sub);
    return json_load_file(p, 0, NULL);
}

static int64_t pending(agent_upload *u)
{
    int64_t p, d, x;
    agent_upload_stats(u, &p, &d, &x);
    return p;
}

static void test_queue_on_disk(void **state)
{
    (void)state;
    char err[256], ck[400], p[512];
    agent_objects *ao = NULL;
    assert_int_equal(agent_objects_open(dir, "http://127.0.0.1:1", NULL, 0, &ao, err, sizeof err), 0);
    snprintf(ck, sizeof ck, "%s/ck.json", dir);
    write_file(ck, "{\"epoch\": 1}\n");

    agent_upload *u = agent_upload_new(ao, dir, -1);
    assert_non_null(u);
    agent_upload_note_checkpoint(u, 7, 2, 100, ck);
    assert_true(exists("uploads/0.json"));
    assert_true(exists("uploads/0.ckpt"));
    json_t *r = record("uploads/0.json");
    assert_non_null(r);
    assert_int_equal(json_integer_value(json_object_get(r, "trial")), 7);
    assert_int_equal(json_integer_value(json_object_get(r, "attempt")), 2);
    assert_int_equal(json_integer_value(json_object_get(r, "step")), 100);
    assert_string_equal(json_string_value(json_object_get(r, "path")), ck);
    assert_null(json_object_get(r, "sha256"));
    json_decref(r);
    /* the trial replaces its file (a new file renamed over it, as trainers
     * do): the staged link keeps the step-100 bytes */
    snprintf(p, sizeof p, "%s.new", ck);
    write_file(p, "{\"epoch\": 2}\n");
    assert_int_equal(rename(p, ck), 0);
    snprintf(p, sizeof p, "%s/uploads/0.ckpt", dir);
    FILE *f = fopen(p, "r");
    char buf[64] = "";
    assert_non_null(f);
    assert_non_null(fgets(buf, sizeof buf, f));
    fclose(f);
    assert_string_equal(buf, "{\"epoch\": 1}\n");
    /* not registered: nothing happens; a stop keeps the queue */
    usleep(200 * 1000);
    assert_int_equal(pending(u), 1);
    agent_upload_free(u);
    assert_true(exists("uploads/0.json") && exists("uploads/0.ckpt"));

    /* leftovers and bad records beside the good one */
    static const struct { const char *name, *text; } bad[] = {
        {"uploads/3.json", "{"},
        {"uploads/4.json", "{\"trial\": 1, \"attempt\": 1, \"step\": 1, \"path\": \"/x\", \"evil\": 1}"},
        {"uploads/5.json", "{\"trial\": 1, \"attempt\": 1, \"step\": 1, \"path\": \"/x\", \"sha256\": \"ABC\"}"},
        {"uploads/6.json", "{\"trial\": 1, \"attempt\": 1, \"step\": 1, \"path\": \"rel/x\"}"},
        {"uploads/8.json", "{\"trial\": 0, \"attempt\": 1, \"step\": 1, \"path\": \"/x\"}"},
        {"uploads/9.json.tmp", "{\"trial\": 1"},
        {"uploads/11.ckpt", "orphan"},
        {"uploads/x.json", "{}"},   /* not ours: left alone */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, bad[i].name);
        write_file(p, bad[i].text);
    }
    /* a record of 20 KiB (over the bound) */
    snprintf(p, sizeof p, "%s/uploads/10.json", dir);
    f = fopen(p, "w");
    assert_non_null(f);
    fprintf(f, "{\"trial\": 1, \"attempt\": 1, \"step\": 1, \"path\": \"/%0*d\"}", 20000, 0);
    fclose(f);
    /* a good record whose link is gone: kept, read from its path */
    snprintf(p, sizeof p, "%s/uploads/2.json", dir);
    char txt[600];
    snprintf(txt, sizeof txt, "{\"trial\": 7, \"attempt\": 2, \"step\": 200, \"path\": \"%s\"}", ck);
    write_file(p, txt);

    u = agent_upload_new(ao, dir, -1);
    assert_non_null(u);
    assert_int_equal(pending(u), 2);
    static const char *const gone[] = {"uploads/3.json", "uploads/4.json", "uploads/5.json", "uploads/6.json",
                                       "uploads/8.json", "uploads/9.json.tmp", "uploads/10.json",
                                       "uploads/11.ckpt"};
    for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++)
        if (exists(gone[i])) fail_msg("%s was not removed at start", gone[i]);
    assert_true(exists("uploads/0.json") && exists("uploads/0.ckpt") && exists("uploads/2.json"));
    assert_true(exists("uploads/x.json"));
    /* the next record numbers after the highest found (10) */
    agent_upload_note_checkpoint(u, 7, 2, 300, ck);
    assert_true(exists("uploads/11.json") && exists("uploads/11.ckpt"));
    assert_int_equal(pending(u), 3);

    /* registered: the uploads fail (nothing listens) and wait, their
     * records now durable with the hash */
    agent_upload_set_agent(u, 1);
    int hashed = 0;
    for (int i = 0; i < 100 && !hashed; i++) {
        usleep(50 * 1000);
        r = record("uploads/0.json");
        hashed = r && json_object_get(r, "sha256") != NULL;
        if (hashed) {
            assert_int_equal(json_integer_value(json_object_get(r, "size")), 13);
            assert_int_equal(json_integer_value(json_object_get(r, "step")), 100);
        }
        json_decref(r);
    }
    assert_true(hashed);
    assert_int_equal(pending(u), 3);
    agent_upload_free(u);
    assert_true(exists("uploads/0.json") && exists("uploads/2.json") && exists("uploads/11.json"));
    agent_objects_close(ao);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queue_on_disk),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
