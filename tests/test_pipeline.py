"""One pipeline, one writer, rules that declare themselves: the architecture, held by tests.

- `cli`, `migrate`, `api` share `pipeline.run`; nothing in the package imports in a cycle;
- suppressions are settled before any fix, so `--fix` applies the DTL902 fixes a check offers;
- the API applies per-file ignores exactly as a run does;
- every byte written into a project goes through `writer.py` and is reported;
- a rule reads only the facts it declares; rules are discovered, and the prefilter is theirs.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from cli_runner import dtl
from parsed_sources import nodes
from tiny_project import files_passed, write_tree

from dtype_lint.api import check_source, make_config
from dtype_lint.core.prefilter import Prefilter, marker_words
from dtype_lint.rule import Rule, RuleContractError
from dtype_lint.rules import ALL_RULES
from dtype_lint.run import pipeline, stamp_memo

PKG = Path(__file__).resolve().parents[1]
LAYER_HEAD = (
    "from vllm.model_executor.layers.linear import ColumnParallelLinear\n\n\n"
    "class Attn:\n"
    "    def __init__(self, kv_b_proj: ColumnParallelLinear):\n"
    "        self.kv_b_proj = kv_b_proj\n\n"
)


def _modules() -> dict[str, Path]:
    out = {}
    for base, pkg in ((PKG / "dtype_lint", "dtype_lint"), (PKG / "rules", "dtype_lint.rules")):
        for path in base.rglob("*.py"):
            rel = path.relative_to(base).with_suffix("").as_posix().replace("/", ".")
            name = pkg if rel == "__init__" else f"{pkg}.{rel.removesuffix('.__init__')}"
            out[name] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    deps = set()
    for node in nodes(path):  # function-level (lazy) imports count too
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = name.split(".")
                if path.name != "__init__.py":
                    parts = parts[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for a in node.names:
                deps.add(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base)
        elif isinstance(node, ast.Import):
            deps.update(a.name for a in node.names)
    return {d for d in deps if d in known and d != name}


def test_no_import_cycles_in_the_package():
    mods = _modules()
    graph = {name: _imports(name, path, set(mods)) for name, path in mods.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(v: str) -> None:
        state[v] = 1
        stack.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                cycle = stack[stack.index(w):] + [w]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if w not in state:
                visit(w)
        stack.pop()
        state[v] = 2

    for v in sorted(graph):
        if v not in state:
            visit(v)


@pytest.mark.parametrize("front", ["dtype_lint.cli", "dtype_lint.migrate.migration", "dtype_lint.api"])
def test_front_ends_run_through_the_pipeline(front):
    mods = _modules()
    deps = _imports(front, mods[front], set(mods))
    assert "dtype_lint.run.pipeline" in deps
    # ...and do not wire stages themselves.
    assert not deps & {"dtype_lint.run.file_analysis", "dtype_lint.fix.fixer", "dtype_lint.core.suppressions", "dtype_lint.run.cache"}
    assert "dtype_lint.cli" not in deps


_WRITES = {"write_text", "write_bytes", "mkstemp", "replace", "rename", "mkdir", "makedirs", "symlink", "chmod"}


def test_only_the_writer_writes_files():
    """No module but writer.py opens a file for writing or renames one (releases.py builds its
    cache of downloaded trees outside any project, with a directory rename of its own)."""
    offenders = []
    for name, path in _modules().items():
        if name in ("dtype_lint.core.writer", "dtype_lint.releases"):
            continue
        for node in nodes(path):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            attr = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if attr in _WRITES and not (attr == "replace" and not (isinstance(f, ast.Attribute)
                                                                      and getattr(f.value, "id", "") == "os")):
                offenders.append(f"{path.name}:{node.lineno} {attr}")
            if attr == "open" and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) \
                    and any(m in str(node.args[1].value) for m in "wax+"):
                offenders.append(f"{path.name}:{node.lineno} open")
    assert offenders == []


# ---- the two bugs that shared wiring fixed ----------------------------------------------------


def _project(root: Path, files: dict[str, str]) -> Path:
    return write_tree(root, {"pyproject.toml": '[tool.dtype-lint]\nhelper = "proj.dtypes:get_layer_input_dtype"\n',
                             "proj/__init__.py": "", **files})


def test_fix_removes_the_unused_suppressions_it_reports_fixable(tmp_path: Path):
    source = "import torch\n\n\ndef f(x):\n    return x.to(torch.float16)  # noqa: DTL001\n"
    root = _project(tmp_path, {"proj/m.py": source})
    check = dtl(root, "check", ".", "--no-cache", "--output-format", "json")
    (finding,) = json.loads(check.stdout)["findings"]
    assert finding["code"] == "DTL902" and finding["fix"]["applicability"] == "safe"
    fixed = dtl(root, "check", ".", "--no-cache", "--fix")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert (root / "proj/m.py").read_text() == source.replace("  # noqa: DTL001", "")
    assert "wrote proj/m.py (fix)" in fixed.stderr


def test_api_applies_per_file_ignores_like_a_run():
    source = LAYER_HEAD + "    def f(self, x):\n        return x.to(self.kv_b_proj.weight.dtype)  # dtype-lint: ignore[DTL001] why\n"
    assert [f.code for f in check_source(source, filename="m.py")] == []
    ignored = {"per-file-ignores": {"*.py": ["DTL001"]}}
    # Ignored for this file: the finding goes, and the suppression is not reported as unused.
    assert check_source(source, filename="m.py", settings=ignored) == []
    bare = source.replace("  # dtype-lint: ignore[DTL001] why", "")
    assert [f.code for f in check_source(bare, filename="m.py")] == ["DTL001"]
    assert check_source(bare, filename="m.py", settings=ignored) == []


def test_a_fixing_run_lists_every_file_it_creates_or_changes(tmp_path: Path):
    attn = LAYER_HEAD + "    def f(self, x):\n        x = x.to(self.kv_b_proj.weight.dtype)\n        return x\n"
    root = _project(tmp_path, {"proj/attn.py": attn})
    result = pipeline.run(make_config({"helper": "proj.dtypes:get_layer_input_dtype"}, root=root),
                          pipeline.RunOptions(paths=[str(root)], use_cache=False, fix=True))
    assert [(w.path, w.action, w.why) for w in result.writes] == [
        ("proj/dtypes.py", "created", "helper"), ("proj/attn.py", "changed", "fix")]
    assert not (root / ".dtype_lint_cache").exists()


def test_only_a_run_that_reads_stamps_stamps_files(tmp_path: Path, monkeypatch):
    # A stamp reads and hashes a file once more: a `--no-cache` check reads none, so it makes none;
    # the cache and the fix stage (a file changed since it was checked) do.
    attn = LAYER_HEAD + "    def f(self, x):\n        x = x.to(self.kv_b_proj.weight.dtype)\n        return x\n"
    root = _project(tmp_path, {"proj/attn.py": attn, "proj/other.py": "import torch\n"})
    stamped: list[str] = []
    real_stamp = pipeline._stamp
    monkeypatch.setattr(pipeline, "_stamp", lambda p: stamped.append(p) or real_stamp(p))
    # a cached run stamps through its memo (run/stamp_memo.py), which hashes what it has no stat data for
    monkeypatch.setattr(stamp_memo, "file_stamp", lambda p: stamped.append(p) or real_stamp(p))
    config = make_config({"helper": "proj.dtypes:get_layer_input_dtype"}, root=root)
    runs = {}
    for name, options in [("check", {}), ("diff", {"diff": True}), ("cached", {"use_cache": True})]:
        stamped.clear()
        result = pipeline.run(config, pipeline.RunOptions(paths=[str(root)], jobs=1,
                                                          **{"use_cache": False, **options}))
        runs[name] = ([f.code for f in result.findings], bool(stamped), sorted(result.checked_stamps.values()))
    real = str((root / "proj/attn.py").resolve())
    assert runs["check"] == (["DTL001"], False, [(real, pipeline.UNSTAMPED)])
    assert runs["diff"][:2] == runs["cached"][:2] == (["DTL001"], True)
    assert runs["diff"][2] == runs["cached"][2] == [(real, real_stamp(real))]


# ---- rules declare themselves -----------------------------------------------------------------


def test_rules_are_discovered_one_module_each():
    modules = sorted(p.stem for p in (PKG / "rules").glob("dtl*.py"))
    assert [r.code.lower() for r in ALL_RULES] == [m.split("_")[0] for m in modules]
    for rule in ALL_RULES:
        assert rule.patterns, f"{rule.code} declares no prefilter patterns"
        assert rule.facts, f"{rule.code} declares no facts"


def test_the_prefilter_takes_the_rules_patterns():
    class Only(Rule):
        code, name, summary = "DTL999", "only", "test"
        patterns = (r"\bspecial_marker_here\b",)
        marker = "special"

    assert Prefilter([Only]).might_match("x = special_marker_here\n")
    assert not Prefilter([Only]).might_match("x = y.weight.dtype\n")
    lazy = Prefilter([Only])  # a pattern is compiled when a text first reaches its marker
    assert not lazy.might_match("no marker\n") and not lazy._compiled
    assert not lazy.might_match("special, but not the pattern\n") and lazy.might_match("special_marker_here")
    assert not Prefilter([]).might_match("x = y.weight.dtype\n")


def test_the_prefilter_says_what_each_rules_own_regex_says():
    """Patterns are searched one by one behind a substring test: a file passes when some rule's
    marker and one of that rule's own patterns are in it."""
    import re

    from dtype_lint.core.prefilter import required_literal
    from dtype_lint.rules import ALL_RULES

    assert required_literal(r"=\s*[\w.]+\.weight\s*$") == ".weight"
    assert required_literal(r"a(?:bc)?de|f") == ""  # an alternation at the top: nothing is required
    assert required_literal(r"(?i)weight") == ""
    own = [(marker, re.compile("|".join(f"(?:{p})" for p in r.patterns), re.M))
           for r in ALL_RULES for marker in marker_words(r)]
    texts = [
        "w = self.o_proj.weight\nx.to(w.dtype)\n", "w = self.o_proj.weight  \n", "y = (self.weight\n)\n",
        'getattr(layer,  # a comment\n  "weight", None)\n', "layer.weight . dtype", "weights = 1\n",
        "x = a.weight_scale\n", "f(x.weight )", "self.weight\n=1", "",
        "x = torch.empty(3, dtype=torch.int32)\n",  # DTL005's marker, a DTL004 pattern: no rule's own
    ]
    texts += [p.read_text(encoding="utf-8") for p in (PKG / "fixtures").rglob("*.py")]
    prefilter = Prefilter(ALL_RULES)
    for text in texts:
        expected = any(marker in text and regex.search(text) is not None for marker, regex in own)
        assert prefilter.might_match(text) == expected, text[:200]


