"""optitpu.optim against torch.optim's trajectories (tests/data/optim, made by
scripts/gen_optim_fixtures.py with torch) and the interface's behaviour."""

import json

import numpy as np
import pytest

import optitpu
from optitpu import optim


def load_case(repo, name):
    base = repo / "tests" / "data" / "optim"
    index = json.loads((base / "index.json").read_text())
    case = next(c for c in index["cases"] if c["name"] == name)
    order = index["param_order"]
    p0 = [np.load(base / "inputs" / f"param0_{p}.npy") for p in order]
    grads = [np.load(base / "inputs" / f"grad_{p}.npy") for p in order]
    want = [np.load(base / name / case["files"][f"param.{p}"]["file"]) for p in order]
    lr = np.load(base / name / case["files"]["lr"]["file"]) if "lr" in case["files"] else None
    return case, p0, grads, want, lr


def _torch_kwargs(hp):
    hp = dict(hp)
    if "betas" in hp:
        hp["betas"] = tuple(hp["betas"])
    return hp


# every torch case of the fixture whose optimizer has a torch-style class here
CASES = {
    "torch_sgd": optim.SGD,
    "torch_sgd_momentum_dampening_wd": optim.SGD,
    "torch_sgd_nesterov_wd_maximize": optim.SGD,
    "torch_adam": optim.Adam,
    "torch_adamw": optim.AdamW,
    "torch_adam_amsgrad": optim.Adam,
    "torch_adamw_amsgrad_maximize": optim.AdamW,
    "torch_rmsprop": optim.RMSprop,
    "torch_rmsprop_centered_momentum": optim.RMSprop,
    "torch_adagrad": optim.Adagrad,
    "torch_adadelta": optim.Adadelta,
    "torch_radam": optim.RAdam,
    "torch_radam_decoupled_wd": optim.RAdam,
    "torch_nadam": optim.NAdam,
    "torch_nadam_decoupled_wd": optim.NAdam,
}


