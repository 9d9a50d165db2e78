"""Optimizers with torch.optim.Optimizer's interface over optitpu's compiled update.

    opt = optitpu.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    loss.backward(); opt.step(); opt.zero_grad()

Parameters are PyTorch CPU tensors (their .grad is read) or NumPy arrays (pass the gradients to
step(grads=[...]) in parameter order), updated in place: each parameter group is ONE compiled
module (liboptitpu's ot_tpu_optimizer) over all its tensors, run on the tensors' own memory with
every parameter and state tensor donated (written where it lies, no copies). The learning rate and
the step number are runtime scalars of that module: changing group["lr"] (a schedule) never
recompiles; changing another hyper-parameter recompiles that group once.

State and hyper-parameters use torch's names (exp_avg, exp_avg_sq, max_exp_avg_sq,
momentum_buffer, betas, eps, weight_decay, amsgrad, maximize, momentum, dampening, nesterov), so
state_dict()/load_state_dict() are interchangeable with torch.optim's for the same optimizer.
"""

from . import _core

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad"]


def _is_torch(x):
    return type(x).__module__.startswith("torch")


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


class _ParamInfo:
    __slots__ = ("dtype", "shape")

    def __init__(self, p):
        dt, shape, _, _ = _core.describe(p.detach() if _is_torch(p) else p)
        self.dtype, self.shape = dt, tuple(shape)


