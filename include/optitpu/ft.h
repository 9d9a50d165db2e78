/*
 * optitpu ft: fault tolerance. Verified checkpoints (safetensors files + a SHA-256 manifest),
 * atomic commit, verified restore with rollback, retention, async save, replication, migration.
 *
 *     ot_ckpt_options o = ot_ckpt_options_default();
 *     o.retention.keep_last = 3;
 *     ot_ckpt_manager *m;
 *     OT_CHECK(ot_ckpt_open("ckpt", &o, &m));          // removes stale step_*.tmp directories
 *     ot_ckpt_tensor params[] = {{"w", wshape, w}, {"b", bshape, b}};
 *     ot_ckpt_shard shards[] = {{"model", 0, 1, params, 2}};
 *     ot_ckpt_save_args a = {.step = 100, .shards = shards, .nshards = 1};
 *     OT_CHECK(ot_ckpt_save_async(m, &a));               // copies to staging, returns
 *     ...                                                // next step runs while it is written
 *     OT_CHECK(ot_ckpt_close(m));                        // waits; reports a failed save
 *
 *     ot_ckpt *ck;
 *     ot_ckpt_restore_report rep;
 *     OT_CHECK(ot_ckpt_restore_latest("ckpt", &o, &ck, &rep));  // newest that verifies
 *     ot_tensor w;
 *     OT_CHECK(ot_ckpt_get(ck, "model", "w", &w));       // view into the mapped, verified file
 *     ot_ckpt_free(ck);
 *     ot_ckpt_restore_report_clear(&rep);
 *
 * Layout: ROOT/step_00000100/ holds one safetensors file per role and shard ("model.safetensors",
 * "optim-00001-of-00004.safetensors", ...) and manifest.json: format and version, step, wall time,
 * pod topology and membership epoch, optimizer configuration, RNG state, data position, metrics,
 * and for each file its role, shard, size and SHA-256; the manifest ends with a SHA-256 of its own
 * bytes (the digest's digits taken as zeros), so a flipped bit anywhere in it is detected too.
 *
 * Commit protocol: everything is written into ROOT/step_N.tmp/, each file fsynced (hashed while it
 * is written); the manifest is written last and fsynced; the directory is fsynced, renamed to
 * step_N and the parent fsynced. A reader never sees a partial checkpoint: a directory without
 * the .tmp suffix is complete. Stale .tmp directories (an interrupted save) are removed by
 * ot_ckpt_open. One writer (one manager) per root.
 *
 * Restore: every file's size and SHA-256 are checked against the manifest before a byte is used;
 * a mismatch is OT_ERR_CORRUPT_DATA naming the file. The verified bytes are the ones used (the
 * file is mapped once, hashed, then parsed), and each file's own metadata (optitpu.role,
 * optitpu.shard, optitpu.step) must agree with the manifest entry that lists it. A resume
 * (ot_ckpt_resume) sets damaged steps aside as step_N.damaged so they never block a new save.
 *
 * Errors: OT_ERR_IO names the file and the system call; after a failed save the .tmp directory is
 * removed and the previous checkpoints are untouched. Threads: a manager is used from one thread
 * (its async save runs on its own background thread); loaded checkpoints are immutable and may
 * be read from any thread.
 */
#ifndef OPTITPU_FT_H
#define OPTITPU_FT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "optitpu/core.h"
#include "optitpu/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

#define OT_CKPT_FORMAT_VERSION 1

/* ---------------------------------------------------------------------------------------------
 * What a checkpoint holds
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_ckpt_tensor {
    const char *name;
    ot_shape shape;
    const void *data; /* shape byte count; read-only while a save uses it */
} ot_ckpt_tensor;

/* One file: the tensors of one role ("model", "optim", [a-z0-9_]) on one shard. */
typedef struct ot_ckpt_shard {
    const char *role;
    int index, count; /* shard index of count; count 1 (or 0) = not sharded */
    const ot_ckpt_tensor *tensors;
    size_t ntensors;
} ot_ckpt_shard;

typedef struct ot_ckpt_pod_info {
    int num_devices, num_processes, num_hosts;
    int64_t membership_epoch;
    const char *topology; /* free-form ("2 hosts x 4 host devices"); NULL = "" */
} ot_ckpt_pod_info;

