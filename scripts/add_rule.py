"""Scaffold a new rule, as Ruff's `scripts/add_rule.py` does: the rule module, its test file, its
generated docs page, and the rules tables regenerated. Nothing else lists rules, so these are the
only files a new rule needs (CONTRIBUTING.md walks through filling them in).

    python scripts/add_rule.py storage-dtype-iinfo --summary "..."          # the next free code, opt-in
    python scripts/add_rule.py storage-dtype-iinfo --summary "..." --code DTL007 --default-on

Writes `rules/dtlNNN_<name>.py` (the rule class, its message, metadata, docs and VALID/INVALID
examples: a working rule that reports `torch.iinfo(L.weight.dtype)` on a quantizable layer, to edit
into the new one), `tests/rules/test_dtlNNN.py`, and `docs/rules/DTLNNN.md` (the module docstring,
as `dtype-lint rule DTLNNN` prints it); then `scripts/readme_rules.py` regenerates the README's and
docs/rules/README.md's tables from the registry. `--root DIR` scaffolds into another checkout.
A new rule is opt-in (`default_enabled = False`) until the accuracy benchmark shows it precise
(benchmarks/accuracy/); `--default-on` is for a rule already measured.
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from readme_rules import write_tables  # noqa: E402 - scripts/ is not a package

from dtype_lint.core.rule_registry import RULE_MODULE_NAME, read_folder  # noqa: E402

_NAME = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
_CODE = re.compile(r"DTL[0-8]\d\d")

RULE_TEMPLATE = '''"""{code} {name}: {summary}.

## What it does
Flags `torch.iinfo(L.weight.dtype)` where `L` is a layer a quantization backend may repack (the
scaffold's example check: replace it with what {code} looks for).

## Why is this bad?
A quantization backend may repack a layer's weight after loading (Marlin: `torch.int32`, NVFP4:
`torch.uint8`; AWQ/GPTQ layers have no `.weight`): the storage dtype of a weight is not the
compute dtype of its input, and what is derived from it describes the storage.

## Example
```python
limit = torch.iinfo(self.o_proj.weight.dtype).max
```

## Use instead
```python
limit = torch.iinfo(torch.int8).max  # the dtype the computation means, named
```

## Fix safety
No fix: which dtype was meant is a human choice.

## Known limits
Only what the layer resolution reads (docs/quantizability.md).

## Options
`preset`, `quantizable`, `exempt-classes`, `not-quantizable`.
"""

from __future__ import annotations

import ast

from dtype_lint.analysis.flow.recognisers import weight_dtype_source
from dtype_lint.rule import FixAvailability, Invalid, Rule, RuleContext, Valid, storage_dtypes

_HEAD = """\\
import torch
from vllm.model_executor.layers.linear import RowParallelLinear


class Block:
    def __init__(self, o_proj: RowParallelLinear):
        self.o_proj = o_proj