class Optimizer:
    """Base class: subclasses give the C optimizer's name and how torch's hyper-parameters map
    onto it (_hparams)."""

    _c_name = None

    def __init__(self, params, defaults, *, clip_grad_norm=0.0, clip_grad_value=0.0):
        self.defaults = dict(defaults)
        self.clip_grad_norm = float(clip_grad_norm)
        self.clip_grad_value = float(clip_grad_value)
        self.param_groups = []
        params = list(params)
        if not params:
            raise _core.InvalidArgument("INVALID_ARGUMENT: optimizer got an empty parameter list")
        if not isinstance(params[0], dict):
            params = [{"params": params}]
        for g in params:
            self.add_param_group(g)
        self._exes = {}  # (group index, subset, hyper-parameters) -> (Executable, state info)

    # ---- torch.optim.Optimizer's interface ----

    def add_param_group(self, group):
        group = dict(group)
        ps = group["params"]
        group["params"] = [ps] if _is_torch(ps) or hasattr(ps, "__array_interface__") else list(ps)
        for k, v in self.defaults.items():
            group.setdefault(k, v)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        for p in group["params"]:
            if id(p) in seen:
                raise _core.InvalidArgument(
                    "INVALID_ARGUMENT: a parameter appears more than once")
            seen.add(id(p))
            info = _ParamInfo(p)
            if info.dtype not in ("f32", "f64"):
                raise _core.InvalidArgument(
                    f"INVALID_ARGUMENT: parameters must be f32 or f64, got {info.dtype}")
        group["_info"] = [_ParamInfo(p) for p in group["params"]]
        group["_state"] = [{} for _ in group["params"]]
        self.param_groups.append(group)

    @property
    def state(self):
        """Per-parameter state: {param: {name: tensor}} (torch tensors are keys; NumPy arrays,
        which are not hashable, are keyed by their index in parameter order)."""
        out, i = {}, 0
        for g in self.param_groups:
            for p, st in zip(g["params"], g["_state"]):
                out[p if _is_torch(p) else i] = st
                i += 1
        return out

    def zero_grad(self, set_to_none=True):
        for g in self.param_groups:
            for p in g["params"]:
                if _is_torch(p) and p.grad is not None:
                    if set_to_none:
                        p.grad = None
                    else:
                        p.grad.detach_()
                        p.grad.zero_()

    def step(self, closure=None, *, grads=None):
        """One update. grads: gradients in parameter order (all groups), required for NumPy
        parameters; by default each torch parameter's .grad (parameters without one are skipped,
        as torch skips them)."""
        loss = None
        if closure is not None:
            import torch

            with torch.enable_grad():
                loss = closure()
        if grads is not None:
            grads = list(grads)
            total = sum(len(g["params"]) for g in self.param_groups)
            if len(grads) != total:
                raise _core.InvalidArgument(
                    f"INVALID_ARGUMENT: step got {len(grads)} gradients for {total} parameters")
        base = 0
        for gi, g in enumerate(self.param_groups):
            n = len(g["params"])
            gs = grads[base:base + n] if grads is not None else [
                p.grad if _is_torch(p) else None for p in g["params"]]
            base += n
            self._step_group(gi, g, gs)
        return loss

    def state_dict(self):
        groups, state, i = [], {}, 0
        for g in self.param_groups:
            idx = []
            for p, st in zip(g["params"], g["_state"]):
                if st:
                    s = {k: v for k, v in st.items() if k != "step"}
                    if self._has_step_state:
                        s = {"step": self._step_value(p, st["step"]), **s}
                    state[i] = s
                idx.append(i)
                i += 1
            groups.append({**{k: v for k, v in g.items() if k not in ("params", "_info", "_state")},
                           "params": idx})
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise _core.InvalidArgument(
                "INVALID_ARGUMENT: state_dict has a different number of parameter groups")
        for g, sg in zip(self.param_groups, groups):
            if len(sg["params"]) != len(g["params"]):
                raise _core.ShapeMismatch(
                    "SHAPE_MISMATCH: a group of the state_dict has a different parameter count")
        for g, sg in zip(self.param_groups, groups):
            for k, v in sg.items():
                if k != "params":
                    g[k] = v
            for j, (p, pid) in enumerate(zip(g["params"], sg["params"])):
                src = state_dict["state"].get(pid, state_dict["state"].get(str(pid)))
                g["_state"][j] = {} if not src else self._import_state(p, g["_info"][j], src)
        self._exes.clear()

    def __repr__(self):
        return f"{type(self).__name__}({len(self.param_groups)} groups)"

    # ---- the compiled update ----

    _has_step_state = True

    def _hparams(self, g):
        raise NotImplementedError

    @staticmethod
    def _step_value(p, step):
        if _is_torch(p):
            import torch

            return torch.tensor(float(step))
        return float(step)

    def _import_state(self, p, info, src):
        st = {}
        for k, v in src.items():
            if k == "step":
                st["step"] = int(float(v))
                continue
            arr = self._new_state(p, info.dtype, info.shape, 0.0)
            _copy_into(arr, v)
            st[k] = arr
        if "step" not in st:
            st["step"] = 1 if st else 0  # torch's SGD keeps no step; a buffer means one was taken
        return st

    @staticmethod
    def _new_state(p, dtype, shape, init):
        if _is_torch(p):
            import torch

            return torch.full(shape, init, dtype=torch.float32 if dtype == "f32" else torch.float64)
        import numpy as np

        return np.full(shape, init, dtype=np.float32 if dtype == "f32" else np.float64)

    def _executable(self, gi, g, subset):
        # lr is a runtime scalar of the update: only the other hyper-parameters are compiled in
        hp = {k: v for k, v in self._hparams(g).items() if k != "lr"}
        key = (gi, subset, tuple(sorted(hp.items())))
        hit = self._exes.get(key)
        if hit is None:
            if self.clip_grad_norm > 0 and len(self.param_groups) > 1:
                raise _core.Unimplemented(
                    "UNIMPLEMENTED: clip_grad_norm clips within one group; use one group")
            shapes = [(g["_info"][j].dtype, g["_info"][j].shape) for j in subset]
            exe, states = _core.optimizer_update(self._c_name, hp, shapes, self.clip_grad_norm,
                                                 self.clip_grad_value)
            hit = self._exes[key] = (exe, states)
        return hit

    def _step_group(self, gi, g, grads):
        lr = float(g["lr"])
        if not lr >= 0 or lr == float("inf"):
            raise _core.InvalidArgument(f"INVALID_ARGUMENT: lr {lr}: must be finite and >= 0")
        by_step = {}
        for j, gr in enumerate(grads):
            if gr is None:
                continue
            by_step.setdefault(g["_state"][j].get("step", 0), []).append(j)
        for step, subset in by_step.items():
            subset = tuple(subset)
            exe, states = self._executable(gi, g, subset)
            n = len(subset)
            per = len(states) // n if n else 0
            sargs = []
            for local, j in enumerate(subset):
                st = g["_state"][j]
                p = g["params"][j]
                for name, dtype, shape, init in states[local * per:(local + 1) * per]:
                    slot = name.split(".", 1)[1]
                    if slot not in st:
                        st[slot] = self._new_state(p, dtype, shape, init)
                    sargs.append(st[slot])
            ps = [_detach(g["params"][j]) for j in subset]
            gs = [_detach(grads[j]) for j in subset]
            exe(*ps, *gs, *[_detach(s) for s in sargs], float(step + 1), lr,
                donate=True)
            for j in subset:
                g["_state"][j]["step"] = step + 1


