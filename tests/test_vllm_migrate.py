"""`dtype-lint migrate` on a copy of vLLM 0.27.1, compared with what vLLM 0.28.0 shipped (PR #38771).

One session-scoped run does the work (copy, migrate, check again; the check before is the
release's shared `--select ALL` run) and the tests read its results:
- migrate exits 0 and writes a report naming the helper and mla_attention.py;
- in the migrated mla_attention.py, both prefill-context paths call
  `get_layer_input_dtype(self.kv_b_proj, use_fp8_prefill)` into a name where 0.27.1 read the
  dtype (in the chunk loop, right before the guard: #20, a fix never hoists), and cast
  `kv_c_normed` only under `if <name> is not None:`, with no `.weight.dtype` and no
  `kv_b_proj_w_dtype` left; the guard and the call are the ones 0.28.0 has (its helper is named
  `_get_kv_b_proj_input_dtype`); 0.28.0 calls it once before the loop, which is the same on
  every run that enters the loop, and also runs it on a run with no chunk;
- every .py file the migration wrote compiles (the others are the release's bytes), and a second check
  offers no DTL001 fix;
- the diff between the trees touches only the flagged functions (from the first check's JSON
  scopes and lines), the added helper import lines, and the new helper file.
"""

from __future__ import annotations

import ast
import difflib
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_runner import dtl as run_cli
from release_runs import check_all, findings_json

# One worker builds the migration of the whole release once: the group keeps this module's tests on
# one worker, and the fixtures are session-scoped because a module fixture is torn down (and built
# again) when a test of another module runs between two of this module's tests there. The group is
# test_triage.py's and test_rules_real_world.py's: the first check is their `--select ALL` run of
# the release (tests/release_runs.py), made once per worker.
pytestmark = [pytest.mark.network, pytest.mark.xdist_group("release-runs")]

MLA = "vllm/model_executor/layers/attention/mla_attention.py"
HELPER_FILE = "vllm/model_executor/layers/quantization/utils/layer_input_dtype.py"
HELPER_MODULE = "vllm.model_executor.layers.quantization.utils.layer_input_dtype"
OUR_HELPER = "get_layer_input_dtype"
UPSTREAM_HELPER = "_get_kv_b_proj_input_dtype"
PREFILL_FUNCS = ("_compute_prefill_context", "_context_parallel_compute_prefill_context")


