#!/usr/bin/env python3
"""The house review's numbers, measured the same way every time (issue 36's acceptance):
state fields each engine phase touches, PE integer casts along the data path, kernel-launch
mechanisms, the largest source files and functions, and the size of benches/results/.

Usage: python3 scripts/house-metrics.py [--json FILE]   (from anywhere in the checkout)

Heuristics, stated so that before/after compare like with like:
- fields per phase: distinct `<owner>.<field>` reads and writes (not method calls) in each
  engine module, where <owner> is `self` or a binding of one of the engine's state types;
- PE casts: ` as <int>` applied to a name that holds a PE (pe, me, src, to, owner, group, peer,
  dst, `.pe`) in proxy/, transport/ and ring/ sources; and, separately, where a `Pe` is made
  from a plain integer (`Pe::new`, `Pe::from_idx`: the boundaries);
- launch paths: hand-written `cuLaunchKernel` calls, cudarc `launch_builder`, and hand-built
  `[*mut c_void; N]` argument arrays in Rust sources.
"""
import json
import os
import re
import subprocess
import sys

ROOT = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                      cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()


def tracked(pattern_ext):
    out = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=ROOT).stdout
    return [f for f in out.split() if f.endswith(pattern_ext)]


def strip_tests(text):
    """The text before an inline `#[cfg(test)] mod ... {` (a `mod tests;` declaration stays)."""
    m = re.search(r"#\[cfg\(test\)\]\s*mod \w+ \{", text)
    return text[: m.start()] if m else text


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
        return f.read()


def functions(text):
    """(name, first line, lines) of every `fn` item with a body: signature to the `}` at its indent."""
    lines = text.splitlines()
    out = []
    for i, l in enumerate(lines):
        t = l.lstrip()
        indent = len(l) - len(t)
        sig = re.sub(r"^(pub(\([a-z]+\))? )?(const )?(async )?(unsafe )?(extern \"C\" )?", "", t)
        m = re.match(r"fn (\w+)", sig)
        if not m:
            continue
        # A declaration (`fn f(..);`, in a trait or an extern block) has no body.
        head = next((lines[k].rstrip() for k in range(i, len(lines))
                     if lines[k].rstrip().endswith(("{", ";", "}"))), ";")
        if head.endswith(";"):
            continue
        if "{" in t and t.endswith("}"):
            out.append((m.group(1), i + 1, 1))
            continue
        close = " " * indent + "}"
        end = next((k for k in range(i, len(lines)) if lines[k].rstrip() == close), len(lines) - 1)
        out.append((m.group(1), i + 1, end - i + 1))
    return out


OWN = re.compile(r"\bself\.([a-z_][a-z0-9_]*)\b(?!\s*[(!:])")
LENT = re.compile(r"\bio\.([a-z_][a-z0-9_]*)\b(?!\s*[(!:])")


def engine_fields():
    """Per engine module: distinct `self.<field>` (the state its methods own or share) and
    distinct `io.<service>` (what a phase borrows from the engine's services, 0 before the
    split)."""
    d = "proxy/src/engine"
    res = {}
    for f in sorted(os.listdir(os.path.join(ROOT, d))):
        p = os.path.join(d, f)
        if os.path.isdir(os.path.join(ROOT, p)):
            p = os.path.join(p, "mod.rs")
            if not os.path.exists(os.path.join(ROOT, p)):
                continue
        elif not f.endswith(".rs"):
            continue
        text = strip_tests(read(p))
        own = {m.group(1) for m in OWN.finditer(text)}
        lent = {m.group(1) for m in LENT.finditer(text)}
        res[f] = {"self": len(own), "io": len(lent)}
    return res


PE_NAMES = r"(?:pe|me|src|to|owner|group|peer|dst|from|rank|p\.pe|f\.pe|self\.me|self\.n)"
CAST = re.compile(r"\b" + PE_NAMES + r"\)?\s+as\s+(?:u8|u16|u32|u64|usize|i32|i64)\b")
MADE = re.compile(r"\bPe::(?:new|from_idx)\(")


def pe_casts():
    """(`as` casts of PEs, `Pe` made from integers) per file, outside tests."""
    res = {}
    for f in tracked(".rs"):
        if not f.startswith(("proxy/src", "transport/src", "ring/src")) or "/tests/" in f:
            continue
        text = strip_tests(read(f))
        n = (len(CAST.findall(text)), len(MADE.findall(text)))
        if n != (0, 0):
            res[f] = n
    return res


def launch_paths():
    pats = {
        "cuLaunchKernel calls": re.compile(r"\bcuLaunchKernel\s*\("),
        "cudarc launch_builder": re.compile(r"\blaunch_builder\s*\("),
        "[*mut c_void; N] arrays": re.compile(r"\[\*mut\s+(?:std::ffi::|core::ffi::|libc::)?c_void;\s*\d+\]"),
    }
    res = {k: 0 for k in pats}
    where = {k: [] for k in pats}
    for f in tracked(".rs"):
        text = read(f)
        for k, p in pats.items():
            n = len(p.findall(text))
            if n:
                res[k] += n
                where[k].append(f"{f}:{n}")
    return res, where


def largest():
    files = []
    funcs = []
    for f in tracked(".rs"):
        text = read(f)
        files.append((len(text.splitlines()), f))
        for name, line, n in functions(text):
            funcs.append((n, f"{f}:{line} {name}"))
    files.sort(reverse=True)
    funcs.sort(reverse=True)
    return files[:10], funcs[:10]


def results_tree():
    out = subprocess.run(["git", "ls-files", "benches/results"], capture_output=True, text=True,
                         cwd=ROOT).stdout.split()
    size = sum(os.path.getsize(os.path.join(ROOT, f)) for f in out)
    rest = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=ROOT).stdout.split()
    return {"files": len(out), "bytes": size, "files_elsewhere": len(rest) - len(out)}


def main():
    fields = engine_fields()
    casts = pe_casts()
    launch, where = launch_paths()
    files, funcs = largest()
    tree = results_tree()
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         cwd=ROOT).stdout.strip()
    print(f"# house metrics at {rev}")
    print("\n## state each engine module touches (outside tests): own `self.` fields, lent `io.` services")
    for k, v in fields.items():
        print(f"- {k}: {v['self']} + {v['io']}")
    total = tuple(sum(v[i] for v in casts.values()) for i in (0, 1))
    print(f"\n## PE conversions in proxy/, transport/, ring/ (outside tests): {total[0]} `as` casts, "
          f"{total[1]} `Pe` made from integers")
    for k, v in sorted(casts.items(), key=lambda x: -sum(x[1])):
        print(f"- {k}: {v[0]} casts, {v[1]} made")
    print("\n## kernel-launch mechanisms in Rust sources")
    for k, v in launch.items():
        print(f"- {k}: {v} ({', '.join(where[k])})")
    print("\n## largest Rust files")
    for n, f in files:
        print(f"- {n} {f}")
    print("\n## longest Rust functions")
    for n, f in funcs:
        print(f"- {n} {f}")
    print(f"\n## benches/results: {tree['files']} files, {tree['bytes'] / 2**20:.1f} MiB "
          f"(the rest of the tree: {tree['files_elsewhere']} files)")
    if "--json" in sys.argv:
        with open(sys.argv[sys.argv.index("--json") + 1], "w") as f:
            json.dump({"rev": rev, "engine_fields": fields, "pe_casts": casts, "launch": launch,
                       "largest_files": files, "longest_functions": funcs, "results": tree}, f,
                      indent=1)


if __name__ == "__main__":
    main()
