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

bf16 and f16 parameters get an f32 master copy (state "master", the parameter widened at its
first step): the gradient in the parameter's dtype is widened, the update runs in f32 on the
master and its state, and the parameter becomes the master rounded to nearest even.

flat=True (flat mode) keeps every parameter group's parameters, gradients and state in one
contiguous buffer per dtype (liboptitpu's flat mode, one fused loop over all tensors) and
re-points the caller's tensors into it; see Optimizer and docs/python.md for exactly what that
does to them.
"""

from . import _core

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "RAdam", "NAdam",
           "Adadelta", "Adafactor", "ScheduleLR",
           "constant_schedule", "exponential_decay", "polynomial_schedule", "linear_schedule",
           "cosine_decay_schedule", "warmup_cosine_decay_schedule", "piecewise_constant_schedule",
           "step_schedule", "cosine_restarts_schedule", "onecycle_schedule",
           "GradientTransformation", "TransformState", "transform"]


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


_DTYPES = ("f32", "f64", "bf16", "f16")


class Optimizer:
    """Base class: subclasses give the C optimizer's name and how torch's hyper-parameters map
    onto it (_hparams).

    flat=False (default): each step runs the group's compiled update on the parameters',
    gradients' and state tensors' own memory, wherever they were allocated.

    flat=True: at construction (and in add_param_group) each group's tensors are laid back to
    back, per dtype, in one parameter buffer and one gradient buffer (huge-page backed, every
    tensor starting at a multiple of 16 elements, zero padding between them), and the optimizer
    state in buffers of the same layout; a step is one fused loop over each buffer (the C
    library's flat mode, bit-identical to the per-tensor update). What it does to the caller's
    parameters:

    - torch tensors: each parameter's values are copied into its place in the buffer and the
      parameter is re-pointed there (``p.data = view``), so the parameter object, its
      requires_grad and the module that holds it stay the same but its data_ptr() changes;
      each ``p.grad`` becomes a view into the gradient buffer (an existing gradient is copied
      in, else zeros), which backward() then accumulates into in place. zero_grad() zeroes the
      gradient buffers in place and keeps the views (set_to_none is ignored: a .grad set to
      None would detach it from the buffer).
    - NumPy arrays cannot be re-pointed: the caller's arrays are copied in and no longer
      updated; the parameters are the views in param_groups[i]["params"] (and
      flat_grads()'s views the gradients, which step(grads=...) takes without a copy).

    A step whose gradients are not all the buffer's views still works: a gradient tensor
    elsewhere (``p.grad = t``) is copied into the buffer and the parameter's .grad re-pointed;
    a parameter re-pointed elsewhere (``p.data = t``) is copied back in and re-pointed again.
    When some parameter has no gradient (None, skipped as torch skips it) or the parameters'
    step counts differ, that step runs the per-tensor update on the buffers' views."""

    _c_name = None

    def __init__(self, params, defaults, *, clip_grad_norm=0.0, clip_grad_value=0.0,
                 flat=False):
        self.defaults = dict(defaults)
        self.clip_grad_norm = float(clip_grad_norm)
        self.clip_grad_value = float(clip_grad_value)
        self.flat = bool(flat)
        self.param_groups = []
        self._exes = {}  # (group index, subset, hyper-parameters) -> (Executable, state info)
        params = list(params)
        if not params:
            raise _core.InvalidArgument("INVALID_ARGUMENT: optimizer got an empty parameter list")
        if not isinstance(params[0], dict):
            params = [{"params": params}]
        for g in params:
            self.add_param_group(g)

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
            if info.dtype not in _DTYPES:
                raise _core.InvalidArgument(
                    f"INVALID_ARGUMENT: parameters must be f32, f64, bf16 or f16, got "
                    f"{info.dtype}")
        group["_info"] = [_ParamInfo(p) for p in group["params"]]
        group["_state"] = [{} for _ in group["params"]]
        if self.flat:
            _Flat(self, len(self.param_groups), group)  # re-points the tensors (may raise)
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
            if "_flat" in g:
                g["_flat"].zero_grad()
                continue
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
            base += n
            if "_flat" in g:  # reads the tensors' .grad itself
                g["_flat"].step(grads[base - n:base] if grads is not None else None,
                                grads is None)
                continue
            gs = grads[base - n:base] if grads is not None else [
                p.grad if _is_torch(p) else None for p in g["params"]]
            self._step_group(gi, g, gs)
        return loss

    def flat_grads(self):
        """flat=True: the gradients' views into the flat buffers, in parameter order (all
        groups); step(grads=flat_grads()) copies nothing. FailedPrecondition otherwise."""
        if not self.flat:
            raise _core.FailedPrecondition(
                "FAILED_PRECONDITION: flat_grads() needs an optimizer made with flat=True")
        return [v for g in self.param_groups for v in g["_flat"].gviews]

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
            groups.append({**{k: v for k, v in g.items()
                              if k not in ("params", "_info", "_state", "_flat")},
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
            flat = g.get("_flat")
            for j, (p, pid) in enumerate(zip(g["params"], sg["params"])):
                src = state_dict["state"].get(pid, state_dict["state"].get(str(pid)))
                if flat is not None:
                    g["_state"][j] = {} if not src else flat.import_state(j, src)
                else:
                    g["_state"][j] = {} if not src else self._import_state(p, g["_info"][j], src)
        self._exes.clear()
        self.__dict__.pop("_args", None)

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
            # state of a bf16/f16 parameter (its master too) is f32; Adafactor's factored
            # moments have their own shapes: the executable checks them at the step
            dt = "f32" if info.dtype in ("bf16", "f16") else info.dtype
            shape = tuple(v.shape) if hasattr(v, "shape") else info.shape
            arr = self._new_state(p, dt, shape, 0.0)
            _copy_into(arr, v)
            st[k] = arr
        if "step" not in st:
            st["step"] = 1 if st else 0  # torch's SGD keeps no step; a buffer means one was taken
        return st

    @staticmethod
    def _new_state(p, dtype, shape, init):
        # stream memory: huge pages, and a start staggered within 4 KiB, so that the update's
        # loads of the state do not alias the parameter's and gradient's in the low address bits
        arr = _core.full(dtype, shape, float(init), True)
        if _is_torch(p):
            import torch

            return torch.from_dlpack(arr)
        import numpy as np

        return np.asarray(arr)

    def _executable(self, gi, g, subset):
        # lr is a runtime scalar of the update: only the other hyper-parameters are compiled in
        hp = {k: v for k, v in self._hparams(g).items() if k != "lr"}
        key = (gi, subset, tuple(sorted(hp.items())), self.clip_grad_norm, self.clip_grad_value)
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
            ps, sargs = self._arguments(gi, g, subset, exe, states)
            gs = [_fast_view(grads[j]) for j in subset]
            exe(*ps, *gs, *sargs, float(step + 1), lr, donate=True)
            for j in subset:
                g["_state"][j]["step"] = step + 1

    def _arguments(self, gi, g, subset, exe, states):
        """The parameter and state arguments of a step, kept between steps: NumPy views of torch
        tensors (the extension reads a buffer faster than a DLPack capsule), rebuilt when the
        executable, a state tensor or a parameter's storage changes."""
        if not hasattr(self, "_args"):
            self._args = {}
        params = [g["params"][j] for j in subset]
        ptrs = tuple(p.data_ptr() for p in params if _is_torch(p))
        hit = self._args.get((gi, subset))
        if hit is not None and hit[0] is exe and hit[1] == ptrs:
            return hit[2], hit[3]
        sargs = []
        for name, dtype, shape, init in states:  # "<local index>.<slot>", parameter-major
            local, slot = name.split(".", 1)
            j = subset[int(local)]
            st = g["_state"][j]
            if slot not in st:
                p = g["params"][j]
                st[slot] = self._new_state(p, dtype, shape, init)
                if slot == "master":  # the f32 master starts as the parameter, widened
                    _copy_into(st[slot], p.detach() if _is_torch(p) else p)
            sargs.append(_fast_view(st[slot]))
        ps = [_fast_view(p) for p in params]
        self._args[(gi, subset)] = (exe, ptrs, ps, sargs)
        return ps, sargs


class _Flat:
    """One parameter group in flat mode (Optimizer's docstring): the group's flat buffers,
    each tensor's views into them, and the flat update. Stored as group["_flat"]."""

    def __init__(self, opt, gi, g):
        params = g["params"]
        torch_kind = [_is_torch(p) for p in params]
        if any(torch_kind) and not all(torch_kind):
            raise _core.InvalidArgument(
                "INVALID_ARGUMENT: flat=True: a group's parameters must be all torch tensors or "
                "all NumPy arrays")
        self.opt, self.gi, self.torch = opt, gi, torch_kind[0]
        shapes = [(i.dtype, i.shape) for i in g["_info"]]
        exe, states, views = self._compile(g, shapes)
        self.shapes, self.views = shapes, views
        ngroups = max(v[0] for v in views) + 1
        proto = params[0]
        # zero padding between the tensors: the update leaves it zero (tpu_optim.h)
        self.pbuf = [opt._new_state(proto, dt, shp, 0.0) for dt, shp in exe.params[:ngroups]]
        self.gbuf = [opt._new_state(proto, dt, shp, 0.0)
                     for dt, shp in exe.params[ngroups:2 * ngroups]]
        self.sbuf = [opt._new_state(proto, dt, shp, init) for _, dt, shp, init in states]
        self.pviews = [self._view(self.pbuf[grp], off, cnt, shp)
                       for (grp, off, cnt), (_, shp) in zip(views, shapes)]
        self.gviews = [self._view(self.gbuf[grp], off, cnt, shp)
                       for (grp, off, cnt), (_, shp) in zip(views, shapes)]
        # each tensor's state: its slots' views ("flat<g>.<dtype>.<slot>"); a scalar slot
        # (NAdam's mu_product) is the group's, shared by its tensors
        self.sviews = [{} for _ in params]
        self.scalar_slots = False
        self.inits = {}
        for (name, _, shp, init), buf in zip(states, self.sbuf):
            grp, slot = int(name.split(".", 1)[0][4:]), name.split(".", 2)[2]
            self.scalar_slots |= len(shp) == 0
            self.inits[slot] = init
            for j, (vg, off, cnt) in enumerate(views):
                if vg == grp:
                    self.sviews[j][slot] = buf if len(shp) == 0 else self._view(
                        buf, off, cnt, shapes[j][1])
        grads = [p.grad for p in params] if self.torch else [None] * len(params)
        if self.torch:
            import torch

            with torch.no_grad():
                for j, p in enumerate(params):
                    self.pviews[j].copy_(p)
                    if grads[j] is not None:
                        self.gviews[j].copy_(grads[j])
                for j, p in enumerate(params):
                    p.data = self.pviews[j]
                    p.grad = self.gviews[j]
        else:
            for j, p in enumerate(params):
                self.pviews[j][...] = p
            g["params"] = list(self.pviews)
        self.pptr = [_address(v) for v in self.pviews]
        self.gptr = [_address(v) for v in self.gviews]
        self.args = tuple(_fast_view(b) for b in self.pbuf + self.gbuf + self.sbuf)
        self.group = g
        g["_flat"] = self

    @staticmethod
    def _view(buf, off, cnt, shape):
        return buf[off:off + cnt].reshape(shape)

    def _compile(self, g, shapes):
        opt = self.opt
        hp = {k: v for k, v in opt._hparams(g).items() if k != "lr"}
        key = ("flat", self.gi, tuple(sorted(hp.items())), opt.clip_grad_norm,
               opt.clip_grad_value)
        hit = opt._exes.get(key)
        if hit is None:
            if opt.clip_grad_norm > 0 and (len(opt.param_groups) > 1 or self.gi > 0):
                raise _core.Unimplemented(
                    "UNIMPLEMENTED: clip_grad_norm clips within one group; use one group")
            exe, states, views = _core.optimizer_update(
                opt._c_name, hp, shapes, opt.clip_grad_norm, opt.clip_grad_value, flat=True)
            if getattr(self, "views", views) != views:  # the layout depends on shapes only
                raise _core.Internal("INTERNAL: the flat layout changed between compiles")
            hit = opt._exes[key] = (exe, states, views)
        return hit

    def zero_grad(self):
        for b in self.gbuf:
            b[...] = 0
        if self.torch:
            for p, v, ptr in zip(self.group["params"], self.gviews, self.gptr):
                gr = p.grad
                if gr is None or gr.data_ptr() != ptr:
                    p.grad = v

    def _check(self, j, x, what):
        dt, shape, _, _ = _core.describe(x.detach() if _is_torch(x) else x)
        if (dt, tuple(shape)) != self.shapes[j]:
            want = self.shapes[j]
            raise _core.ShapeMismatch(
                f"SHAPE_MISMATCH: parameter {j}'s {what}: expected {want[0]}{list(want[1])}, "
                f"got {dt}{list(shape)}")

    def _relink(self):
        """Parameters and gradients that were re-pointed or replaced since the last step are
        copied back into the buffers and re-pointed to their views. Returns whether every
        parameter has a gradient."""
        all_grads = True
        if not self.torch:
            return all_grads
        import torch

        moved = []
        for j, (p, pptr, gptr) in enumerate(zip(self.group["params"], self.pptr, self.gptr)):
            gr = p.grad
            if gr is None:
                all_grads = False
            if p.data_ptr() != pptr or (gr is not None and gr.data_ptr() != gptr):
                moved.append(j)
        for j in moved:  # everything checked before anything is copied
            p = self.group["params"][j]
            self._check(j, p, "values (re-pointed since)")
            if p.grad is not None:
                self._check(j, p.grad, "gradient")
        for j in moved:
            p, pv, gv = self.group["params"][j], self.pviews[j], self.gviews[j]
            with torch.no_grad():
                if p.data_ptr() != self.pptr[j]:
                    pv.copy_(p)
                    p.data = pv
                if p.grad is not None and p.grad.data_ptr() != self.gptr[j]:
                    gv.copy_(p.grad)
                    p.grad = gv
        return all_grads

    def step(self, grads, from_tensors):
        g = self.group
        lr = float(g["lr"])
        if not lr >= 0 or lr == float("inf"):
            raise _core.InvalidArgument(f"INVALID_ARGUMENT: lr {lr}: must be finite and >= 0")
        if from_tensors:
            all_grads = self._relink()
        else:
            all_grads, copies = True, []
            for j, gr in enumerate(grads):  # everything checked before anything is copied
                if gr is None:
                    all_grads = False
                elif _address(gr) != self.gptr[j]:
                    self._check(j, gr, "gradient")
                    copies.append(j)
            for j in copies:
                _copy_into(self.gviews[j], grads[j])
        states = g["_state"]
        steps = {st.get("step", 0) for st in states}
        if all_grads and len(steps) == 1:
            step = steps.pop()
            if step == 0:
                for j in range(len(states)):
                    if not states[j]:
                        self._start(j)
            exe, _, _ = self._compile(g, self.shapes)
            exe(*self.args, float(step + 1), lr, donate=True)
            for st in states:
                st["step"] = step + 1
            return
        # some parameter without a gradient, or step counts that differ: the per-tensor update
        # on the views (the same state memory)
        if self.scalar_slots:
            raise _core.Unimplemented(
                f"UNIMPLEMENTED: flat=True with {type(self.opt).__name__}: its scalar state is "
                "kept once per group, so every parameter needs a gradient at every step")
        for j in range(len(states)):
            if not states[j]:
                self._start(j)
        if from_tensors:
            grads = [p.grad for p in g["params"]] if self.torch else self.gviews
        gs = [None if gr is None else self.gviews[j] for j, gr in enumerate(grads)]
        self.opt._step_group(self.gi, g, gs)

    def _start(self, j):
        """Parameter j's state before its first step (none loaded): the views (a master holds
        the parameter, widened), step 0."""
        st = self.group["_state"][j]
        st.update(self.sviews[j])
        if "master" in st:
            _copy_into(st["master"], self.pviews[j])
        st.setdefault("step", 0)

    def import_state(self, j, src):
        """load_state_dict: copies into parameter j's views."""
        st = {}
        for k, v in src.items():
            if k == "step":
                st["step"] = int(float(v))
            elif k in self.sviews[j]:
                _copy_into(self.sviews[j][k], v)
                st[k] = self.sviews[j][k]
            else:
                raise _core.InvalidArgument(
                    f"INVALID_ARGUMENT: state_dict: unknown state '{k}' for this optimizer")
        for k, v in self.sviews[j].items():  # slots the state_dict does not hold start afresh
            if k not in st:
                if k == "master":
                    _copy_into(v, self.pviews[j])
                else:
                    _copy_into(v, _full_like(v, self.inits[k]))
                st[k] = v
        if "step" not in st:
            st["step"] = 1
        return st


def _full_like(x, value):
    if _is_torch(x):
        import torch

        return torch.full_like(x, value)
    import numpy as np

    return np.full_like(x, value)


def _address(x):
    if _is_torch(x):
        return x.data_ptr()
    return _core.describe(x)[2]


def _fast_view(x):
    if not _is_torch(x):
        return x
    x = x.detach()
    try:
        return x.numpy()  # shares the tensor's memory
    except (RuntimeError, TypeError):  # a torch without NumPy interop: its DLPack capsule
        return x


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



class RAdam(Optimizer):
    """torch.optim.RAdam (betas, eps, weight_decay, decoupled_weight_decay, maximize)."""

    _c_name = "radam"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 decoupled_weight_decay=False, *, maximize=False, **kw):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay,
                                      decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize), **kw)

    def _hparams(self, g):
        b1, b2 = g["betas"]
        return {"lr": g["lr"], "beta1": float(b1), "beta2": float(b2), "eps": g["eps"],
                "weight_decay": g["weight_decay"],
                "decoupled_weight_decay": _flag(g["decoupled_weight_decay"]),
                "maximize": _flag(g["maximize"])}


class NAdam(Optimizer):
    """torch.optim.NAdam (betas, eps, weight_decay, momentum_decay, decoupled_weight_decay)."""

    _c_name = "nadam"

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 momentum_decay=4e-3, decoupled_weight_decay=False, *, maximize=False, **kw):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, momentum_decay=momentum_decay,
                                      decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize), **kw)

    def _hparams(self, g):
        b1, b2 = g["betas"]
        return {"lr": g["lr"], "beta1": float(b1), "beta2": float(b2), "eps": g["eps"],
                "weight_decay": g["weight_decay"], "momentum_decay": g["momentum_decay"],
                "decoupled_weight_decay": _flag(g["decoupled_weight_decay"]),
                "maximize": _flag(g["maximize"])}


