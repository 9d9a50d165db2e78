#!/usr/bin/env python3
"""Writes reference optimizer trajectories from torch.optim and optax.

    python3 scripts/gen_optim_fixtures.py [--out tests/data/optim]

Every case starts from the same initial parameters (a scalar, a vector, a matrix and a 3-D
tensor) and consumes the same 100-step gradient sequence; the fixture records the parameters and
the optimizer state after every step. See tests/data/optim/README.md for the file layout and the
convention differences between the two libraries.

Needs torch (CPU) and jax[cpu] + optax. Deterministic: fixed seeds, torch single-threaded with the
for-loop (foreach=False) implementations, optax under jax.jit on CPU.
"""

import argparse
import json
import math
import os
import re
import shutil
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

STEPS = 100
SHAPES = {"scalar": (), "vector": (7,), "matrix": (5, 3), "tensor3": (2, 3, 4)}
NAMES = list(SHAPES)
CLIP = 5.0
# Biases and scalars are excluded from weight decay / trust ratios where the optimizer has a mask.
MASK = {"scalar": False, "vector": False, "matrix": True, "tensor3": True}

# Learning-rate schedule used by the cases marked "schedule": linear warmup from 0.1*peak over
# 10 steps, then cosine decay to 0.01*peak at step 100 (optax.warmup_cosine_decay_schedule).
WARMUP, DECAY_STEPS = 10, 100


def schedule_table(peak):
    init, end = 0.1 * peak, 0.01 * peak
    out = []
    for t in range(STEPS + 1):
        if t < WARMUP:
            out.append(init + (peak - init) * t / WARMUP)
        else:
            frac = min(t - WARMUP, DECAY_STEPS - WARMUP) / (DECAY_STEPS - WARMUP)
            out.append(end + (peak - end) * 0.5 * (1 + math.cos(math.pi * frac)))
    ref = optax.warmup_cosine_decay_schedule(init, peak, WARMUP, DECAY_STEPS, end)
    for t in range(STEPS):
        assert abs(float(ref(t)) - out[t]) <= 1e-6 * peak, (t, float(ref(t)), out[t])
    return out


def make_inputs():
    rng = np.random.default_rng(20240607)
    p0 = {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()}
    # Gradient magnitude varies by step so that clipping by global norm (5.0) is active on some
    # steps and not on others; tensors get different scales.
    step_scale = np.exp(rng.uniform(np.log(0.2), np.log(2.0), STEPS))
    tensor_scale = {"scalar": 1.0, "vector": 0.5, "matrix": 1.0, "tensor3": 0.8}
    grads = {k: (rng.standard_normal((STEPS,) + s) * step_scale.reshape((-1,) + (1,) * len(s))
                 * tensor_scale[k]).astype(np.float32) for k, s in SHAPES.items()}
    return p0, grads


# ------------------------------------------------------------------------------------------------
# torch
# ------------------------------------------------------------------------------------------------

TORCH = {
    "sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW,
    "rmsprop": torch.optim.RMSprop, "adagrad": torch.optim.Adagrad,
    "adadelta": torch.optim.Adadelta, "radam": torch.optim.RAdam, "nadam": torch.optim.NAdam,
}
if hasattr(torch.optim, "Adafactor"):
    TORCH["adafactor"] = torch.optim.Adafactor


def run_torch(spec, p0, grads, dtype):
    params = [torch.nn.Parameter(torch.tensor(p0[k], dtype=dtype)) for k in NAMES]
    if spec.get("param_groups"):
        by_name = dict(zip(NAMES, params))
        groups = [dict(g, params=[by_name[k] for k in g["params"]]) for g in spec["param_groups"]]
        opt = TORCH[spec["optimizer"]](groups, **spec["hyperparams"], foreach=False)
    else:
        opt = TORCH[spec["optimizer"]](params, **spec["hyperparams"], foreach=False)
    lrs = spec.get("_lr_table")
    base_lr = spec["hyperparams"]["lr"]
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: lrs[t] / base_lr) if lrs else None
    traj = {k: [] for k in NAMES}
    state = {}
    lr_used = []
    for t in range(STEPS):
        for p, k in zip(params, NAMES):
            p.grad = torch.tensor(grads[k][t], dtype=dtype)
        if spec.get("clip_value"):
            torch.nn.utils.clip_grad_value_(params, spec["clip_value"], foreach=False)
        if spec.get("clip_global_norm"):
            torch.nn.utils.clip_grad_norm_(params, spec["clip_global_norm"], foreach=False)
        lr_used.append(opt.param_groups[0]["lr"])
        opt.step()
        if sched:
            sched.step()
        for p, k in zip(params, NAMES):
            traj[k].append(p.detach().numpy().copy())
            for slot, v in opt.state[p].items():
                if slot == "step" or not torch.is_tensor(v):
                    continue
                state.setdefault(f"{slot}.{k}", []).append(v.detach().numpy().copy())
    return traj, state, lr_used