typedef struct ot_ckpt_metric {
    const char *name;
    double value; /* finite */
} ot_ckpt_metric;

typedef struct ot_ckpt_save_args {
    int64_t step; /* >= 0 */
    const ot_ckpt_shard *shards;
    size_t nshards;
    ot_ckpt_pod_info pod;
    const char *optimizer_json; /* the optimizer configuration, a JSON object; NULL = {} */
    const char *rng_algorithm;  /* NULL = "" */
    const uint64_t *rng_state;
    size_t rng_words;               /* <= 1024 */
    int64_t data_epoch, data_index; /* position in the input stream */
    const ot_ckpt_metric *metrics;  /* used by keep-best retention */
    size_t nmetrics;
} ot_ckpt_save_args;

/* ---------------------------------------------------------------------------------------------
 * Manifest
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_ckpt_file_entry {
    const char *path; /* file name inside the step directory */
    const char *role;
    int shard, shards;
    uint64_t size;
    uint8_t sha256[32];
} ot_ckpt_file_entry;

typedef struct ot_ckpt_manifest {
    int format_version;
    int64_t step;
    int64_t time_unix_ns;
    ot_ckpt_pod_info pod;
    const char *optimizer_json; /* compact JSON object */
    const char *rng_algorithm;
    const uint64_t *rng_state;
    size_t rng_words;
    int64_t data_epoch, data_index;
    const ot_ckpt_metric *metrics;
    size_t nmetrics;
    const ot_ckpt_file_entry *files;
    size_t nfiles;
    void *internal_; /* owns everything above */
} ot_ckpt_manifest;

/* Parses and validates manifest.json bytes: every field's type and range, file names (no
 * directories, unique, *.safetensors), hex digests, and (when check_digest) the manifest's own
 * SHA-256. On failure *out is NULL. Free with ot_ckpt_manifest_free. */
OT_API ot_status ot_ckpt_manifest_parse(const void *buf, size_t len, bool check_digest,
                                        ot_ckpt_manifest **out);
OT_API void ot_ckpt_manifest_free(ot_ckpt_manifest *m); /* NULL is a no-op */
/* Looks up a metric; false when absent. */
OT_API bool ot_ckpt_manifest_metric(const ot_ckpt_manifest *m, const char *name, double *value);

/* ---------------------------------------------------------------------------------------------
 * Directory-level operations (no manager needed; none of them modifies anything)
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_ckpt_entry {
    int64_t step;
    char *path;     /* ROOT/step_N, ROOT/step_N.tmp or ROOT/step_N.damaged[.K] */
    bool committed; /* false for a .tmp directory and for a step set aside */
    bool damaged;   /* set aside by ot_ckpt_set_aside (kept for inspection, never loaded) */
} ot_ckpt_entry;

/* Checkpoint directories under root, by ascending step (committed ones first among those of the
 * same step). Free with ot_ckpt_entries_free. A missing root is OT_ERR_NOT_FOUND. */
OT_API ot_status ot_ckpt_list(const char *root, ot_ckpt_entry **out, size_t *n);
OT_API void ot_ckpt_entries_free(ot_ckpt_entry *e, size_t n);

typedef struct ot_ckpt_bad_file {
    char *path;
    ot_status status;
    char *reason;
} ot_ckpt_bad_file;

typedef struct ot_ckpt_verify_report {
    int64_t step;   /* from the manifest; -1 when it could not be read */
    size_t nfiles;  /* files listed in the manifest */
    uint64_t bytes; /* bytes hashed */
    ot_ckpt_bad_file *bad;
    size_t nbad;
} ot_ckpt_verify_report;

/* Verifies one step directory: the manifest (and its digest), then every listed file's size and
 * SHA-256, and that each file parses as safetensors. Reports every bad file (not only the first);
 * returns OK or the first error (OT_ERR_CORRUPT_DATA naming the file). rep may be NULL. */
OT_API ot_status ot_ckpt_verify_dir(const char *step_dir, ot_ckpt_verify_report *rep);
OT_API void ot_ckpt_verify_report_clear(ot_ckpt_verify_report *rep);