class Adadelta(Optimizer):
    """torch.optim.Adadelta (rho, eps, weight_decay, maximize)."""

    _c_name = "adadelta"

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0, *, maximize=False,
                 **kw):
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay,
                                      maximize=maximize), **kw)

    def _hparams(self, g):
        return {"lr": g["lr"], "rho": g["rho"], "eps": g["eps"],
                "weight_decay": g["weight_decay"], "maximize": _flag(g["maximize"])}

class Adafactor(Optimizer):
    """torch.optim.Adafactor (beta2_decay, eps=(eps1, eps2) with eps1 None: the parameter
    dtype's machine epsilon, d, weight_decay, maximize): liboptitpu's "adafactor_torch".
    Factored second moments (row_var, col_var) for parameters of rank >= 2, variance
    otherwise; the unused slots are kept as one element. Not in flat mode (its state is not
    shaped like the parameters: Unimplemented)."""

    _c_name = "adafactor_torch"

    def __init__(self, params, lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0,
                 weight_decay=0.0, *, maximize=False, **kw):
        eps = tuple(eps)
        if len(eps) != 2:
            raise _core.InvalidArgument("INVALID_ARGUMENT: eps: a pair (eps1 or None, eps2)")
        super().__init__(params, dict(lr=lr, beta2_decay=beta2_decay, eps=eps, d=d,
                                      weight_decay=weight_decay, maximize=maximize), **kw)

    def _hparams(self, g):
        e1, e2 = g["eps"]
        return {"lr": g["lr"], "beta2_decay": g["beta2_decay"],
                "eps1": 0.0 if e1 is None else float(e1), "eps2": float(e2), "d": g["d"],
                "weight_decay": g["weight_decay"], "maximize": _flag(g["maximize"])}


