#!/usr/bin/env python3
"""HLO text modules of about N instructions in shapes that stress a compiler's complexity, for
`optitpu compile --stats` at N and 2N (scripts/scale_check.sh).

  scripts/gen_scale_hlo.py SHAPE N > module.hlo
  scripts/gen_scale_hlo.py --list

The shapes complement the library's graph-shape families (ot_graph_family_build,
docs/compiler.md): nests as deep as the graph, long shape-op chains, tuple plumbing, one value
read by every other instruction, huge constants and parameter lists, nested fusion computations.
"""
import sys


def chain(n):
    # one long dependency chain of cheap unary/binary ops on a small vector
    out = ["HloModule chain", "", "ENTRY main {", "  p0 = f32[8] parameter(0)"]
    prev = "p0"
    ops = ["negate", "abs", "tanh", "sine"]
    for i in range(n):
        if i % 3 == 2:
            out.append(f"  v{i} = f32[8] add({prev}, p0)")
        else:
            out.append(f"  v{i} = f32[8] {ops[i % 4]}({prev})")
        prev = f"v{i}"
    out.append(f"  ROOT r = f32[8] copy({prev})")
    out.append("}")
    return out


def fanout_chain(n):
    # one value read by every instruction of a chain
    out = ["HloModule fanout_chain", "", "ENTRY main {", "  p0 = f32[8] parameter(0)",
           "  x = f32[8] tanh(p0)"]
    prev = "p0"
    for i in range(n):
        out.append(f"  v{i} = f32[8] multiply({prev}, x)" if i % 2 else
                   f"  v{i} = f32[8] add(x, {prev})")
        prev = f"v{i}"
    out.append(f"  ROOT r = f32[8] copy({prev})")
    out.append("}")
    return out


def fanout_tuple(n):
    # one value read by n independent users, all of them outputs
    out = ["HloModule fanout_tuple", "", "ENTRY main {", "  p0 = f32[4] parameter(0)",
           "  x = f32[4] exponential(p0)"]
    names = []
    for i in range(n):
        op = ["add", "multiply", "subtract", "maximum"][i % 4]
        out.append(f"  u{i} = f32[4] {op}(x, x)")
        names.append(f"u{i}")
    out.append(f"  ROOT r = ({', '.join(['f32[4]'] * n)}) tuple({', '.join(names)})")
    out.append("}")
    return out


