"""A migration as reviewable changes: a series of `git format-patch` patches, one per concern.

`dtype-lint migrate PATH --series DIR` computes the same rewrite as the in-place migration
(a fixing run that writes nothing), then splits it: the shared helper first, then one patch per
file, directory or rule (`--group-by`). Each commit message says which sites it changes and with
which codes, why they are wrong (which backend gives which storage), the exact rewrite, and what
verified it (the re-check, the compile of every file after the patch, and the executable proof
`proofs.py` can give for it). The patches are made by git itself, in a scratch repository holding
the original text of every file they touch, so they apply with `git am` (or `git apply`) on a
checkout of the scanned tree, in order, and the tree after the last one equals the in-place
migration byte for byte (tests/test_series.py).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import textwrap
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from dtype_lint.findings import Finding
from dtype_lint.fix.fixer import fix_text
from dtype_lint.fix.helper_template import HelperLocation, decision_rows
from dtype_lint.engine.writer import ProjectWriter

GROUPS = ("file", "directory", "rule")
# A fixed date and author make the series reproducible: the same tree gives the same patches.
_DATE = "2026-01-01T00:00:00+0000"
_AUTHOR = ("dtype-lint", "dtype-lint@users.noreply.github.com")

WHY = (
    "A quantization backend may repack a layer's weight after loading, so its storage dtype is not "
    "the compute dtype of the layer's input: Marlin FP8 stores `torch.int32`, NVFP4 `torch.uint8`, "
    "FP8 `float8_e4m3fn`, W8A8-INT8 `torch.int8`, and AWQ/GPTQ/compressed-tensors WNA16 layers have "
    "no `.weight` at all. Casting an activation to `layer.weight.dtype` (or allocating in it) then "
    "crashes (`unsupported `a` scalar_type` in Marlin, vLLM issue #38658; `AttributeError` on AWQ, "
    "PR #34695) or silently truncates the activation to integers."
)


@dataclass
class FileChange:
    path: str  # relative to the series root, posix
    before: bytes | None  # None: the file is created
    after: bytes
    findings: list[Finding] = field(default_factory=list)  # the sites this change fixes
    group: str = ""  # with --group-by rule: the code whose fixes this step applies


@dataclass
class Patch:
    subject: str
    body: str
    changes: list[FileChange]
    file: Path | None = None  # the .patch written


def series_root(path: Path) -> Path:
    """Patch paths are relative to the git checkout holding `path`, else to `path` itself."""
    try:
        top = git(["rev-parse", "--show-toplevel"], path if path.is_dir() else path.parent).strip()
        return Path(top)
    except (OSError, subprocess.CalledProcessError):
        return path if path.is_dir() else path.parent


def plan(changes: list[FileChange], helper_changes: list[FileChange], helper: HelperLocation | None,
         group_by: str, proof=None) -> list[Patch]:
    """The patches, in the order they apply: the helper first, then the groups."""
    if group_by not in GROUPS:
        raise ValueError(f"--group-by must be one of {', '.join(GROUPS)}")
    patches = []
    if helper_changes and helper is not None:
        patches.append(Patch(
            f"Add {helper.func}: one helper decides a layer's input dtype",
            _helper_body(helper), helper_changes))
    groups: dict[str, list[FileChange]] = defaultdict(list)
    for ch in changes:
        key = {"file": ch.path, "directory": str(Path(ch.path).parent), "rule": ch.group}[group_by]
        groups[key].append(ch)
    # A group that fixes an existing helper goes first: every later patch may rely on it, and a
    # reviewer reads the decision before its uses.
    for key in sorted(groups, key=lambda k: (not any(_fixes_helper(f) for c in groups[k] for f in c.findings), k)):
        chs = sorted(groups[key], key=lambda c: c.path)
        patches.append(Patch(_subject(key, chs, helper), _body(chs, helper, proof), chs))
    return patches


def _fixes_helper(f: Finding) -> bool:
    """The finding is an unsound input-dtype helper's definition (DTL005), fixed in place."""
    return f.kind == "definition" and f.fix is not None


def _subject(key: str, changes: list[FileChange], helper: HelperLocation | None) -> str:
    func = helper.func if helper else "the input-dtype helper"
    fixed = [f for c in changes for f in c.findings if _fixes_helper(f)]
    n = sum(len(c.findings) for c in changes) - len(fixed)
    # The whole path: a reviewer of a large tree cannot tell which `model.py` a bare name means.
    where = key if key.startswith("DTL") else (key if key not in ("", ".") else "all files")
    codes = ", ".join(sorted({f.code for c in changes for f in c.findings}))
    what = []
    if fixed:
        what.append("make " + ", ".join(f"`{f.expression.removeprefix('def ')}`" for f in fixed)
                    + " sound for every weight storage")
    if n:
        what.append(f"route {n} weight-dtype site{'s' if n != 1 else ''} through {func}")
    return f"{where}: {' and '.join(what)} ({codes})"


def _helper_body(helper: HelperLocation) -> str:
    return "\n".join([
        _wrap(WHY), "",
        f"This adds `{helper.module}:{helper.func}(layer, fp8_input)`, which returns the dtype an "
        "activation must have before entering `layer`, or None to keep the model dtype:",
        "", *("    " + row for row in decision_rows()), "",
        "Verified: dtype-lint evaluates this function's own code over every storage (fp16, bf16, "
        "fp32, fp8 e4m3fn/e5m2, int32, uint8, int8, no .weight) x fp8_input, and the test suite runs "
        "the same code with torch on real dtypes; it returns no integer dtype for any case.",
    ])


def _wrap(text: str, indent: str = "") -> str:
    """Fill to 72 columns; a list item's continuation lines align under its text."""
    follow = " " * (len(indent) + (0 if indent.strip() else 2)) if indent else ""
    return textwrap.fill(text, 72, initial_indent=indent, subsequent_indent=follow,
                         break_long_words=False, break_on_hyphens=False)


