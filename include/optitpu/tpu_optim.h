/*
 * optitpu tpu_optim: an optimizer compiled once for a whole model and stepped on devices.
 *
 * ot_tpu_optimizer_create builds ONE module that updates all nparams parameters with optimizer o
 * (ot_optimizer_build per parameter inside one computation; hyper-parameters copied at create),
 * optionally clipping the gradients by their global norm first, and compiles it once. step and lr
 * are runtime f64 scalars of the module, so neither a new step nor a new learning rate ever
 * recompiles. With donation (the default) every parameter and state input is aliased to its
 * output (the module's input_output_alias): the update writes in place and the old handles are
 * donated.
 *
 * Host callbacks (ot_optimizer_new_host): when every parameter's optimizer is a host callback,
 * nothing is compiled (ot_tpu_optimizer_executable is NULL, compile_count 0): each step copies
 * the replica's parameters, gradients and state to the host, clips as the compiled update does,
 * runs the callback per parameter on those copies and uploads the results as new buffers. The
 * caller's handles and the state change only when every callback and upload succeeded: a failing
 * callback leaves everything as it was. Host callbacks and graphs do not mix in one wrapper, and
 * loss scaling and bf16/f16 parameters need a graph (INVALID_ARGUMENT).
 *
 * Replicas: each device that trains a copy of the model adds a replica (its own state buffers,
 * allocated on that device with the optimizer's initial values). The executable is shared and
 * read-only.
 *
 * Usage:
 *
 *     ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
 *     to.clip_grad_norm = 1.0;
 *     ot_tpu_optimizer *t;
 *     OT_CHECK(ot_tpu_optimizer_create(adam, shapes, nparams, &to, &t));   // compiles once
 *     OT_CHECK(ot_tpu_optimizer_add_replica(t, dev));
 *     for (int64_t step = 1; ...; step++) {
 *         ... compute grads[k] (buffers on dev) ...
 *         OT_CHECK(ot_tpu_optimizer_step(t, dev, params, grads, step, lr_of(step), NULL));
 *         // params[k] now hold the new handles; the old ones are gone
 *     }
 *     ot_tpu_optimizer_free(t);
 *
 * Mixed precision: a bf16 or f16 parameter gets an f32 master copy, the state tensor
 * "<k>.master" after its optimizer slots. Its gradient (the parameter's dtype) is widened to f32,
 * the optimizer updates the master in f32 (its state in f32 too) and the parameter becomes the
 * master rounded to nearest even. The master starts as the widened parameter at the replica's
 * first step unless set before with ot_tpu_optimizer_set_state (e.g. from the f32 weights the
 * bf16 copy was made from).
 *
 * Flat mode (options.flat): see ot_tpu_optimizer_options.flat. The module then has one
 * parameter, gradient and state tensor per flat group instead of one per tensor (same layout
 * with "parameter" read as "group"), and the state tensors are the flat ones, named
 * "flat<g>.<dtype>.<slot>" (e.g. "flat0.f32.exp_avg") and shaped [group length] (a scalar
 * slot: []).
 *
 * Module layout (ot_tpu_optimizer_executable): parameters 0..n-1 params, n..2n-1 grads, then the
 * state tensors (parameter-major: parameter k's slots, then its master), then step and lr (f64
 * scalars) and, with loss scaling, 1/scale (f32); root tuple (params'..., state'...) in the same
 * order, then found_inf (pred) with loss scaling.
 *
 * Clipping by value (clip_grad_value > 0) comes first: g = clamp(g, -v, v) with v rounded to the
 * gradient dtype. Clipping by norm (clip_grad_norm > 0): torch.nn.utils.clip_grad_norm_ with norm
 * type 2 — total = sqrt(sum over every gradient element of g^2), coef = min(1, max_norm / (total +
 * 1e-6)), g *= coef. The sum of squares and coef are computed in f64 (elements converted from their
 * dtype), coef is rounded to each gradient's dtype before the multiply. With clip_norm_optax,
 * optax's clip_by_global_norm instead: g unchanged when total < max_norm, else (g / total) *
 * max_norm with total rounded to the gradient dtype.
 *
 * Ownership: create allocates; free releases the executable and every replica's state buffers
 * (NULL is a no-op); the devices and the caller's parameter/gradient buffers stay the caller's.
 * A successful step frees the caller's old parameter handles (donated or not) and stores new
 * handles in params[k].
 *
 * Errors: every call returns ot_status with the message in ot_last_error(). A step checks
 * everything (replica known, step >= 1, lr finite and >= 0, every buffer non-NULL, live, on the
 * device and of its shape) before executing: on such an error nothing changes. A failure during
 * execution leaves the handles in place but, with donation, their contents may have been written
 * (the runtime's donated_written); the state is then not trustworthy.
 *
 * Thread safety: different devices may step, get and set state concurrently from different
 * threads (per-replica data is independent; the replica list is locked). One replica must not be
 * used from two threads at once. add_replica may run concurrently with steps on other replicas.
 */