# ------------------------------------------------------------------------------------------------
# optax
# ------------------------------------------------------------------------------------------------

def run_optax(spec, p0, grads, dtype):
    hp = dict(spec["hyperparams"])
    lrs = spec.get("_lr_table")
    lr_key = "learning_rate"
    if lrs:
        table = np.asarray(lrs[:STEPS], np.float64)

        def sched(count):
            return jnp.asarray(table, dtype)[count]
        hp[lr_key] = sched
    for k in ("mask", "weight_decay_mask", "trust_ratio_mask"):
        if hp.get(k) == "MASK":
            hp[k] = dict(MASK)
    fn = getattr(optax, spec["optimizer"])
    tx = fn(**hp)
    if spec.get("lookahead"):
        tx = optax.lookahead(tx, **spec["lookahead"])
    if spec.get("add_decayed_weights"):
        tx = optax.chain(optax.add_decayed_weights(spec["add_decayed_weights"]), tx)
    if spec.get("clip_global_norm"):
        tx = optax.chain(optax.clip_by_global_norm(spec["clip_global_norm"]), tx)
    if spec.get("clip_value"):
        tx = optax.chain(optax.clip(spec["clip_value"]), tx)
    params = {k: jnp.asarray(p0[k], dtype) for k in NAMES}
    if spec.get("lookahead"):
        params = optax.LookaheadParams.init_synced(params)
    st = tx.init(params)

    @jax.jit
    def step(params, st, g):
        upd, st = tx.update(g, st, params)
        return optax.apply_updates(params, upd), st

    traj = {k: [] for k in NAMES}
    state = {}
    lr_used = []
    for t in range(STEPS):
        g = {k: jnp.asarray(grads[k][t], dtype) for k in NAMES}
        params, st = step(params, st, g)
        lr_used.append(float(lrs[t]) if lrs else float(spec["hyperparams"][lr_key]))
        for k in NAMES:
            if spec.get("lookahead"):
                traj[k].append(np.asarray(params.fast[k]))
                state.setdefault(f"slow_{k}", []).append(np.asarray(params.slow[k]))
            else:
                traj[k].append(np.asarray(params[k]))
        for path, leaf in jax.tree_util.tree_flatten_with_path(st)[0]:
            name = re.sub(r"[^A-Za-z0-9]+", "_", jax.tree_util.keystr(path)).strip("_")
            state.setdefault(name, []).append(np.asarray(leaf))
    return traj, state, lr_used


# ------------------------------------------------------------------------------------------------
# Mixed precision (torch.amp.GradScaler semantics)
# ------------------------------------------------------------------------------------------------

INF_STEPS = {12: np.inf, 13: np.nan, 47: -np.inf, 80: np.inf}