# ---- learning-rate schedules (liboptitpu's ot_lr_schedule, optax's formulas) ----

def constant_schedule(value):
    """optax.constant_schedule."""
    return _core.lr_schedule("constant", float(value))


def exponential_decay(init_value, transition_steps, decay_rate, transition_begin=0,
                      staircase=False, end_value=None):
    """optax.exponential_decay (torch ExponentialLR(gamma): (init, 1, gamma))."""
    return _core.lr_schedule("exponential", float(init_value), int(transition_steps),
                             float(decay_rate), int(transition_begin), bool(staircase),
                             float("nan") if end_value is None else float(end_value))


def polynomial_schedule(init_value, end_value, power, transition_steps, transition_begin=0):
    """optax.polynomial_schedule."""
    return _core.lr_schedule("polynomial", float(init_value), float(end_value), float(power),
                             int(transition_steps), int(transition_begin))


def linear_schedule(init_value, end_value, transition_steps, transition_begin=0):
    """optax.linear_schedule."""
    return _core.lr_schedule("linear", float(init_value), float(end_value),
                             int(transition_steps), int(transition_begin))


def cosine_decay_schedule(init_value, decay_steps, alpha=0.0, exponent=1.0):
    """optax.cosine_decay_schedule (torch CosineAnnealingLR(T_max, eta_min): alpha =
    eta_min / init)."""
    return _core.lr_schedule("cosine", float(init_value), float(init_value) * float(alpha),
                             int(decay_steps), float(exponent))