def test_a_rule_cannot_read_a_fact_it_did_not_declare(monkeypatch):
    from dtype_lint.run.file_analysis import analyze
    from dtype_lint.run.pipeline import single_file_index

    class Sneaky(Rule):
        code, name, summary = "DTL998", "sneaky", "test"
        patterns = (r"weight",)
        facts = frozenset({"candidates"})

        def check(self, ctx):
            _ = ctx.layers  # not declared

    monkeypatch.setattr("dtype_lint.run.file_analysis.enabled_rules", lambda config, path=None: [Sneaky])
    cfg = make_config()
    text = LAYER_HEAD + "    def f(self, x):\n        return x.to(self.kv_b_proj.weight.dtype)\n"
    with pytest.raises(RuleContractError, match="does not declare"):
        analyze("m.py", text, single_file_index(text, "m.py", cfg), cfg, "")


def _fix_run_recording_first(root: Path, monkeypatch, between=None) -> list:
    """Fix `root` in one process, recording the `first` findings the fix stage hands the fixer."""
    from dtype_lint.api import check_paths

    seen = []
    real_fix_text = pipeline.fix_text

    def recording(path, text, analyze, unsafe, first=None, **options):
        seen.append((Path(path).name, first))
        return real_fix_text(path, text, analyze, unsafe, first=first, **options)

    monkeypatch.setattr(pipeline, "fix_text", recording)
    if between is not None:
        real_stage = pipeline._fix_stage

        def touched_first(*args, **kwargs):
            between()
            return real_stage(*args, **kwargs)
        monkeypatch.setattr(pipeline, "_fix_stage", touched_first)
    result = check_paths([str(root)], make_config(root=root), fix=True, jobs=1, use_cache=False)
    return seen, result


