"""`dtype-lint migrate PATH`: helper + every safe fix across a tree + a markdown report for the PR.

A migration is a fixing run of the pipeline (no cache: it must see the tree as it is) and a
report built from its result: what was fixed, what is left for a human and why, and every file
the run created or changed.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from pathlib import Path

from dtype_lint.core.config import Config
from dtype_lint.core.findings import FIX_FAILED, Finding
from dtype_lint.core.rule_registry import migration_codes
from dtype_lint.core.source import MAX_SOURCE_BYTES, read_bytes, read_file
from dtype_lint.core.writer import scratch_copy, write_scratch_files
from dtype_lint.ecosystems.registry import default_plugin, plugins
from dtype_lint.run.memory_cache import RunStore
from dtype_lint.run.pipeline import RunOptions, RunResult, not_applied, reanalyze, run, settle


def run_migration(config: Config, path: str, *, unsafe_fixes: bool = False, jobs: int | None = None,
                  progress=None, store: RunStore | None = None) -> RunResult:
    """`store`: keeps the fixing run's per-file results for the re-check of the migrated tree."""
    config = reuse_sound_helper(config, path)
    # A migration routes every site through the helper, and the opt-in rules with proven fixes
    # belong to it (`in_migration` in the rule module: DTL004's guard is DTL001's rewrite, DTL005
    # fixes an unsound helper in place),
    # unless the configuration turned them off.
    opt_in = [code for code in migration_codes() if not config.enabled(code) and code not in config.ignore]
    if opt_in and config.select == ["DTL"]:
        config = dataclasses.replace(config, select=[*config.select, *opt_in])
    return run(config, RunOptions(paths=[path], jobs=jobs, use_cache=False, fix=True,
                                  unsafe_fixes=unsafe_fixes, progress=progress, store=store))


def _fix_description(finding: Finding) -> str:
    """What the written fix does (a fixed finding always carries its fix)."""
    return finding.fix.description if finding.fix is not None else ""


def _rel(path: str, root: str) -> str:
    try:
        return Path(path).resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        return path


def _helper_state(result: RunResult, series: bool = False) -> str:
    helper = result.helper
    if helper is None:
        return "not needed: nothing was routed through it"
    created = any(w.why == "helper" and w.action == "created" for w in result.writes)
    if created:
        return "created by this migration"
    if helper.exists:
        return "existing"
    return "added by the series' first patch" if series and result.fixed else "not created: nothing was fixed"


def render_report(root: str, result: RunResult, report_path: str | None = None, *, series: bool = False) -> str:
    """The pull request's description. `series`: the run wrote patches and left the tree as it
    was; what it reports as fixed is what the patches fix."""
    fixed: dict[str, list[Finding]] = defaultdict(list)
    for f in result.fixed:
        fixed[f.path].append(f)
    left = result.findings
    helper = result.helper
    func = helper.func if helper else result.config.helper_spec[1]
    lines = [
        "# Route activation casts through one input-dtype helper",
        "",
        default_plugin("series_words").REPORT_WHY +
        f"This change routes those casts through `{func}`, which decides the input dtype from "
        "the storage format in one place.",
        "",
        f"- Files checked: {len(result.files)}",
        f"- Sites fixed: {len(result.fixed)} in {len(fixed)} files"
        + (" (by the patches; the tree itself is unchanged)" if series else ""),
        f"- Sites left: {len(left)}",
    ]
    if helper is not None:
        lines.append(f"- Helper: `{helper.module}:{helper.func}` in `{_rel(str(helper.path), root)}` "
                     f"({_helper_state(result, series)})")
        choice = result.helper_choice
        if choice is not None and choice.inferred:
            lines.append(f"- Why there: {choice.note}")
    elif result.helper_choice is not None and result.helper_choice.location is None:
        lines.append(f"- Helper: none could be located: {result.helper_choice.error}")
    lines += ["", "## Fixed", ""]
    if fixed:
        lines += ["| file | sites | where | fix |", "|---|---|---|---|"]
        for path in sorted(fixed):
            fs = sorted(fixed[path], key=Finding.sort_key)
            where = ", ".join(f"`{f.scope}` (line {f.span.line})" for f in fs)
            how = "; ".join(sorted({f.fix.description for f in fs if f.fix}))
            lines.append(f"| `{_rel(path, root)}` | {len(fs)} | {where} | {how} |")
    else:
        lines.append("Nothing to fix.")
    lines += ["", "## Left for a human", ""]
    if left:
        lines += ["| site | code | scope | why |", "|---|---|---|---|"]
        for f in left:
            why = f.no_fix_reason or (f"unsafe fix: {f.fix.unsafe_reason}" if f.fix and f.fix.unsafe_reason
                                      else "fix not applied" if f.fix else f.message)
            lines.append(f"| `{_rel(f.path, root)}:{f.span.line}` | {f.code} | `{f.scope}` | {why.replace('|', '/')} |")
    else:
        lines.append("None: every site was fixed.")
    lines += helper_reuse_section(root, result, series)
    lines += ["", "## Files created or changed", ""]
    written = [w for w in result.writes if w.why != "cache"]
    lines += [f"- `{w.path}` ({w.action}: {w.why})" for w in written]
    if report_path is not None:
        lines.append(f"- `{_rel(report_path, root)}` (this report)")
    elif not written:
        lines.append("None.")
    lines += [
        "",
        "## Safety",
        "",
        "Each rewrite keeps behaviour for fp16, bf16, fp32 and fp8 weights and changes only the packed "
        "storages it exists to fix (int32, uint8, int8, no `.weight`); guarded idioms were proven "
        "equivalent by truth table, against the helper's own code, before rewriting. Every rewritten "
        "file was re-parsed before it was written, and re-checked afterwards.",
        "",
    ]
    return "\n".join(lines)


