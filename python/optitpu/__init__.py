"""optitpu from Python: compile and run HLO modules, optimizers, checkpoints (docs/python.md).

    import numpy as np, optitpu
    exe = optitpu.compile(hlo_text)            # or a path to a .hlo file
    y = exe(np.float32(2), x, b)               # NumPy / torch CPU / JAX CPU arrays, no copies
    np.asarray(y)                              # shares y's memory

Errors are optitpu.Error subclasses named after the C status (InvalidArgument, ShapeMismatch,
CorruptData, ...). The GIL is released while the library compiles and runs.
"""

import os as _os

from . import _core
from ._core import (  # noqa: F401  (the exception classes, one per C status)
    AlreadyExists,
    Array,
    Cancelled,
    CorruptData,
    Error,
    Executable,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    IOError,
    NotFound,
    OutOfMemory,
    OutOfRange,
    PeerFailed,
    ResourceExhausted,
    ShapeMismatch,
    Timeout,
    Unimplemented,
    UnsupportedHardware,
)

__version__ = _core.version()

_NUMPY_DTYPES = {
    "pred": "bool", "s8": "int8", "s16": "int16", "s32": "int32", "s64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "f16": "float16", "f32": "float32", "f64": "float64",
}


def numpy_dtype(name):
    """The NumPy dtype of an optitpu dtype name ('bf16' needs ml_dtypes)."""
    import numpy as np

    if name == "bf16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(_NUMPY_DTYPES[name])


def _array_numpy(self, dtype=None, copy=None):
    """A NumPy view of the array's memory (no copy); bf16 as ml_dtypes.bfloat16."""
    import numpy as np

    if self.dtype == "bf16":
        a = np.asarray(memoryview(self.view("u16"))).view(numpy_dtype("bf16"))
    else:
        a = np.asarray(memoryview(self))
    if dtype is not None and np.dtype(dtype) != a.dtype:
        return a.astype(dtype)
    return a.copy() if copy else a


# the C type is a heap type: these methods are the NumPy side of its interface
Array.__array__ = _array_numpy
Array.numpy = lambda self: _array_numpy(self)
Array.numpy.__doc__ = "A NumPy view of the array's memory (no copy)."


def array(obj):
    """A new optitpu.Array holding a copy of any array-like (buffer protocol or __dlpack__)."""
    return _core.copy(obj)


def compile(hlo, opt_level=2, *, profile=False, cache=None):
    """Parses and compiles an HLO module: `hlo` is HLO text (str or bytes), or a path
    (str / os.PathLike) to a file holding it. opt_level 0, 1 or 2 (the CLI's -O). profile=True
    records the compile's passes and every run's kernels (exe.profile(), exe.chrome_trace(path)).
    cache: None/False (compile), True (the persistent compilation cache in its default
    directory) or a directory. Returns an Executable."""
    filename = None
    if isinstance(hlo, _os.PathLike) or (
        isinstance(hlo, str) and "\n" not in hlo and "{" not in hlo
    ):
        filename = _os.fspath(hlo)
        try:
            with open(filename, "rb") as f:
                text = f.read()
        except FileNotFoundError:
            raise NotFound(f"NOT_FOUND: {filename}: no such HLO file") from None
        except OSError as e:
            raise IOError(f"IO: {filename}: {e.strerror}") from None
    elif isinstance(hlo, str):
        text = hlo.encode()
    elif isinstance(hlo, (bytes, bytearray, memoryview)):
        text = bytes(hlo)
    else:
        raise InvalidArgument(
            f"INVALID_ARGUMENT: compile takes HLO text or a path, not {type(hlo).__name__}")
    return _core.compile(text, filename, opt_level, bool(profile), cache)


def load(path):
    """An executable saved with Executable.save (verified: damaged files raise CorruptData)."""
    return _core.load(_os.fspath(path))


def jit(fn=None, **compile_kwargs):
    """optitpu.jit(fn): lowers fn with JAX (jax.jit(fn).lower) once per input signature,
    compiles the HLO with optitpu and runs it through optitpu. Needs jax."""
    from ._jit import jit as _jit

    if fn is None:
        return lambda f: _jit(f, **compile_kwargs)
    return _jit(fn, **compile_kwargs)


def train(*, on_progress=None, **options):
    """Runs `optitpu train` in this process (ot_train): data-parallel training of a model on
    in-process host devices with the CLI's options as keywords (steps, epochs, devices, topology,
    optimizer, lr, weight_decay, state ("f32", "bf16", "int8"), schedule, warmup_steps, batch_size,
    grad_accum, dataset, synthetic_n, model ("logreg", "mlp", "cnn"), hidden=[...], activation,
    allreduce, grad_compress ("none", "bf16", "int8", "topk:F"), local_sgd, shard_optimizer,
    overlap ("auto", "on", "off"), slice ("PRESET:SHAPE"; devices defaults to the slice's size, slice_registry to the CLI's
    $OPTITPU_SLICE_DIR or /tmp/optitpu-slices-UID), ckpt_dir, ckpt_every, keep, ckpt_replicas
    (R: copies in CKPT_DIR.replica1..R as the CLI's --ckpt-replicas, or a list of directories),
    resume, fresh, final_ckpt, fail_device, fail_step, migrate ((device, step) or "D@S", the
    CLI's --migrate; or migrate_device and migrate_step), recovery ("shrink", "restore"),
    eval_every, seed, trace_path, stop_after, compile_cache (True: the default cache directory,
    or a directory; off by default, unlike the CLI's)).
    on_progress(dict) is called after every step (on the leader device's thread, with the GIL).
    Returns the report as a dict (ot_train_report_json's fields) with "params": {name: Array},
    the final parameters."""
    import json

    options = _train_options(options)
    report, params = _core.train(options, on_progress)
    out = json.loads(report)
    out["params"] = dict(params)
    return out


def _train_options(options):
    """The CLI's spellings of train's options as ot_train_options' fields."""
    o = {k: v for k, v in options.items() if v is not None}  # None: the default
    mig = o.pop("migrate", None)
    if mig is not None:
        try:
            d, s = mig.split("@") if isinstance(mig, str) else mig
            o["migrate_device"], o["migrate_step"] = int(d), int(s)
        except (TypeError, ValueError):
            raise InvalidArgument(f"INVALID_ARGUMENT: migrate {mig!r}: (device, step) or "
                                  "'D@S'") from None
    reps = o.get("ckpt_replicas")
    if reps is not None and not isinstance(reps, (list, tuple)):
        if isinstance(reps, bool) or not isinstance(reps, int) or reps < 0:
            raise InvalidArgument(f"INVALID_ARGUMENT: ckpt_replicas {reps!r}: a count or a "
                                  "list of directories")
        if reps and not o.get("ckpt_dir"):
            raise InvalidArgument("INVALID_ARGUMENT: ckpt_replicas needs ckpt_dir")
        o["ckpt_replicas"] = [f"{o.get('ckpt_dir')}.replica{i}" for i in range(1, reps + 1)]
    if o.get("slice"):
        if "slice_registry" not in o:
            o["slice_registry"] = (_os.environ.get("OPTITPU_SLICE_DIR")
                                   or f"/tmp/optitpu-slices-{_os.getuid()}")
        if "devices" not in o:  # the slice's size ("v4-2x2x2:2x2x1": 4)
            n = 1
            try:
                for d in str(o["slice"]).split(":", 1)[1].split("x"):
                    n *= int(d)
                o["devices"] = n
            except (IndexError, ValueError):
                pass  # the library reports the malformed spec
    return o


from . import ckpt, optim  # noqa: E402,F401
from .pod import Pod  # noqa: E402,F401