def _detach(x):
    return x.detach() if _is_torch(x) else x


def _copy_into(dst, src):
    if _is_torch(dst):
        import torch

        dst.copy_(src if _is_torch(src) else torch.as_tensor(src))
    else:
        import numpy as np

        dst[...] = np.asarray(src.detach().cpu().numpy() if _is_torch(src) else src)


def _flag(x):
    return 1.0 if x else 0.0


class SGD(Optimizer):
    """torch.optim.SGD (momentum, dampening, weight_decay, nesterov, maximize)."""

    _c_name = "sgd"
    _has_step_state = False

    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False, *, maximize=False, **kw):
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize), **kw)

    def _hparams(self, g):
        return {"lr": g["lr"], "momentum": g["momentum"], "dampening": g["dampening"],
                "weight_decay": g["weight_decay"], "nesterov": _flag(g["nesterov"]),
                "maximize": _flag(g["maximize"])}


class Adam(Optimizer):
    """torch.optim.Adam (betas, eps, weight_decay as L2, amsgrad, maximize)."""

    _c_name = "adam"
    _wd = 0.0

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=None,
                 amsgrad=False, *, maximize=False, **kw):
        wd = self._wd if weight_decay is None else weight_decay
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=wd,
                                      amsgrad=amsgrad, maximize=maximize), **kw)

    def _hparams(self, g):
        b1, b2 = g["betas"]
        return {"lr": g["lr"], "beta1": float(b1), "beta2": float(b2), "eps": g["eps"],
                "weight_decay": g["weight_decay"], "amsgrad": _flag(g["amsgrad"]),
                "maximize": _flag(g["maximize"])}


class AdamW(Adam):
    """torch.optim.AdamW (decoupled weight decay, default 0.01)."""

    _c_name = "adamw"
    _wd = 1e-2


class RMSprop(Optimizer):
    """torch.optim.RMSprop (alpha, eps, weight_decay, momentum, centered, maximize)."""

    _c_name = "rmsprop"
    _has_step_state = True

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0,
                 centered=False, *, maximize=False, **kw):
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                                      momentum=momentum, centered=centered, maximize=maximize),
                         **kw)

    def _hparams(self, g):
        return {"lr": g["lr"], "alpha": g["alpha"], "eps": g["eps"],
                "weight_decay": g["weight_decay"], "momentum": g["momentum"],
                "centered": _flag(g["centered"]), "maximize": _flag(g["maximize"])}


class Adagrad(Optimizer):
    """torch.optim.Adagrad (lr_decay, weight_decay, initial_accumulator_value, eps)."""

    _c_name = "adagrad"

    def __init__(self, params, lr=1e-2, lr_decay=0.0, weight_decay=0.0,
                 initial_accumulator_value=0.0, eps=1e-10, *, maximize=False, **kw):
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value,
                                      eps=eps, maximize=maximize), **kw)

    def _hparams(self, g):
        return {"lr": g["lr"], "lr_decay": g["lr_decay"], "weight_decay": g["weight_decay"],
                "initial_accumulator_value": g["initial_accumulator_value"], "eps": g["eps"],
                "maximize": _flag(g["maximize"])}
