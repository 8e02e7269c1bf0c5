/*
 * hf_file.h — small durable-file helpers shared by the content-addressed
 * stores (scheduler/store/ckstore.c, agent/agent_objects.c, common/hf_sha256.c):
 * a write that finishes or fails whole, the fsync of a directory that
 * makes a rename in it durable, and a directory created durably.
 */
#ifndef HF_FILE_H
#define HF_FILE_H

#include <stddef.h>

/* Write all n bytes of p to fd (retrying short writes and EINTR).
 * RET 0 or the errno-derived HF_E* code (HF_EIO for a zero-length write). */
int hf_file_write_all(int fd, const void *p, size_t n);

/* fsync the directory dir (after a rename or link in it). RET 0 or HF_E*. */
int hf_file_fsync_dir(const char *dir);

/* fsync the directory that holds path (after creating path in it), so the
 * new name survives a power cut. RET 0 or HF_E*. */
int hf_file_fsync_parent(const char *path);

/* mkdir path (0755) if missing, then fsync its parent: a file renamed into
 * a new directory whose own entry is not durable is lost with it. An
 * existing path is left as it is. RET 0 or HF_E*. */
int hf_file_mkdir_durable(const char *path);

#endif