#ifndef OPTITPU_TPU_OPTIM_H
#define OPTITPU_TPU_OPTIM_H

#include <stdbool.h>
#include <stdint.h>

#include "optitpu/collectives.h"
#include "optitpu/compiler.h"
#include "optitpu/core.h"
#include "optitpu/optim.h"
#include "optitpu/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ot_tpu_optimizer ot_tpu_optimizer;

/* How the array state slots (Adam's moments, Lion's and SGD's momentum) are stored between
 * steps (options.state_format). The update itself always runs in f32: the state is widened
 * when it is read and compressed again when it is written, inside the update's fused loops (in
 * flat mode one loop for Adam). Scalar slots and f32 masters stay f32. */
typedef enum ot_tpu_state_format {
    OT_TPU_STATE_F32 = 0, /* the update's dtype, as it is (default) */
    OT_TPU_STATE_BF16,    /* bf16: rounded to nearest even, or stochastically (options) */
    OT_TPU_STATE_INT8,    /* 8-bit block-wise (bitsandbytes), see below */
} ot_tpu_state_format;

/* 8-bit block-wise state (OT_TPU_STATE_INT8, Dettmers et al. 2022, bitsandbytes' blockwise 8-bit
 * optimizers): each array slot is a u8 code per element ("flat<g>.<dtype>.<slot>") and an f32
 * absmax per block of OT_TPU_INT8_BLOCK elements ("...<slot>.absmax", after the group's slots
 * and master). A value is map[code] * absmax of its block; after the f32 update the block's new
 * absmax is max |s| (1 for an all-zero block) and the code the first index of the smallest
 * |s / absmax - map[k]|. The map is bitsandbytes' dynamic map (create_dynamic_map, 7 exponent
 * bits): unsigned for slots that never go negative (exp_avg_sq, max_exp_avg_sq, square_avg,
 * sum, acc_delta, nu), signed for the others. In int8 mode every tensor starts at a multiple of
 * OT_TPU_INT8_BLOCK elements, so blocks never straddle two tensors (bitsandbytes' blocks are per
 * tensor too). */
#define OT_TPU_INT8_BLOCK 256
/* In per-tensor mode int8 state is kept for tensors of at least this many elements
 * (options.state_int8_min_size, default this); smaller ones (biases, norms) keep f32 state, as
 * bitsandbytes' min_8bit_size. Per tensor, int8 takes
 * f32 parameters updated by adam or adamw (torch's form, no amsgrad), lion or sgd with momentum
 * (the fused kernel); each slot's codes are the tensor's elements flattened and padded with
 * zeros to whole blocks ([padded length], "<k>.<slot>"), its absmax "<k>.<slot>.absmax" after
 * the tensor's slots. Flat mode compresses every tensor, with any elementwise optimizer. */
#define OT_TPU_INT8_MIN_SIZE 4096

/* The 256 values of the dynamic map, sorted (signed: 0 at 127 and 1 at 255, no -1; unsigned: 0
 * at 0, 1 at 255), as the compiled update computes them. */
OT_API void ot_tpu_int8_map(bool is_signed, float out[256]);