def dtl(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return run_cli(cwd, *args)


@dataclass
class Migration:
    original: Path  # the fetched 0.27.1 tree (read-only here)
    tree: Path  # the migrated copy
    report: Path
    before: dict  # first check's JSON (paths in the copy)
    migrate: subprocess.CompletedProcess
    after: dict  # second check's JSON


MIGRATE_RULES = ("--extend-select", "DTL004,DTL005")


def first_check(original: Path, tree: Path) -> dict:
    """What `check TREE --output-format json --no-cache --extend-select DTL004,DTL005` prints for
    the copy before the migration: the findings of those rules in the shared `--select ALL` run of
    the release (what a rule reports does not depend on which other rules run), named in the copy."""
    from dtype_lint.core.rule_registry import migration_codes, opt_in_codes

    opted_out = opt_in_codes() - set(migration_codes())  # the opt-in rules migrate does not run
    findings = [f for f in findings_json(check_all(original)) if f["code"] not in opted_out]
    for f in findings:
        f["path"] = str(tree / Path(f["path"]).resolve().relative_to(original.resolve()))
    return {"findings": findings}


@pytest.fixture(scope="session")
def migration(vllm_0271: Path, tmp_path_factory) -> Migration:
    base = tmp_path_factory.mktemp("migrate")
    tree = base / "tree"
    shutil.copytree(vllm_0271 / "vllm", tree / "vllm")
    report = base / "report.md"
    # migrate runs the opt-in DTL004/DTL005 too (their fixes are proven): the checks see what it sees.
    before = first_check(vllm_0271, tree)
    assert before["findings"]
    proc = dtl("migrate", str(tree), "--report", str(report), cwd=base)
    second = dtl("check", str(tree), "--output-format", "json", "--no-cache", *MIGRATE_RULES, cwd=base)
    assert second.returncode in (0, 1), second.stderr
    return Migration(vllm_0271, tree, report, before, proc, json.loads(second.stdout))


def rel(path: str, root: Path) -> str:
    return Path(path).resolve().relative_to(root.resolve()).as_posix()


def functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """Qualified name (Class.method, nested.def) -> function node."""
    out = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                q = f"{prefix}.{child.name}" if prefix else child.name
                if not isinstance(child, ast.ClassDef):
                    out[q] = child
                visit(child, q)
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def function_named(tree: ast.Module, name: str) -> ast.FunctionDef:
    found = [fn for q, fn in functions(tree).items() if q.split(".")[-1] == name]
    assert len(found) == 1, f"{name}: {len(found)} definitions"
    return found[0]


# --- the prefill block -------------------------------------------------------------------------------


@dataclass
class PrefillFix:
    call: ast.Call  # helper(self.kv_b_proj, use_fp8_prefill)
    var: str  # the name it is assigned to
    assign: ast.Assign  # var = helper(...)
    block: list  # the statements holding that assignment
    guard: ast.If  # if var is not None: kv_c_normed = kv_c_normed.to(var)
    guard_loop_index: int  # position (in the function body) of the loop holding the guard
    fn_body: list  # the function's own statements

    @property
    def at_top(self) -> bool:
        """Called once, in the function body before the loop (0.28.0's shape)."""
        return self.block is self.fn_body


def prefill_fix(fn: ast.FunctionDef, helper: str) -> PrefillFix:
    assigns = [(node, block) for node0 in ast.walk(fn) for name in ("body", "orelse")
               for block in [getattr(node0, name, None)] if isinstance(block, list)
               for node in block if isinstance(node, ast.Assign) and len(node.targets) == 1
               and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Call)
               and isinstance(node.value.func, ast.Name) and node.value.func.id == helper]
    all_calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == helper]
    assert len(assigns) == 1 and len(all_calls) == 1, f"{fn.name}: one `x = {helper}(...)`"
    assign, block = assigns[0]
    var = assign.targets[0].id
    guards = []
    for i, stmt in enumerate(fn.body):
        for node in ast.walk(stmt):
            if (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                    and isinstance(node.test.left, ast.Name) and node.test.left.id == var
                    and [type(o) for o in node.test.ops] == [ast.IsNot]
                    and isinstance(node.test.comparators[0], ast.Constant) and node.test.comparators[0].value is None):
                guards.append((i, node))
    assert len(guards) == 1, f"{fn.name}: one `if {var} is not None:`"
    loop_index, guard = guards[0]
    assert isinstance(fn.body[loop_index], (ast.For, ast.While)), "the guarded cast sits in the chunk loop"
    return PrefillFix(assign.value, var, assign, block, guard, loop_index, fn.body)


