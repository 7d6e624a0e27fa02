"""Commit messages, the PR description and the series README, in the target's conventions.

A commit message is the project's: a title in its wording (`[Bugfix] Fix ... for INT8 and <format>
kv_b_proj weights`), a body in its pull-request template (vLLM: Purpose / Test Plan / Test
Result), a `Signed-off-by:` trailer where the project asks for one, and no rule code or part of
this tool. The README beside the patches carries what the tool knows: each patch's rule codes,
sites and evidence, and the generated files a maintainer must regenerate.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import field
from pathlib import Path, PurePosixPath

from dtype_lint.core.findings import Finding
from dtype_lint.core.records import record
from dtype_lint.ecosystems.registry import plugins
from dtype_lint.migrate.conventions import RULE_CODE, Convention, Identity, scrub

# Each ecosystem's words for a series (the registry's `series_words` role): the first that claims a
# convention speaks for it; the one that claims none in particular (CONVENTIONS None) for every other,
# and for the helper's own patches, whose storages are the helper template's.
_SERIES_WORDS = plugins("series_words")
_DEFAULT_WORDS = next(words for words in _SERIES_WORDS if words.CONVENTIONS is None)
BACKEND_OF: dict[str | None, str] = _DEFAULT_WORDS.BACKEND_OF
SHORT_BACKEND: dict[str | None, str] = _DEFAULT_WORDS.SHORT_BACKEND
WHY: str = _DEFAULT_WORDS.WHY


def why(convention: Convention) -> str:
    """Why the cast is wrong, in the words of the ecosystem that speaks for the convention."""
    return next(words.WHY for words in _SERIES_WORDS
                if words.CONVENTIONS is None or convention.name in words.CONVENTIONS)


def wrap(text: str, indent: str = "") -> str:
    """Fill to 72 columns; a list item's continuation lines align under its text."""
    follow = " " * (len(indent) + (0 if indent.strip() else 2)) if indent else ""
    return textwrap.fill(text, 72, initial_indent=indent, subsequent_indent=follow,
                         break_long_words=False, break_on_hyphens=False)


@record
class Message:
    """One patch's message, section by section (the PR description reuses the sections)."""

    title: str
    purpose: list[str]
    test_plan: list[str]
    test_result: list[str]
    trailers: list[str] = field(default_factory=list)

    def body(self, convention: Convention) -> str:
        (p, _), (t, _), (r, _) = convention.sections
        # Plain headings: a `#` line would be a comment to `git commit --cleanup=strip`.
        label = lambda heading: heading if heading.endswith("?") else heading + ":"  # noqa: E731
        parts = [label(p), "", *self.purpose, "", label(t), "", *self.test_plan, "", label(r), "", *self.test_result]
        text = "\n".join(parts).rstrip()
        if self.trailers:
            text += "\n\n" + "\n".join(self.trailers)
        return text


