"""Files a project regenerates: a patch to them is undone by the next regeneration.

Transformers writes many `modeling_*.py` files from a `modular_*.py` source
(`utils/modular_model_converter.py`; the generated file opens with a banner saying "This file was
automatically generated from src/transformers/models/x/modular_x.py"), and keeps every block marked
`# Copied from transformers.models.y.modeling_y.Thing` equal to its origin (`make fix-copies`,
`utils/check_copies.py`). Diffusers keeps `# Copied from diffusers...` blocks the same way.

For each file a series changes, :func:`analyze` says whether it is generated or holds a copied
block around a changed site, and whether the series also patches what it is generated or copied
from; and, the other way round, which copies elsewhere in the tree of an object the series changes
are left unpatched. The series README and PR description list what a maintainer must regenerate.
Neither tool runs here: the released wheels ship no `utils/`, and the converter needs the project
installed.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path, PurePosixPath

from dtype_lint.core.records import record

GENERATED = re.compile(r"This file was automatically generated from\s+(\S+?\.py)")
COPIED = re.compile(r"^\s*# Copied from ((?:transformers|diffusers)\.[\w.]+)(?:\s+with\s+(.*))?$")
REGENERATE = "python utils/modular_model_converter.py --files_to_parse {source}"
REGENERATING = ("transformers", "diffusers")  # the conventions whose projects regenerate files
FIX_COPIES = "make fix-copies"


@record(frozen=True)
class Note:
    path: str  # the file the series changes (or, for "copy-left", the copy it leaves)
    kind: str  # "generated" | "copy" | "copy-left"
    source: str  # the modular file, or the dotted origin of the copied block
    source_path: str  # that origin's file, relative to the tree root ("" when not found)
    patched: bool  # the series changes the source too
    action: str  # what a maintainer must do


def generated_from(text: str) -> str | None:
    """The modular source a generated file names in its banner, or None."""
    match = GENERATED.search(text[:4000])
    return match.group(1) if match else None


def copied_blocks(text: str) -> list[tuple[str, str, int, int]]:
    """(origin, qualname, first line, last line) of each class or function marked `# Copied from`."""
    lines = text.splitlines()
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    out: list[tuple[str, str, int, int]] = []
    _copied(tree.body, "", lines, out)
    return out


def _copied(body, prefix: str, lines: list[str], out: list[tuple[str, str, int, int]]) -> None:
    # At module level: a closure that calls itself is a reference cycle, which held the file's
    # tree and lines until the next collection.
    for node in body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            qual = prefix + node.name
            above = lines[first - 2] if first >= 2 else ""
            match = COPIED.match(above)
            if match:
                out.append((match.group(1), qual, first, node.end_lineno or node.lineno))
            if isinstance(node, ast.ClassDef):
                _copied(node.body, qual + ".", lines, out)


def origin_path(root: Path, dotted: str) -> tuple[str, str]:
    """(file relative to root, object qualname) for `transformers.models.llama.modeling_llama.X.y`."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        rel = Path(*parts[:cut]).with_suffix(".py")
        for base in ("", "src"):
            if (root / base / rel).is_file():
                return (Path(base) / rel).as_posix() if base else rel.as_posix(), ".".join(parts[cut:])
    return "", ".".join(parts[-1:])


def _rewritten_lines(ch, span: tuple[int, int] | None = None) -> list[str]:
    """The lines a change adds to a file (stripped; imports left out: a generated file gathers its
    own), optionally only those inside the line span (first, last) of the original."""
    import difflib

    before = ch.before.decode("utf-8", "replace").splitlines()
    after = ch.after.decode("utf-8", "replace").splitlines()
    out = []
    for tag, i1, _i2, j1, j2 in difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes():
        if tag in ("replace", "insert") and (span is None or span[0] <= i1 + 1 <= span[1] + 1):
            out += [line.strip() for line in after[j1:j2]
                    if line.strip() and not line.lstrip().startswith(("import ", "from "))]
    return out


_PARENT = re.compile(r"^from \.\.(\w+)\.(?:modeling|modular)_\w+ import", re.M)


def _modular_sources(changed: dict, modular: str, root: Path) -> list:
    """The patched modular source (if the series patches it) and the patched files of the models
    it inherits code from (the converter copies an inherited method from the parent's modeling
    file)."""
    own = changed.get(modular)
    if own is not None:
        text = own.after.decode("utf-8", "replace")
    elif modular and (root / modular).is_file():
        text = (root / modular).read_text(encoding="utf-8", errors="replace")
    else:
        return []
    base = PurePosixPath(modular).parent.parent
    parents = set(_PARENT.findall(text))
    return ([own] if own is not None else []) + [
        c for p, c in sorted(changed.items()) if PurePosixPath(p).parent.name in parents
        and PurePosixPath(p).parent.parent == base]


