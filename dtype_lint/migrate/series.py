"""A migration as reviewable changes: a series of `git format-patch` patches, one per concern.

`dtype-lint migrate PATH --series DIR` computes the same rewrite as the in-place migration
(a fixing run that writes nothing), then splits it: the shared helper first, then one patch per
file, directory or rule (`--group-by`). Each commit is written in the target project's
conventions (conventions.py, messages.py): its title tag and wording, its pull-request template
(vLLM: Purpose / Test Plan / Test Result), a sign-off by the configured author, no rule codes.
A patch to an input-dtype helper adds that helper's unit test in the project's test layout
(regression.py), and its Test Result is the helper run before and after (and, for vLLM's MLA
module, the release's own prefill run before and after: an ecosystem's `proofs`). The patches
are made by git itself, in a scratch repository holding the original text of every file they
touch, so they apply with `git am` (or `git apply`) on a checkout of the scanned tree, in order,
and the tree after the last one equals the in-place migration byte for byte, plus the tests the
series adds (tests/test_series.py).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections import defaultdict
from dataclasses import field
from pathlib import Path, PurePosixPath

from dtype_lint.core.findings import Finding
from dtype_lint.core.records import record
from dtype_lint.core.writer import ProjectWriter
from dtype_lint.ecosystems.registry import default_plugin
from dtype_lint.fix.fixer import fix_text
from dtype_lint.fix.helper_template import HelperLocation, decision_rows, function_table
from dtype_lint.migrate import messages, regression
from dtype_lint.migrate.conventions import CONVENTIONS, Convention, Identity

# The executable proofs every convention's patches get (the registry's `proofs` role: the reference
# kernels of the helper template's storages).
proofs = default_plugin("proofs")

GROUPS = ("file", "directory", "rule")
# A fixed date makes the series reproducible: the same tree and author give the same patches.
_DATE = "2026-01-01T00:00:00+0000"
# The scratch repository's own commits (its base) are never part of the series.
_SCRATCH = ("dtype-lint", "dtype-lint@localhost")

WHY = messages.WHY


@record
class FileChange:
    path: str  # relative to the series root, posix
    before: bytes | None  # None: the file is created
    after: bytes
    findings: list[Finding] = field(default_factory=list)  # the sites this change fixes
    group: str = ""  # with --group-by rule: the code whose fixes this step applies
    test: bool = False  # a regression test the series adds (not part of the migration itself)


@record
class Patch:
    subject: str
    body: str
    changes: list[FileChange]
    file: Path | None = None  # the .patch written
    kind: str = "sites"  # "helper" | "fix-helper" | "sites"
    message: messages.Message | None = None

    @property
    def findings(self) -> list[Finding]:
        return [f for c in self.changes for f in c.findings]

    @property
    def codes(self) -> list[str]:
        return sorted({f.code for f in self.findings})

    @property
    def tests(self) -> list[str]:
        return [c.path for c in self.changes if c.test]


@record
class Style:
    """How the series is written for its target: the project's convention, who signs it, and
    where the release's own files are read from for its proofs."""

    convention: Convention = field(default_factory=lambda: CONVENTIONS["generic"])
    identity: Identity | None = None
    signoff: bool = False
    root: Path | None = None  # the tree the series applies to
    label: str = "the tree"  # how a proof names that tree's code ("0.33.0")
    taken: set[str] = field(default_factory=set)  # test paths this series already adds
    generated: list = field(default_factory=list)  # generated.Note for the files the series changes


def series_root(path: Path, project_root: Path | None = None) -> Path:
    """Patch paths are relative to the git checkout holding `path`; outside git, to the project
    root dtype-lint found for it (`config.project_root`: the configuration's folder, else the first
    folder above that is not a package) when `path` lies in it, else to `path` itself. So
    `migrate vllm --series OUT` at a release's root writes `vllm/...` paths, and `git am` at that
    root, once it is a repository, applies them where they belong."""
    folder = path if path.is_dir() else path.parent
    try:
        return Path(git(["rev-parse", "--show-toplevel"], folder).strip())
    except (OSError, subprocess.CalledProcessError):
        pass
    top = project_root.resolve() if project_root is not None else None
    return top if top is not None and (folder == top or top in folder.parents) else folder


