"""The in-Python rows of bench.py, each run in its own child: `python stages.py NAME TREE`.

Prints one JSON line: what was done (file counts) and the in-process time of the loop. Imports only
what a stage needs, so that a child costs the stage plus interpreter start-up, like a linter run.
"""

import json
import os
import re
import sys
import time


def py_files(tree):
    """Every .py file under tree, sorted; hidden directories (tool caches) and __pycache__ skipped."""
    out = []
    for dirpath, dirnames, filenames in os.walk(tree):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
        out.extend(os.path.join(dirpath, n) for n in sorted(filenames) if n.endswith(".py"))
    return out


def _read(path):
    with open(path, "rb") as fh:
        data = fh.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def _prefilter():
    try:
        from dtype_lint.core.prefilter import for_rules
        from dtype_lint.rules import ALL_RULES

        might_match = for_rules(ALL_RULES).might_match
    except ImportError:
        # Only until dtype_lint.core.prefilter exists: the same shape of test, said plainly.
        site = re.compile(r"weight\w*[\"'\])]*\s*[.,)]")

        def might_match(text):
            return "weight" in text and site.search(text) is not None

        return might_match, "fallback regex (dtype_lint.core.prefilter not importable)"
    return might_match, "dtype_lint.core.prefilter.for_rules(ALL_RULES).might_match"


def run_stage(name, tree):
    t0, c0 = time.perf_counter(), time.process_time()
    files = py_files(tree)
    info = {"stage": name}
    if name == "read":
        size = sum(len(_read(p)) for p in files)
        info.update(files=len(files), chars=size)
    elif name == "read+prefilter":
        might_match, how = _prefilter()
        matched = sum(1 for p in files if might_match(_read(p)))
        info.update(files=len(files), matched=matched, prefilter=how)
    elif name == "ast.parse":
        import ast

        errors = 0
        for p in files:
            try:
                ast.parse(_read(p), filename=p)
            except (SyntaxError, ValueError):
                errors += 1
        info.update(files=len(files), errors=errors)
    elif name == "libcst-prefiltered":
        import libcst

        might_match, how = _prefilter()
        parsed = errors = 0
        for p in files:
            text = _read(p)
            if not might_match(text):
                continue
            parsed += 1
            try:
                libcst.parse_module(text)
            except libcst.ParserSyntaxError:
                errors += 1
        info.update(files=parsed, read=len(files), errors=errors, prefilter=how)
    else:
        raise SystemExit(f"unknown stage {name!r}")
    info.update(inner_wall_s=time.perf_counter() - t0, inner_cpu_s=time.process_time() - c0)
    return info


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: stages.py NAME TREE")
    print(json.dumps(run_stage(sys.argv[1], sys.argv[2])))
