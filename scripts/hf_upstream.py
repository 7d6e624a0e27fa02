#!/usr/bin/env python
"""The Hugging Face patch series of tests/goldens/upstream/ (transformers 5.23.0, diffusers 0.42.1).

Runs a zero-config `dtype-lint migrate --series DIR --group-by file --convention DIST --signoff`
on a git checkout of the release's `.py` files (the cached tree of `dtype_lint.releases`), authored
by the vLLM series' committed author (scripts/upstream.py's `committed_author()`; `--author`
overrides it). The commit messages follow the project's conventions and name no rule code: the
codes and sites are in the README migrate writes beside the patches, from which this script
writes the committed README, listing each patch with its sites and their triage verdicts
(benchmarks/accuracy/triage/verdicts/). It refuses a series holding a site the triage has not judged TRUE.
The vLLM series has its own script (scripts/upstream.py).

    .venv/bin/python scripts/hf_upstream.py transformers 5.23.0
    .venv/bin/python scripts/hf_upstream.py diffusers 0.42.1
    .venv/bin/python scripts/hf_upstream.py transformers 5.23.0 --check   # exit 1 if the committed one is stale

For transformers, migrate adds each patch's regression test (dtype_lint/ecosystems/hf/regression.py)
and runs them all on the release before and after the series; the patches' Results and the
README's "Regression tests" section quote that run.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import triage  # noqa: E402  (scripts/triage.py: the verdict files)
import upstream  # noqa: E402  (scripts/upstream.py: the vLLM series' committed author)

from dtype_lint.ecosystems.hf.series import PROOF_COMMAND  # noqa: E402

# transformers: one patch per model directory, so a model's `modular_*.py` source and the
# `modeling_*.py` it generates change in the same commit (a maintainer regenerates the one from the
# other, and `make check-repo` holds at every commit); diffusers: one per file.
GROUP_BY = {"transformers": "directory", "diffusers": "file"}
# Both projects' `[tool.ruff] line-length` (their repositories' pyproject.toml; the wheels ship none,
# so the fixer would otherwise find no length to keep and `make style` would rewrap the patches).
LINE_LENGTH = {"transformers": 119, "diffusers": 119}


# Why the series does not run the project's regeneration itself, and what it does instead.
REGENERATION = {
    "transformers": (
        "The regeneration was NOT run here: `utils/modular_model_converter.py` and `utils/check_copies.py` "
        "(`make fix-copies`) live only in the source repository, the released wheel ships no `utils/`, and "
        "the repository could not be brought into this workplace (its snapshot is 1.33 GB, over the 500 MB "
        "limit on a fetched repository). What the series does instead: each patch changes a model's "
        "`modular_*.py` source and the `modeling_*.py` generated from it together (one patch per model "
        "directory), and patches every `# Copied from` origin of a changed block in the same series. A "
        "maintainer runs, on the patched checkout, `make fix-copies` and `python utils/modular_model_converter.py "
        "--files_to_parse <source>` for each source listed below, and checks that the generated files equal "
        "the patches (`git diff` empty)."),
    "diffusers": "A maintainer regenerates these (the released wheels ship no `utils/`, so the series cannot).",
}


def default_author() -> str | None:
    """The vLLM series' committed author, so the HF series carry the same one on any machine."""
    return upstream.committed_author()