def plan(changes: list[FileChange], helper_changes: list[FileChange], helper: HelperLocation | None,
         group_by: str, proof=None, style: Style | None = None) -> list[Patch]:
    """The patches, in the order they apply: the helper first, then the groups."""
    if group_by not in GROUPS:
        raise ValueError(f"--group-by must be one of {', '.join(GROUPS)}")
    style = style or Style()
    conv = style.convention
    patches = []
    helper_test_path = None
    if helper_changes and helper is not None:
        patch = _helper_patch(helper, helper_changes, style)
        helper_test_path = patch.tests[0] if patch.tests else None
        patches.append(patch)
    elif helper is not None and helper.exists:
        candidate = conv.test_path(_rel_to(helper.path, style.root), helper.func)
        if style.root is not None and (style.root / candidate).is_file():
            helper_test_path = candidate
    groups: dict[str, list[FileChange]] = defaultdict(list)
    for change in changes:
        key = {"file": change.path, "directory": str(Path(change.path).parent), "rule": change.group}[group_by]
        groups[key].append(change)
    # A group that fixes an existing helper goes first: every later patch may rely on it, and a
    # reviewer reads the decision before its uses.
    for key in sorted(groups, key=lambda k: (not any(_fixes_helper(f) for c in groups[k] for f in c.findings), k)):
        chs = sorted(groups[key], key=lambda c: c.path)
        if any(_fixes_helper(f) for c in chs for f in c.findings):
            patches.append(_fix_helper_patch(chs, helper, style, proof))
        else:
            # The helper the fixes import (an ecosystem's own helper where its sites route through it).
            imported = {name for ch in chs for f in ch.findings if f.fix for _module, name in f.fix.imports}
            func = (next(iter(imported)) if len(imported) == 1 else
                    helper.func if helper else "the input-dtype helper")
            rewrites = sorted({f.fix.description for ch in chs for f in ch.findings if f.fix})
            result = _proof_lines(proof, chs)
            message = messages.sites_message(conv, key if group_by != "rule" else "", chs, func, rewrites,
                                             helper_test_path, result,
                                             [n for n in style.generated if n.path in {c.path for c in chs}])
            patches.append(_finish(Patch("", "", chs, kind="sites"), message, style))
    return patches


def _rel_to(path, root: Path | None) -> str:
    try:
        return Path(path).resolve().relative_to(Path(root).resolve()).as_posix() if root else Path(path).as_posix()
    except ValueError:
        return Path(path).as_posix()


def _package_rel(path: str) -> str:
    """A path relative to the directory holding the package (a `src/` layout dropped)."""
    parts = PurePosixPath(path).parts
    return str(PurePosixPath(*parts[1:])) if parts and parts[0] == "src" else path


def _free_test_path(test, style: Style, taken: set[str]):
    """The test under a name the tree does not already use (a patch must create, never overwrite)."""
    import dataclasses

    path, n = test.path, 1
    while path in taken or (style.root is not None and (style.root / path).exists()):
        n += 1
        path = str(PurePosixPath(test.path).with_name(f"{PurePosixPath(test.path).stem}_{n}.py"))
    taken.add(path)
    return dataclasses.replace(test, path=path)


def _finish(patch: Patch, message: messages.Message, style: Style) -> Patch:
    messages.signoff(message, style.identity, style.signoff)
    patch.message = message
    patch.subject = message.title
    patch.body = message.body(style.convention)
    messages.check_clean(patch.subject + "\n" + patch.body)
    return patch


def _helper_patch(helper: HelperLocation, helper_changes: list[FileChange], style: Style) -> Patch:
    conv = style.convention
    changes = list(helper_changes)
    helper_path = _rel_to(helper.path, style.root)
    test = None
    result: list[str] = []
    try:
        table = function_table(helper.source, helper.func)
    except Exception:  # noqa: BLE001 - a helper beyond the evaluator gets no generated test
        table = None
    if table is not None:
        test = _free_test_path(regression.helper_test(conv, helper_path, helper.module, helper.func, "fp8_input",
                                                      table), style, style.taken)
        changes.append(FileChange(test.path, None, test.text.encode("utf-8"), test=True))
        if proofs.available():
            package = helper.module.split(".")[0]
            result = proofs.unit_cases({}, {_package_rel(helper_path): helper.source.encode("utf-8")},
                                       helper.module, helper.func, test.cases, package)
    if not result:
        result = ["The helper's decisions were not executed here (no torch)."]
    message = messages.helper_message(conv, helper.module, helper.func, decision_rows(), test, result)
    return _finish(Patch("", "", changes, kind="helper"), message, style)


