"""The edit that adds `from module import name` where isort would put it.

A fix that routes a site through the helper needs its import; it is an ordinary `Edit` of the fix
(so `--diff`, JSON and SARIF carry whole fixes), identical for every fix of a file (the fixer
applies an identical edit once). Placement, in order of preference:
- nothing, when the module already imports `name` from `module` at top level;
- into an existing one-line `from module import a, b` (names kept sorted as isort orders them);
- among the top-level `from` imports of the same top-level package, in module order;
- in the import's isort section (`formatting.ProjectStyle`: future, standard library, third
  party, first party, local folder): among that section's `from` imports in module order (after
  its plain `import`s, as isort and Ruff order them unless `force-sort-within-sections`), or, when
  the file has no import of that section, as a block of its own between the sections before and
  after it, one blank line on each side;
- after the docstring and `from __future__` imports, else at the top.
"""

from __future__ import annotations

import ast

from dtype_lint.core.findings import Edit
from dtype_lint.core.source import SourceText


def _leading_block(tree: ast.Module) -> list[ast.stmt]:
    out = []
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            break
        out.append(stmt)
    return out


def _isort_key(name: str) -> tuple:
    # isort's default order_by_type: CONSTANTS, then Classes, then functions, each alphabetical.
    kind = 0 if name.isupper() else (1 if name[:1].isupper() else 2)
    return kind, name.lower()


def _last_line(s: ast.stmt) -> int:
    # A parsed statement always has its end line (typeshed's `int | None` is for nodes built by hand).
    return s.end_lineno or s.lineno


def _spelling(s: ast.ImportFrom) -> str:
    return "." * s.level + (s.module or "")


def import_edit(src: SourceText, tree: ast.Module, module: str, name: str, asname: str | None = None,
                style=None) -> Edit | None:
    """`from module import name` (`as asname`: the planner's fresh alias when `name` is taken).
    `module` may be relative (`.module_input_dtype`): it then goes among the file's relative imports.
    `style`: the project's formatting.ProjectStyle (default: no configuration, the root unknown)."""
    from dtype_lint.core.project_style import ProjectStyle

    style = style or ProjectStyle()
    nl = "\n"  # the fixer writes every inserted line break in the file's own style
    block = _leading_block(tree)
    level = len(module) - len(module.lstrip("."))
    top_from = [s for s in tree.body if isinstance(s, ast.ImportFrom) and (s.level > 0) == (level > 0)
                and s.col_offset == 0]
    if any(_spelling(s) == module and any(a.name == name and a.asname == asname for a in s.names)
           for s in top_from):
        return None
    if asname is not None:
        name = f"{name} as {asname}"  # isort keeps an aliased import on a line of its own
    line_of: dict[int, list[ast.stmt]] = {}
    for s in block:
        for n in range(s.lineno, _last_line(s) + 1):
            line_of.setdefault(n, []).append(s)

    def alone(s: ast.stmt) -> bool:
        return all(len(line_of.get(n, ())) == 1 for n in (s.lineno, _last_line(s)))

    def after(s: ast.stmt) -> Edit:
        if _last_line(s) >= len(src.lines) and not src.lines[-1].endswith(("\n", "\r")):
            return Edit(len(src.text), len(src.text), f"{nl}from {module} import {name}")
        off = src.offset(_last_line(s) + 1, 0) if _last_line(s) < len(src.lines) else len(src.text)
        return Edit(off, off, f"from {module} import {name}{nl}")

    same = [s for s in block if s in top_from and _spelling(s) == module and alone(s)]
    for s in same:
        raw = src.line(s.lineno)
        if asname is None and s.lineno == s.end_lineno and "(" not in raw and "#" not in raw and "\\" not in raw \
                and all(a.asname is None for a in s.names):
            names = sorted([a.name for a in s.names] + [name], key=_isort_key)
            start = src.offset(s.lineno, 0)
            end = start + len(raw)
            return Edit(start, end, f"from {module} import {', '.join(names)}")
    if same:
        return after(same[-1])

    top = module.split(".")[0]  # "" for a relative module: its siblings are the relative imports
    siblings = [s for s in block if s in top_from and (level or s.module) and
                _spelling(s).split(".")[0] == top and alone(s)]
    if siblings:
        before = [s for s in siblings if _spelling(s).lower() < module.lower()]
        if before:
            return after(before[-1])
        off = src.offset(siblings[0].lineno, 0)
        return Edit(off, off, f"from {module} import {name}{nl}")

    imports = [s for s in block if isinstance(s, (ast.Import, ast.ImportFrom)) and s.col_offset == 0]
    if imports:
        return _in_section(src, imports, module, name, style, after, nl)
    anchor = None
    if block and isinstance(block[0], ast.Expr) and isinstance(block[0].value, ast.Constant) \
            and isinstance(block[0].value.value, str):
        anchor = block[0]
    if anchor is not None:
        off = src.offset(_last_line(anchor) + 1, 0) if _last_line(anchor) < len(src.lines) else len(src.text)
        lead = "" if src.text[:off].endswith(("\n", "\r")) else nl
        return Edit(off, off, f"{lead}{nl}from {module} import {name}{nl}")
    # No docstring, no import: at the top, after a shebang and encoding comments.
    line = 1
    while line <= len(src.lines) and src.line(line).startswith("#"):
        line += 1
    off = src.offset(line, 0) if line <= len(src.lines) else len(src.text)
    return Edit(off, off, f"from {module} import {name}{nl}{nl}")


def _section_of(s: ast.Import | ast.ImportFrom, style) -> int:
    if isinstance(s, ast.ImportFrom):
        return style.section(s.module or "", s.level)
    return style.section(s.names[0].name)


def _in_section(src: SourceText, imports: list[ast.Import | ast.ImportFrom], module: str, name: str, style, after,
                nl: str) -> Edit:
    """The edit that puts the import into its isort section (see the module docstring)."""
    level = len(module) - len(module.lstrip("."))
    ours = style.section(module.lstrip("."), level)
    line = f"from {module} import {name}"
    same = [s for s in imports if _section_of(s, style) == ours]
    if same:
        def sort_key(s: ast.Import | ast.ImportFrom):
            target = _spelling(s) if isinstance(s, ast.ImportFrom) else s.names[0].name
            plain_first = 0 if style.force_sort_within_sections else (0 if isinstance(s, ast.Import) else 1)
            return plain_first, (target or "").lower()

        mine = (0 if style.force_sort_within_sections else 1, module.lower())
        later = [s for s in same if sort_key(s) > mine]
        if later:
            off = src.offset(later[0].lineno, 0)
            return Edit(off, off, f"{line}{nl}")
        return after(same[-1])
    earlier = [s for s in imports if _section_of(s, style) < ours]
    if earlier:
        last = earlier[-1]
        if any(_section_of(s, style) > ours and s.lineno > _last_line(last) for s in imports):
            # The next section follows: a block between two blank lines, reusing the one there.
            if _last_line(last) < len(src.lines) and not src.line(_last_line(last) + 1).strip():
                off = src.offset(_last_line(last) + 2, 0) if _last_line(last) + 1 < len(src.lines) else len(src.text)
                return Edit(off, off, f"{line}{nl}{nl}")
            edit = after(last)
            return Edit(edit.start, edit.end, nl + edit.text + nl)
        edit = after(last)
        text = edit.text if edit.text.startswith(nl) else nl + edit.text
        return Edit(edit.start, edit.end, text)
    first = imports[0]
    off = src.offset(first.lineno, 0)
    return Edit(off, off, f"{line}{nl}{nl}")