def normalised_guard(fix: PrefillFix) -> str:
    """The guard statement with the helper's result variable renamed to a placeholder."""

    class Rename(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.Name:
            return ast.Name("INPUT_DTYPE", node.ctx) if node.id == fix.var else node

    return ast.dump(Rename().visit(ast.parse(ast.unparse(fix.guard))).body[0])


@pytest.fixture(scope="session")
def migrated_mla(migration: Migration) -> ast.Module:
    return ast.parse((migration.tree / MLA).read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def shipped_mla(vllm_0280: Path) -> ast.Module:
    return ast.parse((vllm_0280 / MLA).read_text(encoding="utf-8"))


def test_migrate_exit_code_and_report(migration: Migration):
    # Exit 1 exactly when sites without a safe fix remain (DTL002 has none), and each is listed.
    left = [f for f in migration.before["findings"] if not (f["fix"] and f["fix"]["applicability"] == "safe")]
    assert migration.migrate.returncode == (1 if left else 0), migration.migrate.stdout + migration.migrate.stderr
    text = migration.report.read_text(encoding="utf-8")
    # Each is listed where it is after the migration (fixes above it in its file move it).
    for f in migration.after["findings"]:
        assert f"`{rel(f['path'], migration.tree)}:{f['line']}` | {f['code']}" in text
    assert f"{HELPER_MODULE}:{OUR_HELPER}" in text
    assert HELPER_FILE in text and "created by this migration" in text
    assert "mla_attention.py" in text
    for name in PREFILL_FUNCS:
        assert name in text
    fixed = sum(1 for f in migration.before["findings"] if f["fix"] and f["fix"]["applicability"] == "safe")
    assert f"- Sites fixed: {fixed} in " in text


@pytest.mark.parametrize("name", PREFILL_FUNCS)
def test_prefill_paths_use_the_helper(migration: Migration, migrated_mla: ast.Module, name: str):
    fn = function_named(migrated_mla, name)
    fix = prefill_fix(fn, OUR_HELPER)
    assert ast.unparse(fix.call) == f"{OUR_HELPER}(self.kv_b_proj, use_fp8_prefill)"
    assert ast.unparse(fix.guard) == f"if {fix.var} is not None:\n    kv_c_normed = kv_c_normed.to({fix.var})"
    # Called where 0.27.1 read the dtype: in the chunk loop, right before the guard (never
    # hoisted: the loop may run zero times and calls the layer).
    assert not fix.at_top and fix.block[fix.block.index(fix.assign) + 1] is fix.guard
    assert fix.assign in list(ast.walk(fn.body[fix.guard_loop_index]))
    text = (migration.tree / MLA).read_text(encoding="utf-8")
    segment = ast.get_source_segment(text, fn)
    assert ".weight.dtype" not in segment
    assert "kv_b_proj_w_dtype" not in segment  # also catches _kv_b_proj_w_dtype
    assert "hasattr(self.kv_b_proj" not in segment


@pytest.mark.parametrize("name", PREFILL_FUNCS)
def test_prefill_fix_matches_vllm_0280(migrated_mla: ast.Module, shipped_mla: ast.Module, name: str):
    ours = prefill_fix(function_named(migrated_mla, name), OUR_HELPER)
    shipped = prefill_fix(function_named(shipped_mla, name), UPSTREAM_HELPER)
    assert normalised_guard(ours) == normalised_guard(shipped)
    assert [ast.dump(a) for a in ours.call.args] == [ast.dump(a) for a in shipped.call.args]
    assert [ast.dump(k) for k in ours.call.keywords] == [ast.dump(k) for k in shipped.call.keywords]
    # 0.28.0 calls it once before the loop; ours where the dtype was read, right before the
    # guard in the loop: the same on every run that enters the loop.
    assert shipped.at_top and not ours.at_top
    assert ours.block[ours.block.index(ours.assign) + 1] is ours.guard


def test_helper_import_and_file(migration: Migration, migrated_mla: ast.Module):
    imports = [n for n in migrated_mla.body if isinstance(n, ast.ImportFrom) and n.module == HELPER_MODULE]
    assert [[a.name for a in n.names] for n in imports] == [[OUR_HELPER]]
    helper = migration.tree / HELPER_FILE
    from dtype_lint.fix.helper_template import helper_source

    assert helper.read_text(encoding="utf-8") == helper_source(OUR_HELPER, "vllm")


def test_every_migrated_file_compiles(migration: Migration):
    # Every file the migration wrote or created; the others hold the release's own bytes
    # (test_diff_touches_only_flagged_functions_and_imports), which Python compiles as shipped.
    written = [path for path in sorted(migration.tree.rglob("*.py"))
               if not (migration.original / path.relative_to(migration.tree)).is_file()
               or (migration.original / path.relative_to(migration.tree)).read_bytes() != path.read_bytes()]
    for path in written:
        compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
    assert (migration.tree / HELPER_FILE) in written and (migration.tree / MLA) in written


def test_second_check_offers_no_fix(migration: Migration):
    left = migration.after["findings"]
    assert not [f for f in left if f["code"] == "DTL001" and f["fix"]], left
    assert not [f for f in left if f["code"] in ("DTL900", "DTL901")], left
    flagged_before = {rel(f["path"], migration.tree) for f in migration.before["findings"]}
    assert MLA in flagged_before
    assert not [f for f in left if rel(f["path"], migration.tree) == MLA]


# --- the diff stays where the findings were ------------------------------------------------------------


def _is_helper_import(line: str) -> bool:
    try:
        (node,) = ast.parse(line.strip()).body
    except (SyntaxError, ValueError):
        return False
    return isinstance(node, ast.ImportFrom) and node.module == HELPER_MODULE and [a.name for a in node.names] == [OUR_HELPER]


def test_diff_touches_only_flagged_functions_and_imports(migration: Migration):
    findings = [f for f in migration.before["findings"] if f["fix"]]
    # DTL004's fix is DTL001's idiom rewrite of the same guarded cast.
    assert findings and all(f["code"] in ("DTL001", "DTL004") for f in findings)
    by_file: dict[str, list[dict]] = {}
    for f in findings:
        by_file.setdefault(rel(f["path"], migration.tree), []).append(f)

    original = {p.relative_to(migration.original).as_posix() for p in migration.original.rglob("*.py")}
    migrated = {p.relative_to(migration.tree).as_posix() for p in migration.tree.rglob("*.py")}
    assert original - migrated == set(), "files disappeared"
    assert migrated - original == {HELPER_FILE}, "only the helper is new"
    assert not [p for p in migration.tree.rglob("*") if p.is_file() and not p.name.endswith(".py")
                and not (migration.original / p.relative_to(migration.tree)).exists()]

    changed = sorted(p for p in original
                     if (migration.original / p).read_bytes() != (migration.tree / p).read_bytes())
    assert changed and set(changed) <= set(by_file), f"changed without a finding: {set(changed) - set(by_file)}"
    fixed = {rel(f["path"], migration.tree) for f in findings if f["fix"] and f["fix"]["applicability"] == "safe"}
    assert set(changed) == fixed

    for path in changed:
        old_text = (migration.original / path).read_text(encoding="utf-8")
        new_text = (migration.tree / path).read_text(encoding="utf-8")
        funcs = functions(ast.parse(old_text))
        regions = []
        for f in by_file[path]:
            fn = funcs.get(f["scope"].split(".<locals>")[0]) or funcs.get(f["scope"])
            assert fn is not None, f"{path}: no function {f['scope']}"
            assert fn.lineno <= f["line"] <= fn.end_lineno, f"{path}:{f['line']} outside {f['scope']}"
            regions.append((fn.lineno, fn.end_lineno))

        def inside(first: int, last: int, regions=regions) -> bool:
            return any(lo <= first and last <= hi for lo, hi in regions)

        old_lines, new_lines = old_text.splitlines(), new_text.splitlines()
        matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
        hunks = [op for op in matcher.get_opcodes() if op[0] != "equal"]
        assert hunks
        for tag, i1, i2, j1, j2 in hunks:
            added = new_lines[j1:j2]
            if tag == "insert" and added and all(_is_helper_import(a) for a in added):
                continue  # the helper import, at module level
            if tag == "insert":
                # Inserted between old lines i1 and i1 + 1 (1-based): inside a flagged function.
                assert inside(i1, i1 + 1) or inside(i1 + 1, i1 + 1), (
                    f"{path}: lines inserted after line {i1} outside every flagged function:\n" + "\n".join(added))
            else:
                assert inside(i1 + 1, i2), (
                    f"{path}: lines {i1 + 1}-{i2} changed outside every flagged function:\n"
                    + "\n".join(old_lines[i1:i2]) + "\n---\n" + "\n".join(added))
            assert not any(_is_helper_import(a) for a in added)
        imports_added = sum(1 for a in new_lines if _is_helper_import(a)) - sum(1 for a in old_lines if _is_helper_import(a))
        assert imports_added == 1, path