# ---- existing helpers: reuse a sound one, or replace unsound ones by one shared helper -----------


def reuse_sound_helper(config: Config, path: str) -> Config:
    """When no helper is configured and the preset's does not exist, but the project already has a
    sound input-dtype helper taking a layer and the fp8 flag, route the fixes through it."""
    from dtype_lint.analysis.helper_functions import project_helpers

    if config.helper:
        return config
    found = project_helpers(config, [path])
    if any(h.configured for h in found):
        return config
    for h in found:
        module = h.qualname.rpartition(".")[0]
        if module and h.flag_param and h.sound and not h.maybe_unsound and not h.uncallable and _definite(h):
            return dataclasses.replace(config, helper=f"{module}:{h.name}")
    return config


def _definite(h) -> bool:
    """Every case has one answer (no branch on what the evaluator cannot know)."""
    from dtype_lint.dtypes.evaluator import alternatives

    return all(len(alternatives(v)) == 1 for _c, v in h.table.rows)


def helper_reuse_section(root: str, result: RunResult, series: bool = False) -> list[str]:
    """The report's account of the input-dtype helpers the project already had: each one's table
    beside the helper this change uses, and what was done about it."""
    from dtype_lint.analysis.helper_functions import project_helpers
    from dtype_lint.fix.helper_template import helper_table

    module, func = result.config.helper_spec
    created = any(w.why == "helper" and w.action == "created" for w in result.writes)
    existing = [h for h in project_helpers(result.config, [root]) if not (h.configured and created)]
    if not existing:
        return []
    helper = result.helper
    shared = helper_table(module, func, result.config.template,
                          str(helper.path) if helper is not None and helper.path.exists() else None)
    routed = [h for h in existing if h.configured]
    rewritten = [f for f in result.fixed if f.kind == "call"]
    # Helpers whose callers could not be routed get the missing branch where they are defined.
    in_place = {(_rel(f.path, root), f.expression.removeprefix("def ")): f for f in result.fixed
                if f.kind == "definition"}
    left = [f for f in result.findings if f.kind == "call"]
    lines = ["", "## Existing input-dtype helpers", ""]
    for h in existing:
        where = f"`{_rel(h.path, root)}:{h.line}` `{h.name}`"
        fixed = in_place.get((_rel(h.path, root), h.name))
        if fixed is not None:
            what = (f"fixed in place ({_fix_description(fixed)}); before: "
                    + fixed.message.split(": ", 1)[-1].split("; an activation", 1)[0])
        elif h.configured and not created:
            what = ("sound: the fixes are routed to it, and no new helper was created" if h.sound
                    else "the configured helper, wrong for: " + "; ".join(h.wrong_cases()))
        elif h.sound:
            what = "sound, but not the configured helper"
        else:
            what = "unsound: " + "; ".join(h.wrong_cases())
        lines.append(f"- {where}: {what}.")
    if not routed and any(not h.sound and (_rel(h.path, root), h.name) not in in_place for h in existing):
        lines += ["", f"They are replaced by one shared, sound helper, `{module}:{func}` "
                  f"({_helper_state(result, series)}): {len(rewritten)} call sites were rewritten to it"
                  + (f"; {len(left)} left, each with its reason below." if left else ".")
                  + " The old helpers stay defined (other code may call them); delete them once unused."]
        for f in rewritten:
            lines.append(f"  - `{_rel(f.path, root)}:{f.span.line}` `{f.scope}`: {_fix_description(f)}")
        for f in left:
            lines.append(f"  - left: `{_rel(f.path, root)}:{f.span.line}` `{f.scope}`: "
                         f"{(f.no_fix_reason or f.message).replace('|', '/')}")
    for h in existing:
        if h.configured and not created:
            continue
        lines += ["", f"What `{h.name}` decides beside `{func}`, from each one's own code "
                  "(bf16 model; **bold**: they differ):", ""]
        lines += _side_by_side(h, func, shared)
    return lines


