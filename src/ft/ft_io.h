/* Internal file-system helpers for src/ft: durable writes that hash while writing, directory
 * fsync, recursive removal, verified hashing of files, and fault injection for tests. Every
 * error message names the file. */
#ifndef OT_FT_IO_H
#define OT_FT_IO_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "optitpu/core.h"

/* A piece of a file's content. */
typedef struct ot_ft_seg {
    const void *ptr;
    size_t len;
} ot_ft_seg;

/* Creates (O_EXCL) and writes the concatenated segments, hashing them in the same pass; fsyncs
 * when asked. Large files are copied block by block into page-aligned buffers, each piece hashed
 * while in cache, and written by a second thread with O_DIRECT where the file system takes it
 * (through the page cache otherwise). On failure the partial file is unlinked. sha256 / size may
 * be NULL. */
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
ot_status ot_ft_mkdirs(const char *path);     /* with its missing parents (mkdir -p) */
ot_status ot_ft_rename(const char *from, const char *to);
ot_status ot_ft_rmtree(const char *path); /* OK when it does not exist */
bool ot_ft_exists(const char *path);
bool ot_ft_is_dir(const char *path);
/* ot_malloc'd "a/b". */
char *ot_ft_join(const char *a, const char *b);

/* Background priority. The threads of a background job (a thread that called
 * ot_ft_background_begin and the I/O threads ot_ft_write_file starts from it) run at SCHED_IDLE
 * (nice 19 where that is refused), so a training thread wins any contended core.
 * ot_ft_prio_group_boost, called by a thread about to wait for the job, raises them all to the
 * caller's own priority (best effort: raising a priority may need privilege; without it the job
 * finishes at the low priority). */
#define OT_FT_PRIO_GROUP_MAX 8
typedef struct ot_ft_prio_group {
    atomic_int tids[OT_FT_PRIO_GROUP_MAX];
    atomic_bool boosted;
    atomic_int nice;
} ot_ft_prio_group;

void ot_ft_prio_group_init(ot_ft_prio_group *g);
void ot_ft_background_begin(ot_ft_prio_group *g); /* lowers the calling thread; joins g */
void ot_ft_background_end(void);
/* The calling thread's background group (NULL outside a background job): a thread it starts for
 * the same job joins it with ot_ft_background_begin. */
ot_ft_prio_group *ot_ft_background_group(void);
void ot_ft_prio_group_boost(ot_ft_prio_group *g);

/* Test hook: the nth write-side system call from now (write, fsync, rename, mkdir; 1-based)
 * fails with errno err; n = 0 disables. Process-wide. */
void ot_ft_inject_io_failure(int64_t n, int err);
/* Test hook: allow = false writes every file through the page cache (the path taken where the
 * file system refuses O_DIRECT). Process-wide; on by default. */
void ot_ft_allow_direct_io(bool allow);
/* Whether the calling thread's last ot_ft_write_file wrote its full blocks with O_DIRECT. */
bool ot_ft_last_write_direct(void);

#endif /* OT_FT_IO_H */
