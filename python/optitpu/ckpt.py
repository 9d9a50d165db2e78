"""Verified checkpoints and safetensors files (liboptitpu's ft and safetensors modules).

    optitpu.ckpt.save("ckpt", 100, {"w": w, "b": b})          # ckpt/step_00000100, atomic
    step, tensors = optitpu.ckpt.restore("ckpt")               # newest step that verifies
    optitpu.ckpt.verify("ckpt", 100)                           # CorruptData naming bad files
    optitpu.ckpt.latest("ckpt")                                # 100 (None when there is none)
    optitpu.ckpt.save_file("w.safetensors", {"w": w})          # the safetensors package reads it
    tensors = optitpu.ckpt.load_file("w.safetensors")

Arrays in: anything with the buffer protocol or __dlpack__ (read in place while written).
Arrays out: optitpu.Array copies of the verified bytes (np.asarray / torch.from_dlpack views).
"""

import os

from . import _core

__all__ = ["save", "restore", "verify", "latest", "save_file", "load_file", "step_dir"]


def step_dir(root, step):
    """ROOT/step_NNNNNNNN, the directory of one committed step."""
    return os.path.join(os.fspath(root), f"step_{int(step):08d}")


def save(root, step, tensors, *, role="model", roles=None, metrics=None):
    """Saves {name: array} as role `role` (or roles={role: {name: array}}) of step `step` under
    root with the commit protocol (files fsynced, a SHA-256 manifest, an atomic rename).
    AlreadyExists when the step is committed. Returns {"step", "bytes", "seconds"}."""
    if roles is None:
        roles = {role: tensors}
    elif tensors:
        raise _core.InvalidArgument("INVALID_ARGUMENT: give tensors or roles, not both")
    return _core.ckpt_save(os.fspath(root), int(step), dict(roles), metrics)


def restore(root, step=None, *, role="model", all_roles=False):
    """(step, {name: Array}) of role `role` (all_roles: {role: {name: Array}}) from the newest
    committed step that verifies (step=None: rolls back past damaged ones), or from `step`
    (CorruptData when it does not verify). NotFound when there is no checkpoint."""
    root = os.fspath(root)
    got, roles, _ = _core.ckpt_restore(root, None if step is None else step_dir(root, step))
    if all_roles:
        return got, roles
    if role not in roles:
        raise _core.NotFound(f"NOT_FOUND: step {got} has no role '{role}'")
    return got, roles[role]


def verify(root, step=None):
    """Verifies step `step` (default: the newest committed one): manifest digest, every file's
    size and SHA-256, every file parses. Returns {"step", "files", "bytes"}; raises CorruptData
    naming each bad file."""
    root = os.fspath(root)
    if step is None:
        step = latest(root, verified=False)
        if step is None:
            raise _core.NotFound(f"NOT_FOUND: no committed checkpoint under {root}")
    return _core.ckpt_verify(step_dir(root, step))


def latest(root, *, verified=True):
    """The newest committed step under root (verified=True: the newest that verifies), or None."""
    root = os.fspath(root)
    try:
        entries = _core.ckpt_list(root)
    except _core.NotFound:
        return None
    for step, path, committed, damaged in reversed(entries):
        if not committed or damaged:
            continue
        if not verified:
            return step
        try:
            _core.ckpt_verify(path)
            return step
        except _core.Error:
            continue
    return None


def save_file(path, tensors, metadata=None):
    """Writes a safetensors file (atomic, fsynced; byte-identical to safetensors.numpy.save_file
    for at most one metadata entry)."""
    _core.st_save(os.fspath(path), dict(tensors), metadata)


def load_file(path, *, metadata=False):
    """{name: Array} of a safetensors file (every rule of the reference reader checked first:
    CorruptData otherwise); metadata=True: ({name: Array}, {key: value})."""
    t, m = _core.st_load(os.fspath(path))
    return (t, m) if metadata else t