/* ---------------------------------------------------------------------------------------------
 * Loaded (verified) checkpoints
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_ckpt ot_ckpt;

/* Verified restore of one step directory. */
OT_API ot_status ot_ckpt_load(const char *step_dir, ot_ckpt **out);
OT_API void ot_ckpt_free(ot_ckpt *ck); /* NULL is a no-op */
OT_API const ot_ckpt_manifest *ot_ckpt_manifest_of(const ot_ckpt *ck);
OT_API int64_t ot_ckpt_step(const ot_ckpt *ck);
OT_API const char *ot_ckpt_dir(const ot_ckpt *ck);
/* Files in manifest order; the handle belongs to ck. */
OT_API size_t ot_ckpt_file_count(const ot_ckpt *ck);
OT_API const ot_safetensors *ot_ckpt_file(const ot_ckpt *ck, size_t i);
/* A borrowed view of tensor `name` of `role`, searched over that role's shards; valid until
 * ot_ckpt_free. OT_ERR_NOT_FOUND when absent. */
OT_API ot_status ot_ckpt_get(const ot_ckpt *ck, const char *role, const char *name,
                             ot_tensor *view);

typedef struct ot_ckpt_skip {
    int64_t step;
    char *path;
    ot_status status;
    char *reason;
    char *moved_to; /* ot_ckpt_resume: where the step was set aside (NULL: left in place) */
} ot_ckpt_skip;

typedef struct ot_ckpt_restore_report {
    int64_t step;          /* restored step; -1 when none */
    ot_ckpt_skip *skipped; /* newer checkpoints passed over, newest first, and why */
    size_t nskipped;
    size_t nrepaired; /* primary copies repaired from a replica on the way */
} ot_ckpt_restore_report;

typedef struct ot_ckpt_options ot_ckpt_options;

/* Rollback: walks from the newest committed checkpoint back to the first that verifies and loads
 * it. With replicas in o, a step whose primary copy is missing or corrupt is repaired from a
 * verified replica (and then loaded from the primary). OT_ERR_NOT_FOUND when there is no
 * checkpoint at all, OT_ERR_CORRUPT_DATA when none verifies (rep lists why). rep may be NULL;
 * when given, clear it with ot_ckpt_restore_report_clear. */
OT_API ot_status ot_ckpt_restore_latest(const char *root, const ot_ckpt_options *o, ot_ckpt **out,
                                        ot_ckpt_restore_report *rep);
OT_API void ot_ckpt_restore_report_clear(ot_ckpt_restore_report *rep);

/* Moves ROOT/step_N (whatever it is: a damaged directory, a file, a dangling or looping symlink)
 * aside to ROOT/step_N.damaged (step_N.damaged.2, .3, ... when that name is taken), then fsyncs
 * ROOT. The step is kept for inspection, ot_ckpt_list reports it as damaged, nothing loads it, and
 * it no longer blocks a new save of step N. *moved_to (may be NULL) receives the new path
 * (ot_free). OT_ERR_NOT_FOUND when there is no ROOT/step_N. */
OT_API ot_status ot_ckpt_set_aside(const char *root, int64_t step, char **moved_to);

/* Decides whether a verified checkpoint can be used by the caller (ot_ckpt_resume). OT_OK: use it.
 * OT_ERR_CORRUPT_DATA: its contents are damaged (tensors missing, of other shapes): skip it like a
 * step that fails verification. Any other error stops the resume with that error. */
typedef ot_status (*ot_ckpt_accept_fn)(void *ud, const ot_ckpt *ck);

/* The resume of a training job: ot_ckpt_restore_latest, where a verified step must also pass
 * accept (NULL accepts everything), and every committed step newer than the one loaded (each one
 * failed verification or was rejected as damaged) is set aside with ot_ckpt_set_aside, on the
 * primary and on each replica, so that the resumed run can save those steps again;
 * rep->skipped[i].moved_to says where each went. When no step is usable they are all set aside and
 * the result is OT_ERR_NOT_FOUND (start from the beginning). When accept returns another error,
 * or memory runs out, nothing is moved and that error is returned. */
