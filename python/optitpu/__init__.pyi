# Type stubs of the optitpu package.
import os
from typing import Any, Callable, TypeVar

from . import ckpt as ckpt, optim as optim
from .pod import Pod as Pod
from ._core import (AlreadyExists as AlreadyExists, Array as Array, Cancelled as Cancelled,
                    CorruptData as CorruptData, Error as Error, Executable as Executable,
                    FailedPrecondition as FailedPrecondition, Internal as Internal,
                    InvalidArgument as InvalidArgument, IOError as IOError, NotFound as NotFound,
                    OutOfMemory as OutOfMemory, OutOfRange as OutOfRange, PeerFailed as PeerFailed,
                    ResourceExhausted as ResourceExhausted, ShapeMismatch as ShapeMismatch,
                    Timeout as Timeout, Unimplemented as Unimplemented,
                    UnsupportedHardware as UnsupportedHardware)

__version__: str
F = TypeVar("F", bound=Callable[..., Any])

def numpy_dtype(name: str) -> Any: ...
def array(obj: Any) -> Array: ...
def compile(hlo: str | bytes | os.PathLike[str], opt_level: int = ..., *, profile: bool = ...,
            cache: bool | str | None = ...) -> Executable: ...
def load(path: str | os.PathLike[str]) -> Executable: ...
def jit(fn: F | None = ..., **compile_kwargs: Any) -> Any: ...
def train(*, on_progress: Callable[[dict[str, Any]], Any] | None = ...,
          **options: Any) -> dict[str, Any]: ...
