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


def _model():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def test_flat_adamw_trains_like_torch_and_repoints_the_tensors():
    ref, ours = _model(), _model()
    params = list(ours.parameters())
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.05, foreach=False)
    opt = optim.AdamW(params, lr=1e-2, weight_decay=0.05, flat=True)
    fl = opt.param_groups[0]["_flat"]
    base, nbytes = fl.pbuf[0].data_ptr(), fl.pbuf[0].numel() * 4
    # every parameter now lives in the flat buffer (same objects, same values), every .grad in
    # the gradient buffer
    assert all(base <= p.data_ptr() < base + nbytes and p.data_ptr() % 64 == 0 for p in params)
    assert [p is q for p, q in zip(params, ours.parameters())] == [True] * len(params)
    for a, b in zip(ref.parameters(), params):
        assert torch.equal(a, b) and b.requires_grad and b.grad is not None
    gptrs = [p.grad.data_ptr() for p in params]
    x = torch.randn(64, 8)
    y = x.sum(1, keepdim=True).sin()
    for _ in range(100):
        for m, o in ((ref, opt_ref), (ours, opt)):
            o.zero_grad()
            torch.nn.functional.mse_loss(m(x), y).backward()
            o.step()
    for a, b in zip(ref.parameters(), params):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    # backward accumulated into the views; zero_grad kept them
    assert [p.grad.data_ptr() for p in params] == gptrs
    opt.zero_grad()
    assert all(p.grad is not None and not p.grad.any() for p in params)
    sd = opt.state_dict()
    assert set(sd["state"][0]) == {"step", "exp_avg", "exp_avg_sq"}
    opt_ref.load_state_dict(sd)  # interchangeable with torch's
    opt2 = optim.AdamW(_model().parameters(), lr=1e-2, weight_decay=0.05, flat=True)
    opt2.load_state_dict(opt_ref.state_dict())
    for k in sd["state"]:
        torch.testing.assert_close(opt2.state_dict()["state"][k]["exp_avg"],
                                   sd["state"][k]["exp_avg"])


def test_flat_follows_replaced_tensors_and_missing_grads():
    ref, ours = _model(), _model()
    rp, op = list(ref.parameters()), list(ours.parameters())
    opt_ref = optim.AdamW(rp, lr=0.1)  # the per-tensor mode: the reference
    opt = optim.AdamW(op, lr=0.1, flat=True)
    fl = opt.param_groups[0]["_flat"]
    g = [torch.randn_like(p) for p in rp]
    for p, q, gr in zip(rp, op, g):
        p.grad = gr.clone()
        q.grad = gr.clone()  # replaced: copied into the buffer, .grad re-pointed
    opt_ref.step()
    opt.step()
    assert [q.grad.data_ptr() for q in op] == fl.gptr
    with torch.no_grad():  # a parameter re-pointed elsewhere is copied back in
        w = op[0].detach().clone()
        op[0].data = w
    rp[2].grad = op[2].grad = None  # skipped, as torch skips it
    for p, q, gr in zip(rp, op, g):
        if p.grad is not None:
            p.grad.copy_(gr * 2)
            q.grad.copy_(gr * 2)
    opt_ref.step()
    opt.step()
    assert op[0].data_ptr() == fl.pptr[0]
    assert opt.state[op[2]]["step"] == 1 and opt.state[op[0]]["step"] == 2
    for p, q in zip(rp, op):
        assert torch.equal(p, q)
    with pytest.raises(optitpu.ShapeMismatch):
        with torch.no_grad():
            op[1].data = torch.zeros(3)
        opt.step()


@pytest.mark.parametrize("flat", [False, True])
def test_bf16_tensors_with_f32_masters(flat):
    w = torch.tensor([1.5, -2.0, 0.25], dtype=torch.bfloat16)
    w.grad = torch.ones(3, dtype=torch.bfloat16)
    opt = optim.SGD([w], lr=0.5, flat=flat)
    opt.step()
    assert w.dtype == torch.bfloat16
    assert torch.equal(w, torch.tensor([1.0, -2.5, -0.25], dtype=torch.bfloat16))
    assert opt.state[w]["master"].dtype == torch.float32


def test_flat_bad_groups():
    with pytest.raises(optitpu.InvalidArgument, match="all torch tensors or all NumPy"):
        optim.AdamW([torch.ones(2), np.ones(2, np.float32)], flat=True)
