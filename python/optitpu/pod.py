"""optitpu.Pod: in-process host devices joined by liboptitpu's communicator (collectives.h).

    pod = optitpu.Pod(devices=8, topology="torus-2x4")
    sums = pod.allreduce([grad_on_device_0, ..., grad_on_device_7])       # 8 new arrays
    full = pod.allgather(shards)                                         # [8 * d0, ...] each

Each collective runs every device's part on its own thread with the GIL released, exactly as
the training driver does, with the library's deterministic algorithms (every device receives
bit-identical results). The inputs are read in place and never written; the results are new
optitpu.Array objects, one per device. A failed collective raises and leaves the pod usable (its
communicators are rebuilt).
"""

from . import _core

__all__ = ["Pod"]


class Pod:
    """devices: how many; topology: a preset ("ring-N", "torus-AxB", "mesh-AxB", "v4-2x2x1",
    ...) of exactly that many devices, or None (the collectives' own rings)."""

    def __init__(self, devices=8, topology=None):
        self._h = _core.pod_create(int(devices), topology)

    @property
    def devices(self):
        return self._h.devices

    @property
    def topology(self):
        return self._h.topology

    def allreduce(self, arrays, op="sum", *, algo="auto"):
        """Every device gets op over all devices' arrays (sum, prod, max, min, mean)."""
        return _core.pod_collective(self._h, "allreduce", arrays, op, 0, algo)

    def allgather(self, arrays, *, algo="auto"):
        """Every device gets the arrays concatenated along dimension 0, in device order."""
        return _core.pod_collective(self._h, "allgather", arrays, "sum", 0, algo)

    def reduce_scatter(self, arrays, op="sum", *, algo="auto"):
        """Device r gets block r (of devices equal blocks along dimension 0) of the reduction."""
        return _core.pod_collective(self._h, "reduce_scatter", arrays, op, 0, algo)

    def broadcast(self, arrays, root=0, *, algo="auto"):
        """Every device gets device `root`'s array."""
        return _core.pod_collective(self._h, "broadcast", arrays, "sum", int(root), algo)

    def alltoall(self, arrays, *, algo="auto"):
        """Block j (along dimension 0) of device i's array lands in block i of device j's."""
        return _core.pod_collective(self._h, "alltoall", arrays, "sum", 0, algo)

    def __repr__(self):
        return f"optitpu.Pod(devices={self.devices}, topology={self.topology!r})"