typedef struct ot_tpu_optimizer_options {
    bool donate;            /* default true: params and state are donated to the update
                               (input_output_alias), updated in place */
    double clip_grad_norm;  /* > 0: gradients clipped by global norm over all params before the
                               update (torch clip_grad_norm_ semantics); 0: off */
    double clip_grad_value; /* > 0: every gradient element clamped to [-v, v] first (torch
                               clip_grad_value_, optax clip); 0: off */
    bool clip_norm_optax;   /* clip_grad_norm with optax.clip_by_global_norm's formula instead:
                               g unchanged when the norm < max_norm, else (g / norm) * max_norm
                               (norm summed in f64, rounded to the gradient dtype) */
    const ot_compile_options *compile; /* NULL: ot_compile_options_default() */
    /* The persistent compilation cache (compiler.h; not owned, must outlive create) the update
     * is compiled through; NULL (default): compiled every time. */
    ot_compile_cache *compile_cache;
    /* Dynamic loss scaling (torch.amp.GradScaler): gradients arrive multiplied by the replica's
     * loss scale (ot_tpu_optimizer_loss_scale); the step unscales them in f32 (g * f32(1/scale))
     * before clipping; when any unscaled element is inf/NaN the step changes nothing (params,
     * state, masters) and the scale is multiplied by backoff_factor; after growth_interval clean
     * steps in a row it is multiplied by growth_factor. Defaults: off, 65536, 2, 0.5, 2000. */
    bool loss_scaling;
    double init_scale, growth_factor, backoff_factor;
    int64_t growth_interval;
    /* Parameter groups: NULL, or nparams entries — parameter k is updated by
     * param_optimizers[k] (NULL entry: o) with its own hyper-parameters and state slots, and its
     * lr is the step's lr times lr_scale[k] (lr_scale NULL: 1). Both are copied at create. */
    const ot_optimizer *const *param_optimizers;
    const double *lr_scale;
    /* optax's masks: NULL, or nparams entries copied at create. weight_decay_mask[k] false:
     * parameter k's optimizer (its group's, inside a Lookahead too) gets its weight-decay
     * hyper-parameters ("weight_decay", "weight_decay_rate") set to 0 — e.g. no decay on
     * biases and norms (optax's `mask` / `weight_decay_mask`). trust_ratio_mask[k] false:
     * "trust_ratio" 0 (LARS's `trust_ratio_mask`). A false entry for an optimizer without such
     * a hyper-parameter is INVALID_ARGUMENT. */
    const bool *weight_decay_mask;
    const bool *trust_ratio_mask;
    /* Flat mode (default false): each replica keeps one parameter buffer and one gradient
     * buffer per group — tensors of one dtype (f32, f64, bf16, f16) and one hyper-parameter
     * group (the
     * same param_optimizers entry, masks and lr_scale; without groups: one per dtype) — holding
     * its tensors back to back, each starting at a multiple of OT_TPU_FLAT_ALIGN elements, and
     * one buffer per state slot and group of the same layout. The module takes these flat
     * buffers and each group's update is built once over its flat 1-D shape, so the compiler
     * fuses it into one loop (one kernel for Adam over any number of tensors). The caller
     * fills gradients and reads parameters through per-tensor views (ot_tpu_optimizer_flat_view,
     * write_grad, write_param, read_param) and steps with ot_tpu_optimizer_step_flat. Results
     * are bit-identical to the per-tensor mode.
     * Elementwise updates are flattened as they are (checked on the optimizer's update
     * graph). An update that reduces over its tensor — lamb's and lars's trust ratios from
     * per-tensor norms, masks included — is built once over the flat buffer with the group's
     * segments (ot_optim_inputs.seg): each tensor's norms are reduced over its slice reshaped
     * to its shape, as in the per-tensor mode, and every element gets its tensor's ratio (0 in
     * the gaps). State not shaped like the tensors (adafactor's factored moments) is
     * UNIMPLEMENTED in flat mode, as are host callbacks. A bf16/f16 group keeps one f32
     * master buffer of its layout (state "flat<g>.<dtype>.master" after its slots, taken from
     * the flat parameters at the first step unless set), updated in f32 as in the per-tensor
     * mode. Clipping by value, by global norm (summed tensor by tensor over segments of
     * the flat buffers, in the per-tensor order) and loss scaling work. A scalar state slot
     * (NAdam's mu_product) is kept once per group. */
    bool flat;
    /* Compressed state (an f32 update: f32, bf16 and f16 parameters): state_format
     * OT_TPU_STATE_BF16 keeps every array state slot in bf16 (2 bytes instead of 4 per slot and
     * parameter); its state tensors are bf16 (get_state / set_state). Rounding is to nearest even,
     * or with state_stochastic_rounding stochastic: the f32 value's low 16 bits plus 16 random
     * bits, truncated (so a value is rounded up with probability low16 / 65536 and E[stored] =
     * value), the random bits a counter-based hash of (state_seed, unit, slot, step, element index)
     * — the unit is the flat group (flat mode) or the parameter, the index the element's in the
     * unit's buffer: the same seed and steps give the same bits on every run, replica and thread
     * count. Non-finite values round to nearest. OT_TPU_STATE_INT8 (see above)
     * keeps 1 byte per slot and parameter plus 4 per block of 256. Another format, an f64
     * parameter, or per tensor an optimizer the int8 kernel lacks: INVALID_ARGUMENT. */
    ot_tpu_state_format state_format;
    bool state_stochastic_rounding;
    uint64_t state_seed;
    /* int8 state: the update of an f32 group whose optimizer is adam or adamw (torch's form, no
     * amsgrad), lion or sgd with momentum is one fused kernel that decodes, updates and
     * quantizes block by block in one pass over memory; other optimizers (and bf16/f16 groups)
     * build it as graph code: dequantize, the optimizer's update graph, quantize. Both give the
     * same bits. state_int8_unfused (default false) takes the graph code for every group (tests,
     * comparisons). */
    bool state_int8_unfused;
    /* int8 state per tensor: tensors of fewer elements keep f32 state (bitsandbytes'
     * min_8bit_size); default OT_TPU_INT8_MIN_SIZE, 0 or 1: every tensor with array state.
     * Negative: INVALID_ARGUMENT. Flat and sharded mode quantize every tensor (not read). */
    int64_t state_int8_min_size;
    /* Sharded update (ZeRO stage 1; see "sharded mode" below): shard_devices > 1 shards the
     * update over that many devices; 0 or 1 (default): every replica updates everything. The
     * flat vector starts with shard_head elements the caller may use (e.g. metrics reduced with
     * the gradients; their update is computed and discarded), default 0. */
    int shard_devices;
    int64_t shard_head;
} ot_tpu_optimizer_options;