def warmup_cosine_decay_schedule(init_value, peak_value, warmup_steps, decay_steps,
                                 end_value=0.0, exponent=1.0):
    """optax.warmup_cosine_decay_schedule."""
    return _core.lr_schedule("warmup_cosine", float(init_value), float(peak_value),
                             int(warmup_steps), int(decay_steps), float(end_value),
                             float(exponent))


def piecewise_constant_schedule(init_value, boundaries_and_scales):
    """optax.piecewise_constant_schedule (torch MultiStepLR: every scale gamma)."""
    items = sorted((int(k), float(v)) for k, v in dict(boundaries_and_scales).items())
    return _core.lr_schedule("piecewise_constant", float(init_value), [k for k, _ in items],
                             [v for _, v in items])


def step_schedule(init_value, step_size, gamma=0.1):
    """torch StepLR: init * gamma ** (t // step_size)."""
    return _core.lr_schedule("step", float(init_value), int(step_size), float(gamma))


def cosine_restarts_schedule(base, eta_min, t0, t_mult=1):
    """torch CosineAnnealingWarmRestarts."""
    return _core.lr_schedule("cosine_restarts", float(base), float(eta_min), int(t0), int(t_mult))


def onecycle_schedule(total_steps, peak, pct_start=0.3, div_factor=25.0, final_div_factor=1e4,
                      torch_convention=True):
    """torch OneCycleLR (cosine annealing); torch_convention=False: optax's
    cosine_onecycle_schedule."""
    return _core.lr_schedule("onecycle", int(total_steps), float(peak), float(pct_start),
                             float(div_factor), float(final_div_factor), bool(torch_convention))