def generate(dist: str, version: str, author: str | None, out: Path | None = None) -> Path:
    from dtype_lint.migrate.series import checkout
    from dtype_lint.releases import release_tree

    out = out or ROOT / "tests" / "goldens" / "upstream" / f"{dist}-{version}"
    with tempfile.TemporaryDirectory(prefix="dtype-lint-hf-series-") as tmp:
        repo = checkout(release_tree(dist, version), Path(tmp) / "tree", f"{dist} {version}",
                        ignore=("__pycache__", ".dtype_lint_cache", ".dtype-lint-complete"))
        series = Path(tmp) / "series"
        cmd = [sys.executable, "-m", "dtype_lint", "migrate", ".", "--series", str(series),
               "--group-by", GROUP_BY[dist], "--convention", dist, "--signoff",
               "--line-length", str(LINE_LENGTH[dist]),
               "--report", str(Path(tmp) / "report.md"), "--no-progress"]
        if author:
            cmd += ["--author", author]
        proc = subprocess.run(cmd, cwd=repo, capture_output=True, text=True)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"migrate failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        patches = sorted(series.glob("*.patch"))
        if not patches:
            raise SystemExit("migrate wrote no patches")
        # The sites of each patch, from the README migrate wrote beside them (the commit messages
        # carry no rule code), checked against the triage before anything is written.
        series_readme = (series / "README.md").read_text(encoding="utf-8")
        sites = sites_by_patch(series_readme, [p.name for p in patches])
        check_sites(dist, version, sites)
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        for patch in patches:
            shutil.copy(patch, out / patch.name)
        if (series / "PR.md").is_file():
            shutil.copy(series / "PR.md", out / "PR.md")
        generated = section(series_readme, "## Generated files")
        tests = section(series_readme, "## Regression tests")
    return write_readme(dist, version, out, sites, generated, tests)


# A site cell of a README row: `path:line` DTLnnn (migrate's README adds the scope after it).
SITE = re.compile(r"`([^`\s]+:\d+)` (DTL\d{3})")


def sites_by_patch(readme: str, names: list[str]) -> dict[str, list[tuple[str, str]]]:
    """patch name -> its (path:line, code) sites, from the table row of a README naming that patch
    (migrate's `--series` README, or the committed one this script writes)."""
    out: dict[str, list[tuple[str, str]]] = {}
    rows = {line.split("`", 2)[1]: line for line in readme.splitlines() if line.startswith("| [`")}
    for name in names:
        if name not in rows:
            raise SystemExit(f"{name}: no row in the series README")
        cells = rows[name].split(" | ")
        # The sites column: the first cell holding a site (the verdict cell quotes none).
        site_cell = next((c for c in cells[1:] if SITE.search(c)), "")
        out[name] = SITE.findall(site_cell)
    return out


def section(readme: str, heading: str) -> list[str]:
    """The lines of a `## ` section of a README, without its heading."""
    if heading not in readme:
        return []
    body = readme.split(heading, 1)[1].split("\n## ", 1)[0]
    return body.strip("\n").splitlines()


def check_sites(dist: str, version: str, sites: dict[str, list[tuple[str, str]]]) -> None:
    rows = triage.load_verdicts(dist, version).rows
    for name, found in sites.items():
        for site, _code in found:
            row = rows.get(site)
            if row is None or row.verdict != "TRUE":
                raise SystemExit(f"{name}: `{site}` is not judged TRUE in the triage")


