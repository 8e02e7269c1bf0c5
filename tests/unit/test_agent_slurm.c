/*
 * test_agent_slurm.c — the agent inside a Slurm job (agent/agent_slurm.h):
 * the job's CPUs and GPUs read from Slurm's variables (malformed values
 * refused), the name, slots and work directory agent_slurm_apply fills,
 * and the --idle-timeout clock.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "agent/agent_slurm.h"

#include <stdlib.h>
#include <string.h>

static void test_cpus_gpus(void **st)
{
    (void)st;
    assert_int_equal(agent_slurm_cpus("4", "8"), 4);
    assert_int_equal(agent_slurm_cpus(NULL, "4(x2),2"), 4);
    assert_int_equal(agent_slurm_cpus("", "6"), 6);
    assert_int_equal(agent_slurm_cpus(NULL, NULL), 0);
    assert_int_equal(agent_slurm_cpus("4x", NULL), -1);
    assert_int_equal(agent_slurm_cpus("0", NULL), -1);
    char g[16];
    assert_int_equal(agent_slurm_gpus("2,3", "0,1", g, sizeof g), 0);
    assert_string_equal(g, "2,3");
    assert_int_equal(agent_slurm_gpus(NULL, "0,1", g, sizeof g), 0);
    assert_string_equal(g, "0,1");
    assert_int_equal(agent_slurm_gpus(NULL, NULL, g, sizeof g), 0);
    assert_string_equal(g, "none");
    assert_int_equal(agent_slurm_gpus("NoDevFiles", NULL, g, sizeof g), 0);
    assert_string_equal(g, "none");
    assert_int_equal(agent_slurm_gpus("0,,1", NULL, g, sizeof g), -1);
    assert_int_equal(agent_slurm_gpus("GPU-uuid", NULL, g, sizeof g), -1);
    assert_int_equal(agent_slurm_gpus("0,1,2,3,4,5,6,7,8,9", NULL, g, sizeof g), -1);   /* too long */
}

static void test_apply(void **st)
{
    (void)st;
    agent_cfg c;
    agent_slurm_bufs b;
    char err[256];
    memset(&c, 0, sizeof c);
    c.gpus = "auto";
    c.workdir = AGENT_DEFAULT_WORKDIR;
    unsetenv("SLURM_JOB_ID");
    assert_int_equal(agent_slurm_apply(&c, &b, err, sizeof err), -1);
    setenv("SLURM_JOB_ID", "42", 1);
    setenv("SLURMD_NODENAME", "n3", 1);
    setenv("SLURM_CPUS_ON_NODE", "3", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    unsetenv("SLURM_JOB_GPUS");
    setenv("TMPDIR", "/scratch", 1);
    assert_int_equal(agent_slurm_apply(&c, &b, err, sizeof err), 0);
    assert_string_equal(c.name, "slurm-42-n3");
    assert_int_equal(c.slots, 3);
    assert_string_equal(c.gpus, "none");
    assert_string_equal(c.workdir, "/scratch/hyperfarm-agent-42-n3");
    /* GPUs: one slot per GPU (slots stay 0); what the user set is kept */
    memset(&c, 0, sizeof c);
    c.gpus = "auto";
    c.name = "mine";
    c.workdir = "/w";
    setenv("CUDA_VISIBLE_DEVICES", "0,1", 1);
    assert_int_equal(agent_slurm_apply(&c, &b, err, sizeof err), 0);
    assert_string_equal(c.gpus, "0,1");
    assert_int_equal(c.slots, 0);
    assert_string_equal(c.name, "mine");
    assert_string_equal(c.workdir, "/w");
    setenv("SLURM_JOB_ID", "42;rm", 1);
    assert_int_equal(agent_slurm_apply(&c, &b, err, sizeof err), -1);
}

static void test_idle(void **st)
{
    (void)st;
    agent_idle i = {0};
    assert_int_equal(agent_idle_expired(&i, 0, 2, 1000), 0);
    assert_int_equal(agent_idle_expired(&i, 0, 2, 2999), 0);
    assert_int_equal(agent_idle_expired(&i, 1, 2, 3500), 0);   /* a trial: the clock restarts */
    assert_int_equal(agent_idle_expired(&i, 0, 2, 4000), 0);
    assert_int_equal(agent_idle_expired(&i, 0, 2, 6000), 1);
    agent_idle j = {0};
    assert_int_equal(agent_idle_expired(&j, 0, 0, 1), 0);
    assert_int_equal(agent_idle_expired(&j, 0, 0, 1000000), 0);   /* 0: never */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpus_gpus),
        cmocka_unit_test(test_apply),
        cmocka_unit_test(test_idle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