def _side_by_side(h, func: str, shared) -> list[str]:
    rows = ["| weight storage | fp8 input | `" + h.name + "` | `" + func + "` |", "|---|---|---|---|"]
    theirs = h.table.as_dict() if h.table is not None else {}
    for case, mine in (shared.rows if shared is not None else ()):
        other = theirs.get(case) or theirs.get(dataclasses.replace(case, flag=False), "(not evaluated)")
        storage = "no `.weight`" if case.storage is None else case.storage
        a, b = (f"**{other}**", f"**{mine}**") if other != mine else (other, mine)
        rows.append(f"| {storage} | {case.flag} | {a.replace('|', '/')} | {b} |")
    return rows


def print_summary(result: RunResult, report_path: str) -> None:
    import sys

    from rich.console import Console
    from rich.table import Table

    fixed: dict[str, int] = defaultdict(int)
    for f in result.fixed:
        fixed[f.path] += 1
    console = Console(file=sys.stdout, highlight=False, soft_wrap=True)
    if fixed:
        table = Table(title="dtype-lint migrate")
        table.add_column("file")
        table.add_column("fixed", justify="right")
        for path in sorted(fixed):
            table.add_row(path, str(fixed[path]))
        console.print(table)
    if result.helper is not None:
        h = result.helper
        console.print(f"helper: {h.module}:{h.func} at {h.path} ({_helper_state(result, False)})")
    console.print(f"fixed {len(result.fixed)} sites in {len(fixed)} files; {len(result.findings)} left")
    console.print(f"report: {report_path}")


def recheck(config: Config, path: str, result: RunResult, changes: dict[str, bytes] | None = None,
            jobs: int | None = None, store: RunStore | None = None) -> list[Finding]:
    """The findings of a fresh check of the migrated result: of the tree itself after an in-place
    migration (`changes` None), or of a scratch copy of it with `changes` (paths relative to the
    series root -> bytes) applied. The fixing run's own account misses what a fix does to other
    files (a call site stops being a finding once the helper it calls is made sound).
    `store`: the fixing run's entries (run/memory_cache.py). The copy reuses a file's findings only
    where the disk cache would on that tree (the file, everything its analysis read, every module
    it looked up, every listing and census it made unchanged); the rest is analysed again. Used
    only when the project root is the series root: entries are named relative to the project
    root, and a file outside it is named by its absolute path, which in the copy is another file."""
    import os

    if changes is None:
        return _recheck_in_place(config, path, result, jobs, store)
    from dtype_lint.migrate.series import series_root

    root = series_root(Path(path).resolve(), Path(config.root))
    target = Path(path).resolve()
    with scratch_copy(root, (".git", config.cache_dir, "__pycache__")) as copy:
        write_scratch_files(copy, changes)
        moved = lambda p: copy / Path(p).resolve().relative_to(root)  # noqa: E731
        try:
            cfg_root = moved(config.root)
        except ValueError:
            cfg_root = copy
        cfg = dataclasses.replace(config, root=cfg_root)
        same_root = Path(config.root).resolve() == root
        fresh = run(cfg, RunOptions(paths=[str(moved(target))], jobs=jobs, use_cache=False,
                                    store=store if same_root else None)).findings
        relative = not any(Path(f.path).is_absolute() for f in result.fixed + result.findings)
        real_copy = copy.resolve()
        out = []
        for f in fresh:
            original = _in_tree(Path(os.path.abspath(f.path)), copy, real_copy, root)
            shown = os.path.relpath(original) if relative else str(original)
            out.append(dataclasses.replace(f, path=Path(shown).as_posix()))
        return sorted(out, key=Finding.sort_key)


def _in_tree(path: Path, copy: Path, real_copy: Path, root: Path) -> Path:
    """Where a file the re-check of `copy` names is in the tree at `root`: by the name the run
    gave it (a link keeps its own name, as in the fixing run), else by its real path; a file
    outside the copy (read through a link that leads out of the tree) is that very file."""
    for base, named in ((copy, path), (real_copy, path), (real_copy, path.resolve())):
        try:
            return root / named.relative_to(base)
        except ValueError:
            continue
    return path.resolve()