OT_API ot_status ot_ckpt_resume(const char *root, const ot_ckpt_options *o,
                                ot_ckpt_accept_fn accept, void *ud, ot_ckpt **out,
                                ot_ckpt_restore_report *rep);

/* Writes the tensors of `role` (every shard) as one safetensors file, atomically (for `optitpu
 * ckpt export`). Names: "name" for an unsharded role, "SHARD/name" for a sharded one; role NULL
 * exports all roles as "role/name" or "role.SHARD/name". OT_ERR_NOT_FOUND for an unknown role. */
OT_API ot_status ot_ckpt_export(const ot_ckpt *ck, const char *role, const char *out_path);

/* ---------------------------------------------------------------------------------------------
 * Manager: saving, retention, async, replication
 * ------------------------------------------------------------------------------------------- */

/* Which old checkpoints to keep; the union of the rules is kept, everything else that is fully
 * committed is deleted after each save. All zero keeps everything. The newest checkpoint that
 * verifies is never deleted. */
typedef struct ot_ckpt_retention {
    int keep_last;      /* the newest N (0: rule off) */
    int64_t keep_every; /* steps that are multiples of K (0: rule off) */
    int keep_best;      /* the best M by best_metric (0: rule off) */
    const char *best_metric;
    bool best_higher; /* true: larger is better */
} ot_ckpt_retention;

struct ot_ckpt_options {
    const char *const *replicas; /* replica roots; each commit is copied and verified there */
    size_t nreplicas;
    ot_ckpt_retention retention;
    bool fsync; /* default true; false only for tests and benchmarks of the non-durable path */
    /* Shard files written side by side (each hashed while written by its own thread): 0 (the
     * default) = the online CPUs, at most 4 and at most the shards of 16 MiB or more; 1 = one
     * after the other in the saving thread. The files are the same either way. */
    int write_threads;
};

OT_API ot_ckpt_options ot_ckpt_options_default(void);

typedef struct ot_ckpt_manager ot_ckpt_manager;

/* Creates root (and replica roots) when missing, parents included, and removes stale
 * step_*.tmp directories in them. The options are copied. */
OT_API ot_status ot_ckpt_open(const char *root, const ot_ckpt_options *o, ot_ckpt_manager **out);
/* Waits for an async save in flight and frees the manager; returns that save's status (a failed
 * async save is never dropped). NULL is a no-op returning OK. */
OT_API ot_status ot_ckpt_close(ot_ckpt_manager *m);
OT_API const char *ot_ckpt_root(const ot_ckpt_manager *m);

typedef struct ot_ckpt_save_stats {
    int64_t step;
    uint64_t bytes;          /* bytes written on the primary (tensor files + manifest) */
    double write_seconds;    /* write + hash + fsync + commit on the primary */
    double snapshot_seconds; /* async: copy into staging (what the caller waited for) */
    size_t ndeleted;         /* checkpoints removed by retention */
} ot_ckpt_save_stats;

/* Synchronous save with the commit protocol, then replication and retention. Waits for an async
 * save in flight first; if that one failed, its error is returned and nothing new is saved.
 * OT_ERR_ALREADY_EXISTS when step_N is already committed. stats may be NULL. */
OT_API ot_status ot_ckpt_save(ot_ckpt_manager *m, const ot_ckpt_save_args *a,
                              ot_ckpt_save_stats *stats);
/* Snapshots every tensor into a host staging buffer (reused between saves) and deep-copies the
 * arguments, then returns; writing, hashing, commit, replication and retention run on a
 * background thread. The caller may modify its buffers as soon as this returns. Waits for the
 * previous async save first; if that one failed, returns its error (message names the step) and
 * does not start a new save. */
OT_API ot_status ot_ckpt_save_async(ot_ckpt_manager *m, const ot_ckpt_save_args *a);
/* Waits for the async save in flight; returns its status (then cleared). stats may be NULL. */
OT_API ot_status ot_ckpt_wait(ot_ckpt_manager *m, ot_ckpt_save_stats *stats);