/* Stochastic rounding's random bits, as the compiled update computes them (for references and
 * tests): ot_tpu_sr_key(seed, group, slot) once per state buffer, then element idx of the flat
 * buffer at step t gets the top 16 bits of ot_tpu_sr_bits(key, t, idx) added to its f32 bits
 * before truncation to bf16. Pure functions. */
OT_API uint32_t ot_tpu_sr_key(uint64_t seed, int group, int slot);
OT_API uint32_t ot_tpu_sr_bits(uint32_t key, int64_t step, int64_t idx);

/* Element alignment of each tensor inside a flat buffer (64 bytes of f32). */
#define OT_TPU_FLAT_ALIGN 16

OT_API ot_tpu_optimizer_options ot_tpu_optimizer_options_default(void);

/* Builds ONE module updating all nparams parameters (shapes given: f32 or f64 arrays) with
 * optimizer o (hyper-parameters copied now), and compiles it once. opts NULL: defaults.
 * On failure *out is NULL and nothing is leaked. */
OT_API ot_status ot_tpu_optimizer_create(const ot_optimizer *o, const ot_shape *param_shapes,
                                         int nparams, const ot_tpu_optimizer_options *opts,
                                         ot_tpu_optimizer **out);
/* Frees every replica's state buffers too. NULL is a no-op. */
OT_API void ot_tpu_optimizer_free(ot_tpu_optimizer *t);
/* Compiles done so far (1 after create, 2 for a sharded update with a trust ratio; stepping
 * never recompiles). */
OT_API int64_t ot_tpu_optimizer_compile_count(const ot_tpu_optimizer *t);
/* The compiled update (owned by t; read-only) and the module it was compiled from. */
OT_API const ot_executable *ot_tpu_optimizer_executable(const ot_tpu_optimizer *t);
OT_API int ot_tpu_optimizer_param_count(const ot_tpu_optimizer *t);

