/* Internal file-system helpers for src/ft: durable writes that hash while writing, directory
 * fsync, recursive removal, verified hashing of files, and fault injection for tests. Every
 * error message names the file. */
#ifndef OT_FT_IO_H
#define OT_FT_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "optitpu/core.h"

/* A piece of a file's content. */
typedef struct ot_ft_seg {
    const void *ptr;
    size_t len;
} ot_ft_seg;

/* Creates (O_EXCL unless truncate) and writes the concatenated segments, hashing them
 * concurrently on a second thread when the file is large; fsyncs when asked. On failure the
 * partial file is unlinked. sha256 / size may be NULL. */
ot_status ot_ft_write_file(const char *path, const ot_ft_seg *segs, size_t nseg, bool do_fsync,
                           uint8_t sha256[32], uint64_t *size);
/* Copies src to dst (dst created exclusively), hashing what it reads; fsyncs dst. */
ot_status ot_ft_copy_file(const char *src, const char *dst, bool do_fsync, uint8_t sha256[32],
                          uint64_t *size);
/* Hashes a whole file; *size receives its length. When expect_size is >= 0 and the length
 * differs, returns OT_ERR_CORRUPT_DATA before hashing. */
ot_status ot_ft_hash_file(const char *path, int64_t expect_size, uint8_t sha256[32],
                          uint64_t *size);
/* Reads a whole (small) file into an ot_malloc'd, NUL-terminated buffer; max_len caps it. */
ot_status ot_ft_read_small(const char *path, size_t max_len, char **out, size_t *len);
ot_status ot_ft_fsync_path(const char *path); /* a file or a directory */
ot_status ot_ft_mkdir(const char *path);      /* OK when it exists already */
ot_status ot_ft_rename(const char *from, const char *to);
ot_status ot_ft_rmtree(const char *path); /* OK when it does not exist */
bool ot_ft_exists(const char *path);
bool ot_ft_is_dir(const char *path);
/* ot_malloc'd "a/b". */
char *ot_ft_join(const char *a, const char *b);

/* Test hook: the nth write-side system call from now (write, fsync, rename, mkdir; 1-based)
 * fails with errno err; n = 0 disables. Process-wide. */
void ot_ft_inject_io_failure(int64_t n, int err);

#endif /* OT_FT_IO_H */