/* Applies a retention policy to a root now; *ndeleted may be NULL. */
OT_API ot_status ot_ckpt_apply_retention(const char *root, const ot_ckpt_retention *r,
                                         size_t *ndeleted);

/* Copies a committed, verified step directory to another root with the same commit protocol,
 * verifying every byte copied against the manifest. OT_ERR_ALREADY_EXISTS when the destination
 * has that step committed. */
OT_API ot_status ot_ckpt_replicate(const char *step_dir, const char *dst_root);
/* Repairs ROOT's copy of `step` (missing or failing verification) from the first replica in o
 * whose copy verifies; the corrupt copy is removed. OT_ERR_NOT_FOUND when no replica verifies. */
OT_API ot_status ot_ckpt_repair(const char *root, const ot_ckpt_options *o, int64_t step);

/* ---------------------------------------------------------------------------------------------
 * Migration: move a workload's state between devices through the verified path.
 *
 * The device and pod layers stay abstract here: a source reads the state of the device being
 * drained (or that failed), a sink loads it into the healthy device. ot_ft_migrate tries the live
 * device first: it reads the state, serializes it to safetensors images in memory (SHA-256 of
 * each), parses them back with the validating reader, loads the parsed tensors into the sink and,
 * when the sink can read back, compares the target's state with the hashes. If the live path
 * fails at any point (the device does not answer, returns inconsistent data, or the copy does not
 * verify), it falls back to the newest verified checkpoint (ot_ckpt_restore_latest, role "model"
 * -> params, "optim" -> optimizer state) and verifies the sink the same way. When neither
 * verifies it returns OT_ERR_FAILED_PRECONDITION naming both reasons; the sink may then hold
 * partial state and must not be used.
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_ft_state {
    int64_t step;
    const ot_ckpt_tensor *params;
    size_t nparams;
    const ot_ckpt_tensor *optim;
    size_t noptim;
} ot_ft_state;

typedef struct ot_ft_state_source {
    void *ctx;
    /* Fills *st with the device's state (borrowed until release). An error (OT_ERR_PEER_FAILED,
     * OT_ERR_TIMEOUT, ...) means the device does not answer. */
    ot_status (*read)(void *ctx, ot_ft_state *st);
    void (*release)(void *ctx, ot_ft_state *st); /* may be NULL */
} ot_ft_state_source;

typedef struct ot_ft_state_sink {
    void *ctx;
    /* Loads the state into the target (copying what it keeps; st is valid only during the call). */
    ot_status (*load)(void *ctx, const ot_ft_state *st);
    /* Optional (NULL): reads the target's state back for verification, tensors in the order
     * load received them (names may repeat across optimizer shards). */
    ot_status (*read_back)(void *ctx, ot_ft_state *st);
    void (*release)(void *ctx, ot_ft_state *st); /* may be NULL */
} ot_ft_state_sink;

typedef enum ot_ft_migrate_path {
    OT_FT_MIGRATE_NONE = 0,
    OT_FT_MIGRATE_LIVE,
    OT_FT_MIGRATE_CHECKPOINT,
} ot_ft_migrate_path;

typedef struct ot_ft_migrate_report {
    ot_ft_migrate_path path;
    int64_t step;
    uint64_t bytes;         /* tensor bytes moved */
    bool verified_readback; /* the sink's read-back matched */
    ot_status live_status;  /* why the live path was not used (OK when it was) */
    char live_error[256];
    ot_ckpt_restore_report restore; /* when the checkpoint path ran */
} ot_ft_migrate_report;

/* live may be NULL (the device is gone); ckpt_root may be NULL (no checkpoints); o gives the
 * replicas used on the checkpoint path (may be NULL). rep must be cleared with
 * ot_ft_migrate_report_clear. */
OT_API ot_status ot_ft_migrate(const ot_ft_state_source *live, const char *ckpt_root,
                               const ot_ckpt_options *o, const ot_ft_state_sink *dst,
                               ot_ft_migrate_report *rep);
OT_API void ot_ft_migrate_report_clear(ot_ft_migrate_report *rep);
OT_API const char *ot_ft_migrate_path_name(ot_ft_migrate_path p);

#ifdef __cplusplus
}
#endif

#endif /* OPTITPU_FT_H */