def run_amp_f16(spec, p0, grads):
    """f16 model copy, f32 master weights, dynamic loss scaling with torch.amp.GradScaler.

    Each step the 'backward pass' yields the scaled gradient in f16: f16(g * scale), computed in
    f32 and rounded (overflow gives inf). Steps in INF_STEPS also get one non-finite element.
    GradScaler unscales in f32, skips the optimizer step when any gradient is not finite, and
    adapts the scale (x0.5 on overflow, x2 after growth_interval clean steps)."""
    hp = spec["scaler"]
    master = [torch.nn.Parameter(torch.tensor(p0[k], dtype=torch.float32)) for k in NAMES]
    opt = TORCH[spec["optimizer"]](master, **spec["hyperparams"], foreach=False)
    scaler = torch.amp.GradScaler("cpu", **hp)
    traj = {k: [] for k in NAMES}
    half = {k: [] for k in NAMES}
    state = {}
    scales, skipped, grads16 = [], [], {k: [] for k in NAMES}
    one = torch.ones((), dtype=torch.float32)
    for t in range(STEPS):
        scaler.scale(one)  # the 'loss' is scaled here; this also initializes the scale tensor
        scale = scaler.get_scale()
        scales.append(scale)
        for p, k in zip(master, NAMES):
            g = grads[k][t].astype(np.float32) * np.float32(scale)
            if t in INF_STEPS and k == "matrix":
                g = g.copy()
                g[1, 2] = INF_STEPS[t]
            with np.errstate(over="ignore"):
                g16 = g.astype(np.float16)
            grads16[k].append(g16)
            p.grad = torch.tensor(g16).to(torch.float32)
        scaler.unscale_(opt)
        if spec.get("clip_global_norm"):
            torch.nn.utils.clip_grad_norm_(master, spec["clip_global_norm"], foreach=False)
        found_inf = sum(v.item() for v in scaler._per_optimizer_states[id(opt)][
            "found_inf_per_device"].values())
        skipped.append(bool(found_inf))
        scaler.step(opt)
        scaler.update()
        for p, k in zip(master, NAMES):
            traj[k].append(p.detach().numpy().copy())
            half[k].append(p.detach().to(torch.float16).numpy().copy())
            for slot, v in opt.state[p].items():
                if slot == "step" or not torch.is_tensor(v):
                    continue
                state.setdefault(f"{slot}.{k}", []).append(v.detach().numpy().copy())
    extra = {"scale": np.asarray(scales, np.float32), "skipped": np.asarray(skipped, np.bool_)}
    return traj, half, state, extra, grads16


def run_bf16_master(spec, p0, grads):
    """bf16 model copy, f32 master weights: grads arrive in bf16, the update runs in f32 on the
    master copy, and the model copy is the master rounded to bf16 (nearest even)."""
    master = [torch.nn.Parameter(torch.tensor(p0[k], dtype=torch.float32)) for k in NAMES]
    opt = TORCH[spec["optimizer"]](master, **spec["hyperparams"], foreach=False)
    traj = {k: [] for k in NAMES}
    half = {k: [] for k in NAMES}
    state = {}
    gb = {k: [] for k in NAMES}
    for t in range(STEPS):
        for p, k in zip(master, NAMES):
            g = torch.tensor(grads[k][t]).to(torch.bfloat16)
            gb[k].append(g.view(torch.int16).numpy().view(np.uint16).copy())
            p.grad = g.to(torch.float32)
        opt.step()
        for p, k in zip(master, NAMES):
            traj[k].append(p.detach().numpy().copy())
            half[k].append(p.detach().to(torch.bfloat16).view(torch.int16).numpy()
                           .view(np.uint16).copy())
            for slot, v in opt.state[p].items():
                if slot == "step" or not torch.is_tensor(v):
                    continue
                state.setdefault(f"{slot}.{k}", []).append(v.detach().numpy().copy())
    return traj, half, state, gb


# ------------------------------------------------------------------------------------------------
# Cases
# ------------------------------------------------------------------------------------------------