/* State tensors: nparams * slots of them (parameter-major), named "<k>.<slot>", e.g.
 * "0.exp_avg". name: NULL when i is out of range. */
OT_API int ot_tpu_optimizer_state_count(const ot_tpu_optimizer *t);
OT_API const char *ot_tpu_optimizer_state_name(const ot_tpu_optimizer *t, int i);
/* The shape of state tensor i (OUT_OF_RANGE when there is none). */
OT_API ot_status ot_tpu_optimizer_state_shape(const ot_tpu_optimizer *t, int i, ot_shape *out);

/* Allocates (initial values) the state of one replica on device d; a replica is identified by
 * its device pointer. Calling twice for the same device: ALREADY_EXISTS. */
OT_API ot_status ot_tpu_optimizer_add_replica(ot_tpu_optimizer *t, ot_device *d);
OT_API int ot_tpu_optimizer_replica_count(const ot_tpu_optimizer *t);

/* One step on device d's replica: params[k] (buffers on d) are replaced by the updated buffers
 * (the old handles are freed/donated by this call, new handles stored back into params[k]);
 * grads on d are read only. step = t >= 1, lr this step's learning rate. ro may be NULL.
 * Unknown device: NOT_FOUND. On error before execution nothing changes. */
OT_API ot_status ot_tpu_optimizer_step(ot_tpu_optimizer *t, ot_device *d, ot_buffer **params,
                                       ot_buffer *const *grads, int64_t step, double lr,
                                       const ot_run_options *ro);

/* The loss scale of device d's replica for the next step (1 without loss scaling) and whether
 * its last step was skipped for inf/NaN gradients. A skipped step is not an optimizer step:
 * pass the same step number again next time (torch's step count does not advance either). */
OT_API ot_status ot_tpu_optimizer_loss_scale(ot_tpu_optimizer *t, ot_device *d, double *scale,
                                             bool *last_skipped);

/* Copy state tensor i of device d's replica to a new host tensor (*out owned by the caller) /
 * overwrite it from host (shape and dtype must match: SHAPE_MISMATCH, nothing changed). */
OT_API ot_status ot_tpu_optimizer_get_state(ot_tpu_optimizer *t, ot_device *d, int i,
                                            ot_tensor *out);
OT_API ot_status ot_tpu_optimizer_set_state(ot_tpu_optimizer *t, ot_device *d, int i,
                                            const ot_tensor *in);

/* The wrapper as an optimizer (it implements the same interface, so wrappers compose): a new
 * ot_optimizer (*out owned by the caller, name "tpu_optimizer") whose state slots, initial
 * values, shapes and update graph (or host callback) are those of a copy of the optimizer t was
 * created with, hyper-parameters as copied at create. Wrap it again — ot_tpu_optimizer_create
 * on it (tpu(tpu(adam))), ot_optimizer_new_lookahead (Lookahead(tpu(adam))), or
 * ot_optimizer_step_reference — and it computes exactly what the wrapped optimizer computes. The
 * wrapper's own step machinery (clipping, loss scaling, parameter groups, masks, replicas) is not
 * part of the view: the outer wrapper has its own. */
OT_API ot_status ot_tpu_optimizer_as_optimizer(const ot_tpu_optimizer *t, ot_optimizer **out);

/* ---- flat mode (options.flat) ---- */

/* Where tensor k lives: flat group `group` (one per dtype and hyper-parameter group, in order
 * of first appearance), its dtype, its first element `offset` and `count` elements (row-major,
 * its shape's order). */
typedef struct ot_tpu_flat_view {
    int group;
    ot_dtype dtype;
    int64_t offset, count;
} ot_tpu_flat_view;

/* Flat groups (0 when t is not in flat mode). */
OT_API int ot_tpu_optimizer_flat_group_count(const ot_tpu_optimizer *t);
/* Tensor k's view (OUT_OF_RANGE for a bad k, FAILED_PRECONDITION when not in flat mode). */
OT_API ot_status ot_tpu_optimizer_flat_view(const ot_tpu_optimizer *t, int k,
                                            ot_tpu_flat_view *out);
