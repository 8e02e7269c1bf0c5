/*
 * hf_file.h — small durable-file helpers shared by the content-addressed
 * stores (scheduler/store/ckstore.c, agent/agent_objects.c, common/hf_sha256.c):
 * a write that finishes or fails whole, and the fsync of a directory that
 * makes a rename in it durable.
 */
#ifndef HF_FILE_H
#define HF_FILE_H

#include <stddef.h>

/* Write all n bytes of p to fd (retrying short writes and EINTR).
 * RET 0 or the errno-derived HF_E* code (HF_EIO for a zero-length write). */
int hf_file_write_all(int fd, const void *p, size_t n);

/* fsync the directory dir (after a rename or link in it). RET 0 or HF_E*. */
int hf_file_fsync_dir(const char *dir);

#endif
