"""The triage of real trees (docs/triage/) stays true of the tool.

Every DTL001/DTL002 finding on vLLM 0.27.1 and 0.33.0, aphrodite-engine 0.24.1, sglang 0.5.23 and
lmdeploy 0.18.0 has a verdict written by someone who read the code (a new or moved finding fails
here until it is judged); precision holds on the trees issue #9 names; every TRUE site is reported
or carries a documented known limit; and the committed pages are what the run gives.

The join is scripts/triage.py's own (imported, not re-implemented). Each tree is checked once per
session (`--select ALL`: the DTL001/DTL002 and the DTL003-DTL005 triage read the same run);
test_vllm_real_world.py holds the 0.28.0 side of the seed sites: `test_0280_mla_prefill_is_clean`
(the two prefill functions call the helper and are not reported). CI runs one tree of each kind
(`CI_TREES`, the CI budget); DTL_FULL=1 runs every tree and the README summary of them all.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from conftest import full_only
from release_runs import check_all, findings_json
from test_vllm_real_world import MLA, PREFILL_FUNCS, function_spans

ROOT = Path(__file__).resolve().parents[1]


def _load_script():
    spec = importlib.util.spec_from_file_location("dtype_lint_triage_script", ROOT / "scripts" / "triage.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


triage = _load_script()

# fixture name -> verdict file name; the fixtures (tests/conftest.py) fetch the trees.
TREES = {
    "vllm_0271": "vllm-0.27.1",
    "vllm_0300": "vllm-0.30.0",
    "vllm_0330": "vllm-0.33.0",
    "aphrodite_0241": "aphrodite-engine-0.24.1",
    "sglang_0523": "sglang-0.5.23",
    "lmdeploy_0180": "lmdeploy-0.18.0",
    "transformers_5230": "transformers-5.23.0",
    "diffusers_0421": "diffusers-0.42.1",
}
# issue #9 (vLLM family), #22 (Hugging Face): at least 95% judged true there; vLLM 0.30.0 (#21) was
# triaged after the rules were written
PRECISION_TREES = ("vllm_0300", "vllm_0330", "sglang_0523", "aphrodite_0241", "transformers_5230", "diffusers_0421")
MIN_PRECISION = 0.95
RULE_TREES = {"vllm_0271": ("vllm", "0.27.1"), "vllm_0330": ("vllm", "0.33.0")}  # DTL003-DTL005, issue #10
# The CI budget (tests/conftest.py, docs/testing.md): one tree of each kind (the vLLM releases of the
# seed sites and of the rule triage, the fork, the peer with nothing to find, a Hugging Face tree);
# DTL_FULL=1 adds vLLM 0.30.0, sglang (the namespace-package peer) and transformers.
CI_TREES = ("vllm_0271", "vllm_0330", "aphrodite_0241", "lmdeploy_0180", "diffusers_0421")


def budgeted(fixtures) -> list:
    return [f if f in CI_TREES else full_only(f, "one tree of each kind runs in CI") for f in fixtures]


def _check_all(tree: Path) -> list[dict]:
    """The JSON findings of the run scripts/triage.py makes: zero configuration but `--select ALL`
    (DTL003-DTL005 are opt-in; what DTL001/DTL002 report does not depend on it). One run per tree
    and session (tests/release_runs.py): `triaged`, `rules_triaged` and test_rules_real_world.py
    read the same one."""
    return findings_json(check_all(tree))


def _triage(tree: Path, name: str):
    dist, _, version = name.rpartition("-")
    return triage.join(triage.load_verdicts(dist, version), _check_all(tree), tree)


@pytest.fixture(scope="module")
def rules_triaged(request):
    """The DTL003-DTL005 triage of both trees (the same run as `triaged`'s)."""
    def findings_of(dist, version):
        fixture = next(f for f, dv in RULE_TREES.items() if dv == (dist, version))
        tree = request.getfixturevalue(fixture)
        return _check_all(tree), tree

    return {t.name: t for t in triage.rule_triages(findings_of)}


@pytest.fixture(scope="module")
def triaged(request):
    """name -> Triage, each tree run at most once (only the trees a test asks for)."""
    done = {}

    def get(fixture: str):
        name = TREES[fixture]
        if name not in done:
            done[name] = _triage(request.getfixturevalue(fixture), name)
        return done[name]

    return get


def test_verdict_files_parse_and_name_documented_limits():
    assert triage.check_known_limits() == [], "a known-limit name's bullet left docs/quantizability.md"
    names = {f"{d}-{v}" for d, v in triage.all_trees()}
    assert names == set(TREES.values())
    for d, v in triage.all_trees():
        verdicts = triage.load_verdicts(d, v)
        for row in verdicts.rows.values():
            # One line of reasons with short quotes, never a pasted block of engine code.
            assert len(row.why) <= 400, f"{verdicts.path.name}:{row.lineno}: keep `why` to one short line"


def test_a_bad_verdict_file_is_refused_with_its_line(tmp_path):
    good = triage.verdict_path("vllm", "0.33.0").read_text(encoding="utf-8")
    bad = tmp_path / "x-1.tsv"
    bad.write_text(good + "vllm/x.py:3\tFALSE\tharmless\tno such category\t\n", encoding="utf-8")
    with pytest.raises(triage.VerdictError, match=r"x-1.tsv:\d+: a FALSE row needs one of"):
        triage.load_verdicts("x", "1", bad)
    bad.write_text(good + "vllm/x.py:3\tTRUE\tknown-limit:no-such-limit\tx\t\n", encoding="utf-8")
    with pytest.raises(triage.VerdictError, match="known-limit:"):
        triage.load_verdicts("x", "1", bad)


def test_join_counts_sites_and_names_what_to_rejudge(tmp_path):
    rows = [
        ("a.py:10", "TRUE", "", "cast of the read at :5", "a.py:5"),
        ("a.py:12", "TRUE", "", "another cast of the read at :5", "a.py:5"),
        ("b.py:3", "FALSE", "not-quantizable", "a norm", ""),
        ("c.py:7", "TRUE", "known-limit:value-flow", "two calls deep", ""),
        ("d.py:9", "TRUE", "known-limit:generic-types", "behind an nn.Module", ""),
        ("e.py:1", "TRUE", "", "was reported once", ""),
    ]
    text = "".join(f"#count\t{c}\t1\n" for c in triage.FALSE_CATEGORIES) + "\t".join(triage.COLUMNS) + "\n"
    (tmp_path / "t-1.tsv").write_text(text + "".join("\t".join(r) + "\n" for r in rows), encoding="utf-8")
    verdicts = triage.load_verdicts("t", "1", tmp_path / "t-1.tsv")

    def finding(path, line, code="DTL001"):
        return {"path": f"./{path}", "line": line, "col": 1, "code": code, "message": "m", "scope": "f",
                "expression": "x"}

    findings = [finding("a.py", 10), finding("b.py", 3, "DTL002"), finding("d.py", 9), finding("f.py", 2),
                finding("g.py", 1, "DTL003")]
    t = triage.join(verdicts, findings, tmp_path)
    assert [k for k, _, _ in t.findings] == ["a.py:10", "b.py:3", "d.py:9", "f.py:2"]  # DTL003 is not ours
    assert (t.true_findings, t.precision) == (2, 0.5)
    assert sorted(t.true_sites()) == ["a.py:5", "c.py:7", "d.py:9", "e.py:1"]
    assert sorted(t.reported_sites()) == ["a.py:5", "d.py:9"] and t.recall == 0.5
    assert [r.key for r in t.unreported_true()] == ["c.py:7", "e.py:1"]
    problems = t.problems()
    assert len(problems) == 3, problems
    assert "`f.py:2` DTL001 has no verdict" in problems[0]
    assert any("`e.py:1` is TRUE and no longer reported" in p for p in problems)
    assert any("`d.py:9` is reported now" in p for p in problems)
    page = triage.render(t)
    assert "| `c.py:7` | [known limit: Value flow is one step deep](../quantizability.md#known-limits) |" in page
    assert "- `f.py:2` DTL001: m" in page


@pytest.mark.network
@pytest.mark.parametrize("fixture", budgeted(TREES))
def test_every_finding_has_a_verdict(triaged, fixture):
    t = triaged(fixture)
    missing = [f"{k} {f['code']} {f['scope']}: {f['expression']}" for k, f in t.unjudged]
    assert missing == [], (
        f"findings without a verdict in docs/triage/verdicts/{TREES[fixture]}.tsv (read the code, add a row, "
        "then run scripts/triage.py --all):\n" + "\n".join(missing)
    )


@pytest.mark.network
@pytest.mark.parametrize("fixture", budgeted(PRECISION_TREES))
def test_precision(triaged, fixture):
    t = triaged(fixture)
    assert t.findings, "no findings: nothing to measure (the tool went silent?)"
    false = [f"{k}: {r.category}: {r.why}" for k, _, r in t.false_findings]
    assert t.precision >= MIN_PRECISION, (
        f"{TREES[fixture]}: precision {t.true_findings}/{len(t.findings)} = {t.precision:.1%} < {MIN_PRECISION:.0%}; "
        "FALSE findings:\n" + "\n".join(false)
    )


@pytest.mark.network
@pytest.mark.parametrize("fixture", budgeted(TREES))
def test_every_true_site_is_reported_or_a_known_limit(triaged, fixture):
    t = triaged(fixture)
    # A `missed` row, a TRUE row no longer reported without a reason, a known limit that is reported now.
    problems = [p for p in t.problems() if "has no verdict" not in p]
    assert problems == [], f"{TREES[fixture]}:\n" + "\n".join(problems)


@pytest.mark.network
def test_lmdeploy_has_no_finding(triaged):
    t = triaged("lmdeploy_0180")
    assert [k for k, _, _ in t.findings] == []
    assert t.true_sites() == {}, "lmdeploy has no TRUE site: a TRUE row there contradicts the review"


@pytest.mark.network
@pytest.mark.parametrize("func", PREFILL_FUNCS)
def test_0271_mla_prefill_sites_are_true_and_reported(triaged, vllm_0271, func):
    t = triaged("vllm_0271")
    _, first, last = function_spans(vllm_0271 / MLA)[func]
    here = [(k, r) for k, _, r in t.judged if k.startswith(MLA + ":") and first <= int(k.rpartition(":")[2]) <= last]
    assert here, f"no finding in {func} ({MLA}:{first}-{last})"
    assert all(r.verdict == "TRUE" for _, r in here), here


@pytest.mark.network
@pytest.mark.parametrize("fixture", budgeted(TREES))
def test_committed_page_is_what_the_run_gives(triaged, fixture):
    t = triaged(fixture)
    page = triage.TRIAGE / f"{TREES[fixture]}.md"
    assert page.read_text(encoding="utf-8") == triage.render(t), (
        f"docs/triage/{page.name} is stale: run .venv/bin/python scripts/triage.py --all"
    )


@pytest.mark.network
@pytest.mark.full("needs every tree; CI checks the pages of its trees")
def test_readme_summary_is_what_the_runs_give(triaged):
    runs = [triaged(f) for f in sorted(TREES, key=lambda f: triage.TREE_ORDER.index(TREES[f]))]
    readme = triage.README.read_text(encoding="utf-8")
    assert triage.render_summary(runs, readme) == readme, "docs/triage/README.md: run scripts/triage.py --all"


def _rule_rows(rows, notes=()) -> str:
    head = "".join(f"#note\t{n}\n" for n in notes) + "\t".join(triage.RULE_COLUMNS) + "\n"
    return head + "".join("\t".join(r) + "\n" for r in rows)


def test_rule_verdict_files_parse_and_cover_the_rule_trees():
    assert set(triage.RULE_TREES) == set(RULE_TREES.values())
    for dist, version in triage.RULE_TREES:
        verdicts = triage.load_rule_verdicts(dist, version)
        assert verdicts.rows, verdicts.path
        assert {r.code for r in verdicts.rows.values()} <= set(triage.RULE_CODES)
        for row in verdicts.rows.values():
            assert len(row.why) <= 400, f"{verdicts.path.name}:{row.lineno}: keep `why` to one short line"


@pytest.mark.parametrize("row, message", [
    (("a.py:3", "DTL001", "TRUE", "x"), "code is one of"),
    (("a.py:3", "DTL003", "MAYBE", "x"), "verdict is TRUE or FALSE"),
    (("a.py:3", "DTL003", "TRUE", ""), "every verdict says why"),
    (("a.py", "DTL003", "TRUE", "x"), "is not path:line"),
])
def test_a_bad_rule_verdict_file_is_refused_with_its_line(tmp_path, row, message):
    path = tmp_path / "x-1.tsv"
    path.write_text(_rule_rows([("b.py:1", "DTL004", "TRUE", "fine"), row]), encoding="utf-8")
    with pytest.raises(triage.VerdictError, match=rf"x-1.tsv:3: .*{message}"):
        triage.load_rule_verdicts("x", "1", path)


def test_rule_join_counts_per_rule_and_names_findings_and_rows_to_judge(tmp_path):
    rows = [("a.py:10", "DTL003", "TRUE", "no weight under AWQ"), ("a.py:10", "DTL004", "FALSE", "guarded"),
            ("b.py:3", "DTL005", "TRUE", "int8"), ("c.py:7", "DTL003", "FALSE", "gone since")]
    (tmp_path / "t-1.tsv").write_text(_rule_rows(rows, ["A note."]), encoding="utf-8")
    verdicts = triage.load_rule_verdicts("t", "1", tmp_path / "t-1.tsv")

    def finding(path, line, code):
        return {"path": f"./{path}", "line": line, "col": 1, "code": code, "message": "m", "scope": "f",
                "expression": "x"}

    findings = [finding("a.py", 10, "DTL003"), finding("a.py", 10, "DTL004"), finding("b.py", 3, "DTL005"),
                finding("d.py", 2, "DTL003"), finding("e.py", 1, "DTL001")]
    t = triage.join_rules(verdicts, findings, tmp_path)
    assert [(k, f["code"]) for k, f, _ in t.findings] == [
        ("a.py:10", "DTL003"), ("a.py:10", "DTL004"), ("b.py:3", "DTL005"), ("d.py:2", "DTL003")]  # not DTL001
    assert t.counts() == (4, 2, 1) and t.counts("DTL003") == (2, 1, 0) and t.counts("DTL004") == (1, 0, 1)
    assert t.precision() == 0.5 and t.precision("DTL005") == 1.0
    problems = t.problems()
    assert len(problems) == 2, problems
    assert "`d.py:2` DTL003 has no verdict" in problems[0]
    assert "`c.py:7` DTL003 (t-1.tsv:6) has no finding" in problems[1]
    page = triage.render_rules([t])
    assert "| DTL003 | 2 | 1 | 0 | 50% |" in page and "| **all** | **4** | **2** | **1** | **50%** |" in page
    assert "2 of 4 TRUE: **below the bar**." in page
    assert "A note.\n" in page and "| 4 | `d.py:2` | DTL003 | **no verdict** |  |" in page
    assert "## To judge" in page


@pytest.mark.network
@pytest.mark.parametrize("fixture", list(RULE_TREES))
def test_every_rule_finding_has_a_verdict_and_every_verdict_a_finding(rules_triaged, fixture):
    t = rules_triaged["-".join(RULE_TREES[fixture])]
    assert t.problems() == [], (
        f"docs/triage/verdicts/dtl003-005/{t.name}.tsv no longer fits the run (read the code, fix the rows, then "
        "run scripts/triage.py --all):\n" + "\n".join(t.problems()))


@pytest.mark.network
@pytest.mark.parametrize("fixture", list(RULE_TREES))
def test_rule_precision_meets_issue_10(rules_triaged, fixture):
    t = rules_triaged["-".join(RULE_TREES[fixture])]
    n, true, _ = t.counts()
    assert n, "no DTL003-DTL005 finding: nothing to measure (the rules went silent?)"
    false = [f"{k} {f['code']}: {r.why}" for k, f, r in t.findings if r is not None and r.verdict == "FALSE"]
    assert t.precision() >= triage.MIN_RULE_PRECISION, (
        f"{t.name}: DTL003-DTL005 precision {true}/{n} = {t.precision():.1%} < {triage.MIN_RULE_PRECISION:.0%}; "
        "FALSE findings:\n" + "\n".join(false))


@pytest.mark.network
def test_rule_page_is_what_the_runs_give(rules_triaged):
    page = triage.RULE_PAGE.read_text(encoding="utf-8")
    runs = [rules_triaged[f"{d}-{v}"] for d, v in triage.RULE_TREES]
    assert page == triage.render_rules(runs), "docs/triage/rules-dtl003-005.md is stale: run scripts/triage.py --all"
