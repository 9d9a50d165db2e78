import os
import pathlib

import pytest

# the repository (its tests/data); the CTest script runs a copy of these tests elsewhere
REPO = pathlib.Path(os.environ.get("OPTITPU_SOURCE_DIR") or pathlib.Path(__file__).resolve().parents[2])

AXPY = """HloModule axpy
ENTRY main {
  a = f32[] parameter(0)
  x = f32[4] parameter(1)
  y = f32[4] parameter(2)
  ab = f32[4] broadcast(a), dimensions={}
  ax = f32[4] multiply(ab, x)
  ROOT r = f32[4] add(ax, y)
}
"""


@pytest.fixture
def axpy():
    import optitpu

    with optitpu.compile(AXPY) as exe:
        yield exe


@pytest.fixture
def repo():
    return REPO