"""


class {class_name}(Rule):
    code = "{code}"
    name = "{name}"
    summary = "{summary}"
    default_enabled = {default_enabled}
    patterns = (r"\\biinfo\\(",)
    facts = frozenset({{"candidates", "layers"}})
    fix_availability = FixAvailability.NONE
    fix_note = "the dtype meant is a human choice"
    regions = "sites"

    VALID = [
        Valid(_HEAD + "    def f(self):\\n        return torch.iinfo(torch.int8).max\\n"),
        Valid("import torch\\nimport torch.nn as nn\\nclass V(nn.Module):\\n    def __init__(self):\\n"
              "        self.proj = nn.Linear(4, 4)\\n    def f(self):\\n"
              "        return torch.iinfo(self.proj.weight.dtype).max\\n"),
    ]
    INVALID = [
        Invalid(_HEAD + "    def f(self):\\n        return torch.iinfo(self.o_proj.weight.dtype).max\\n",
                message_contains=("self.o_proj", "torch.iinfo")),
    ]

    def check(self, ctx: RuleContext) -> None:
        for function, node in ctx.calls():
            if ast.unparse(node.func) not in ("torch.iinfo", "iinfo") or not node.args:
                continue
            weight_dtype = weight_dtype_source(node.args[0], function.scope)
            verdict = ctx.layer_verdict(weight_dtype.layer, function, site=node) if weight_dtype else None
            if verdict is None:
                continue
            confidence, evidence = verdict
            ctx.report(node, f"`torch.iinfo` of `{{ast.unparse(weight_dtype.layer)}}.weight.dtype`, the storage dtype "
                             f"of a quantizable layer {{storage_dtypes(evidence)}}; name the dtype meant",
                       confidence=confidence, evidence=evidence, no_fix_reason="the dtype meant is a human choice")
'''

TEST_TEMPLATE = '''"""{code} {name} beyond its examples (tests/test_rule_examples.py runs those): it is
{default_words}, selectable by its code, and reports no fix."""

from __future__ import annotations

from dtype_lint.api import check_source
from dtype_lint.rules import RULES_BY_CODE

RULE = RULES_BY_CODE["{code}"]
SITE = RULE.INVALID[0].code


def test_selected_by_its_code_it_reports_its_example_without_a_fix():
    (finding,) = check_source(SITE, filename="block.py", settings={{"select": ["{code}"]}})
    assert finding.code == "{code}" and finding.fix is None and finding.no_fix_reason


def test_the_default_selection_{default_test_name}():
    codes = {{finding.code for finding in check_source(SITE, filename="block.py")}}
    assert ("{code}" in codes) is {default_enabled}
'''


def next_code(rules: Path) -> str:
    """The code after the highest rule code in use (the engine's DTL9xx are not rules)."""
    used = [int(path.stem[3:6]) for path in rules.glob("dtl*.py") if RULE_MODULE_NAME.fullmatch(path.stem)]
    return f"DTL{max(used, default=0) + 1:03d}"


def page(module_text: str) -> str:
    """docs/rules/CODE.md as `dtype-lint rule CODE` prints it (cli_output.rule_doc), plus its newline."""
    docstring = module_text.split('"""', 2)[1]
    title, _, body = inspect.cleandoc(docstring).partition("\n")
    return f"# {title}\n{body}\n\n"


def scaffold(root: Path, name: str, summary: str, code: str | None = None, default_on: bool = False) -> list[Path]:
    """Write the new rule's files under `root`; the paths written (the rules tables' files last)."""
    if not _NAME.fullmatch(name):
        raise SystemExit(f"error: the rule name is kebab-case (`storage-dtype-iinfo`), got {name!r}")
    if not summary or '"' in summary or "\\" in summary or "\n" in summary:
        raise SystemExit("error: --summary is one line without quotes or backslashes")
    rules = root / "rules"
    code = code or next_code(rules)
    if not _CODE.fullmatch(code):
        raise SystemExit(f"error: a rule code is DTL001-DTL899, got {code!r}")
    taken = {info.code: info.name for info in read_folder(rules)}
    if code in taken or name in taken.values():
        raise SystemExit(f"error: {code if code in taken else name} is taken ({taken})")
    module = rules / f"{code.lower()}_{name.replace('-', '_')}.py"
    test = root / "tests" / "rules" / f"test_{code.lower()}.py"
    doc = root / "docs" / "rules" / f"{code}.md"
    for path in (module, test, doc):
        if path.exists():
            raise SystemExit(f"error: {path} exists")
    fields = {"code": code, "name": name, "summary": summary.rstrip("."), "default_enabled": default_on,
              "class_name": "".join(part.capitalize() for part in name.split("-"))}
    module.write_text(RULE_TEMPLATE.format(**fields), encoding="utf-8")
    test.write_text(TEST_TEMPLATE.format(
        **fields, default_words="on by default" if default_on else "opt-in (off unless selected by code)",
        default_test_name="runs_it" if default_on else "leaves_it_off"), encoding="utf-8")
    doc.write_text(page(module.read_text(encoding="utf-8")), encoding="utf-8")
    tables = [root / stale for stale in write_tables(root)]
    return [module, test, doc, *tables]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help="kebab-case, e.g. storage-dtype-iinfo")
    parser.add_argument("--summary", required=True, help="one line: what the rule reports")
    parser.add_argument("--code", help="DTLNNN (default: the next free code)")
    parser.add_argument("--default-on", action="store_true", help="on by default (default: opt-in)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to write into (default: this one)")
    args = parser.parse_args(argv)
    for path in scaffold(args.root.resolve(), args.name, args.summary, args.code, args.default_on):
        print(f"wrote {path.relative_to(args.root.resolve()).as_posix()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
