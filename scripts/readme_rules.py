"""Regenerate the fix column of the README's rules table from each rule's declaration
(`Rule.fix_availability` and `Rule.fix_note`, see dtype_lint/rule.py). `--check` exits 1 when the
README is stale instead of writing it."""

from __future__ import annotations

import sys
from pathlib import Path

from dtype_lint.rules import RULES_BY_CODE

README = Path(__file__).resolve().parents[1] / "README.md"


def render(text: str) -> str:
    """The README with every rule row's last cell replaced by the rule's fix column."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if not line.startswith("| [DTL"):
            continue
        code = line[3:9]
        rule = RULES_BY_CODE.get(code)
        if rule is None:
            continue
        cells = line.split(" | ")
        cells[-1] = f"{rule.fix_column()} |"
        lines[i] = " | ".join(cells)
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    text = README.read_text(encoding="utf-8")
    fresh = render(text)
    if "--check" in argv:
        if fresh != text:
            print("README.md's rules table is stale: run python scripts/readme_rules.py", file=sys.stderr)
            return 1
        return 0
    README.write_text(fresh, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