def test_the_fix_stage_starts_from_the_check_stages_findings(tmp_path: Path, monkeypatch):
    from tiny_project import FIXED_CALL, tiny_project

    root = tiny_project(tmp_path)
    seen, result = _fix_run_recording_first(root, monkeypatch)
    assert [name for name, _ in seen] == ["attn.py"]
    first = seen[0][1]
    assert first is not None and [f.code for f in first] == ["DTL001"] and first[0].fix is not None
    assert FIXED_CALL in (root / "proj/attn.py").read_text() and [f.code for f in result.fixed] == ["DTL001"]


def test_a_file_changed_since_the_check_is_analysed_again_before_fixing(tmp_path: Path, monkeypatch):
    from tiny_project import ATTN, FIXED_CALL, tiny_project

    root = tiny_project(tmp_path)
    attn = root / "proj/attn.py"
    # An edit the check never saw: the checked offsets would land in the wrong place.
    seen, result = _fix_run_recording_first(root, monkeypatch, between=lambda: attn.write_text("\n\n" + ATTN))
    assert seen == [("attn.py", None)]
    assert attn.read_text().startswith("\n\n") and FIXED_CALL in attn.read_text()
    assert not result.findings


def test_the_helper_choice_stage_analyses_again_only_the_files_whose_fixes_it_changes(tmp_path: Path, monkeypatch):
    """An inferred helper home changes the import of every fix routed through the helper, so those
    files are analysed again with it; a file whose findings carry no helper fix is not."""
    from tiny_project import ATTN

    from dtype_lint.api import check_paths

    unguarded = ATTN.replace("x = x.to(self.kv_b_proj.weight.dtype)", "n = self.kv_b_proj.weight.shape[0]")
    root = write_tree(tmp_path / "p", {"pyproject.toml": "[tool.dtype-lint]\n", "src/pkg/__init__.py": "",
                                       "src/pkg/a.py": ATTN, "src/pkg/b.py": ATTN, "src/pkg/read.py": unguarded})
    analysed = files_passed(monkeypatch, pipeline, "analyze_path")
    monkeypatch.chdir(root)
    # DTL003 (opt-in) gives read.py a finding without a helper fix
    result = check_paths(["."], make_config({"select": ["DTL", "DTL003"]}, root=root), jobs=1, use_cache=False)
    assert result.helper_choice is not None and result.helper_choice.inferred
    assert sorted(analysed) == ["a.py", "a.py", "b.py", "b.py", "read.py"]
    assert {f.fix.imports for f in result.findings if f.fix} == {(("pkg.layer_input_dtype", "get_layer_input_dtype"),)}
