/*
 * agent_fs.h — the trial's files under the agent's work directory:
 * checking the relative paths the scheduler sends, creating the checkpoint
 * directory, copying a PBT parent's checkpoint, and the control file.
 *
 * Layout for an assignment with checkpoint_dir "experiments/7/trials/5/checkpoints":
 *     <workdir>/experiments/7/trials/5/               the trial's working directory (cwd)
 *     <workdir>/experiments/7/trials/5/checkpoints/   HYPERFARM_CHECKPOINT_DIR
 *     <workdir>/experiments/7/trials/5/control.json   {"should_stop": false|true, "reason": ...}
 *     <workdir>/experiments/7/trials/5/hostfile       rank 0 of an mpirun-launcher trial only
 *                                                     (HYPERFARM_HOSTFILE; Open MPI "host slots=N" lines)
 *
 * Paths from the scheduler are untrusted: they must be relative, made of
 * non-empty components without "." or "..", of printable characters, and
 * bounded in length, so nothing outside <workdir> is ever touched.
 */
#ifndef AGENT_FS_H
#define AGENT_FS_H

#include <stddef.h>

#define AGENT_PATH_MAX 1024
/* Bounds on a PBT checkpoint copy: a runaway directory is not copied. */
#define AGENT_COPY_MAX_FILES 10000
#define AGENT_COPY_MAX_DEPTH 8

/* Is rel an acceptable relative path? RET 0 or HF_EINVAL with a reason in err. */
int agent_fs_check_rel(const char *rel, char *err, size_t errlen);

/* mkdir -p path (mode 0755). RET 0 or an HF_E* code (errno-derived). */
int agent_fs_mkdirs(const char *path);

/* Copy the files of directory src into dst (created), recursively, regular
 * files and directories only (symlinks and devices are skipped), within
 * AGENT_COPY_MAX_*. Existing files in dst are overwritten.
 * RET 0 or an HF_E* code with a message in err. */
int agent_fs_copy_tree(const char *src, const char *dst, char *err, size_t errlen);

/* Atomically (write path.tmp, fsync, rename) write len bytes of text to
 * path. RET 0 or an HF_E* code. */
int agent_fs_write_file(const char *path, const char *text, size_t len);

/* Atomically (write temp, fsync, rename) write the control file:
 * {"should_stop": should_stop, "reason": reason|null, "time": ms}. */
int agent_fs_write_control(const char *path, int should_stop, const char *reason);

#endif