def cases():
    S = "schedule"
    c = []

    def T(name, opt, hp, **kw):
        c.append(dict(name=name, framework="torch", optimizer=opt, hyperparams=hp, **kw))

    def O(name, opt, hp, **kw):
        c.append(dict(name=name, framework="optax", optimizer=opt, hyperparams=hp, **kw))

    T("torch_sgd", "sgd", {"lr": 0.05})
    T("torch_sgd_momentum_dampening_wd", "sgd",
      {"lr": 0.05, "momentum": 0.9, "dampening": 0.1, "weight_decay": 1e-2},
      clip_global_norm=CLIP, lr_schedule=S)
    T("torch_sgd_nesterov_wd_maximize", "sgd",
      {"lr": 0.02, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-2, "maximize": True})
    T("torch_adam", "adam", {"lr": 1e-2, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 1e-2},
      clip_global_norm=CLIP, lr_schedule=S)
    T("torch_adamw", "adamw", {"lr": 1e-2, "betas": [0.9, 0.999], "eps": 1e-8,
                               "weight_decay": 0.1}, clip_global_norm=CLIP, lr_schedule=S)
    T("torch_adam_amsgrad", "adam", {"lr": 1e-2, "amsgrad": True})
    T("torch_adamw_amsgrad_maximize", "adamw",
      {"lr": 1e-2, "amsgrad": True, "weight_decay": 1e-2, "maximize": True})
    T("torch_rmsprop", "rmsprop", {"lr": 1e-2, "alpha": 0.99, "eps": 1e-8})
    T("torch_rmsprop_centered_momentum", "rmsprop",
      {"lr": 1e-2, "alpha": 0.9, "eps": 1e-8, "centered": True, "momentum": 0.9,
       "weight_decay": 1e-2}, clip_global_norm=CLIP, lr_schedule=S)
    T("torch_adagrad", "adagrad", {"lr": 0.1, "lr_decay": 1e-2, "initial_accumulator_value": 0.1,
                                   "eps": 1e-10, "weight_decay": 1e-2})
    T("torch_adadelta", "adadelta", {"lr": 1.0, "rho": 0.9, "eps": 1e-6, "weight_decay": 1e-2})
    T("torch_radam", "radam", {"lr": 1e-2, "weight_decay": 1e-2}, clip_global_norm=CLIP,
      lr_schedule=S)
    T("torch_radam_decoupled_wd", "radam",
      {"lr": 1e-2, "weight_decay": 1e-2, "decoupled_weight_decay": True})
    T("torch_nadam", "nadam", {"lr": 1e-2, "momentum_decay": 4e-3, "weight_decay": 1e-2},
      clip_global_norm=CLIP, lr_schedule=S)
    T("torch_nadam_decoupled_wd", "nadam",
      {"lr": 1e-2, "weight_decay": 1e-2, "decoupled_weight_decay": True})
    if "adafactor" in TORCH:
        T("torch_adafactor", "adafactor", {"lr": 1e-2, "beta2_decay": -0.8, "eps": [None, 1e-3],
                                           "d": 1.0, "weight_decay": 1e-2})
    T("torch_adam_clip_value", "adam", {"lr": 1e-2}, clip_value=0.5)
    T("torch_adamw_param_groups", "adamw", {"lr": 1e-2, "weight_decay": 0.1},
      param_groups=[{"params": ["matrix", "tensor3"]},
                    {"params": ["scalar", "vector"], "lr": 5e-3, "weight_decay": 0.0}])
    T("torch_amp_f16_gradscaler_adam", "adam", {"lr": 1e-2}, mixed_precision="f16",
      scaler={"init_scale": 2.0 ** 16, "growth_factor": 2.0, "backoff_factor": 0.5,
              "growth_interval": 10}, clip_global_norm=CLIP)
    T("torch_bf16_master_adamw", "adamw", {"lr": 1e-2, "weight_decay": 1e-2},
      mixed_precision="bf16")

    O("optax_sgd_nesterov_wd", "sgd", {"learning_rate": 0.05, "momentum": 0.9, "nesterov": True},
      add_decayed_weights=1e-2, clip_global_norm=CLIP, lr_schedule=S)
    O("optax_adam", "adam", {"learning_rate": 1e-2, "b1": 0.9, "b2": 0.999, "eps": 1e-8},
      clip_global_norm=CLIP, lr_schedule=S)
    O("optax_adam_eps_root", "adam", {"learning_rate": 1e-2, "eps": 1e-8, "eps_root": 1e-8})
    O("optax_adamw", "adamw", {"learning_rate": 1e-2, "weight_decay": 0.1},
      clip_global_norm=CLIP, lr_schedule=S)
    O("optax_adamw_masked", "adamw", {"learning_rate": 1e-2, "weight_decay": 0.1,
                                      "mask": "MASK"})
    O("optax_amsgrad", "amsgrad", {"learning_rate": 1e-2})
    O("optax_rmsprop", "rmsprop", {"learning_rate": 1e-2, "decay": 0.9, "eps": 1e-8})
    O("optax_rmsprop_centered_momentum", "rmsprop",
      {"learning_rate": 1e-2, "decay": 0.9, "eps": 1e-8, "centered": True, "momentum": 0.9},
      clip_global_norm=CLIP, lr_schedule=S)
    O("optax_adagrad", "adagrad", {"learning_rate": 0.1, "initial_accumulator_value": 0.1,
                                   "eps": 1e-7})
    O("optax_adadelta", "adadelta", {"learning_rate": 1.0, "rho": 0.9, "eps": 1e-6,
                                     "weight_decay": 1e-2})
    O("optax_radam", "radam", {"learning_rate": 1e-2}, clip_global_norm=CLIP, lr_schedule=S)
    O("optax_nadam", "nadam", {"learning_rate": 1e-2})
    O("optax_lamb", "lamb", {"learning_rate": 1e-2, "b1": 0.9, "b2": 0.999, "eps": 1e-6,
                             "weight_decay": 1e-2, "mask": "MASK"},
      clip_global_norm=CLIP, lr_schedule=S)
    O("optax_lars", "lars", {"learning_rate": 0.1, "weight_decay": 1e-2,
                             "weight_decay_mask": "MASK", "trust_coefficient": 0.001, "eps": 0.0,
                             "trust_ratio_mask": "MASK", "momentum": 0.9, "nesterov": False},
      clip_global_norm=CLIP, lr_schedule=S)
    O("optax_lion", "lion", {"learning_rate": 1e-3, "b1": 0.9, "b2": 0.99, "weight_decay": 1e-2},
      lr_schedule=S)
    O("optax_adam_clip_value", "adam", {"learning_rate": 1e-2}, clip_value=0.5)
    O("optax_lookahead_adam", "adam", {"learning_rate": 1e-2},
      lookahead={"sync_period": 5, "slow_step_size": 0.5})
    O("optax_adafactor", "adafactor",
      {"learning_rate": 1e-2, "min_dim_size_to_factor": 2, "decay_rate": 0.8,
       "decay_offset": 0, "multiply_by_parameter_scale": True, "clipping_threshold": 1.0,
       "momentum": None, "eps": 1e-30, "factored": True})
    return c