/* Device d's flat parameter and gradient buffers of group g, owned by t (borrowed: the
 * parameter handle changes at every step_flat; do not free either). Either out may be NULL.
 * Padding between tensors starts at zero; whoever writes a whole buffer must keep it zero. */
OT_API ot_status ot_tpu_optimizer_flat_buffers(ot_tpu_optimizer *t, ot_device *d, int g,
                                               ot_buffer **param, ot_buffer **grad);
/* Copy host tensor `in` (tensor k's shape and dtype, else SHAPE_MISMATCH, nothing written)
 * into tensor k's segment of device d's flat gradient / parameter buffer, and copy tensor k's
 * parameter segment out to a new host tensor (*out owned by the caller). */
OT_API ot_status ot_tpu_optimizer_write_grad(ot_tpu_optimizer *t, ot_device *d, int k,
                                             const ot_tensor *in);
OT_API ot_status ot_tpu_optimizer_write_param(ot_tpu_optimizer *t, ot_device *d, int k,
                                              const ot_tensor *in);
OT_API ot_status ot_tpu_optimizer_read_param(ot_tpu_optimizer *t, ot_device *d, int k,
                                             ot_tensor *out);
/* One step of device d's replica over its flat buffers (the per-tensor ot_tpu_optimizer_step
 * is FAILED_PRECONDITION in flat mode, and this one outside it). Same checks and guarantees. */
OT_API ot_status ot_tpu_optimizer_step_flat(ot_tpu_optimizer *t, ot_device *d, int64_t step,
                                            double lr, const ot_run_options *ro);

/* ---- sharded mode (options.shard_devices = N > 1; ZeRO stage 1) ----
 *
 * The parameters are one flat f32 vector: shard_head elements, then the nparams tensors back to
 * back in order, zero-padded to N blocks of block_len elements (a multiple of 16). With int8
 * state the head and every tensor start at multiples of OT_TPU_INT8_BLOCK (zeros between them)
 * and block_len is a multiple of it: the shard boundaries fall on quantization blocks, each
 * block lies in one tensor and starts where that tensor's own block does, so a device's state
 * is its block's codes ("0.<slot>", u8[block_len]) and absmax ("0.<slot>.absmax",
 * f32[block_len / OT_TPU_INT8_BLOCK]) and the update is the unsharded int8 update of every
 * tensor (state_int8_min_size 1, or flat mode) bit for bit. Device `rank`
 * of an N-member communicator owns block rank: its replica holds the optimizer state of that
 * block only (about 1/N of the unsharded state) and updates it. A step is three calls, which
 * every member makes in the same order (collectives):
 *
 *     ot_tpu_optimizer_shard_reduce(t, comm, coll, grads, reduced);    // reduce-scatter
 *     ot_tpu_optimizer_shard_update(t, dev, comm, reduced, params, step, lr, NULL);
 *     ot_tpu_optimizer_shard_gather(t, comm, coll, params);            // all-gather, in place
 *
 * (or ot_tpu_optimizer_step_sharded, which makes all three). grads: this member's gradients in
 * the layout (N * block_len f32 on the host; the padding zero); reduced: block_len f32, this
 * member's block of the sum over the members; params: N * block_len f32 on the host, the current
 * parameters in the layout (identical on every member), of which the update rewrites block rank
 * and the gather every other block. The module is the update of one f32[block_len] tensor
 * (compiled once): param_count is 1 and the state tensors are block-shaped, "0.<slot>"
 * (get_state / set_state / add_replica as usual; a replica is a device, its rank the one it steps
 * with).
 *
 * Only an elementwise update shards — each element's update must not read other elements, so a
 * block updates exactly as the same elements of the whole tensors do — or one whose only
 * coupling is a trust ratio (lamb, lars; see below). With the tree or direct
 * algorithm (coll; the comm's choice under auto) the reduce-scatter gives every element the
 * all-reduce's summation order, so a sharded run is bit for bit the unsharded data-parallel run
 * with that all-reduce; other algorithms sum in another order (still the same bits on every
 * member and run). The gather only copies: coll's algorithm when it has an all-gather, else
 * direct in shared memory, else the communicator's choice.
 *
 * Clipping by global norm and loss scaling take the pod's gradients: shard_update computes the
 * norm's f64 sum of squares and found_inf from every member's block (two small all-gathers: the
 * first elements of the blocks that a summation block straddles, then each member's partial
 * sums and found_inf), summed in the unsharded update's order (the canonical summation order of
 * each tensor, docs/exec.md, then tensor by tensor), so clipping, skipping and the loss scale
 * are the unsharded run's bit for bit on every member.
 *
 * Lamb's and lars's trust ratios take each tensor's norms of the parameter and of the update:
 * shard_update first runs a second executable computing the block's update before the ratio
 * (compile_count 2), sums the squares of both per tensor over the pod in the same way (f32, the
 * canonical order of each tensor's reduce) and hands every element its tensor's two sums, from
 * which the update takes the ratio — so the parameters are the unsharded ones bit for bit.
 *
 * Errors: create refuses (INVALID_ARGUMENT, with the reason) an optimizer whose update is not
 * elementwise and couples elements otherwise than by a trust ratio (adafactor: factored
 * moments), a non-f32 parameter, int8 state with an optimizer its fused kernel lacks (it takes
 * adam, adamw, lion, sgd with momentum), bf16 state with stochastic rounding (the block would
 * draw other random bits than the tensors), host callbacks, parameter groups and flat mode;
 * shard_devices < 0 or shard_head < 0. The shard calls: FAILED_PRECONDITION outside sharded
 * mode, INVALID_ARGUMENT for a communicator of another size than shard_devices or a NULL buffer,
 * the collective's and the step's errors otherwise (params are written only after a successful
 * update, so a failed one leaves them as they were; a failed collective aborts the communicator).
 *
 * Ownership: grads, reduced and params stay the caller's (read during the call only); the
 * device's parameter and gradient blocks are allocated on the replica's first update (or
 * shard_blocks) and freed with t.
 *
 * Thread safety: as ot_tpu_optimizer_step — each member steps its own device from its own thread;
 * one device's calls must not overlap. */

