#!/usr/bin/env python
"""The vLLM 0.33.0 patch series of tests/goldens/upstream/, regenerated from a fresh run (the default rules
plus the opt-in DTL003-DTL005, which the triage judged on this release).

Runs `migrate --series` (grouped by file) on a git checkout of the release's `.py` files, writes
the patches and a README that lists each patch with its sites, their triage verdicts and the
proof its commit message carries, and every finding left out of the series with the reason.
It refuses to write a series holding a site the triage has not judged TRUE.

    .venv/bin/python scripts/upstream.py            # rewrite tests/goldens/upstream/vllm-0.33.0/
    .venv/bin/python scripts/upstream.py --check    # exit 1 if the committed series is stale

tests/test_upstream.py checks the series applies with `git am` and equals the in-place migration.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import triage  # noqa: E402  (scripts/triage.py: the verdict files)

DIST, VERSION = "vllm", "0.33.0"
OUT = ROOT / "tests" / "goldens" / "upstream" / f"{DIST}-{VERSION}"


@contextmanager
def cwd(path: Path):
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def rules_verdicts(version: str = VERSION) -> dict[tuple[str, str], tuple[str, str]]:
    """(path:line, code) -> (verdict, why) from the DTL003-DTL005 verdict file for `version`."""
    rows = triage.load_rule_verdicts(DIST, version).rows
    return {key: (row.verdict, row.why) for key, row in rows.items()}


def verdict_of(finding, verdicts: triage.Verdicts, rules: dict) -> tuple[str, str]:
    key = f"{Path(finding.path).as_posix()}:{finding.span.line}"
    if finding.code in triage.RULES:
        row = verdicts.rows.get(key)
        return (row.verdict, row.why) if row else ("not judged", "")
    return rules.get((key, finding.code), ("not judged", ""))


def committed_author() -> str | None:
    """The author the committed series carries (its first patch's `From:`), so that `--check`
    regenerates the same bytes on any machine."""
    first = sorted(OUT.glob("0001-*.patch")) if OUT.is_dir() else []
    if not first:
        return None
    import email

    header = first[0].read_text(encoding="utf-8").split("\n\n", 1)[0].split("\n", 1)[1]  # past the mbox line
    author = email.message_from_string(header).get("From")
    return " ".join(str(author).split()) if author else None


def generate(tree: Path, out: Path, work: Path, author: str | None = None) -> None:
    """Write the series and its README for the release tree `tree` into `out` (emptied first)."""
    from dtype_lint.migrate.migration import migration_series
    from dtype_lint.migrate.series import checkout, git
    from dtype_lint.run.pipeline import RunOptions, run

    repo = checkout(tree, work / "tree", f"{DIST} {VERSION}")
    series_dir = work / "series"
    with cwd(repo):
        config = _config()
        # The sites as the release has them (a patched file's remaining findings move by the
        # lines its import adds): the triage judged these lines.
        before = run(config, RunOptions(paths=["."], use_cache=False, jobs=1)).findings
        result, patches, files = migration_series(config, ".", str(series_dir), "file", jobs=1,
                                                  convention="vllm", author=author, label=VERSION)
    fixed = {_where(f) for f in result.fixed}
    # What the series leaves, on the release's lines: a remaining finding of a patched file has
    # moved, so it is matched to the release's finding of the same file, rule and scope.
    # A fresh check of the patched tree, not the fixing run's account: a call site in a file no
    # patch touches stops being a finding when the helper it calls is fixed.
    applied = checkout(tree, work / "applied", f"{DIST} {VERSION}")
    for f in files:
        git(["am", "-q", str(f)], applied)
    with cwd(applied):
        after = run(_config(), RunOptions(paths=["."], use_cache=False, jobs=1)).findings
    remaining = Counter((Path(f.path).as_posix(), f.code, f.scope) for f in after)
    left, resolved = [], []
    for f in before:
        if _where(f) in fixed:
            continue
        key = (Path(f.path).as_posix(), f.code, f.scope)
        if remaining[key] > 0:
            remaining[key] -= 1
            left.append(f)
        else:
            resolved.append(f)
    verdicts = triage.load_verdicts(DIST, VERSION)
    rules = rules_verdicts()
    doubtful = [f for f in result.fixed if verdict_of(f, verdicts, rules)[0] != "TRUE"]
    if doubtful:
        raise SystemExit("the series would fix sites the triage has not judged TRUE: "
                         + ", ".join(f"{f.path}:{f.span.line} {f.code}" for f in doubtful))
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for f in files:
        shutil.copyfile(f, out / Path(f).name)
    shutil.copyfile(series_dir / "PR.md", out / "PR.md")
    (out / "README.md").write_text(readme(left, resolved, patches, files, verdicts, rules), encoding="utf-8")


# The opt-in rules are judged on this release (benchmarks/accuracy/triage/rules-dtl003-005.md): the
# series fixes their TRUE sites too (the MLA helper's own fix is DTL005's). Named, not derived from
# the registry: the committed series (tests/goldens/upstream/) is what these rules' judged findings
# give, and a new rule joins it only once the triage has judged its findings on this release.
SELECT = ("DTL", "DTL003", "DTL004", "DTL005")


def _config():
    import dataclasses

    from dtype_lint.core.config import load_config

    return dataclasses.replace(load_config(Path(".")), select=list(SELECT))


def _where(f) -> tuple[str, int, str]:
    return Path(f.path).as_posix(), f.span.line, f.code


def _proof(patch) -> str:
    body = patch.body
    kinds = []
    if "reference CPU implementation of each backend's" in body:
        kinds.append("reference layers, each storage: before crashes or truncates, after ok")
    if "run on real torch dtypes" in body:
        kinds.append("the helper's own code run on every storage × fp8 input, before and after")
    if "own _compute_prefill_context" in body:
        kinds.append(f"vLLM {VERSION}'s own `_compute_prefill_context` run before and after")
    return "; ".join(kinds) or "none executable: re-check and compile only"


def _tests(patch) -> str:
    return "<br>".join(f"`{t}`" for t in patch.tests) or "none (see its Test Plan)"


def readme(left, resolved, patches, files, verdicts, rules) -> str:
    from dtype_lint import __version__

    names = [Path(f).name for f in files]
    lines = [
        f"# vLLM {VERSION}: the dtype-lint migration as a patch series",
        "",
        f"Generated by `scripts/upstream.py` (dtype-lint {__version__}) from "
        f"`dtype-lint migrate --series DIR --group-by file`, with the default rules and the opt-in "
        f"DTL003-DTL005 (`select = {list(SELECT)}`: the triage judged them on this release), on the "
        f".py files of the vLLM {VERSION} "
        "release (`pip download vllm==0.33.0 --no-deps`). Apply on a checkout of that release:",
        "",
        "```sh",
        "git am path/to/tests/goldens/upstream/vllm-0.33.0/*.patch",
        "```",
        "",
        "Every site a patch touches was judged TRUE in the triage (benchmarks/accuracy/triage/vllm-0.33.0.md for "
        "DTL001/DTL002, benchmarks/accuracy/triage/rules-dtl003-005.md for DTL003-DTL005): some shipped "
        "quantization backend gives that layer a packed or missing `.weight` on that path. "
        "`tests/test_upstream.py` applies the series with `git am`, compiles every file after each "
        "patch, and compares the result with the in-place migration byte for byte (the tests the "
        "series adds aside); it runs each added test against the release tree before and after its "
        "patch (vLLM imported through dtype_lint/migrate/release_stubs.py): it fails before and passes after.",
        "",
        "The commit messages follow vLLM's conventions (a `[Bugfix]`/`[Model]`/`[Quantization]` title, the "
        "Purpose / Test Plan / Test Result template, `Signed-off-by:`) and name no rule code; the codes and "
        "the triage are here. `PR.md` is the description for sending the series as one pull request.",
        "",
        "## The patches",
        "",
        "| patch | sites | verdict | test it adds | proof in the commit message |",
        "|---|---|---|---|---|",
    ]
    for name, patch in zip(names, patches):
        sites = [(ch.path, f) for ch in patch.changes for f in sorted(ch.findings, key=lambda f: f.span.line)]
        if not sites:
            site_cell, verdict_cell = "adds the helper", "—"
        else:
            site_cell = "<br>".join(f"`{p}:{f.span.line}` {f.code}" for p, f in sites)
            verdict_cell = "<br>".join(f"{verdict_of(f, verdicts, rules)[0]}: {_md(verdict_of(f, verdicts, rules)[1])}"
                                       for _, f in sites)
        lines.append(f"| [`{name}`]({name}) | {site_cell} | {verdict_cell} | {_tests(patch)} | {_proof(patch)} |")
    if any(patch.kind == "sites" for patch in patches):
        lines += [
            "",
            "The test files the patches add carry no license header: this repository writes no other "
            "project's copyright line. vLLM's pre-commit hook (`check-spdx-header`) adds vLLM's SPDX "
            "header to each new file when the series is committed there.",
            "",
            "The model patches add no test of their own: each changed method belongs to a model class "
            "that only vLLM's engine builds (its distributed state and a quantized checkpoint, for most a "
            "GPU), and a unit test cannot construct one. Their Test Plan runs the shared helper's test "
            "(added by the first patch), whose decision they now take, and their Test Result is the "
            "reference-layer table: each storage's layer fed the old cast and the new one.",
        ]
    if any(f.code == "DTL004" for p in patches for ch in p.changes for f in ch.findings):
        lines += [
            "",
            "A DTL004 patch rewrites a hand-written copy of the guard vLLM used before PR #38771. "
            "`dtype-lint verify` runs only vLLM's own `_compute_prefill_context` functions, so the "
            "proof for such a patch is the reference-layer table in its message (the rewrite is the "
            "one the rule proved equal to the helper on every storage it keeps working); the verify "
            "matrix of the same guard in vLLM 0.27.1 is in docs/kernels.md.",
        ]
    if resolved:
        lines += [
            "",
            "## Findings the series resolves without touching them",
            "",
            "No patch rewrites these lines; after the series dtype-lint no longer reports them, because "
            "what made them wrong was fixed elsewhere (an unsound helper they call is sound now).",
            "",
            "| site | code | verdict |",
            "|---|---|---|",
        ]
        for f in resolved:
            verdict, why = verdict_of(f, verdicts, rules)
            lines.append(f"| `{f.path}:{f.span.line}` | {f.code} | {verdict}{': ' + _md(why) if why else ''} |")
    lines += [
        "",
        "## Findings not in the series",
        "",
        "The same run reports these; each is left to a person, with the reason. None of them is "
        "fixed by the patches above.",
        "",
        "| site | code | verdict | why not in the series |",
        "|---|---|---|---|",
    ]
    for f in left:
        verdict, why = verdict_of(f, verdicts, rules)
        reason = f.no_fix_reason or (f"unsafe fix: {f.fix.unsafe_reason}" if f.fix and f.fix.unsafe_reason
                                     else "report only" if not f.fix else "fix not applied")
        lines.append(f"| `{f.path}:{f.span.line}` | {f.code} | {verdict}{': ' + _md(why) if why else ''} "
                     f"| {_md(reason)} |")
    lines.append("")
    return "\n".join(lines)


def _md(text: str) -> str:
    return text.replace("|", "/").replace("\n", " ")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the committed series differs from a fresh one")
    ap.add_argument("--author", metavar="'NAME <EMAIL>'",
                    help="author and sign-off of the commits (default: the committed series' own, else git config)")
    args = ap.parse_args(argv)
    author = args.author or committed_author()
    from dtype_lint.releases import release_tree

    tree = release_tree(DIST, VERSION)
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "out"
        generate(tree, fresh if args.check else OUT, Path(tmp), author)
        if not args.check:
            print(f"wrote {OUT.relative_to(ROOT)}")
            return 0
        stale = sorted({p.name for p in fresh.iterdir()} ^ {p.name for p in OUT.iterdir()} if OUT.is_dir()
                       else ["(missing)"])
        stale += [p.name for p in sorted(fresh.iterdir()) if (OUT / p.name).is_file()
                  and (OUT / p.name).read_bytes() != p.read_bytes()]
        if stale:
            print(f"{OUT.relative_to(ROOT)} is stale: {', '.join(stale)}; run scripts/upstream.py", file=sys.stderr)
            return 1
        print(f"{OUT.relative_to(ROOT)} is up to date")
        return 0


if __name__ == "__main__":
    sys.exit(main())