# ------------------------------------------------------------------------------------------------
# Learning-rate schedules on their own: lr at steps 0..SCHED_STEPS-1
# ------------------------------------------------------------------------------------------------

SCHED_STEPS = 200


def torch_schedules():
    S = torch.optim.lr_scheduler
    out = {}

    def run(name, make, params, base_lr=0.1):
        p = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.SGD([p], lr=base_lr)
        sch = make(opt)
        lrs = []
        for _ in range(SCHED_STEPS):
            lrs.append(opt.param_groups[0]["lr"])
            opt.step()
            sch.step()
        out[name] = (np.asarray(lrs, np.float64), dict(params, base_lr=base_lr))

    run("torch_step", lambda o: S.StepLR(o, step_size=30, gamma=0.5),
        {"class": "StepLR", "step_size": 30, "gamma": 0.5})
    run("torch_multistep", lambda o: S.MultiStepLR(o, milestones=[50, 120, 160], gamma=0.2),
        {"class": "MultiStepLR", "milestones": [50, 120, 160], "gamma": 0.2})
    run("torch_exponential", lambda o: S.ExponentialLR(o, gamma=0.98),
        {"class": "ExponentialLR", "gamma": 0.98})
    run("torch_linear_warmup", lambda o: S.LinearLR(o, start_factor=0.1, end_factor=1.0,
                                                    total_iters=20),
        {"class": "LinearLR", "start_factor": 0.1, "end_factor": 1.0, "total_iters": 20})
    run("torch_cosine", lambda o: S.CosineAnnealingLR(o, T_max=SCHED_STEPS, eta_min=1e-3),
        {"class": "CosineAnnealingLR", "T_max": SCHED_STEPS, "eta_min": 1e-3,
         "note": "torch updates this one recursively (its 'chainable form'), not in closed form"})
    run("torch_cosine_warm_restarts",
        lambda o: S.CosineAnnealingWarmRestarts(o, T_0=50, T_mult=2, eta_min=1e-3),
        {"class": "CosineAnnealingWarmRestarts", "T_0": 50, "T_mult": 2, "eta_min": 1e-3})
    run("torch_onecycle",
        lambda o: S.OneCycleLR(o, max_lr=0.1, total_steps=SCHED_STEPS, pct_start=0.3,
                               anneal_strategy="cos", cycle_momentum=False, div_factor=25.0,
                               final_div_factor=1e4),
        {"class": "OneCycleLR", "max_lr": 0.1, "total_steps": SCHED_STEPS, "pct_start": 0.3,
         "anneal_strategy": "cos", "div_factor": 25.0, "final_div_factor": 1e4,
         "three_phase": False})
    run("torch_polynomial", lambda o: S.PolynomialLR(o, total_iters=150, power=2.0),
        {"class": "PolynomialLR", "total_iters": 150, "power": 2.0})
    run("torch_warmup_then_cosine",
        lambda o: S.SequentialLR(o, [S.LinearLR(o, start_factor=0.01, total_iters=10),
                                     S.CosineAnnealingLR(o, T_max=SCHED_STEPS - 10, eta_min=0.0)],
                                 milestones=[10]),
        {"class": "SequentialLR", "schedulers": [
            {"class": "LinearLR", "start_factor": 0.01, "end_factor": 1.0, "total_iters": 10},
            {"class": "CosineAnnealingLR", "T_max": SCHED_STEPS - 10, "eta_min": 0.0}],
         "milestones": [10]})
    return out


