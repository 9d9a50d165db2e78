#!/usr/bin/env python3
"""Checks the folder include graph against the rule in docs/architecture.md.

    scripts/check_layering.py [ROOT]     check the tree at ROOT (default: the repository)
    scripts/check_layering.py --graph    print the edges the tree has, with one place each
    scripts/check_layering.py --self-test

Reads every `#include "..."` in src/*/, include/optitpu/ and cli/ and fails (exit 1, one line per
problem, file:line first) on: an edge the rule does not allow, another folder's private header
(`*_internal.h`), a folder of src/ the rule does not name, a name in the rule that is no folder, and
a cycle in the rule itself. The build (CMakeLists.txt) reads the same table.
"""
import os
import re
import sys
import tempfile

# Public headers that do not carry their folder's name.
PUBLIC_OWNER = {
    "export": "core",
    "collectives": "pod",
    "tpu_optim": "optim",
    "safetensors": "ft",
    "optitpu": "umbrella",
}
# Folders that implement another folder's interface and take its place in the rule.
ALIAS = {"mpi_absent": "mpi"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def read_rule(root):
    """The ```layers block of docs/architecture.md: {layer: set(layers it may include)}."""
    path = os.path.join(root, "docs", "architecture.md")
    rule, inside = {}, False
    with open(path, encoding="utf-8") as f:
        for line in f:
            s = line.strip()
            if s == "```layers":
                inside = True
            elif inside and s.startswith("```"):
                break
            elif inside and s:
                name, *deps = s.split()
                rule[name] = set(d for d in deps if d != "-")
    if not rule:
        raise SystemExit(f"{path}: no ```layers block")
    return rule


def public_owner(header):
    base = os.path.basename(header)[:-2]
    return PUBLIC_OWNER.get(base, base)


def sources(root):
    """(path relative to root, owning layer) for every file the rule governs."""
    src = os.path.join(root, "src")
    for d in sorted(os.listdir(src)):
        if not os.path.isdir(os.path.join(src, d)):
            continue
        for f in sorted(os.listdir(os.path.join(src, d))):
            if f.endswith((".c", ".h")):
                yield f"src/{d}/{f}", ALIAS.get(d, d)
    inc = os.path.join(root, "include", "optitpu")
    for f in sorted(os.listdir(inc)):
        if f.endswith(".h"):
            yield f"include/optitpu/{f}", public_owner(f)
    cli = os.path.join(root, "cli")
    if os.path.isdir(cli):
        for f in sorted(os.listdir(cli)):
            if f.endswith((".c", ".h")):
                yield f"cli/{f}", "cli"


def target_of(rel, inc):
    """(layer, private) of the header `inc` included from file `rel`; None for the file's own
    folder."""
    if inc.startswith("optitpu/"):
        return public_owner(inc), False
    if "/" not in inc:  # a header of the file's own folder
        return None, False
    parts = inc.split("/")
    folder = parts[-2]  # "ir/x.h" and "../ir/x.h" both name ir
    return ALIAS.get(folder, folder), parts[-1].endswith("_internal.h")


def edges(root):
    for rel, layer in sources(root):
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                tgt, private = target_of(rel, m.group(1))
                if tgt is not None and tgt != layer:
                    yield layer, tgt, private, f"{rel}:{n}", m.group(1)


def rule_cycle(rule):
    """A cycle in the rule as a list of layers, or None (iterative DFS)."""
    color = {}
    for start in rule:
        if start in color:
            continue
        stack = [(start, iter(sorted(rule[start])))]
        path = [start]
        color[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                color[node] = 2
                stack.pop()
                path.pop()
                continue
            if nxt not in rule:
                continue
            if color.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in color:
                color[nxt] = 1
                stack.append((nxt, iter(sorted(rule[nxt]))))
                path.append(nxt)
    return None


def check(root):
    rule = read_rule(root)
    problems = []
    cyc = rule_cycle(rule)
    if cyc:
        problems.append("docs/architecture.md: the rule has a cycle: " + " -> ".join(cyc))
    for name, deps in rule.items():
        for d in deps:
            if d not in rule:
                problems.append(f"docs/architecture.md: {name} may include '{d}', which the rule "
                                "does not name")
    folders = {ALIAS.get(d, d) for d in os.listdir(os.path.join(root, "src"))
               if os.path.isdir(os.path.join(root, "src", d))}
    for d in sorted(folders - set(rule)):
        problems.append(f"src/{d}: a folder the rule in docs/architecture.md does not name")
    for d in sorted(set(rule) - folders - {"cli", "umbrella"}):
        problems.append(f"docs/architecture.md: '{d}' names no folder of src/")
    for layer, tgt, private, where, inc in edges(root):
        if private and layer != "cli":
            problems.append(f"{where}: {layer} includes {inc}, a private header of {tgt} "
                            "(offer a named interface header instead)")
        elif tgt not in rule.get(layer, set()):
            problems.append(f"{where}: {layer} includes {inc}, but {layer} may not include {tgt} "
                            "(docs/architecture.md)")
    return problems


def self_test():
    """Builds small trees that break the rule in each way and checks each is caught."""
    def tree(files):
        d = tempfile.mkdtemp(prefix="layering-")
        for rel, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w") as f:
                f.write(text)
        return d

    doc = "```layers\ncore -\nir core\ncompiler ir core\ncli umbrella\numbrella compiler ir core\n```\n"
    base = {
        "docs/architecture.md": doc,
        "src/core/a.c": '#include "optitpu/core.h"\n',
        "src/ir/ir_internal.h": "",
        "src/ir/ir_passes.h": "",
        "src/ir/b.c": '#include "ir_internal.h"\n#include "optitpu/core.h"\n',
        "src/compiler/c.c": '#include "ir/ir_passes.h"\n#include "optitpu/ir.h"\n',
        "include/optitpu/core.h": "",
        "include/optitpu/ir.h": '#include "optitpu/core.h"\n',
        "include/optitpu/compiler.h": '#include "optitpu/ir.h"\n',
        "include/optitpu/optitpu.h": '#include "optitpu/compiler.h"\n',
        "cli/main.c": '#include "optitpu/optitpu.h"\n',
    }
    cases = {
        "clean": ({}, None),
        "upward edge": ({"src/ir/d.c": '#include "optitpu/compiler.h"\n'}, "may not include"),
        "private header": ({"src/compiler/e.c": '#include "ir/ir_internal.h"\n'}, "private header"),
        "relative private header": ({"src/compiler/e.c": '#include "../ir/ir_internal.h"\n'},
                                    "private header"),
        "cli internals": ({"cli/x.c": '#include "compiler/c.h"\n'}, "may not include"),
        "unnamed folder": ({"src/extra/f.c": ""}, "does not name"),
        "cycle": ({"docs/architecture.md": doc.replace("core -", "core compiler")}, "cycle"),
    }
    failed = 0
    for name, (extra, expect) in cases.items():
        files = dict(base)
        files.update(extra)
        got = check(tree(files))
        ok = (not got) if expect is None else any(expect in p for p in got)
        if not ok:
            failed += 1
            print(f"self-test '{name}': expected {expect or 'no problem'}, got {got}")
    print(f"layering self-test: {len(cases) - failed}/{len(cases)} cases caught as expected")
    return 1 if failed else 0


def main():
    args = sys.argv[1:]
    if args[:1] == ["--self-test"]:
        return self_test()
    graph = args[:1] == ["--graph"]
    if graph:
        args = args[1:]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    if graph:
        seen = {}
        for layer, tgt, _, where, inc in edges(root):
            seen.setdefault((layer, tgt), f"{where} {inc}")
        for (a, b), w in sorted(seen.items()):
            print(f"{a} -> {b}   ({w})")
        return 0
    problems = check(root)
    for p in problems:
        print(p)
    n = sum(1 for _ in edges(root))
    print(f"layering: {len(problems)} problem(s) in {n} cross-folder includes")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