def _recheck_in_place(config: Config, path: str, result: RunResult, jobs: int | None,
                      store: RunStore | None) -> list[Finding]:
    """A fresh check of the migrated tree under `config`. The fixing run's entries in `store` are
    keyed by its own settings, which add the migration's opt-in rules to `config`'s (run_migration):
    where that is the only difference, the tree is checked under the fixing run's settings (each
    file whose analysis read nothing the fixes wrote keeps its results, as a warm disk cache would)
    and the added rules' findings are dropped: what a rule reports does not depend on which other
    rules run (but for one known shape: with a rule on that parses files whole, DTL001/DTL002 also
    see a weight handed to a function before another argument in a class holding no other line
    their patterns match; docs/quantizability.md, known limits). Otherwise (a helper the run
    chose, another setting) the check starts cold."""
    added = [code for code in result.config.select if code not in config.select]
    keyed = dataclasses.replace(config, select=result.config.select)
    if store is None or keyed.fingerprint() != result.config.fingerprint():
        return run(config, RunOptions(paths=[path], jobs=jobs, use_cache=False)).findings
    fresh = run(result.config, RunOptions(paths=[path], jobs=jobs, use_cache=False, store=store)).findings
    return [f for f in fresh if f.code not in added]


def _outside_root(outcome, root: Path):
    """`outcome`, or a fix not applied when its file's real path is outside `root`."""
    if not outcome.changed:
        return outcome
    try:
        Path(outcome.path).resolve().relative_to(root)
    except ValueError:
        return not_applied(outcome, f"{outcome.path}: leads to {Path(outcome.path).resolve()}, outside the "
                                    f"series root {root}; no patch of it can change that file")
    return outcome