def concat_wide(n):
    # one concatenate with n operands, each a distinct slice of one parameter
    w = max(1, n // 2)
    out = ["HloModule concat_wide", "", "ENTRY main {", f"  p0 = f32[{w}] parameter(0)"]
    names = []
    for i in range(w):
        out.append(f"  s{i} = f32[1] slice(p0), slice={{[{w - 1 - i}:{w - i}]}}")
        names.append(f"s{i}")
    out.append(f"  ROOT r = f32[{w}] concatenate({', '.join(names)}), dimensions={{0}}")
    out.append("}")
    return out


def shape_chain(n):
    # reshape -> transpose -> broadcast -> reduce -> reshape ... on small arrays
    out = ["HloModule shape_chain", "",
           "add { a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b) }", "",
           "ENTRY main {", "  p0 = f32[4,6] parameter(0)", "  zero = f32[] constant(0)"]
    prev = "p0"
    i = 0
    while i < n:
        k = (i // 5) % 3
        out.append(f"  a{i} = f32[6,4] transpose({prev}), dimensions={{1,0}}")
        out.append(f"  b{i} = f32[2,3,4] reshape(a{i})")
        if k == 0:
            out.append(f"  c{i} = f32[2,3,4,1] reshape(b{i})")
            out.append(f"  d{i} = f32[2,3,4] reshape(c{i})")
        elif k == 1:
            out.append(f"  c{i} = f32[2,3,4,2] broadcast(b{i}), dimensions={{0,1,2}}")
            out.append(f"  d{i} = f32[2,3,4] reduce(c{i}, zero), dimensions={{3}}, to_apply=add")
        else:
            out.append(f"  c{i} = f32[4,3,2] transpose(b{i}), dimensions={{2,1,0}}")
            out.append(f"  d{i} = f32[2,3,4] transpose(c{i}), dimensions={{2,1,0}}")
        out.append(f"  e{i} = f32[4,6] reshape(d{i})")
        prev = f"e{i}"
        i += 5
    out.append(f"  ROOT r = f32[4,6] negate({prev})")
    out.append("}")
    return out


def tuple_plumbing(n):
    # a chain of 3-tuples, each built from the previous one's elements through get-tuple-element
    out = ["HloModule tuple_plumbing", "", "ENTRY main {", "  p0 = f32[4] parameter(0)",
           "  p1 = f32[4] parameter(1)", "  p2 = s32[] parameter(2)",
           "  t0 = (f32[4], f32[4], s32[]) tuple(p0, p1, p2)"]
    i = 0
    k = 0
    while i < n:
        t = f"t{k}"
        out.append(f"  a{k} = f32[4] get-tuple-element({t}), index=0")
        out.append(f"  b{k} = f32[4] get-tuple-element({t}), index=1")
        out.append(f"  c{k} = s32[] get-tuple-element({t}), index=2")
        out.append(f"  x{k} = f32[4] add(a{k}, b{k})")
        out.append(f"  n{k} = ((f32[4], f32[4], s32[]), f32[4]) tuple({t}, x{k})")
        out.append(f"  m{k} = (f32[4], f32[4], s32[]) get-tuple-element(n{k}), index=0")
        out.append(f"  y{k} = f32[4] get-tuple-element(m{k}), index=1")
        out.append(f"  t{k + 1} = (f32[4], f32[4], s32[]) tuple(y{k}, x{k}, c{k})")
        i += 8
        k += 1
    out.append(f"  ROOT r = (f32[4], f32[4], s32[]) copy(t{k})")
    out.append("}")
    return out


def _nest(n, kind):
    # computations nested as deep as the graph: each level's computation holds a few ops and
    # calls (or loops on, or branches to) the next level
    depth = max(1, n // 6)
    out = [f"HloModule nest_{kind}", ""]
    # the innermost level
    out.append(f"lvl{depth} {{\n  p = f32[4] parameter(0)\n  ROOT r = f32[4] tanh(p)\n}}")
    if kind == "while":
        out.append("cond {\n  p = (s32[], f32[4]) parameter(0)\n"
                   "  i = s32[] get-tuple-element(p), index=0\n  one = s32[] constant(1)\n"
                   "  ROOT c = pred[] compare(i, one), direction=LT\n}")
    for d in range(depth - 1, -1, -1):
        nxt = f"lvl{d + 1}"
        name = f"lvl{d}" if d > 0 else "ENTRY main"
        body = []
        if kind == "while" and d > 0:
            # lvl_d is a while body over (s32[], f32[4]) whose value goes through lvl_{d+1}
            body.append("  t = (s32[], f32[4]) parameter(0)")
            body.append("  i = s32[] get-tuple-element(t), index=0")
            body.append("  p = f32[4] get-tuple-element(t), index=1")
            body.append("  one = s32[] constant(1)")
            body.append("  i1 = s32[] add(i, one)")
            if d + 1 < depth:
                body.append("  z = s32[] constant(0)")
                body.append("  wi = (s32[], f32[4]) tuple(z, p)")
                body.append(f"  w = (s32[], f32[4]) while(wi), condition=cond, body={nxt}")
                body.append("  y = f32[4] get-tuple-element(w), index=1")
            else:
                body.append(f"  y = f32[4] call(p), to_apply={nxt}")
            body.append("  q = f32[4] sine(y)")
            body.append("  ROOT r = (s32[], f32[4]) tuple(i1, q)")
        else:
            body.append("  p = f32[4] parameter(0)")
            body.append("  a = f32[4] negate(p)")
            if kind == "call" or (kind == "while" and d == 0):
                if kind == "while":
                    body.append("  z = s32[] constant(0)")
                    body.append("  wi = (s32[], f32[4]) tuple(z, a)")
                    body.append(f"  w = (s32[], f32[4]) while(wi), condition=cond, body={nxt}")
                    body.append("  y = f32[4] get-tuple-element(w), index=1")
                else:
                    body.append(f"  y = f32[4] call(a), to_apply={nxt}")
            else:  # conditional on the sign of the first element
                body.append("  s = f32[1] slice(a), slice={[0:1]}")
                body.append("  s0 = f32[] reshape(s)")
                body.append("  zero = f32[] constant(0)")
                body.append("  c = pred[] compare(s0, zero), direction=GT")
                body.append(f"  y = f32[4] conditional(c, a, a), true_computation={nxt}, "
                            f"false_computation=neg{d}")
            body.append("  ROOT r = f32[4] cosine(y)")
        if kind == "cond":
            out.append(f"neg{d} {{\n  p = f32[4] parameter(0)\n  ROOT r = f32[4] negate(p)\n}}")
        out.append(f"{name} {{\n" + "\n".join(body) + "\n}")
    return out


def nest_call(n):
    return _nest(n, "call")


def nest_while(n):
    return _nest(n, "while")


def nest_cond(n):
    return _nest(n, "cond")


def nest_fusion(n):
    # fusion computations nested inside each other (XLA dumps after fusion hold such modules)
    depth = max(1, n // 3)
    out = ["HloModule nest_fusion", ""]
    out.append(f"f{depth} {{\n  p = f32[4] parameter(0)\n  ROOT r = f32[4] tanh(p)\n}}")
    for d in range(depth - 1, -1, -1):
        name = f"f{d}" if d > 0 else "ENTRY main"
        out.append(f"{name} {{\n  p = f32[4] parameter(0)\n  a = f32[4] negate(p)\n"
                   f"  y = f32[4] fusion(a), kind=kLoop, calls=f{d + 1}\n"
                   f"  ROOT r = f32[4] add(y, p)\n}}")
    return out


def big_constant(n):
    # one constant of n elements and n/1000 more of 1000 elements, summed
    out = ["HloModule big_constant", "",
           "add { a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b) }", "",
           "ENTRY main {", f"  p0 = f32[{n}] parameter(0)"]
    vals = ", ".join(str((i * 7919 % 2001 - 1000) / 8.0) for i in range(n))
    out.append(f"  c = f32[{n}] constant({{{vals}}})")
    out.append(f"  s = f32[{n}] add(p0, c)")
    out.append("  zero = f32[] constant(0)")
    out.append(f"  r0 = f32[] reduce(s, zero), dimensions={{0}}, to_apply=add")
    prev = "r0"
    for k in range(max(1, n // 1000)):
        vals = ", ".join(str((i + k) % 17) for i in range(1000))
        out.append(f"  k{k} = f32[1000] constant({{{vals}}})")
        out.append(f"  q{k} = f32[] reduce(k{k}, zero), dimensions={{0}}, to_apply=add")
        out.append(f"  a{k} = f32[] add({prev}, q{k})")
        prev = f"a{k}"
    out.append(f"  ROOT r = f32[] copy({prev})")
    out.append("}")
    return out


def many_params(n):
    # n parameters of assorted dtypes and ranks, each converted and summed into a chain
    out = ["HloModule many_params", "", "ENTRY main {"]
    types = ["f32[2]", "s32[2]", "bf16[2]", "f16[2]", "f64[2]", "u8[2]", "pred[2]", "s8[2]"]
    prev = None
    for i in range(n // 3):
        t = types[i % len(types)]
        out.append(f"  p{i} = {t} parameter({i})")
        out.append(f"  c{i} = f32[2] convert(p{i})")
        if prev is None:
            prev = f"c{i}"
        else:
            out.append(f"  s{i} = f32[2] add({prev}, c{i})")
            prev = f"s{i}"
    out.append(f"  ROOT r = f32[2] copy({prev})")
    out.append("}")
    return out


def many_computations(n):
    # n/4 small computations each called once from the entry (many callees, not deep)
    k = max(1, n // 5)
    out = ["HloModule many_computations", ""]
    for i in range(k):
        out.append(f"c{i} {{\n  p = f32[4] parameter(0)\n  ROOT r = f32[4] sine(p)\n}}")
    out.append("ENTRY main {\n  p0 = f32[4] parameter(0)")
    prev = "p0"
    for i in range(k):
        out.append(f"  y{i} = f32[4] call({prev}), to_apply=c{i}")
        out.append(f"  z{i} = f32[4] add(y{i}, p0)")
        prev = f"z{i}"
    out.append(f"  ROOT r = f32[4] copy({prev})\n}}")
    return out


SHAPES = {f.__name__: f for f in [chain, fanout_chain, fanout_tuple, concat_wide, shape_chain,
                                   tuple_plumbing, nest_call, nest_while, nest_cond, nest_fusion,
                                   big_constant, many_params, many_computations]}


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "--list":
        print("\n".join(SHAPES))
        return
    if len(sys.argv) != 3 or sys.argv[1] not in SHAPES:
        sys.exit("usage: gen_scale_hlo.py SHAPE N | --list  (shapes: " + ", ".join(SHAPES) + ")")
    sys.stdout.write("\n".join(SHAPES[sys.argv[1]](int(sys.argv[2]))) + "\n")


if __name__ == "__main__":
    main()