class ScheduleLR:
    """Drives an optimizer's learning rate from a schedule, as a torch LR scheduler does: the
    constructor sets every group's lr to schedule(0); step() (after optimizer.step()) to
    schedule(t) for the next step index t. Changing group["lr"] never recompiles."""

    def __init__(self, optimizer, schedule):
        self.optimizer = optimizer
        self.schedule = schedule
        self.last_epoch = 0
        self._apply()

    def _apply(self):
        lr = self.schedule(self.last_epoch)
        for g in self.optimizer.param_groups:
            g["lr"] = lr

    def step(self):
        self.last_epoch += 1
        self._apply()

    def get_last_lr(self):
        return [g["lr"] for g in self.optimizer.param_groups]

    def state_dict(self):
        return {"last_epoch": self.last_epoch}

    def load_state_dict(self, sd):
        self.last_epoch = int(sd["last_epoch"])
        self._apply()


# ---- optax-style transformations (for JAX users) ----

_OPTAX_FLAG = {"adam", "adamw", "rmsprop", "adagrad", "radam", "nadam"}
_OPTAX_NAMES = {"b1": "beta1", "b2": "beta2"}


class GradientTransformation:
    """optax's (init, update) pair: state = init(params); updates, state = update(grads, state,
    params). Arrays in: any pytree of array-likes; out: NumPy arrays in the same structure."""

    def __init__(self, init, update):
        self.init = init
        self.update = update

    def __iter__(self):  # unpacks as optax's NamedTuple does
        return iter((self.init, self.update))