@pytest.mark.parametrize("flat", [False, True], ids=["per_tensor", "flat"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_trajectory_matches_torch(repo, name, flat):
    case, p0, grads, want, lr = load_case(repo, name)
    params = [p.copy() for p in p0]
    hp = dict(case["hyperparams"])
    clip = case.get("clip_global_norm", {}).get("max_norm", 0.0)
    opt = CASES[name](params, **_torch_kwargs(hp), clip_grad_norm=clip, flat=flat)
    if flat:  # NumPy arrays are copied into the flat buffer: the parameters are its views
        params = opt.param_groups[0]["params"]
    addrs = [p.ctypes.data for p in params]
    tol = case.get("suggested_tolerance", {"rtol": 1e-5, "atol": 1e-6})
    for t in range(grads[0].shape[0]):
        if lr is not None:
            opt.param_groups[0]["lr"] = float(lr[t])
        opt.step(grads=[g[t] for g in grads])
        for p, w in zip(params, want):
            np.testing.assert_allclose(p, w[t], rtol=tol["rtol"], atol=tol["atol"],
                                       err_msg=f"{name} step {t}")
    assert [p.ctypes.data for p in params] == addrs  # updated in place
    assert len(opt._exes) == 1  # the lr schedule never recompiled


def _mixed_params(rng, dtype=np.float32):
    shapes = [(3, 5), (7,), (), (4, 4, 3), (33,), (1,)]
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


@pytest.mark.parametrize("cls,kw", [(optim.AdamW, {"weight_decay": 0.1}),
                                    (optim.SGD, {"momentum": 0.9, "nesterov": True}),
                                    (optim.Adagrad, {"initial_accumulator_value": 0.1}),
                                    (optim.NAdam, {})])
def test_flat_is_bit_identical_to_per_tensor(cls, kw):
    rng = np.random.default_rng(3)
    w = _mixed_params(rng) + [rng.standard_normal(6)]  # an f64 tensor: a second flat group
    grads = [[rng.standard_normal(x.shape).astype(x.dtype) for x in w] for _ in range(5)]
    a = [x.copy() for x in w]
    opt_a = cls(a, lr=0.01, **kw)
    opt_b = cls([x.copy() for x in w], lr=0.01, flat=True, **kw)
    b = opt_b.param_groups[0]["params"]
    assert all(x.ctypes.data % 64 == 0 for x in b)  # every tensor starts on a cache line
    for t, g in enumerate(grads):
        opt_a.param_groups[0]["lr"] = opt_b.param_groups[0]["lr"] = 0.01 * (t + 1)
        opt_a.step(grads=g)
        opt_b.step(grads=g if t % 2 else [x.copy() for x in g])  # copied into the buffer
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)
    sa, sb = opt_a.state_dict()["state"], opt_b.state_dict()["state"]
    for k in sa:
        assert set(sa[k]) == set(sb[k])
        for slot in sa[k]:
            np.testing.assert_array_equal(sa[k][slot], sb[k][slot])


def test_flat_numpy_grads_views_and_fallback():
    rng = np.random.default_rng(4)
    w = _mixed_params(rng)
    ref = optim.AdamW([x.copy() for x in w], lr=0.1)
    opt = optim.AdamW([x.copy() for x in w], lr=0.1, flat=True)
    ps = opt.param_groups[0]["params"]
    gv = opt.flat_grads()
    assert [g.shape for g in gv] == [x.shape for x in w]
    g = [rng.standard_normal(x.shape).astype(np.float32) for x in w]
    for v, x in zip(gv, g):
        v[...] = x
    opt.step()  # NumPy: without grads= the gradients are flat_grads()'s views
    ref.step(grads=g)
    # a parameter without a gradient is skipped (torch's rule): the per-tensor update runs
    # on the buffers' views, and the step counts then differ
    g2 = [None] + [x * 2 for x in g[1:]]
    opt.step(grads=g2)
    ref.step(grads=g2)
    assert opt.state[0]["step"] == 1 and opt.state[1]["step"] == 2
    opt.step(grads=g)
    ref.step(grads=g)
    for x, y in zip(ref.param_groups[0]["params"], ps):
        np.testing.assert_array_equal(x, y)
    opt.zero_grad()
    assert all(not v.any() for v in gv)
    # state_dict round trip into another flat optimizer
    other = optim.AdamW([x.copy() for x in w], lr=0.5, flat=True)
    other.load_state_dict(opt.state_dict())
    for v in other.param_groups[0]["params"]:
        v[...] = 0
    for a, b in zip(other.param_groups[0]["params"], ps):
        a[...] = b
    opt.step(grads=g)
    other.step(grads=g)
    for a, b in zip(other.param_groups[0]["params"], ps):
        np.testing.assert_array_equal(a, b)


def test_flat_add_param_group():
    w1, w2 = np.ones(4, np.float32), np.ones(3, np.float64)
    opt = optim.SGD([w1], lr=0.1, flat=True)
    opt.add_param_group({"params": [w2], "lr": 0.5})  # its own flat buffers and update
    assert len(opt.flat_grads()) == 2
    opt.step(grads=[np.ones(4, np.float32), np.ones(3, np.float64)])
    np.testing.assert_allclose(opt.param_groups[0]["params"][0], 0.9)
    np.testing.assert_allclose(opt.param_groups[1]["params"][0], 0.5)
    np.testing.assert_array_equal(w1, 1)  # NumPy: the caller's arrays were copied in


def test_flat_bad_arguments():
    w = np.ones(4, np.float32)
    with pytest.raises(optitpu.FailedPrecondition):
        optim.AdamW([w]).flat_grads()
    with pytest.raises(optitpu.Unimplemented):  # factored state is not shaped like the tensors
        optim.Adafactor([np.ones((4, 3), np.float32)], flat=True)
    opt = optim.NAdam([np.ones(4, np.float32), np.ones(3, np.float32)], flat=True)
    with pytest.raises(optitpu.Unimplemented, match="scalar state"):
        opt.step(grads=[None, np.ones(3, np.float32)])
    opt = optim.AdamW([np.ones(4, np.float32)], flat=True)
    with pytest.raises(optitpu.ShapeMismatch):
        opt.step(grads=[np.ones(5, np.float32)])
    with pytest.raises(optitpu.InvalidArgument):
        opt.step(grads=[np.ones(4, np.float32)] * 2)
    opt.param_groups[0]["lr"] = float("nan")
    with pytest.raises(optitpu.InvalidArgument):
        opt.step(grads=[np.ones(4, np.float32)])
    np.testing.assert_array_equal(opt.param_groups[0]["params"][0], 1)  # nothing changed
    with pytest.raises(optitpu.Unimplemented):
        optim.AdamW([{"params": [np.ones(2, np.float32)]},
                     {"params": [np.ones(2, np.float32)]}], flat=True, clip_grad_norm=1.0)


def test_bf16_params_with_f32_master(repo):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    base = repo / "tests" / "data" / "optim"
    index = json.loads((base / "index.json").read_text())
    case = next(c for c in index["cases"] if c["name"] == "torch_bf16_master_adamw")
    order = index["param_order"]
    files = case["files"]

    def fx(key):
        return np.load(base / case["name"] / files[key]["file"])

    p0 = [np.load(base / "inputs" / f"param0_{p}.npy") for p in order]
    bf = ml_dtypes.bfloat16
    gb = [fx(f"grad_bf16.{p}").view(bf) for p in order]
    want_bf = [fx(f"param_bf16.{p}").view(bf) for p in order]
    want_master = [fx(f"param.{p}") for p in order]
    for flat in (False, True):
        params = [x.astype(bf) for x in p0]
        opt = optim.AdamW(params, **case["hyperparams"], flat=flat)
        if flat:
            params = opt.param_groups[0]["params"]
        # the masters start as the f32 weights the bf16 copy was made from (torch's recipe)
        sd = opt.state_dict()
        sd["state"] = {i: {"step": 0, "master": x} for i, x in enumerate(p0)}
        opt.load_state_dict(sd)
        for t in range(gb[0].shape[0]):
            opt.step(grads=[g[t] for g in gb])
            for k, p in enumerate(params):
                assert p.dtype == bf
                np.testing.assert_array_equal(p.view(np.uint16), want_bf[k][t].view(np.uint16),
                                              err_msg=f"flat={flat} step {t}")
        for k, m in enumerate(want_master):
            master = opt.state[k]["master"]
            assert master.dtype == np.float32
            np.testing.assert_allclose(master, m[-1], rtol=1e-5, atol=1e-6)
    # without a master given, it starts as the parameter widened
    p = np.array([1.5, -2.0], bf)
    opt = optim.SGD([p], lr=0.5)
    opt.step(grads=[np.array([1.0, 1.0], bf)])
    np.testing.assert_array_equal(opt.state[0]["master"], [1.0, -2.5])
    np.testing.assert_array_equal(p.astype(np.float32), [1.0, -2.5])


@pytest.mark.parametrize("flat", [False, True])
def test_f16_params_and_bad_mixed_precision_grads(flat):
    p = np.array([1.5, -2.0], np.float16)
    opt = optim.SGD([p], lr=0.5, flat=flat)
    with pytest.raises(optitpu.ShapeMismatch):  # the gradient comes in the parameter's dtype
        opt.step(grads=[np.ones(2, np.float32)])
    q = opt.param_groups[0]["params"][0]
    np.testing.assert_array_equal(q, [1.5, -2.0])  # nothing changed
    opt.step(grads=[np.ones(2, np.float16)])
    assert q.dtype == np.float16 and opt.state[0]["master"].dtype == np.float32
    np.testing.assert_array_equal(q, [1.0, -2.5])
    np.testing.assert_array_equal(opt.state[0]["master"], [1.0, -2.5])


def test_adafactor_matches_torch(repo):
    case, p0, grads, want, lr = load_case(repo, "torch_adafactor")
    params = [p.copy() for p in p0]
    hp = dict(case["hyperparams"])
    hp["eps"] = tuple(hp["eps"])
    opt = optim.Adafactor(params, **hp)
    tol = case["suggested_tolerance"]
    for t in range(grads[0].shape[0]):
        if lr is not None:
            opt.param_groups[0]["lr"] = float(lr[t])
        opt.step(grads=[g[t] for g in grads])
        for p, w in zip(params, want):
            np.testing.assert_allclose(p, w[t], rtol=tol["rtol"], atol=tol["atol"])
    assert opt.state[2]["row_var"].shape[-1] == 1  # the matrix's factored moments
    with pytest.raises(optitpu.InvalidArgument):
        optim.Adafactor(params, eps=(1e-3,))
    with pytest.raises(optitpu.InvalidArgument):
        optim.Adafactor(params, beta2_decay=0.5).step(grads=[g[0] for g in grads])


def test_state_dict_roundtrip():
    rng = np.random.default_rng(0)
    w = [rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(5).astype(np.float32)]
    grads = [[rng.standard_normal(x.shape).astype(np.float32) for x in w] for _ in range(6)]
    a = [x.copy() for x in w]
    opt_a = optim.AdamW(a, lr=0.01, weight_decay=0.1)
    for g in grads[:3]:
        opt_a.step(grads=g)
    sd = opt_a.state_dict()
    assert sd["state"][0]["step"] == 3.0
    assert set(sd["state"][0]) == {"step", "exp_avg", "exp_avg_sq"}
    assert sd["param_groups"][0]["params"] == [0, 1]
    assert sd["param_groups"][0]["betas"] == (0.9, 0.999)
    b = [x.copy() for x in a]
    opt_b = optim.AdamW(b, lr=0.5)
    opt_b.load_state_dict(sd)
    assert opt_b.param_groups[0]["lr"] == 0.01
    for g in grads[3:]:
        opt_a.step(grads=g)
        opt_b.step(grads=g)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_param_groups_and_lr_change():
    w1, w2 = np.ones(4, np.float32), np.ones(4, np.float32)
    opt = optim.SGD([{"params": [w1]}, {"params": [w2], "lr": 0.5}], lr=0.1)
    g = np.ones(4, np.float32)
    opt.step(grads=[g, g])
    np.testing.assert_allclose(w1, 0.9)
    np.testing.assert_allclose(w2, 0.5)
    opt.param_groups[0]["lr"] = 1.0
    opt.step(grads=[g, g])
    np.testing.assert_allclose(w1, -0.1, atol=1e-7)
    opt.param_groups[0]["momentum"] = 0.9  # another hyper-parameter: that group recompiles
    opt.step(grads=[g, g])
    assert "momentum_buffer" in opt.state[0]


def test_bad_optimizer_arguments():
    w = np.ones(4, np.float32)
    with pytest.raises(optitpu.InvalidArgument):
        optim.Adam([])
    with pytest.raises(optitpu.InvalidArgument):
        optim.Adam([np.ones(4, np.int32)])
    with pytest.raises(optitpu.InvalidArgument):
        optim.Adam([w, w])
    opt = optim.Adam([w], lr=0.1)
    with pytest.raises(optitpu.InvalidArgument):
        opt.step(grads=[])
    with pytest.raises(optitpu.ShapeMismatch):
        opt.step(grads=[np.ones(5, np.float32)])
    with pytest.raises(optitpu.ShapeMismatch):
        opt.step(grads=[np.ones(4, np.float64)])
    np.testing.assert_array_equal(w, 1)  # nothing changed
    opt.param_groups[0]["lr"] = -1.0
    with pytest.raises(optitpu.InvalidArgument):
        opt.step(grads=[np.ones(4, np.float32)])
    ro = np.ones(4, np.float32)
    ro.flags.writeable = False
    with pytest.raises(optitpu.InvalidArgument):
        optim.SGD([ro], lr=0.1).step(grads=[np.ones(4, np.float32)])


def test_schedules_match_fixture_and_formulas(repo):
    _, _, _, _, lr = load_case(repo, "torch_adamw")
    peak = 0.01
    s = optim.warmup_cosine_decay_schedule(0.1 * peak, peak, 10, 100, 0.01 * peak)
    np.testing.assert_allclose([s(t) for t in range(100)], lr, rtol=1e-6)
    assert s.kind == "warmup_cosine"
    c = optim.cosine_decay_schedule(1.0, 10, alpha=0.1)
    assert c(0) == 1.0 and abs(c(10) - 0.1) < 1e-12 and abs(c(5) - 0.55) < 1e-12
    st = optim.step_schedule(1.0, 3, 0.5)
    assert [st(t) for t in range(7)] == [1, 1, 1, 0.5, 0.5, 0.5, 0.25]
    p = optim.piecewise_constant_schedule(2.0, {5: 0.5, 2: 0.1})
    assert [p(t) for t in (0, 2, 5)] == [2.0, 2.0 * 0.1, 2.0 * 0.1 * 0.5]
    assert optim.linear_schedule(1.0, 0.0, 4)(2) == 0.5
    with pytest.raises(optitpu.InvalidArgument):
        optim.step_schedule(1.0, 0)
    with pytest.raises(optitpu.InvalidArgument):
        optitpu._core.lr_schedule("nope")


def test_schedule_lr_drives_the_optimizer(repo):
    case, p0, grads, want, lr = load_case(repo, "torch_adamw")
    params = [p.copy() for p in p0]
    hp = case["hyperparams"]
    opt = optim.AdamW(params, lr=hp["lr"], betas=hp["betas"], eps=hp["eps"],
                      weight_decay=hp["weight_decay"], clip_grad_norm=5.0)
    sched = optim.ScheduleLR(opt, optim.warmup_cosine_decay_schedule(0.001, 0.01, 10, 100, 1e-4))
    tol = case["suggested_tolerance"]
    for t in range(100):
        opt.step(grads=[g[t] for g in grads])
        sched.step()
    for p, w in zip(params, want):
        np.testing.assert_allclose(p, w[-1], rtol=tol["rtol"], atol=tol["atol"])


@pytest.mark.parametrize("with_params", [False, True])
def test_optax_transform_matches_optax_trajectory(repo, with_params):
    case, p0, grads, want, lr = load_case(repo, "optax_adam")
    hp = case["hyperparams"]
    peak = hp["learning_rate"]
    tx = optim.transform("adam", optim.warmup_cosine_decay_schedule(0.1 * peak, peak, 10, 100,
                                                                    0.01 * peak),
                         b1=hp["b1"], b2=hp["b2"], eps=hp["eps"], clip_by_global_norm=5.0)
    params = {n: p.copy() for n, p in zip("abcd", p0)}
    state = tx.init(params)
    tol = case["suggested_tolerance"]
    for t in range(100):
        g = {n: gr[t] for n, gr in zip("abcd", grads)}
        updates, state = tx.update(g, state, params if with_params else None)
        params = {n: params[n] + updates[n] for n in params}  # optax.apply_updates
    assert state.count == 100
    for n, w in zip("abcd", want):
        np.testing.assert_allclose(params[n], w[-1], rtol=tol["rtol"], atol=tol["atol"])


def test_optax_transform_is_functional():
    tx = optim.transform("sgd", 0.1, momentum=0.9)
    p = [np.ones(3, np.float32)]
    s0 = tx.init(p)
    u1, s1 = tx.update([np.ones(3, np.float32)], s0, p)
    u2, _ = tx.update([np.ones(3, np.float32)], s0, p)  # the old state again: same update
    np.testing.assert_array_equal(u1[0], u2[0])
    np.testing.assert_array_equal(p[0], 1)
    assert s0.count == 0 and s1.count == 1


def test_state_is_stream_memory_shared_with_numpy():
    w = np.ones(1000, np.float32)
    opt = optim.Adam([w], lr=0.1)
    opt.step(grads=[np.ones(1000, np.float32)])
    m = opt.state[0]["exp_avg"]
    assert isinstance(m, np.ndarray) and m.dtype == np.float32
    np.testing.assert_allclose(m, 0.1)  # (1 - beta1) * g
    m[:] = 0  # the compiled update reads this very memory
    opt.step(grads=[np.zeros(1000, np.float32)])
    np.testing.assert_array_equal(opt.state[0]["exp_avg"], 0)
    a = optitpu._core.full("f64", (3, 2), 2.5, True)
    assert a.shape == (3, 2) and np.all(np.asarray(a) == 2.5)
    with pytest.raises(optitpu.Unimplemented):
        optitpu._core.full("s32", (2,), 1.0)