def optax_schedules():
    out = {}
    defs = {
        "optax_constant": (optax.constant_schedule, {"value": 0.1}),
        "optax_piecewise_constant": (optax.piecewise_constant_schedule,
                                     {"init_value": 0.1,
                                      "boundaries_and_scales": {50: 0.2, 120: 0.2, 160: 0.2}}),
        "optax_exponential_decay": (optax.exponential_decay,
                                    {"init_value": 0.1, "transition_steps": 10,
                                     "decay_rate": 0.8, "transition_begin": 5}),
        "optax_exponential_decay_staircase": (optax.exponential_decay,
                                              {"init_value": 0.1, "transition_steps": 10,
                                               "decay_rate": 0.8, "staircase": True,
                                               "end_value": 0.01}),
        "optax_linear": (optax.linear_schedule, {"init_value": 0.01, "end_value": 0.1,
                                                 "transition_steps": 20}),
        "optax_warmup_cosine_decay": (optax.warmup_cosine_decay_schedule,
                                      {"init_value": 0.0, "peak_value": 0.1, "warmup_steps": 10,
                                       "decay_steps": SCHED_STEPS, "end_value": 1e-3}),
        "optax_sgdr": (optax.sgdr_schedule, {"cosine_kwargs": [
            {"init_value": 0.0, "peak_value": 0.1, "warmup_steps": 5, "decay_steps": 50,
             "end_value": 1e-3},
            {"init_value": 0.0, "peak_value": 0.05, "warmup_steps": 5, "decay_steps": 70,
             "end_value": 1e-3},
            {"init_value": 0.0, "peak_value": 0.025, "warmup_steps": 5, "decay_steps": 80,
             "end_value": 1e-3}]}),
        "optax_cosine_onecycle": (optax.cosine_onecycle_schedule,
                                  {"transition_steps": SCHED_STEPS, "peak_value": 0.1,
                                   "pct_start": 0.3, "div_factor": 25.0,
                                   "final_div_factor": 1e4}),
        "optax_polynomial": (optax.polynomial_schedule,
                             {"init_value": 0.1, "end_value": 0.001, "power": 2.0,
                              "transition_steps": 150, "transition_begin": 10}),
    }
    with jax.enable_x64(True):
        for name, (fn, kw) in defs.items():
            f = fn(**kw)
            vals = np.asarray([float(f(jnp.asarray(t, jnp.int64))) for t in range(SCHED_STEPS)])
            desc = {"function": f"optax.{fn.__name__}",
                    **{k: ({str(b): v for b, v in val.items()} if isinstance(val, dict) else val)
                       for k, val in kw.items()}}
            out[name] = (vals, desc)
    return out