def _short(text: str, limit: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def fixed_helper_names(findings: list[Finding]) -> list[str]:
    return [f.expression.removeprefix("def ") for f in findings
            if f.code == "DTL005" and f.expression.startswith("def ") and f.fix is not None]


def changed_cases(before, after) -> list[tuple[str | None, bool, str, str]]:
    """(storage, flag, before, after) for every case the patch changes."""
    if before is None or after is None:
        return []
    from dtype_lint.dtypes.evaluator import PARAMS

    def said(storage, value: str) -> str:
        # The evaluator models the layer's model dtype as bf16: name it as the code does.
        return _DEFAULT_WORDS.MODEL_DTYPE_WORDS if value == f"torch.{PARAMS}" and storage != PARAMS else value

    old = before.as_dict()
    return [(case.storage, case.flag, said(case.storage, old.get(case, "?")), said(case.storage, now))
            for case, now in after.rows if old.get(case) != now]


def _storage_name(storage: str | None) -> str:
    return "no `.weight`" if storage is None else storage


def where_label(path: str, package: str) -> str:
    parts = list(PurePosixPath(path).with_suffix("").parts)
    for drop in ("src", package, "model_executor", "models"):
        if len(parts) > 1 and parts[0] == drop:
            parts = parts[1:]
    return "/".join(parts)


def helper_message(convention: Convention, module: str, func: str, decisions: list[str], test,
                   result: list[str]) -> Message:
    title = convention.title("helper", f"Add {func}() to pick a layer's input dtype from its weight storage", "")
    purpose = [wrap(WHY), "",
               wrap(f"This adds `{module}.{func}(layer, fp8_input)`, which returns the dtype an activation "
                    "must have before entering `layer`, or None to keep the model dtype:"),
               "", *("    " + row for row in decisions)]
    purpose += _links(convention)
    plan = [f"    {convention.test_command(test.path)}"] if test else []
    return Message(title, purpose, plan, result)


def fix_helper_message(convention: Convention, path: str, funcs: list[str], cases, test_paths: list[str],
                       result: list[str], line: int) -> Message:
    storages = sorted({SHORT_BACKEND.get(s, str(s)) for s, _f, _b, _a in cases})
    names = ", ".join(f"{f}()" for f in funcs)
    title = convention.title("fix-helper", f"Fix {names} for {' and '.join(storages) or 'quantized'} weights", path)
    purpose = [wrap(WHY), "",
               wrap(f"`{names}` ({path}:{line}) decides the dtype an activation is cast to before the layer. "
                    "For these weight storages it returns a dtype the layer cannot take:"), ""]
    for storage, flag, was, now in cases:
        backend = BACKEND_OF.get(storage, str(storage))
        purpose.append(wrap(f"{_storage_name(storage)} storage ({backend}), fp8 input {flag}: returned "
                            f"{was}, now {now}", "- "))
    purpose += ["", wrap(_DEFAULT_WORDS.HELPER_FIX_HARM)]
    history = _DEFAULT_WORDS.HELPER_FIX_HISTORY.get(convention.name)
    if history is not None:
        purpose += ["", wrap(history)]
    purpose += _links(convention)
    plan = [f"    {convention.test_command(p)}" for p in test_paths]
    return Message(title, purpose, plan, result)


def sites_message(convention: Convention, key: str, changes, func: str, rewrites: list[str], helper_test: str | None,
                  result: list[str], notes=()) -> Message:
    findings = [(ch.path, f) for ch in changes for f in sorted(ch.findings, key=Finding.sort_key)]
    n = len(findings)
    label = where_label(key, convention.package) if key not in ("", ".") else "all files"
    if convention.tags:
        what = f"{label}: take the input dtype from {func}(), not the weight's storage dtype"
    else:
        what = f"Take the input dtype from {func}() in {label}, not the weight's storage dtype"
    title = convention.title("sites", what, key)
    purpose = [wrap(why(convention)), "", f"The {'site' if n == 1 else f'{n} sites'}:"]
    for path, f in findings:
        purpose.append(wrap(f"{path}:{f.span.line} in `{f.scope}`: `{_short(f.expression)}`", "- "))
        for evidence_item in f.evidence:
            where = f" ({Path(evidence_item.path).name}:{evidence_item.line})" if evidence_item.path else ""
            purpose.append(wrap(scrub(f"{evidence_item.message}{where}"), "    "))
    purpose += ["", "Change:"] + [wrap(scrub(d), "- ") for d in rewrites]
    if notes:
        purpose += [""] + _generated_lines(notes)[:-1]
    purpose += _links(convention)
    plan = [f"    python -m py_compile {' '.join(sorted({ch.path for ch in changes}))}"]
    if helper_test:
        plan.append(f"    {convention.test_command(helper_test)}")
        plan += ["", wrap(f"The sites now take {func}()'s decision, which that test covers for every storage; a "
                          "test of the model itself would need it built with quantized weights, which needs "
                          "a GPU.")]
    return Message(title, purpose, plan, result)


def _links(convention: Convention) -> list[str]:
    if not convention.issue_links:
        return []
    return ["", "Related:", *(f"- {link}" for link in convention.issue_links)]


def signoff(message: Message, identity: Identity | None, enabled: bool) -> Message:
    if enabled and identity is not None:
        message.trailers.append(f"Signed-off-by: {identity}")
    return message


def check_clean(text: str) -> None:
    """A commit message must not carry a rule code or a part of this tool."""
    hit = RULE_CODE.search(text)
    if hit or "dtype-lint's" in text or "dtype evaluator" in text:
        raise ValueError("a commit message names the tool's internals: "
                         f"{text[max(0, (hit.start() if hit else 0) - 40):][:80]!r}")


def flag_name(source: str, func: str) -> str:
    """The name of `func`'s second parameter (the fp8 flag) in module text `source`."""
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == func:
            params = [a.arg for a in node.args.posonlyargs + node.args.args]
            if len(params) >= 2:
                return params[1]
    return "fp8_input"


def module_of(path: str, package: str) -> str:
    """The dotted module of a file path relative to the tree (a `src/` layout dropped)."""
    parts = list(PurePosixPath(path).with_suffix("").parts)
    if parts and parts[0] == "src":
        parts = parts[1:]
    return ".".join(parts)


def _generated_lines(notes) -> list[str]:
    if not notes:
        return []
    lines = ["Generated and copied code:", ""]
    for note in notes:
        what = {"generated": f"generated from {note.source}", "copy": f"a block copied from {note.source}",
                "copy-left": f"a copy of {note.source}, not patched here"}[note.kind]
        lines.append(wrap(f"{note.path}: {what}; {note.action}.", "- "))
    return lines + [""]


def pr_description(patches, convention: Convention, notes=()) -> str:
    """One pull request for the whole series: its title, then the template's sections with each
    patch's part under its title."""
    (p, _), (t, _), (r, _) = convention.sections
    kinds = {patch.kind for patch in patches}
    title = convention.title("fix-helper" if "fix-helper" in kinds else "helper" if "helper" in kinds else "sites",
                             "Take activation dtypes from the layer's input dtype, not its weight storage", "")
    lines = [f"# {title}", "", f"## {p}", "", wrap(why(convention)), "", "This pull request, commit by commit:", ""]
    lines += [f"{i}. {patch.subject}" for i, patch in enumerate(patches, 1)]
    links = _links(convention)
    if links:
        lines += links
    lines += [""] + _generated_lines(notes)
    lines += [f"## {t}", "", "```sh"]
    seen = []
    for patch in patches:
        for line in patch.message.test_plan if patch.message else []:
            cmd = line.strip()
            if cmd.startswith(("pytest", "python")) and cmd not in seen:
                seen.append(cmd)
    lines += seen + ["```", "", f"## {r}", ""]
    for patch in patches:
        if not patch.message:
            continue
        lines += [f"### {patch.subject}", "", "```", *patch.message.test_result, "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def readme(patches, files, convention: Convention, identity: Identity | None, signed: bool, notes=(),
           left=()) -> str:
    """What the tool knows about the series, beside the patches: each patch's rule codes and
    sites (never in a commit message), the generated files to regenerate, and what is left."""
    names = [Path(f).name for f in files]
    lines = ["# Migration series", "",
             f"Written for {convention.project} (convention `{convention.name}`): titles, pull-request template "
             f"and test layout of the project. Author: {identity or 'not set'}; "
             f"{'signed off' if signed else 'not signed off'}. Apply in order with `git am` on the patches "
             "the table names, in its order (this folder may hold other files; `dtype-lint migrate` printed the "
             "exact command); `PR.md` is the description for sending them as one pull request.", "",
             "| patch | kind | rules | sites | test added |", "|---|---|---|---|---|"]
    for name, patch in zip(names, patches):
        sites = "<br>".join(f"`{c.path}:{f.span.line}` {f.code} `{f.scope}`" for c in patch.changes
                            for f in sorted(c.findings, key=Finding.sort_key)) or "adds the helper"
        tests = "<br>".join(f"`{t}`" for t in patch.tests) or "none"
        lines.append(f"| [`{name}`]({name}) | {patch.kind} | {', '.join(patch.codes) or '-'} | {sites} | {tests} |")
    if notes:
        lines += ["", "## Generated files", ""] + [line for line in _generated_lines(notes)[2:]]
    lines += ["", "## Left after the series", "",
              f"A fresh check of the tree with every patch applied reports {len(left)} finding(s)."]
    lines += [f"- `{f.path}:{f.span.line}` {f.code} `{f.scope}`" for f in left]
    return "\n".join(lines).rstrip() + "\n"
