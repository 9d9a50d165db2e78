/* Internal interfaces between the checkpoint sources in src/ft. */
#ifndef OT_FT_CKPT_INTERNAL_H
#define OT_FT_CKPT_INTERNAL_H

#include "optitpu/ft.h"

#define OT_CKPT_MANIFEST     "manifest.json"
#define OT_CKPT_MANIFEST_MAX ((size_t)64 << 20)

/* Serializes a manifest (JSON text, ot_free) for the given arguments and files. */
ot_status ot_ckpt_manifest_build(const ot_ckpt_save_args *a, const ot_ckpt_file_entry *files,
                                 size_t nfiles, int64_t time_unix_ns, char **out, size_t *len);
/* Writes step a->step under root with the commit protocol (no replication, no retention);
 * write_threads as ot_ckpt_options.write_threads. */
ot_status ot_ckpt_commit(const char *root, const ot_ckpt_save_args *a, bool do_fsync,
                         int write_threads, ot_ckpt_save_stats *stats);
/* "root/step_%08lld" (ot_free); tmp adds ".tmp". */
char *ot_ckpt_step_path(const char *root, int64_t step, bool tmp);
/* Validates the save arguments (names, roles, shards, dtypes, JSON, metrics). */
ot_status ot_ckpt_check_args(const ot_ckpt_save_args *a);
/* Retention where `known_good` (a step just written and hashed, or -1) counts as verified. */
ot_status ot_ckpt_retention_impl(const char *root, const ot_ckpt_retention *r, int64_t known_good,
                                 size_t *ndeleted);
/* Removes step_*.tmp directories under root. */
ot_status ot_ckpt_clean_tmp(const char *root);
/* The file name for a shard: "role.safetensors" or "role-00001-of-00004.safetensors". */
void ot_ckpt_shard_file(const ot_ckpt_shard *s, char *buf, size_t n);

#endif