def save(path, a):
    a = np.array(a, order="C", copy=True)  # keeps rank 0 (ascontiguousarray would not)
    np.save(path, a, allow_pickle=False)
    return a


def dtype_name(a):
    return {"float32": "f32", "float64": "f64", "float16": "f16", "uint16": "u16",
            "bool": "pred", "int32": "s32", "int64": "s64"}[np.asarray(a).dtype.name]


def entry(fname, a, real=None):
    a = np.asarray(a)
    return {"file": fname, "dtype": real or dtype_name(a), "shape": list(a.shape),
            "npy_descr": a.dtype.str}


def drift(t32, t64):
    """Largest deviation of the f32 trajectory from the same algorithm run in f64."""
    max_abs, max_rel = 0.0, 0.0
    for k in NAMES:
        a, b = np.asarray(t32[k], np.float64), np.asarray(t64[k], np.float64)
        d = np.abs(a - b)
        max_abs = max(max_abs, float(d.max()))
        big = np.abs(b) > 1e-3
        if big.any():
            max_rel = max(max_rel, float((d[big] / np.abs(b[big])).max()))
    return max_abs, max_rel


def write_case(spec, outdir, p0, grads):
    d = os.path.join(outdir, spec["name"])
    os.makedirs(d)
    if spec.get("lr_schedule"):
        peak = spec["hyperparams"]["lr" if spec["framework"] == "torch" else "learning_rate"]
        spec["_lr_table"] = schedule_table(peak)
    ent = {k: v for k, v in spec.items() if not k.startswith("_")}
    if spec.get("lr_schedule"):
        ent["lr_schedule"] = {"kind": "warmup_cosine_decay", "init_value": "0.1*peak",
                              "peak_value": "lr", "warmup_steps": WARMUP,
                              "decay_steps": DECAY_STEPS, "end_value": "0.01*peak",
                              "equivalent": "optax.warmup_cosine_decay_schedule(0.1*lr, lr, 10, "
                                            "100, 0.01*lr); torch: LambdaLR with the same values"}
    if spec.get("clip_global_norm"):
        ent["clip_global_norm"] = {
            "max_norm": spec["clip_global_norm"],
            "convention": "torch.nn.utils.clip_grad_norm_: g *= min(1, max_norm/(norm+1e-6))"
            if spec["framework"] == "torch" else
            "optax.clip_by_global_norm: g *= max_norm/norm when norm > max_norm"}
    if spec.get("clip_value"):
        ent["clip_value"] = {
            "max_abs": spec["clip_value"],
            "convention": "each gradient element clamped to [-v, v] before the optimizer "
                          "(torch.nn.utils.clip_grad_value_ / optax.clip)"}
    ent["files"] = {}
    mp = spec.get("mixed_precision")
    if spec["framework"] == "torch" and mp == "f16":
        traj, half, state, extra, g16 = run_amp_f16(spec, p0, grads)
        for k in NAMES:
            ent["files"][f"grad_f16.{k}"] = entry(f"grad_f16_{k}.npy",
                                                  save(os.path.join(d, f"grad_f16_{k}.npy"),
                                                       np.stack(g16[k])))
            ent["files"][f"param_f16.{k}"] = entry(f"param_f16_{k}.npy",
                                                   save(os.path.join(d, f"param_f16_{k}.npy"),
                                                        np.stack(half[k])))
        for nm, v in extra.items():
            ent["files"][nm] = entry(f"{nm}.npy", save(os.path.join(d, f"{nm}.npy"), v))
        ent["inf_injected"] = {str(k): str(v) for k, v in INF_STEPS.items()}
        lr_used = [spec["hyperparams"]["lr"]] * STEPS
    elif spec["framework"] == "torch" and mp == "bf16":
        traj, half, state, gb = run_bf16_master(spec, p0, grads)
        for k in NAMES:
            ent["files"][f"grad_bf16.{k}"] = entry(f"grad_bf16_{k}.npy",
                                                   save(os.path.join(d, f"grad_bf16_{k}.npy"),
                                                        np.stack(gb[k])), "bf16")
            ent["files"][f"param_bf16.{k}"] = entry(f"param_bf16_{k}.npy",
                                                    save(os.path.join(d, f"param_bf16_{k}.npy"),
                                                         np.stack(half[k])), "bf16")
        lr_used = [spec["hyperparams"]["lr"]] * STEPS
    else:
        run = run_torch if spec["framework"] == "torch" else run_optax
        traj, state, lr_used = run(spec, p0, grads, torch.float32 if run is run_torch else
                                   jnp.float32)
        if run is run_torch:
            t64, _, _ = run_torch(spec, p0, grads, torch.float64)
        else:
            with jax.enable_x64(True):
                t64, _, _ = run_optax(spec, p0, grads, jnp.float64)
        max_abs, max_rel = drift(traj, t64)
        ent["f32_vs_f64"] = {"max_abs": max_abs, "max_rel": max_rel,
                             "what": "largest deviation over all steps and elements of this f32 "
                                     "trajectory from the same library run in float64 "
                                     "(relative: elements with |p| > 1e-3)"}
        ent["suggested_tolerance"] = {"rtol": max(1e-6, 4 * max_rel),
                                      "atol": max(1e-7, 4 * max_abs)}
    for k in NAMES:
        ent["files"][f"param.{k}"] = entry(f"param_{k}.npy",
                                           save(os.path.join(d, f"param_{k}.npy"),
                                                np.stack(traj[k])))
    for slot, vals in sorted(state.items()):
        fn = "state_" + re.sub(r"[^A-Za-z0-9]+", "_", slot) + ".npy"
        ent["files"][f"state.{slot}"] = entry(fn, save(os.path.join(d, fn), np.stack(vals)))
    ent["files"]["lr"] = entry("lr.npy", save(os.path.join(d, "lr.npy"),
                                              np.asarray(lr_used, np.float64)))
    return ent


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "..", "tests", "data", "optim"))
    args = ap.parse_args()
    out = args.out
    for name in os.listdir(out) if os.path.isdir(out) else []:
        p = os.path.join(out, name)
        if os.path.isdir(p):
            shutil.rmtree(p)
        elif name.endswith(".npy") or name == "index.json":
            os.remove(p)
    os.makedirs(os.path.join(out, "inputs"), exist_ok=True)
    p0, grads = make_inputs()
    inputs = {}
    for k in NAMES:
        inputs[f"param.{k}"] = entry(f"inputs/param0_{k}.npy",
                                     save(os.path.join(out, "inputs", f"param0_{k}.npy"), p0[k]))
        inputs[f"grad.{k}"] = entry(f"inputs/grad_{k}.npy",
                                    save(os.path.join(out, "inputs", f"grad_{k}.npy"), grads[k]))
    index = {
        "format": "optitpu-optim-trajectories/1",
        "generator": "scripts/gen_optim_fixtures.py",
        "versions": {"torch": torch.__version__, "jax": jax.__version__,
                     "jaxlib": __import__("jaxlib").__version__, "optax": optax.__version__,
                     "numpy": np.__version__, "ml_dtypes": ml_dtypes.__version__,
                     "python": sys.version.split()[0]},
        "steps": STEPS,
        "params": {k: list(s) for k, s in SHAPES.items()},
        "param_order": NAMES,
        "inputs": inputs,
        "cases": [],
    }
    for spec in cases():
        ent = write_case(spec, out, p0, grads)
        index["cases"].append(ent)
        print(spec["name"], ent.get("f32_vs_f64", {}).get("max_rel", ""), flush=True)
    os.makedirs(os.path.join(out, "schedules"), exist_ok=True)
    index["schedules"] = []
    for name, (vals, desc) in {**torch_schedules(), **optax_schedules()}.items():
        fn = f"schedules/{name}.npy"
        e = entry(fn, save(os.path.join(out, fn), vals))
        index["schedules"].append({"name": name, "framework": name.split("_")[0],
                                   "definition": desc, "lr": e})
    text = json.dumps(index, indent=1)
    text = re.sub(r"\[\s*((?:-?[0-9.e+-]+,\s*)*-?[0-9.e+-]+)\s*\]",
                  lambda m: "[" + ", ".join(v.strip() for v in m.group(1).split(",")) + "]", text)
    text = re.sub(r"\[\s+\]", "[]", text)
    with open(os.path.join(out, "index.json"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