def write_readme(dist: str, version: str, out: Path, sites: dict[str, list[tuple[str, str]]] | None = None,
                 generated: list[str] | None = None, tests: list[str] | None = None) -> Path:
    """The README of a written series: each patch with its sites and their triage verdicts.
    `sites`/`generated` default to what the committed README already says (`--readme-only`)."""
    patches = sorted(out.glob("*.patch"))
    old = (out / "README.md").read_text(encoding="utf-8") if (out / "README.md").is_file() else ""
    if sites is None:
        sites = sites_by_patch(old, [p.name for p in patches])
    if generated is None:
        # The committed section opens with this script's own paragraph: keep only the notes.
        generated = section(old, "## Generated files")
        generated = generated[next((i for i, line in enumerate(generated) if line.startswith("- ")), 0):]
    if tests is None:
        tests = section(old, "## Regression tests")
    check_sites(dist, version, sites)
    rows = triage.load_verdicts(dist, version).rows
    table = []
    for patch in patches:
        text = patch.read_text(encoding="utf-8")
        found = sites[patch.name]
        cells = "<br>".join(f"`{s}` {c}" for s, c in found) or "adds the helper"
        verdict = "<br>".join(f"TRUE: {_md(rows[s].why)}" for s, _ in found) or "—"
        proof = "real bitsandbytes 4/8-bit on CPU (hf_verify)" if f"{PROOF_COMMAND}`)" in text else \
            ("re-check and compile only" if found else "the helper's decisions, listed")
        table.append(f"| [`{patch.name}`]({patch.name}) | {cells} | {verdict} | {proof} |")
    title = dist
    readme = [
        f"# {title} {version}: the dtype-lint migration as a patch series", "",
        f"Generated by `scripts/hf_upstream.py {dist} {version}` from a zero-configuration `dtype-lint migrate "
        f"--series DIR --group-by {GROUP_BY[dist]} --convention {dist} --signoff` on the `.py` files of the {title} "
        f"{version} release (`pip download {dist}=={version} --no-deps`). Apply on a checkout of that release:", "",
        "```sh", f"git am path/to/tests/goldens/upstream/{dist}-{version}/*.patch", "```", "",
        f"The first patch adds `get_module_input_dtype` to the project's torch utilities; every later patch "
        f"routes the sites of one {'model directory' if GROUP_BY[dist] == 'directory' else 'file'} through it. "
        "Every site was judged TRUE in "
        f"[the triage](../../../../benchmarks/accuracy/triage/{dist}-{version}.md). "
        f"The commit messages follow {title}'s conventions "
        "(a plain imperative title, the \"What does this PR do?\" / Tests / Results template, `Signed-off-by:`) "
        "and name no rule code; the codes and the triage are here. `PR.md` is the description for sending the "
        "series as one pull request. tests/test_hf_upstream.py applies the series with `git am` and compiles "
        "every file" + ("; each patch adds a regression test, and tests/test_hf_regression.py runs them on the "
                        "release before and after the series (see \"Regression tests\" below)." if tests else "."),
        "",
        "| patch | sites | verdict | proof in the commit message |", "|---|---|---|---|", *table, "",
    ]
    if generated:
        readme += ["## Generated files", "",
                   "A patch to a generated file is undone by the next regeneration unless its source carries "
                   "the change too. " + REGENERATION.get(dist, REGENERATION["diffusers"]), "", *generated, ""]
    if tests:
        readme += ["## Regression tests", "", *tests, ""]
    (out / "README.md").write_text("\n".join(readme), encoding="utf-8")
    return out


def _md(text: str) -> str:
    return text.replace("|", "/").replace("\n", " ")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dist", choices=("transformers", "diffusers"))
    parser.add_argument("version")
    parser.add_argument("--author", metavar="'NAME <EMAIL>'",
                        help="author and sign-off of the commits (default: the vLLM series' committed author, "
                             "else git config)")
    parser.add_argument("--readme-only", action="store_true", help="rewrite the README of the committed patches")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if the committed series differs from a fresh one (writes nothing)")
    args = parser.parse_args(argv)
    out = ROOT / "tests" / "goldens" / "upstream" / f"{args.dist}-{args.version}"
    if args.readme_only:
        print(write_readme(args.dist, args.version, out))
    elif args.check:
        return check(args.dist, args.version, out, args.author or default_author())
    else:
        print(generate(args.dist, args.version, args.author or default_author()))
    return 0


def check(dist: str, version: str, out: Path, author: str | None) -> int:
    """Regenerate the series into a scratch folder and compare it with the committed one."""
    with tempfile.TemporaryDirectory(prefix="dtype-lint-hf-check-") as tmp:
        fresh = generate(dist, version, author, Path(tmp) / "out")
        names = {p.name for p in fresh.iterdir()}
        stale = sorted(names ^ {p.name for p in out.iterdir()}) if out.is_dir() else ["(missing)"]
        stale += [n for n in sorted(names)
                  if (out / n).is_file() and (out / n).read_bytes() != (fresh / n).read_bytes()]
    if stale:
        print(f"{out.relative_to(ROOT)} is stale: {', '.join(stale)}; run scripts/hf_upstream.py {dist} {version}",
              file=sys.stderr)
        return 1
    print(f"{out.relative_to(ROOT)} is up to date")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