def _fix_helper_patch(chs: list[FileChange], helper: HelperLocation | None, style: Style, proof) -> Patch:
    conv = style.convention
    changes = list(chs)
    all_cases, funcs, tests, result = [], [], [], []
    line = 0
    for change in chs:
        names = messages.fixed_helper_names(change.findings)
        if not names:
            continue
        before_text = change.before.decode("utf-8") if change.before is not None else ""
        after_text = change.after.decode("utf-8")
        line = line or min(f.span.line for f in change.findings if _fixes_helper(f))
        for func in names:
            funcs.append(func)
            try:
                old, new = function_table(before_text, func), function_table(after_text, func)
            except Exception:  # noqa: BLE001 - beyond the evaluator: no table, no generated test
                continue
            all_cases += messages.changed_cases(old, new)
            module = messages.module_of(change.path, conv.package)
            test = _free_test_path(regression.helper_test(conv, change.path, module, func,
                                                          messages.flag_name(after_text, func), new),
                                   style, style.taken)
            changes.append(FileChange(test.path, None, test.text.encode("utf-8"), test=True))
            tests.append(test.path)
            if proofs.available():
                package = module.split(".")[0]
                rel = _package_rel(change.path)
                result += proofs.unit_cases({rel: change.before or b""}, {rel: change.after}, module, func, test.cases,
                                            package) + [""]
        if proofs.available() and style.root is not None:
            result += proofs.release_proof(change.path, style.label, before_text, after_text, style.root)
    extra = _proof_lines(proof, chs, fallback=False)
    result += extra
    if not any(text.strip() for text in result):
        result = ["Not executed here (no torch)."]
    message = messages.fix_helper_message(conv, chs[0].path, funcs, all_cases, tests, result, line)
    others = [(ch.path, f) for ch in chs for f in sorted(ch.findings, key=Finding.sort_key) if not _fixes_helper(f)]
    if others:  # a coarser grouping put call sites beside the helper's fix
        func = helper.func if helper else "the input-dtype helper"
        message.purpose += ["", f"Also in this patch, call sites routed through {func}():"]
        message.purpose += [messages.wrap(f"{path}:{f.span.line} in `{f.scope}`", "- ") for path, f in others]
    while message.test_result and not message.test_result[-1].strip():
        message.test_result.pop()
    return _finish(Patch("", "", changes, kind="fix-helper"), message, style)


def _proof_lines(proof, chs, fallback: bool = True) -> list[str]:
    extra = proof(chs) if proof else None
    if extra:
        return extra.rstrip().splitlines()
    return ["Not executed: no reference run applies to these sites; each changed file compiles."] if fallback else []


def _fixes_helper(f: Finding) -> bool:
    """The finding is an unsound input-dtype helper's definition (DTL005), fixed in place."""
    return f.kind == "definition" and f.fix is not None


def format_patches(patches: list[Patch], out: Path, identity: Identity | None = None) -> list[tuple[str, bytes]]:
    """Commit the patches in a scratch repository as `identity` and `git format-patch` them
    there: (file name, bytes) of each, in order; each patch's `file` is set to its path in `out`.
    Nothing is written into `out` here: migration.py writes the patches and their descriptions
    together, once series_folder.py has agreed that none of them overwrites a file the user has."""
    author = (identity.name, identity.email) if identity else _SCRATCH
    with tempfile.TemporaryDirectory(prefix="dtype-lint-series-") as tmp:
        repo = Path(tmp) / "repo"
        scratch = ProjectWriter(Path(tmp))
        scratch.make_dirs(repo, "scratch repository")
        git(["init", "-q", "-b", "main"], repo)
        base: dict[str, bytes] = {}
        for patch in patches:
            for change in patch.changes:
                if change.before is not None:
                    base.setdefault(change.path, change.before)
        for rel, data in base.items():
            _put(scratch, repo / rel, data)
        git(["add", "-A"], repo)
        git(["commit", "-q", "--allow-empty", "-m", "base"], repo)
        for patch in patches:
            for change in patch.changes:
                _put(scratch, repo / change.path, change.after)
            git(["add", "-A"], repo)
            git(["commit", "-q", "--cleanup=verbatim", "-m", patch.subject + "\n\n" + patch.body], repo, author)
        made = Path(tmp) / "patches"
        names = git(["format-patch", "--no-signature", "--zero-commit", "-o", str(made), "HEAD~" +
                      str(len(patches))], repo).split()
        formatted = []
        for patch, name in zip(patches, names):
            patch.file = out / Path(name).name
            formatted.append((Path(name).name, Path(name).read_bytes()))
    return formatted


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


def git(args: list[str], cwd: Path, author: tuple[str, str] = _SCRATCH) -> str:
    """git with a fixed author and date, and none of the caller's or the repository's hooks,
    filters or settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_TERMINAL_PROMPT="0",
               GIT_AUTHOR_NAME=author[0], GIT_AUTHOR_EMAIL=author[1], GIT_COMMITTER_NAME=author[0],
               GIT_COMMITTER_EMAIL=author[1], GIT_AUTHOR_DATE=_DATE, GIT_COMMITTER_DATE=_DATE)
    cmd = ["git", "-c", f"core.hooksPath={os.devnull}", "-c", "core.fsmonitor=false", "-c", "commit.gpgsign=false",
           "-c", "core.autocrlf=false", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def split_by_rule(path: str, original: str, analyze, unsafe: bool,
                  codes: list[str]) -> list[tuple[str, str, list[Finding]]]:
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
