"""`dtype-lint doctor [PATHS]`: what a run would use and see, so a user can tell why a tree came out
clean: the configuration as resolved (and where each setting came from), the project root, the
files in scope, where the helper is (exists, would be created, inferred, or cannot be), and which
quantizable roots match classes in the tree.

It is a check run (the same pipeline, cache included) plus a read of the run's class index
through its public methods; it writes nothing but the cache a check writes.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import field, fields
from pathlib import Path

from dtype_lint import __version__
from dtype_lint.analysis.index.class_facts import ProjectFacts
from dtype_lint.analysis.index.class_index import QuantizableLayerIndex
from dtype_lint.core.config import SETTING_KEYS, Config
from dtype_lint.core.records import record
from dtype_lint.fix.helper_home import INFERRED_MODULE, configured_location, existing_inferred
from dtype_lint.fix.helper_template import HelperError
from dtype_lint.reporters._common import plural
from dtype_lint.run.file_analysis import safe_read
from dtype_lint.run.pipeline import RunOptions, RunResult, run


@record
class RootMatch:
    """How one quantizable root shows up in the scanned tree."""

    root: str
    origin: str  # "code" (the class obtains a quant method itself) | "preset" | "configured"
    defined_at: str = ""  # path:line when the tree defines the class itself
    subclasses: list[str] = field(default_factory=list)  # tree classes that inherit from it
    importers: list[str] = field(default_factory=list)  # tree modules that import it by name
    why: str = ""  # for a root from the code: what its code does
    unknown_backends: str = ""  # why the backends handed it cannot be told (its sites: low confidence)

    @property
    def matched(self) -> bool:
        return bool(self.defined_at or self.subclasses or self.importers)


# Spellings a class's code must contain to obtain a quant method for itself (facts.py's
# quant-root calls): files without any are not parsed.
_QUANT_ROOT_WORDS = ("get_quant_method", "resolve_quant_method", "create_weights")


def _code_roots(index: QuantizableLayerIndex) -> dict[str, tuple[str, str]]:
    """qualname -> (path:line, why) for each class in the tree whose own code makes it a
    quantizable layer. Parses only the files that spell such a call."""
    project = ProjectFacts(index, load_file=safe_read)
    roots = {}
    for module, header in sorted(index.modules.items()):
        text = safe_read(header.path) if header.classes else None
        if not text or not any(w in text for w in _QUANT_ROOT_WORDS):
            continue
        for name in header.classes:
            qualname = f"{module}.{name}" if module else name
            class_facts = project.class_facts(qualname)
            if class_facts is not None and class_facts.quant_root is not None:
                roots[qualname] = (f"{header.path}:{class_facts.quant_root.line}", class_facts.quant_root.message)
    return roots


def root_matches(index: QuantizableLayerIndex, config: Config) -> list[RootMatch]:
    """Each quantizable root (found in the code, then the preset's, then configured ones) with
    where the tree defines, subclasses or imports it. Reads the index through its public
    surface (modules, class_location, canonical, mro) and class facts for the code's roots."""
    matches = {q: RootMatch(q, "code", why=why) for q, (_at, why) in _code_roots(index).items()}
    for match in config.all_quantizable:
        matches.setdefault(match, RootMatch(match, "configured" if match in config.quantizable else "preset"))
    by_short = defaultdict(list)  # a root matched by name where its package is not scanned
    for match in matches:
        by_short[(match.split(".")[0], match.rsplit(".", 1)[-1])].append(match)

    def roots_of(qualname: str) -> set[str]:
        found = set()
        for ancestor in index.mro(qualname)[1:]:
            if ancestor in matches:
                found.add(ancestor)
            elif index.class_location(ancestor) is None:
                found.update(by_short.get((ancestor.split(".")[0], ancestor.rsplit(".", 1)[-1]), ()))
        return found

    for module, header in sorted(index.modules.items()):
        for name, (_bases, line) in header.classes.items():
            qualname = f"{module}.{name}" if module else name
            if qualname in matches:
                matches[qualname].defined_at = f"{header.path}:{line}"
            for match in roots_of(qualname):
                matches[match].subclasses.append(qualname)
        for target in set(header.imports.values()):
            target = index.canonical(target)
            key = (target.split(".")[0], target.rsplit(".", 1)[-1])
            for match in ({target} & matches.keys()) or set(by_short.get(key, ())):
                matches[match].importers.append(module)
    return list(matches.values())


def diagnose(config: Config, paths: list[str], use_cache: bool = True) -> tuple[RunResult, list[RootMatch]]:
    result = run(config, RunOptions(paths=paths, use_cache=use_cache))
    assert result.index is not None  # a check run always builds its class index (pipeline._run)
    matches = root_matches(result.index, config)
    _note_unknown_backends(result.index, config, matches)
    return result, matches


def _note_unknown_backends(index: QuantizableLayerIndex, config: Config, matches: list[RootMatch]) -> None:
    """A root found in the code whose backends the storage model cannot read (its config type
    has no subclass in the tree): doctor says so, as check reports its sites with low confidence."""
    from dtype_lint.analysis.storage.catalogue import default_model

    code_roots = [m for m in matches if m.origin == "code" and m.matched]
    if not code_roots:
        return
    model = default_model(ProjectFacts(index, load_file=safe_read), config.all_config_params)
    for match in code_roots:
        found = model.undispatched(match.root)
        if found is not None:
            match.unknown_backends = found[0]


def _settings(config: Config, command_line: frozenset[str] = frozenset(),
              inferred: frozenset[str] = frozenset(), preset_unused: bool = False) -> list[tuple[str, object, str]]:
    """(key, value, where from) for every [tool.dtype-lint] key: the configuration file, the
    command line (`command_line`: the keys its flags set), a preset, inferred from the code
    (`inferred`: the keys the run chose from the tree, such as the helper's home), or the default.
    `preset_unused`: the project is not the preset's engine and writes nothing on its layers
    (_unused_preset), so the preset's helper and template are not shown as if they applied."""
    from_file: set[str] = set()
    if config.source != "defaults":
        try:
            from dtype_lint.core.config import ConfigError, read_toml

            doc = read_toml(Path(config.source))
            tool = doc.get("tool", {})
            table = tool.get("dtype-lint", doc if not config.source.endswith("pyproject.toml") else {}) \
                if isinstance(tool, dict) else {}
            from_file = set(table) if isinstance(table, dict) else set()
        except ConfigError:
            pass
    default = Config()
    attrs = {f.name for f in fields(Config)}
    out = []
    for key, (attr, kind) in SETTING_KEYS.items():
        if kind == "extend" or attr not in attrs:
            continue
        value = getattr(config, attr)
        if key == "helper" and not value:
            value = ":".join(config.helper_spec)
        elif key == "helper-template" and not value:
            value = config.template
        # A flag overrides (or extends) the file's value: the command line is where it came from.
        if key in command_line or any(other in command_line for other, (other_attr, other_kind)
                                      in SETTING_KEYS.items() if other_attr == attr and other_kind == "extend"):
            where = "command line"
        elif key in from_file or any(other in from_file for other, (other_attr, other_kind) in SETTING_KEYS.items()
                                     if other_attr == attr and other_kind == "extend"):
            where = Path(config.source).name
        elif key in inferred:
            where = "inferred from the code"
        elif key in ("helper", "helper-template") and not getattr(config, attr) and preset_unused:
            value, where = "", f"not set: the `{config.preset}` preset's default is not used here; see `helper:` below"
        elif key in ("helper", "helper-template") and not getattr(config, attr):
            where = f"the {config.preset} preset"
        elif value != getattr(default, attr):
            # Set neither by the file nor by a flag: a value the run derived (never a guess that
            # the user typed it).
            where = "inferred from the code"
        else:
            where = "default"
        out.append((key, value, where))
    return out


def _helper_lines(result: RunResult, files: list[str], preset_unused: bool = False,
                  family_labels: tuple[str, ...] = ()) -> list[str]:
    """Where the helper a fix uses lives. `preset_unused`: the project is not the preset's engine
    and writes nothing on its layers (_unused_preset); `family_labels`: the helpers of the ecosystem
    families that decided sites in this run (their `HELPER_LABEL`s)."""
    config = result.config
    choice = result.helper_choice
    rel = _relto(config.root)
    if choice is not None and choice.location is None:
        return [f"helper: none can be used: {choice.error}"]
    if choice is not None:
        lines = []
        for one in choice.choices():  # a monorepo's packages have one each
            loc = one.location
            if loc is None:
                lines.append(f"helper: none can be used: {one.error}")
                continue
            state = "exists" if loc.exists else f"would be created by --fix from the `{one.config.template}` template"
            lines.append(f"helper: {loc.module}:{loc.func} ({one.how}) at {rel(loc.path)}: {state}")
            if one.inferred:
                lines.append(f"  why: {one.note}")
        return lines
    module, func = config.helper_spec
    if preset_unused and not config.helper:
        return _ecosystem_helper_lines(result, files, func, family_labels)
    how = "configured" if config.helper else f"the {config.preset} preset's default"
    try:
        loc = configured_location(config, files)
    except HelperError as error:
        # The preset's default living in an engine the project does not hold (vLLM's, for an HF
        # package or another engine) is not news where no site needs it: said without its words.
        lines = [f"helper: {module}:{func} ({how}) cannot be used here: {error}"] if config.helper else \
            [f"helper: the shared `{func}` (for sites no ecosystem family claims) is not in this project"]
        earlier = _earlier_inferred(files, config, rel, func)
        if earlier:
            lines.append(f"  no site needs it now; a fixing run reuses {earlier}")
        else:
            lines.append("  no site needs it now; a fixing run puts it in the package that holds the most sites")
        return lines
    state = "exists" if loc.exists else "would be created by --fix when a site needs it"
    return [f"helper: {module}:{func} ({how}) at {rel(loc.path)}: {state}"]


def _earlier_inferred(files: list[str], config, rel, func: str) -> str:
    """"`pkg.module:func` in path, which an earlier run created" for a shared helper an earlier
    fixing run inferred and created, else ""."""
    earlier = existing_inferred(files, config.root, func)
    if not earlier:
        return ""
    top, base = sorted(earlier.items())[0]
    where = rel(base.joinpath(*top.split("."), INFERRED_MODULE + ".py"))
    return f"`{top}.{INFERRED_MODULE}:{func}` in {where}, which an earlier run created"


def _ecosystem_helper_lines(result: RunResult, files: list[str], func: str,
                            family_labels: tuple[str, ...]) -> list[str]:
    """The `helper:` lines of a project that is not the preset's engine and writes nothing on its
    layers, with no `helper` set and no site needing the shared helper: the helper of the ecosystem
    whose code it is (the families that decided its sites, else the family that speaks for the most
    of its files: registry.project_family), or plainly that it cannot be told. Never the preset's
    helper, which lives in an engine the project does not hold."""
    from types import SimpleNamespace

    from dtype_lint.ecosystems.registry import optional, project_family

    config, index = result.config, result.index
    assert index is not None  # a check run always builds its class index (pipeline._run)
    if family_labels:
        labels = " and the ".join(family_labels)
        return [f"helper: fixes here use the {labels}, as the `family:` "
                f"{'paragraphs' if len(family_labels) > 1 else 'paragraph'} below "
                f"{'say' if len(family_labels) > 1 else 'says'}; no site needs the shared helper"]
    views = [SimpleNamespace(module=name, path=header.path, imports=header.imports)
             for name, header in sorted(index.modules.items())]
    found = project_family(views)
    if found is not None:
        family, count = found
        return [f"helper: no site needs one now; this is {optional(family, 'family', 'helper_words')()}",
                f"  why: {count} of {plural(len(views), 'file')} are its code (by what they import)"]
    rel = _relto(config.root)
    lines = ["helper: no site needs one now, and which ecosystem's helper a fix would use cannot be told: "
             "no file here is the code of an ecosystem dtype-lint knows"]
    earlier = _earlier_inferred(files, config, rel, func)
    if earlier:
        lines.append(f"  a fix on a layer no family claims reuses {earlier}")
    else:
        lines.append(f"  a fix on a layer no family claims (a class in `quantizable`, or one whose code obtains a "
                     f"quant method) would use a shared `{func}`, made from the "
                     f"`{config.helper_template or 'torch'}` template in the package that holds the most sites")
    return lines


def _family_paragraphs(result: RunResult) -> list[tuple[str, list[str]]]:
    """Each ecosystem family that decided sites in this run: its helper's label and its own
    paragraph (its helper plug-in's `doctor_lines`, optional): its sites, quantizable roots and
    where its helper lives."""
    from dtype_lint.ecosystems.registry import plugins

    out: list[tuple[str, list[str]]] = []
    findings = [*result.findings, *result.fixed]
    for ecosystem_helper in plugins("helper"):
        describe = getattr(ecosystem_helper, "doctor_lines", None)
        lines = describe(findings, result.index, result.config.root) if describe is not None else []
        if lines:
            out.append((ecosystem_helper.HELPER_LABEL, lines))
    return out


def _undecided_sites(result: RunResult, matches: list[RootMatch]) -> list:
    """The sites check reports with low confidence that no quantizable root and no ecosystem family
    decided: a layer reached without its class (a bound function on instances matched by their
    class's name, a name heuristic), whose backends cannot be told. Not those of a root shown with
    unknown backends, nor those a family's `doctor` paragraph counts (asked one finding at a time)."""
    from dtype_lint.analysis.storage.verdicts import BACKEND_MARK
    from dtype_lint.ecosystems.registry import plugins

    told = {BACKEND_MARK + m.unknown_backends for m in matches if m.matched and m.unknown_backends}
    describers = [describe for helper in plugins("helper")
                  for describe in [getattr(helper, "doctor_lines", None)] if describe is not None]
    return [f for f in result.findings
            if f.confidence == "low" and not any(e.message in told for e in f.evidence)
            and not any(describe([f], result.index, result.config.root) for describe in describers)]


def _undecided_lines(undecided: list, rel) -> list[str]:
    """The quantizable-roots paragraph's lines on the sites no root decided (_undecided_sites): how
    check reached each one, in its own evidence's words."""
    from dtype_lint.analysis.storage.verdicts import BACKEND_MARK, UNKNOWN_BACKENDS, backends_unknown

    n, unknown = len(undecided), sum(1 for f in undecided if backends_unknown(f.evidence))
    if unknown == n:
        told = f"; which backends reach {'its layer' if n == 1 else 'their layers'} cannot be told"
    else:
        told = f"; for {unknown} of them which backends reach the layer cannot be told" if unknown else ""
    lines = [f"  {plural(n, 'site')} reported that no root decides, with low confidence{told}:"]
    for finding in undecided[:6]:
        how = next((e.message.removeprefix(BACKEND_MARK).removeprefix(UNKNOWN_BACKENDS + ": ")
                    for e in finding.evidence if backends_unknown((e,))), "")
        if not how:
            how = finding.evidence[-1].message if finding.evidence else finding.message
        lines.append(f"    {rel(finding.path)}:{finding.span.line}: {how}")
    if len(undecided) > 6:
        lines.append(f"    and {len(undecided) - 6} more; `dtype-lint check` lists them")
    return lines


def _engine_lines(result: RunResult, not_used: frozenset[str] = frozenset()) -> list[str]:
    """Which release of each engine the project's layers of it are judged against, and why
    (core/engine_source.py): the tree's own code, the installed engine, a pin. None for an engine
    in `not_used` (the packages of a preset the tree neither is nor writes on: _unused_preset):
    no layer of it is judged here."""
    from dtype_lint.core.engine_source import ENGINES, choose

    config, index = result.config, result.index
    lines = []
    for dist, package in ENGINES.items():
        if package in not_used:
            continue
        if index is not None and index.modules.get(package) is not None:
            lines.append(f"engine ({dist}): the tree's own `{package}` package: its backends are read from its code")
            continue
        source = choose(config.root, config.engine_release, dist)
        if source is None:
            continue
        how = "read from its code" if source.kind == "installed" else "shipped catalogue"
        lines.append(f"engine ({dist}): {source.words.split(', ')[0]}, {how} (for layers the project imports from "
                     f"{package}): {source.why}")
    return lines


def _relto(root: Path):
    def rel(path) -> str:
        try:
            return Path(path).resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            return str(path)
    return rel


def _inferred_keys(result: RunResult, file_keys_config: Config) -> frozenset[str]:
    """The settings this run chose from the code: the helper's home (and its template) where no
    file or flag set `helper`."""
    choice = result.helper_choice
    if choice is None or not choice.inferred:
        return frozenset()
    return frozenset({"helper"} | ({"helper-template"} if not file_keys_config.helper_template else set()))


def _engines(matches: list[RootMatch]) -> set[str]:
    return {m.root.split(".", 1)[0] for m in matches}


def _unused_preset(config: Config, index, unmatched: list[RootMatch]) -> list[RootMatch]:
    """The preset's roots, when none is in the tree, no module of the tree is the preset's engine
    and none imports from its layers' package (presets.layer_packages); else []."""
    from dtype_lint.ecosystems.presets import tree_on_preset

    preset = [m for m in unmatched if m.origin == "preset"]
    if not preset or tree_on_preset(config.preset, index.modules):
        return []
    return preset


def render(result: RunResult, matches: list[RootMatch], command_line: frozenset[str] = frozenset(),
           configured: Config | None = None) -> str:
    """The doctor's report. `command_line`: the setting keys the command line's flags set;
    `configured`: the configuration as the file and the flags give it (before the run inferred
    anything), to tell inferred settings from set ones."""
    config = result.config
    rel = _relto(config.root)
    index = result.index
    assert index is not None  # a check run always builds its class index (pipeline._run)
    files = [h.path for h in index.modules.values()]
    unmatched = [m for m in matches if not m.matched]
    unused = _unused_preset(config, index, unmatched)
    paragraphs = _family_paragraphs(result)
    family_labels = tuple(dict.fromkeys(label for label, _lines in paragraphs))
    lines = [
        f"dtype-lint {__version__}",
        f"project root: {config.root}",
        f"configuration: {config.source if config.source != 'defaults' else 'none found (defaults)'}",
        f"files: {len(result.files)} Python files in scope, {result.analyzed} could hold a site "
        f"(class index: {len(index.modules)} modules)",
        "",
        "settings:",
    ]
    for key, value, where in _settings(config, command_line, _inferred_keys(result, configured or config),
                                       preset_unused=bool(unused)):
        lines.append(f"  {key} = {json.dumps(value)}  ({where})")
    lines += ["", *_helper_lines(result, files, bool(unused), family_labels),
              *_engine_lines(result, frozenset(_engines(unused))), ""]
    matched = [m for m in matches if m.matched]
    code = sum(1 for m in matches if m.origin == "code")
    lines.append(f"quantizable roots: {len(matched)} of {len(matches)} match the tree "
                 f"({code} found in the code: classes that obtain a quant method for themselves)")
    for match in matches:
        if not match.matched:
            continue
        parts = []
        if match.defined_at:
            parts.append(f"defined at {rel(match.defined_at.rsplit(':', 1)[0])}:{match.defined_at.rsplit(':', 1)[1]}")
        if match.subclasses:
            shown = ", ".join(s.rsplit(".", 1)[-1] for s in match.subclasses[:6])
            more = f" and {len(match.subclasses) - 6} more" if len(match.subclasses) > 6 else ""
            parts.append(f"{plural(len(match.subclasses), 'subclass', 'subclasses')} ({shown}{more})")
        if match.importers:
            parts.append(f"imported by {plural(len(match.importers), 'module')}")
        lines.append(f"  {match.root} [{match.origin}]")
        if match.why:
            lines.append(f"      why: {match.why}")
        lines.append(f"      {'; '.join(parts)}")
        if match.unknown_backends:
            lines.append(f"      backends: {match.unknown_backends}; its sites are reported with low confidence")
    if unused:
        from dtype_lint.ecosystems.presets import layer_packages

        # A project that is not the preset's engine and writes no code on its layers (an HF package,
        # another engine, a project that only drives vLLM) is not missing its classes: one line,
        # not a list of another ecosystem's layers.
        lines.append(f"  the `{config.preset}` preset's {plural(len(unused), 'layer class', 'layer classes')}: "
                     f"not used here (the tree is not {' or '.join(sorted(_engines(unused)))}, and no file "
                     f"imports from {' or '.join(sorted(layer_packages(m.root for m in unused)))})")
        unmatched = [m for m in unmatched if m not in unused]
    if unmatched:
        lines.append(f"  not in the tree ({len(unmatched)}):")
        lines += [f"    {m.root} [{m.origin}]" for m in unmatched]
    family_lines = [line for _label, lines in paragraphs for line in lines]
    undecided = _undecided_sites(result, matches)
    if undecided:
        lines += _undecided_lines(undecided, rel)
    if not matched and not family_lines:
        # Only where check reports nothing no root decided is every site skipped.
        skipped = "every site is skipped" if not undecided else \
            f"every site but the {'one' if len(undecided) == 1 else len(undecided)} above is skipped"
        lines.append(f"  => no class in the tree is quantizable: {skipped}. Set `quantizable = [...]` "
                     "to your layer classes (those whose weights a quantization backend repacks), or `preset`")
    if family_lines:
        lines += ["", *family_lines]
    fixable = sum(1 for f in result.findings if f.fix is not None)
    lines += ["", f"findings: {len(result.findings)} ({fixable} with a fix); `dtype-lint check` lists them"]
    for warning in result.warnings:
        lines.append(f"warning: {warning}")
    return "\n".join(lines) + "\n"
