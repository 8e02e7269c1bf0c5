/*
 * options.h — every setting of hyperfarm-scheduler in one table (flag,
 * environment variable, type, default, bounds, help), as Redis keeps its
 * settings: main.c parses it with hf_config and reads the values from a
 * sched_options. Adding a setting is one field here and one row in
 * options.c; docs/operations.md lists them (`--help` prints the table).
 */
#ifndef HF_SCHED_OPTIONS_H
#define HF_SCHED_OPTIONS_H

#include "hf_config.h"

#include <stdint.h>

typedef struct sched_options {
    const char *listen, *db, *web, *token_file, *tls_cert, *tls_key;
    const char *log_level, *log_format, *config, *ck_dir, *ck_storage;
    const char *synchronous, *backup_dir, *restore;
    const char *standby_of, *standby_token_file, *peers;   /* docs/scheduler.md "Standby and failover" */
    int64_t agent_timeout, hb_ms, hb_fast_ms, hb_rate, threads, max_log_lines;
    int64_t max_conns_per_ip, request_timeout, max_ck_mb, ck_grace;
    int64_t header_timeout, min_body_rate, backup_interval, backup_keep, backup_rate_mb;
    int64_t failover_after;
    const char *replication;                     /* docs/scheduler.md "Replication" */
    int64_t standby_timeout, repl_buffer_mb;
    int print_config, wh_allow_private;
    /* the agent provisioner (docs/deploy.md "Slurm"; scheduler/provision/provision.h) */
    const char *provisioner, *prov_url, *prov_agent, *prov_agent_args;
    const char *slurm_partition, *slurm_account, *slurm_gres, *slurm_mem, *slurm_sbatch_args, *slurm_job_name;
    int64_t prov_interval_ms, slurm_cpus, slurm_max_agents, slurm_idle_timeout, slurm_time;
} sched_options;

#define OPTIONS_MAX 64   /* rows of the table, HF_CFG_END included */

/* Fill tab (OPTIONS_MAX rows) with the option table, each row writing
 * into its field of o. o must outlive tab's use (hf_config_parse, _free). */
void options_table(sched_options *o, hf_cfg_opt tab[OPTIONS_MAX]);

/* The usage line of --help. */
extern const char *const options_synopsis;

#endif
