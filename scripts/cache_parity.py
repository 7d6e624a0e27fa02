#!/usr/bin/env python
"""Does a cached run print what a run without the cache prints, on real trees?

The cache (run/cache.py), its censuses kept by reference (groups), the stamp memo and the
pre-commit replay (run/replay_index.py) may only make the same answer cheaper. The unit tests
check that on small projects; this walks the sequence a user meets on a copy of each release
tree (fetched and cached as scripts/triage.py's are: `pip download`, `.py` files only):

- `check .` with a new cache, then warm;
- for up to three files with a fixable finding (else two with findings): a first run on the
  file alone (json, concise, text), the file touched, the file edited (json, concise, `-q`);
- another file edited so that the compiled-code census passes over it still, then so that it
  names `torch.jit` (the named files again after each);
- a new module that scripts the class holding the first fixable site (its fix must go);
- `check .` warm after all that.

Each cached output is compared with `--no-cache`'s of the same command, byte for byte (the JSON's
`elapsed_s` set to 0). Exit 1 when one differs.

    .venv/bin/python scripts/cache_parity.py vllm==0.27.1 sglang==0.5.23 peft==0.21.2
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dtype_lint.releases import release_tree  # noqa: E402


def _run(cwd: Path, *args: str) -> tuple[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run([sys.executable, "-m", "dtype_lint", "check", "--exit-zero", *args], cwd=cwd,
                          capture_output=True, text=True, env=env)
    return re.sub(r'"elapsed_s": [0-9.e-]+', '"elapsed_s": 0', done.stdout), done.stderr


class Parity:
    def __init__(self) -> None:
        self.compared = 0
        self.differ: list[str] = []

    def same(self, tree: Path, label: str, *args: str) -> None:
        """The cached run of `args` against `--no-cache`'s (the cached one first: it is the one
        whose state the sequence builds)."""
        cached = _run(tree, *args)
        fresh = _run(tree, "--no-cache", *args)
        self.compared += 1
        if cached != fresh:
            self.differ.append(f"{tree.name}: {label}")
            print(f"  DIFFER {label}\n    cached:  {cached[0][:400]!r}\n    no-cache: {fresh[0][:400]!r}")

    def tree(self, src: Path, work: Path) -> None:
        tree = work / src.name
        shutil.copytree(src, tree, symlinks=True)
        self.same(tree, "cold cache", "--output-format", "json", ".")
        self.same(tree, "warm", "--output-format", "json", ".")
        report = json.loads(_run(tree, "--no-cache", "--output-format", "json", ".")[0])
        findings = report["findings"]
        files = sorted({f["path"] for f in findings if f.get("fix")})[:3] or sorted({f["path"] for f in findings})[:2]
        print(f"{src.name}: {len(findings)} findings; named files {files}")
        for name in files:
            path = tree / name
            for fmt in (("--output-format", "json"), ("--output-format", "concise"), ()):
                self.same(tree, f"first run on {name} {fmt}", *fmt, name)
            os.utime(path)
            self.same(tree, f"{name} touched", "--output-format", "concise", name)
            with path.open("a", encoding="utf-8") as out:
                out.write("\n# edited by cache_parity\n")
            for fmt in (("--output-format", "json"), ("--output-format", "concise"), ("-q",)):
                self.same(tree, f"{name} edited {fmt}", *fmt, name)
        other = next((p for p in sorted(tree.rglob("*.py")) if p.relative_to(tree).as_posix() not in files
                      and ".dtype_lint_cache" not in p.parts), None)
        if other is not None:
            for edit, what in (("\nimport torch  # compiles nothing\n", "passed over still"),
                               ("\n_script = torch.jit.script\n", "names torch.jit")):
                with other.open("a", encoding="utf-8") as out:
                    out.write(edit)
                for name in files:
                    self.same(tree, f"another file edited ({what}), {name}", "--output-format", "json", name)
        fixable = next((f for f in findings if f.get("fix")), None)
        owner = _class_at(tree / fixable["path"], fixable["line"]) if fixable is not None else None
        if owner is not None:
            # A new module that scripts the class holding a fixable site: the fix must go.
            module = fixable["path"][:-3].replace("/", ".").removesuffix(".__init__")
            (tree / "_cache_parity_export.py").write_text(
                f"import torch\nfrom {module} import {owner}\n\n\n"
                f"def export(layer: {owner}):\n    return torch.jit.script(layer)\n", encoding="utf-8")
            self.same(tree, f"a new file scripts {owner}", "--output-format", "json", fixable["path"])
        self.same(tree, "warm after the edits", "--output-format", "json", ".")


def _class_at(path: Path, line: int) -> str | None:
    """The top-level class whose body holds `line` of `path`, else None."""
    import ast

    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef) and node.lineno <= line <= (node.end_lineno or 0):
            return node.name
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("releases", nargs="+", metavar="DIST==VERSION", help="release trees, e.g. vllm==0.27.1")
    args = parser.parse_args(argv)
    parity = Parity()
    with tempfile.TemporaryDirectory(prefix="dtype-lint-cache-parity-") as work:
        for spec in args.releases:
            dist, _, version = spec.partition("==")
            started = time.monotonic()
            parity.tree(release_tree(dist, version), Path(work))
            print(f"  {time.monotonic() - started:.0f} s")
    print(f"{parity.compared} outputs compared, {len(parity.differ)} differ")
    return 1 if parity.differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