class TransformState:
    """The state of a GradientTransformation: the step count and each leaf's slots (NumPy)."""

    def __init__(self, count, slots):
        self.count = count
        self.slots = slots

    def __repr__(self):
        return f"TransformState(count={self.count}, {len(self.slots)} leaves)"


def _tree_flatten(tree):
    try:
        import jax

        leaves, treedef = jax.tree_util.tree_flatten(tree)
        return leaves, lambda xs: jax.tree_util.tree_unflatten(treedef, xs)
    except ImportError:
        pass
    if isinstance(tree, dict):
        keys = sorted(tree)
        return [tree[k] for k in keys], lambda xs: dict(zip(keys, xs))
    if isinstance(tree, (list, tuple)):
        return list(tree), lambda xs: type(tree)(xs)
    return [tree], lambda xs: xs[0]


def transform(name, learning_rate, *, clip_by_global_norm=0.0, **hparams):
    """An optax-style GradientTransformation running liboptitpu's compiled update of optimizer
    `name` ("adam", "adamw", "sgd", "lion", "lamb", ...), with optax's formulas where the
    library has both conventions (its "optax" flag). learning_rate: a number or a schedule
    (callable of the step index, e.g. optitpu.optim.warmup_cosine_decay_schedule(...)).
    Hyper-parameters by the library's names or optax's b1/b2; clip_by_global_norm > 0 clips
    first with optax.clip_by_global_norm's formula.

    The update is computed as the step's new parameters minus the parameters, so
    params + updates equals the step to the rounding of that subtraction; with params=None the
    update starts from zero parameters, which is exact for optimizers whose update does not read
    the parameters (no weight decay)."""
    import numpy as np

    hp = {_OPTAX_NAMES.get(k, k): float(v) for k, v in hparams.items()}
    if name in _OPTAX_FLAG:
        hp["optax"] = 1.0
    compiled = {}

    def executable(leaves):
        shapes = tuple((_core.describe(x)[0], tuple(np.shape(x))) for x in leaves)
        hit = compiled.get(shapes)
        if hit is None:
            hit = compiled[shapes] = _core.optimizer_update(
                name, hp, list(shapes), float(clip_by_global_norm), 0.0,
                clip_by_global_norm > 0)
        return hit

    def init(params):
        leaves, _ = _tree_flatten(params)
        _, states = executable([np.asarray(x) for x in leaves])
        per = len(states) // len(leaves) if leaves else 0
        slots = []
        for k in range(len(leaves)):
            slots.append({nm.split(".", 1)[1]: np.full(shape, init, dtype=numpy_dtype(dt))
                          for nm, dt, shape, init in states[k * per:(k + 1) * per]})
        return TransformState(0, slots)

    def update(updates, state, params=None):
        gl, unflatten = _tree_flatten(updates)
        gl = [np.asarray(g, order="C") for g in gl]  # a copy only when not contiguous
        if params is None:
            pl = [np.zeros_like(g) for g in gl]
        else:
            pl = [np.array(p, copy=True, order="C") for p in _tree_flatten(params)[0]]
        old = [p.copy() for p in pl] if params is not None else None
        exe, states = executable(pl)
        per = len(states) // len(pl) if pl else 0
        slots = [{k: v.copy() for k, v in s.items()} for s in state.slots]
        sargs = [slots[k][nm.split(".", 1)[1]] for k in range(len(pl))
                 for nm, _, _, _ in states[k * per:(k + 1) * per]]
        lr = learning_rate(state.count) if callable(learning_rate) else learning_rate
        exe(*pl, *gl, *sargs, float(state.count + 1), float(lr), donate=True)
        ups = pl if old is None else [p - o for p, o in zip(pl, old)]
        return unflatten(ups), TransformState(state.count + 1, slots)

    return GradientTransformation(init, update)


def numpy_dtype(name):
    from . import numpy_dtype as nd

    return nd(name)
