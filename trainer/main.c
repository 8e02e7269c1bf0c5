/*
 * main.c — hyperfarm-train: parse options (flags, HYPERFARM_HPARAMS, the
 * trial environment), pick the BLAS kernel, then either train in this
 * process (train.c) or hand over to the distributed runner (dist.c,
 * tr_dist_main) when --nproc > 1, --mode, or a world size > 1 is given.
 */
#include "blas.h"
#include "trainer/dist/dist.h"
#include "hf_err.h"
#include "hf_log.h"
#include "options.h"
#include "train.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    /* the main thread's name, also after a re-exec through /proc/self/exe
     * (blas.c, the launcher's ranks), whose comm would read "exe" */
    pthread_setname_np(pthread_self(), "hyperfarm-train");
    hf_log_init("hyperfarm-train");
    tr_options o;
    char err[512] = "";
    int rc = tr_options_load(&o, argc, argv, err, sizeof err);
    if (rc == 1) {
        tr_options_usage(stdout);
        return TR_EXIT_OK;
    }
    if (rc) {
        fprintf(stderr, "hyperfarm-train: %s\n", err);
        return TR_EXIT_ERROR;
    }
    int level;
    if (hf_log_parse_level(o.log_level, &level) == 0) hf_log_set_level(level);
    tr_blas_setup(argv);   /* may re-exec with OPENBLAS_CORETYPE set */

    if (tr_options_is_distributed(&o)) return tr_dist_main(&o);
    return tr_train_main(&o);
}