def _body(changes: list[FileChange], helper: HelperLocation | None, proof) -> str:
    lines = [_wrap(WHY), "", "Sites:"]
    for ch in changes:
        for f in sorted(ch.findings, key=Finding.sort_key):
            lines.append(_wrap(f"{ch.path}:{f.span.line} {f.code} in `{f.scope}`: `{_short(f.expression)}`", "- "))
            for e in f.evidence:
                where = f" ({Path(e.path).name}:{e.line})" if e.path else ""
                lines.append(_wrap(f"{e.message}{where}", "    "))
    lines += ["", "Rewrite:"]
    for desc in sorted({f.fix.description for ch in changes for f in ch.findings if f.fix}):
        lines.append(_wrap(desc, "- "))
    wrong = [f for ch in changes for f in ch.findings if _fixes_helper(f)]
    for f in wrong:
        lines.append(_wrap(f"before this patch, {f.message}", "- "))
    lines += ["", "Verified:",
              _wrap("dtype-lint re-checked every changed file: the sites above are gone and nothing new appears;", "- "),
              _wrap("every Python file of the tree compiles after this patch;", "- ")]
    if wrong:
        lines.append(_wrap("dtype-lint's dtype evaluator read the patched helper's own code: it is sound on every "
                           "storage (fp16, bf16, fp32, fp8 e4m3fn/e5m2, int32, uint8, int8, no .weight) x fp8 "
                           "input, and decides every other case exactly as before;", "- "))
    extra = proof(changes) if proof else None
    if extra:
        lines.append(extra.rstrip())
    else:
        lines.append(_wrap("no executable proof applies to these sites beyond the checks above.", "- "))
    return "\n".join(lines)


def _short(text: str, limit: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def write(patches: list[Patch], out: Path, writer: ProjectWriter) -> list[Path]:
    """Commit the patches in a scratch repository, `git format-patch` them there, and write the
    patch files into `out` through the run's writer (the user named that folder)."""
    with tempfile.TemporaryDirectory(prefix="dtype-lint-series-") as tmp:
        repo = Path(tmp) / "repo"
        scratch = ProjectWriter(Path(tmp))
        scratch.make_dirs(repo, "scratch repository")
        git(["init", "-q", "-b", "main"], repo)
        base: dict[str, bytes] = {}
        for p in patches:
            for ch in p.changes:
                if ch.before is not None:
                    base.setdefault(ch.path, ch.before)
        for rel, data in base.items():
            _put(scratch, repo / rel, data)
        git(["add", "-A"], repo)
        git(["commit", "-q", "--allow-empty", "-m", "base"], repo)
        for p in patches:
            for ch in p.changes:
                _put(scratch, repo / ch.path, ch.after)
            git(["add", "-A"], repo)
            git(["commit", "-q", "-m", p.subject, "-m", p.body], repo)
        made = Path(tmp) / "patches"
        names = git(["format-patch", "--no-signature", "--zero-commit", "-o", str(made), "HEAD~" +
                      str(len(patches))], repo).split()
        files = []
        writer.make_dirs(out, "patch series", outside_ok=True)
        for p, name in zip(patches, names):
            target = out / Path(name).name
            writer.write(target, Path(name).read_bytes(), "patch", outside_ok=True)
            p.file = target
            files.append(target)
    return files


def _put(writer: ProjectWriter, path: Path, data: bytes) -> None:
    writer.make_dirs(path.parent, "scratch repository")
    writer.write(path, data, "scratch")


def checkout(src: Path, dest: Path, message: str = "base", ignore=("__pycache__", ".dtype_lint_cache")) -> Path:
    """A git repository at `dest` holding a copy of `src` as one commit: what a maintainer
    applies a series to (the tests and scripts/upstream.py make theirs this way)."""
    import shutil

    shutil.copytree(src, dest, ignore=shutil.ignore_patterns(*ignore))
    git(["init", "-q", "-b", "main"], dest)
    git(["add", "-A"], dest)
    git(["commit", "-q", "-m", message], dest)
    return dest


def git(args: list[str], cwd: Path) -> str:
    """git with a fixed author and date, and none of the caller's or the repository's hooks,
    filters or settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_TERMINAL_PROMPT="0",
               GIT_AUTHOR_NAME=_AUTHOR[0], GIT_AUTHOR_EMAIL=_AUTHOR[1], GIT_COMMITTER_NAME=_AUTHOR[0],
               GIT_COMMITTER_EMAIL=_AUTHOR[1], GIT_AUTHOR_DATE=_DATE, GIT_COMMITTER_DATE=_DATE)
    cmd = ["git", "-c", f"core.hooksPath={os.devnull}", "-c", "core.fsmonitor=false", "-c", "commit.gpgsign=false",
           "-c", "core.autocrlf=false", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def split_by_rule(path: str, original: str, analyze, unsafe: bool, codes: list[str]) -> list[tuple[str, str, list[Finding]]]:
    """(code, text after that code's fixes, the findings fixed) for each code in order, each step
    starting from the previous one's text: a file's change split by rule."""
    steps = []
    text = original
    for code in codes:
        def only(t, code=code):
            return [f if f.code == code or f.fix is None else _without_fix(f) for f in analyze(t)]

        outcome = fix_text(path, text, only, unsafe)
        if outcome.error:
            raise ValueError(f"{path}: {outcome.error}")
        if outcome.text != text:
            steps.append((code, outcome.text, outcome.applied))
            text = outcome.text
    return steps


def _without_fix(f: Finding) -> Finding:
    from dataclasses import replace

    return replace(f, fix=None, no_fix_reason="fixed in another patch of the series")
