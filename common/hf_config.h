/*
 * hf_config.h — every setting of a program in one table (as Redis's
 * config.c does): name, environment variable, type, default, bounds, help.
 *
 * Precedence, lowest first: default, config file (--config FILE, lines of
 * "name = value", '#' comments), environment, command-line flags.
 * Flags: "--name value", "--name=value"; booleans "--name" / "--no-name".
 * Strings are stored as pointers into argv, the environment, the default
 * literal, or (for config-file values) a copy owned by the table until
 * hf_config_free().
 */
#ifndef HF_CONFIG_H
#define HF_CONFIG_H

#include <stdint.h>
#include <stdio.h>

typedef enum { HF_CFG_STR, HF_CFG_INT, HF_CFG_DOUBLE, HF_CFG_BOOL } hf_cfg_type;

typedef struct hf_cfg_opt {
    const char *name;   /* flag without "--", e.g. "listen" */
    const char *env;    /* environment variable or NULL */
    hf_cfg_type type;
    void       *dest;   /* const char ** | int64_t * | double * | int * */
    const char *def;    /* default as text, NULL = unset (strings stay NULL) */
    double      min, max;  /* bounds for INT/DOUBLE (ignored when min > max) */
    const char *help;
} hf_cfg_opt;

#define HF_CFG_END {NULL, NULL, HF_CFG_STR, NULL, NULL, 0, 0, NULL}

/* Parse defaults, config file, environment, then argv[1..]. Non-flag
 * arguments are moved to the front of argv[1..] in order and counted in
 * *npos. "--" ends flags. RET 0; 1 when --help was given (usage is the
 * caller's); HF_EINVAL with a message in err naming the flag or variable. */
int  hf_config_parse(hf_cfg_opt *opts, int argc, char **argv, int *npos, char *err, size_t errlen);
void hf_config_usage(FILE *f, const char *synopsis, const hf_cfg_opt *opts);
/* Print the effective configuration as JSON (--print-config). */
void hf_config_print(FILE *f, const hf_cfg_opt *opts);
void hf_config_free(hf_cfg_opt *opts);

#endif