def migration_series(config: Config, path: str, out: str, group_by: str = "file", *, unsafe_fixes: bool = False,
                     jobs: int | None = None, progress=None, proof=None, convention: str | None = None,
                     author: str | None = None, signoff: bool | None = None, label: str | None = None):
    """The migration as `git format-patch` patches in `out`, the tree left untouched, written in
    the target's convention (detected, or `convention`), authored and signed off by `author`
    (default: git's user.name/user.email; an IdentityError when neither is there).
    Returns (the fixing run's result, the patches, the files written). `proof`: a function giving
    a patch's executable proof (default: the ecosystems' `proofs`, on the reference kernels when
    torch is there; False: none). Besides the patches, `out` gets PR.md (one pull request's
    description for the whole series) and README.md (what the tool knows about each patch: rule
    codes, sites, generated files). The result's remaining findings are a re-check of the patched tree."""
    from dtype_lint.core.source import FileText
    from dtype_lint.migrate import conventions, generated, messages, series
    from dtype_lint.run.outputs import check_output
    from dtype_lint.run.pipeline import UserError

    if problem := check_output(out, "--series", config, paths=[path], folder=True):
        raise UserError(problem)
    from dtype_lint.migrate.series_folder import FIXED_NAMES, SeriesFolder

    # The names every series writes are known now: a folder holding the user's README.md is
    # refused before the migration runs (the patch names are checked once they are made).
    folder = SeriesFolder.open(out)
    if problem := folder.problem(FIXED_NAMES):
        raise UserError(problem)

    root = series.series_root(Path(path).resolve(), Path(config.root))
    conv = conventions.get(convention, root)
    identity = conventions.resolve_identity(author, root)
    style = series.Style(conv, identity, conv.signoff if signoff is None else signoff, root,
                         label or "the tree")
    # The fixing run's per-file results, for the re-check of the patched copy below.
    store = RunStore()
    result = run(config, RunOptions(paths=[path], jobs=jobs, use_cache=False, diff=True,
                                    unsafe_fixes=unsafe_fixes, progress=progress, store=store))

    def rel(p) -> str:
        return Path(p).resolve().relative_to(root).as_posix()

    # A file reached through a link that leads out of the series root: no patch of the tree can
    # change it, so its fixes are not applied, as `--fix` leaves it (DTL901 says why).
    result.outcomes = [_outside_root(o, root) for o in result.outcomes]
    changes: list[series.FileChange] = []
    for outcome in result.outcomes:
        if not outcome.changed:
            continue
        data = read_bytes(outcome.path, MAX_SOURCE_BYTES)
        ft = FileText.decode(data)
        if group_by == "rule":
            steps = series.split_by_rule(outcome.path, outcome.original,
                                         lambda t, p=outcome.path: reanalyze(result, p, t),
                                         unsafe_fixes, sorted({f.code for f in outcome.applied}))
            before = data
            for code, text, applied in steps:
                after = ft.encode(text)
                changes.append(series.FileChange(rel(outcome.path), before, after, applied, group=code))
                before = after
        else:
            changes.append(series.FileChange(rel(outcome.path), data, ft.encode(outcome.text), list(outcome.applied)))
    helper_changes = []
    # Every helper the fixes import and the tree lacks (a monorepo's packages each have one).
    created = result.created_helpers or ([result.helper] if result.helper is not None else [])
    for helper in [h for h in created if not h.exists] if changes else []:
        for marker in helper.package_markers:
            helper_changes.append(series.FileChange(rel(marker), None, b""))
        helper_changes.append(series.FileChange(rel(helper.path), None, helper.source.encode("utf-8")))
    if proof is None and result.helper is not None:
        text = result.helper.source or read_file(str(result.helper.path)).text
        proof = default_plugin("proofs").for_changes(text, result.helper.func)
    # Generated and copied files, known before the messages are written: a maintainer reading a
    # patch to a generated file must see there what regenerates it.
    # (Only the Hugging Face projects regenerate files: elsewhere a `# Copied from` comment is prose.)
    gen = (generated.analyze(root, [series.Patch("", "", changes)])
           if conv.name in generated.REGENERATING else [])
    style.generated = gen
    # An ecosystem whose sites route through its own helper adds it in a first patch of its own (the
    # registry's `series` role: Hugging Face's, to the project's torch utilities), with its proof.
    first_patch, first_proof = None, None
    for plugin in plugins("series") if changes else ():
        first_patch = plugin.series_patch(result, root, rel)
        if first_patch is not None:
            first_proof = plugin.patch_proof
            break
    if first_patch is not None and not proof:
        proof = first_proof
    patches = series.plan(changes, helper_changes, result.helper, group_by, proof or None, style)
    if first_patch is not None:
        if style.signoff and identity is not None:
            first_patch.body = first_patch.body.rstrip("\n") + f"\n\nSigned-off-by: {identity}"
        patches.insert(0, first_patch)
    found_tests = None
    # A convention whose ecosystem tests each patch (the `regression` role: transformers' adds a test
    # of the class each patch changes, run on the release here).
    tests_plugin = next((plugin for plugin in plugins("regression") if conv.name in plugin.CONVENTIONS), None)
    if tests_plugin is not None and patches:
        found_tests = tests_plugin.add_tests(patches, first_patch, style)
    formatted = series.format_patches(patches, Path(out), identity) if patches else []
    files = [Path(out) / name for name, _data in formatted]
    settle(result, result.outcomes)  # the report counts what the patches fix
    final: dict[str, bytes] = {}
    for patch in patches:
        for change in patch.changes:
            if not change.test:
                final[change.path] = change.after
    # The re-check tells what is left; the fixes that were not applied say why beside it.
    refused = [f for o in result.outcomes if o.error for f in o.remaining if f.code == FIX_FAILED]
    result.findings = sorted(recheck(config, path, result, final, jobs, store) + refused, key=Finding.sort_key)
    if patches:
        outputs = dict(formatted)
        outputs["PR.md"] = messages.pr_description(patches, conv, gen).encode("utf-8")
        readme = messages.readme(patches, files, conv, identity, style.signoff, gen, result.findings)
        if tests_plugin is not None and found_tests is not None:
            readme = readme.rstrip("\n") + "\n\n" + "\n".join(tests_plugin.readme_section(patches, found_tests))
        outputs["README.md"] = readme.encode("utf-8")
        _publish(result, folder, outputs)
    return result, patches, files


def _publish(result: RunResult, folder, outputs: dict[str, bytes]) -> None:
    """Write the series' files into its folder, none over a file the user has (series_folder.py):
    checked for all of them before the first is written; the tool's stale patches removed; the
    manifest last: a run interrupted before it leaves files no manifest vouches for, which a
    later run refuses to overwrite rather than guess whose they are."""
    from dtype_lint.core.writer import WriteError
    from dtype_lint.migrate.series_folder import MANIFEST
    from dtype_lint.run.pipeline import UserError

    if problem := folder.problem(outputs):
        raise UserError(problem)
    try:
        result.writer.make_dirs(folder.path, "patch series", outside_ok=True)
        for name, data in outputs.items():
            result.writer.write(folder.path / name, data, "patch" if name.endswith(".patch") else "series",
                                outside_ok=True)
        for stale in folder.stale(outputs):
            stale.unlink()
        result.writer.write(folder.path / MANIFEST, folder.manifest(outputs), "series", outside_ok=True)
    except (WriteError, OSError) as error:
        raise UserError(f"--series {folder.shown}: {error}") from None