/* The layout: shard_devices (0 when not sharded: FAILED_PRECONDITION), block_len, and where each
 * parameter starts in the flat vector (param_offset: nparams entries, or NULL). Any output may be
 * NULL. */
OT_API ot_status ot_tpu_optimizer_shard_layout(const ot_tpu_optimizer *t, int *devices,
                                               int64_t *block_len, int64_t *param_offset);
OT_API ot_status ot_tpu_optimizer_shard_reduce(ot_tpu_optimizer *t, ot_comm *comm,
                                               const ot_coll_options *coll, const float *grads,
                                               float *reduced);
OT_API ot_status ot_tpu_optimizer_shard_update(ot_tpu_optimizer *t, ot_device *d, ot_comm *comm,
                                               const float *reduced, float *params, int64_t step,
                                               double lr, const ot_run_options *ro);
OT_API ot_status ot_tpu_optimizer_shard_gather(ot_tpu_optimizer *t, ot_comm *comm,
                                               const ot_coll_options *coll, float *params);
/* Resident blocks (in place of shard_update's host vectors, where the device's memory is the
 * host's): device d's parameter and gradient blocks (block_len f32 each) in its own memory,
 * allocated on the first call, then the same memory for t's life (the update writes the
 * parameter block in place). The caller fills *grad (e.g. reduces its block of the gradients
 * straight into it) and reads *param (e.g. publishes it to the others, who all-gather it); it
 * writes *param only to replace the parameters (at the start, after a restore). Either output
 * may be NULL. FAILED_PRECONDITION: not in sharded mode, the device's memory is not the host's
 * (ot_buffer_host_data_mut), or donation is off (the update would move the block). NOT_FOUND: no
 * replica on d. */
OT_API ot_status ot_tpu_optimizer_shard_blocks(ot_tpu_optimizer *t, ot_device *d, float **param,
                                               float **grad);
/* The device's parameter block moved into the caller's memory mem (block_len f32, outliving t
 * or the next call; a view, ot_buffer_view_host): the update then writes mem in place, e.g. the
 * device's block of one parameter vector that every device of the process reads. mem holds the
 * parameters (the block's old values are not copied). mem NULL: back into memory of the device's
 * own, the values copied (before mem is freed). Errors as shard_blocks. */