def _carried(ch, sources, span: tuple[int, int] | None = None) -> tuple[str, bool]:
    """Whether the patched sources carry every line the change rewrites in a generated file or a
    copied block (a line-by-line check, not the project's regeneration): what to say, and whether
    they all are."""
    if not sources:
        return "no patched source to compare with", False
    texts = {line.strip() for src in sources for line in src.after.decode("utf-8", "replace").splitlines()}
    lines = _rewritten_lines(ch, span)
    absent = [line for line in lines if line not in texts]
    where = ", ".join(sorted(PurePosixPath(src.path).name for src in sources))
    if absent:
        return (f"{len(absent)} of the {len(lines)} rewritten lines are in no patched source ({where}): "
                f"`{absent[0]}`"), False
    said = "the one rewritten line is" if len(lines) == 1 else f"each of the {len(lines)} rewritten lines is"
    return f"{said} in the patched {where} (a line-by-line check)", bool(lines)


def _without_src(path: str) -> str:
    return path[len("src/"):] if path.startswith("src/") else path


def _dotted(rel: str) -> str:
    parts = list(Path(rel).with_suffix("").parts)
    if parts and parts[0] == "src":
        parts = parts[1:]
    return ".".join(parts)


def analyze(root: Path, patches, scan_tree: bool = True) -> list[Note]:
    changed = {ch.path: ch for p in patches for ch in p.changes if not ch.test}
    notes: list[Note] = []
    changed_objects: dict[str, set[str]] = {}
    for path, change in sorted(changed.items()):
        if change.before is None:
            continue
        text = change.before.decode("utf-8", "replace")
        source = generated_from(text)
        if source is not None:
            # The banner names the source repository's path (`src/transformers/...`); a tree made
            # from the released wheel holds it without `src/`.
            source_rel = next((s for s in (source, _without_src(source)) if (root / s).is_file()), "")
            patched = source in changed or _without_src(source) in changed
            sources = _modular_sources(changed, source_rel or _without_src(source), root)
            carried, complete = _carried(change, sources)
            # A modular source that inherits the changed method from a patched parent carries it.
            if not patched and sources and complete:
                patched = True
                action = (f"{source} inherits the changed code from "
                          f"{', '.join(sorted(PurePosixPath(c.path).name for c in sources))}, patched in this "
                          f"series: regenerate it ({REGENERATE.format(source=source)}) and check the result "
                          f"equals this patch; {carried}")
            elif patched:
                action = (f"regenerate it from {source} ({REGENERATE.format(source=source)}) and check the result "
                          f"equals this patch; {carried}")
            else:
                action = (f"the change must also go into {source} (or the file it inherits the code from): "
                          f"port it there, then {REGENERATE.format(source=source)}")
            notes.append(Note(path, "generated", source, source_rel, patched, action))
        lines = {f.span.line for f in change.findings}
        blocks = copied_blocks(text)
        for origin, _qual, first, last in blocks:
            if not any(first <= line <= last for line in lines):
                continue
            origin_rel, _obj = origin_path(root, origin)
            patched = origin_rel in changed
            carried, _complete = _carried(change, [changed[origin_rel]] if patched else [], (first, last))
            action = (f"the origin is patched in this series too; {FIX_COPIES} keeps the copy equal to it; {carried}"
                      if patched
                      else f"{FIX_COPIES} would undo this change: patch the origin {origin} as well")
            notes.append(Note(path, "copy", origin, origin_rel, patched, action))
        # The objects this file's change touches, by qualname, for the reverse search.
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        touched = changed_objects.setdefault(_dotted(path), set())
        for node in ast.walk(tree):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                if any(node.lineno <= line <= (node.end_lineno or node.lineno) for line in lines):
                    touched.add(node.name)
    if scan_tree and changed_objects:
        notes += _copies_left(root, changed, changed_objects)
    return notes


def _copies_left(root: Path, changed, changed_objects: dict[str, set[str]]) -> list[Note]:
    """Copies elsewhere of an object the series changes, in files the series does not touch."""
    notes = []
    for file in sorted(root.rglob("*.py")):
        rel = file.relative_to(root).as_posix()
        if rel in changed or any(part.startswith(".") for part in file.relative_to(root).parts):
            continue
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if "# Copied from" not in text:
            continue
        for origin, qual, _first, _last in copied_blocks(text):
            module, _, obj = origin.rpartition(".")
            top = obj.split(".")[0]
            for mod, names in changed_objects.items():
                if (module == mod and top in names) or (origin.startswith(mod + ".")
                                                        and origin[len(mod) + 1:].split(".")[0] in names):
                    notes.append(Note(rel, "copy-left", origin, origin_path(root, origin)[0], False,
                                      f"{qual} is copied from a changed object and this series leaves it: "
                                      f"run {FIX_COPIES} after applying it"))
                    break
    return notes
