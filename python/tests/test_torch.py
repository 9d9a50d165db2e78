"""PyTorch CPU tensors in and out, and optitpu.optim against torch.optim on a model (skipped
where torch is not installed)."""

import numpy as np
import pytest

import optitpu
from optitpu import optim

torch = pytest.importorskip("torch")

from conftest import AXPY  # noqa: E402


def test_tensors_in_and_out_without_copies():
    exe = optitpu.compile(AXPY)
    x = torch.arange(4, dtype=torch.float32)
    y = exe(torch.tensor(2.0), x, x)
    t = torch.from_dlpack(y)
    assert t.data_ptr() == y.data_ptr
    assert torch.equal(t, 3 * x)
    assert optitpu._core.describe(x)[2] == x.data_ptr()
    with pytest.raises(optitpu.InvalidArgument, match="C-contiguous"):
        exe(2.0, torch.arange(8.0)[::2], x)
    with pytest.raises(optitpu.ShapeMismatch):
        exe(2.0, x.double(), x)


def test_bf16_tensor():
    exe = optitpu.compile("HloModule m\nENTRY main {\n  x = bf16[3] parameter(0)\n"
                          "  ROOT r = bf16[3] add(x, x)\n}\n")
    x = torch.tensor([1.5, -2.0, 0.25], dtype=torch.bfloat16)
    y = torch.from_dlpack(exe(x))
    assert y.dtype == torch.bfloat16 and torch.equal(y, 2 * x)


def test_adamw_trains_like_torch():
    torch.manual_seed(0)

    def model():
        torch.manual_seed(1)
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))

    ref, ours = model(), model()
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.05, foreach=False)
    opt = optim.AdamW(ours.parameters(), lr=1e-2, weight_decay=0.05)
    x = torch.randn(64, 8)
    y = x.sum(1, keepdim=True).sin()
    ptrs = [p.data_ptr() for p in ours.parameters()]
    for _ in range(100):
        for m, o in ((ref, opt_ref), (ours, opt)):
            o.zero_grad()
            torch.nn.functional.mse_loss(m(x), y).backward()
            o.step()
    for a, b in zip(ref.parameters(), ours.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert [p.data_ptr() for p in ours.parameters()] == ptrs
    # state dicts are interchangeable
    sd = opt.state_dict()
    opt_ref2 = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.05)
    opt_ref2.load_state_dict(sd)
    opt.load_state_dict(opt_ref.state_dict())
    for k in opt_ref.state_dict()["state"]:
        for name in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(opt.state_dict()["state"][k][name],
                                       opt_ref.state_dict()["state"][k][name])
    assert np.isfinite(float(sd["state"][0]["step"]))