OT_API ot_status ot_tpu_optimizer_shard_param_view(ot_tpu_optimizer *t, ot_device *d, float *mem);
/* shard_update on the resident blocks: the parameter block updated in place with the gradient
 * block; nothing is copied between host vectors and the device (shard_times' copy_ns counts
 * only lamb's and lars's per-element norms). A collective when shard_update is one. Before
 * shard_blocks: FAILED_PRECONDITION. */
OT_API ot_status ot_tpu_optimizer_shard_update_blocks(ot_tpu_optimizer *t, ot_device *d,
                                                      ot_comm *comm, int64_t step, double lr,
                                                      const ot_run_options *ro);
/* Device d's last shard_update in the calling thread's CPU nanoseconds: *copy_ns copying its
 * blocks between the host vectors and the device (parameters and gradients in, the updated
 * parameters out; lamb/lars: the norms in), *comm_ns in the pod's collectives (the sums of
 * squares' all-gathers: lamb/lars, clipping by norm); the rest of the call is the update's
 * computation. 0 before the first update. NOT_FOUND: no replica on d. Same thread as the
 * update (the times are that thread's). */
OT_API ot_status ot_tpu_optimizer_shard_times(ot_tpu_optimizer *t, const ot_device *d,
                                              int64_t *copy_ns, int64_t *comm_ns);
/* With clip_grad_norm: the global gradient norm device d's last shard_update clipped with (the
 * pod's, before clipping) and the f64 sum of squares it is the root of (sum_sq may be NULL).
 * FAILED_PRECONDITION without clipping by norm or before the first update. */
OT_API ot_status ot_tpu_optimizer_shard_grad_norm(ot_tpu_optimizer *t, ot_device *d, double *norm,
                                                  double *sum_sq);
/* The three calls in order; reduced is a scratch of block_len f32 (NULL: allocated per call). */
OT_API ot_status ot_tpu_optimizer_step_sharded(ot_tpu_optimizer *t, ot_device *d, ot_comm *comm,
                                               const ot_coll_options *coll, const float *grads,
                                               float *reduced, float *params, int64_t step,
                                               double lr, const ot_run_options *ro);

/* The wrapper's own profile (all replicas together). Times are wall-clock seconds. */
typedef struct ot_tpu_profile {
    bool compiled;          /* true: one compiled executable updates everything; false: host
                               callbacks (the compile pipeline is bypassed: every step copies to
                               the host and runs the C callback per parameter) */
    int64_t compiles;       /* 1 after create when compiled (2: sharded with a trust ratio;
                               never more), 0 for host callbacks */
    double compile_seconds; /* building the update module and compiling it, once, at create */
    bool compile_cache_hit; /* the compile was a load from opts.compile_cache */
    int64_t steps;          /* successful steps */
    int64_t failed_steps;   /* steps that returned an error (nothing changed, or the state was
                               lost by a failed execution, see ot_tpu_optimizer_step) */
    double last_step_seconds, min_step_seconds, max_step_seconds, total_step_seconds;
    /* What one update reads and writes, by its tensors' sizes: every parameter read and
     * written, every gradient read, every state tensor (f32 masters included) read and
     * written: bytes_per_step = 2 * param_bytes + grad_bytes + 2 * state_bytes. */
    int64_t param_bytes, grad_bytes, state_bytes, bytes_per_step;
    /* Compiled only: what the executable's kernels read and write per step by the compiler's
     * count (ot_executable_total_bytes): bytes_per_step plus the step/lr scalars when the update
     * is fused into loops that touch each tensor once, more with intermediates in memory. */
    int64_t executable_bytes;
    /* Host callbacks only: bytes copied per step between the device and the host (parameters,
     * gradients and state down, parameters and state up); 0 when compiled. */
    int64_t host_transfer_bytes_per_step;
} ot_tpu_profile;

/* Fills *out with t's profile (consistent: taken under the replica lock). */
OT_API ot_status ot_tpu_optimizer_profile(const ot_tpu_optimizer *t, ot_tpu_profile *out);

#ifdef __cplusplus
}
#endif

#endif /* OPTITPU_TPU_OPTIM_H */
