"""How a target project wants its patches written: title tag and wording, the pull-request
template the body follows, where its tests live, and whether commits are signed off.

A migration series is read by the target's maintainers, not by dtype-lint's: a commit message
speaks the project's language (vLLM's `[Bugfix]` / `[Model]` / `[Quantization]` titles and its
Purpose / Test Plan / Test Result template; Hugging Face's "What does this PR do?"), and never
names a rule code or a part of this tool. What the tool knows about each site (codes, evaluator
tables, triage) goes in the series README beside the patches.

The convention is detected from the tree's top-level package (`vllm/`, `src/transformers/`,
`src/diffusers/`, ...) and can be named with `migrate --convention`.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path, PurePosixPath

from dtype_lint.core.records import record

# What a commit message may never contain: the tool's rule codes.
RULE_CODE = re.compile(r"\bDTL\d{3}\b")


class IdentityError(Exception):
    """No author identity for the series' commits (a user error: exit 2)."""


@record(frozen=True)
class Identity:
    name: str
    email: str

    def __str__(self) -> str:
        return f"{self.name} <{self.email}>"


_IDENTITY = re.compile(r"^\s*(?P<name>[^<>]*?)\s*<(?P<email>[^<>\s]+@[^<>\s]+)>\s*$")


def parse_identity(text: str) -> Identity:
    match = _IDENTITY.match(text or "")
    if not match or not match.group("name"):
        raise IdentityError(f"--author must be `Name <email>`, got {text!r}")
    return Identity(match.group("name"), match.group("email"))


def resolve_identity(author: str | None, root: Path) -> Identity:
    """`--author` when given, else `git config user.name` / `user.email` as git itself would read
    them in `root`. Never a made-up address: a sign-off certifies a real person's right to submit."""
    if author:
        return parse_identity(author)
    values = {}
    for key in ("user.name", "user.email"):
        try:
            values[key] = subprocess.run(["git", "config", "--get", key], cwd=root, capture_output=True,
                                         text=True, check=False).stdout.strip()
        except OSError:
            values[key] = ""
    if values["user.name"] and values["user.email"]:
        return Identity(values["user.name"], values["user.email"])
    missing = " and ".join(k for k, v in values.items() if not v)
    raise IdentityError(f"the series needs an author for its commits and sign-offs: git config {missing} "
                        "is not set here; pass --author 'Name <email>'")


@record(frozen=True)
class Convention:
    name: str
    project: str  # how the project calls itself in prose
    package: str  # its top-level import package ("" for the generic default)
    signoff: bool  # sign every commit off by default (DCO)
    # The template's sections, in order: (heading, what goes there) keys Purpose/Test Plan/Test Result.
    sections: tuple[tuple[str, str], ...]
    tags: bool  # titles carry a `[Tag]`
    test_style: str  # "pytest" (parametrized functions) or "unittest" (a TestCase class)
    pr_preamble: str = ""  # text the PR template opens with
    issue_links: tuple[str, ...] = ()  # the upstream reports the MLA case belongs to

    def title(self, kind: str, what: str, where: str) -> str:
        """`kind`: "helper" (the new shared helper), "fix-helper" (an existing input-dtype helper
        made sound), "sites" (call sites routed through the helper)."""
        if not self.tags:
            return what[0].upper() + what[1:]
        if kind == "helper":
            tag = "[Quantization]"
        elif kind == "fix-helper":
            tag = "[Bugfix]"
        else:
            tag = "[Model]" if _is_model_path(where) else "[Bugfix]"
        return f"{tag} {what}"

    def test_path(self, module_path: str, subject: str) -> str:
        """Where the project keeps a unit test of `subject` defined in `module_path` (posix,
        relative to the tree root)."""
        parts = list(PurePosixPath(module_path).with_suffix("").parts)
        if parts and parts[0] == "src":
            parts = parts[1:]
        if parts and self.package and parts[0] == self.package:
            parts = parts[1:]
        name = "test_" + subject.lstrip("_") + ".py"
        if self.name in ("transformers", "diffusers") and "models" in parts:
            # tests/models/<model>/ beside test_modeling_<model>.py
            i = parts.index("models")
            model_dir = parts[i + 1: i + 2] if len(parts) > i + 2 else []
            return str(PurePosixPath("tests", "models", *model_dir, name))
        if self.name == "generic":
            return str(PurePosixPath("tests", name))
        # vLLM mirrors the package: vllm/model_executor/layers/x.py -> tests/model_executor/layers/
        return str(PurePosixPath("tests", *parts[:-1], name))

    def test_command(self, test_path: str) -> str:
        return f"pytest {test_path} -v"


def _is_model_path(path: str) -> bool:
    parts = PurePosixPath(path).parts
    return "models" in parts


_VLLM_SECTIONS = (
    ("Purpose", "what breaks, for which weight storage and backend, and the related reports"),
    ("Test Plan", "the commands"),
    ("Test Result", "before and after"),
)
_HF_SECTIONS = (
    ("What does this PR do?", "what breaks, for which weight storage and backend"),
    ("Tests", "the commands"),
    ("Results", "before and after"),
)

CONVENTIONS: dict[str, Convention] = {
    c.name: c
    for c in (
        Convention("vllm", "vLLM", "vllm", signoff=True, sections=_VLLM_SECTIONS, tags=True, test_style="pytest",
                   issue_links=("https://github.com/vllm-project/vllm/issues/38658",
                                "https://github.com/vllm-project/vllm/pull/38771")),
        Convention("transformers", "Transformers", "transformers", signoff=False, sections=_HF_SECTIONS, tags=False,
                   test_style="unittest"),
        Convention("diffusers", "Diffusers", "diffusers", signoff=False, sections=_HF_SECTIONS, tags=False,
                   test_style="unittest"),
        Convention("generic", "the project", "", signoff=False, sections=_VLLM_SECTIONS, tags=False,
                   test_style="pytest"),
    )
}


def detect(root: Path) -> str:
    """The convention of the tree at `root`, from its top-level package: `vllm/`, or
    `transformers/` / `diffusers/` (at the top or under `src/`); else "generic"."""
    for name in ("vllm", "transformers", "diffusers"):
        for base in (root, root / "src"):
            if (base / name / "__init__.py").is_file() or (base / name).is_dir() and any((base / name).glob("*.py")):
                return name
    return "generic"


def get(name: str | None, root: Path) -> Convention:
    """The named convention, or the detected one when `name` is None or "auto"."""
    if name in (None, "", "auto"):
        return CONVENTIONS[detect(root)]
    if name not in CONVENTIONS:
        raise ValueError(f"--convention must be one of auto, {', '.join(CONVENTIONS)}; got {name!r}")
    return CONVENTIONS[name]


# How the fixer says it checked a rewrite, and how a reviewer would read it.
_PROVEN = (
    (" (proven by truth table)", "; the new code decides as the old guard on every storage the old "
                                 "guard handled, and differs only where it was wrong"),
    (" (proven by the dtype evaluator)", ", the storages where it was wrong; every other case is unchanged"),
)


def scrub(text: str) -> str:
    """A commit message's text with the tool's rule codes and inner workings taken out
    (evidence lines and fix descriptions may quote them); what is left must still read as prose."""
    for tool_words, plain in _PROVEN:
        text = text.replace(tool_words, plain)
    text = re.sub(r"\s*\((?:DTL\d{3}(?:,\s*)?)+\)", "", text)
    return RULE_CODE.sub("this check", text)
