"""core/toml_docs.py: a TOML text is parsed once a process, and every caller gets its own copy.

A run reads the project's pyproject.toml in up to five places (the fast path, find_pyproject,
load_config, the formatter style, the distribution reader); on this repository's 8 KB file an
edited-file run parsed it four times, 1.3-1.5 ms each (issue #37).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
from cli_runner import dtl

from dtype_lint.core import toml_docs

TOML_MODULE = "tomllib" if sys.version_info >= (3, 11) else "tomli"

PYPROJECT = """\
[project]
name = "proj"
version = "0.1"
dependencies = ["torch"]

[tool.dtype-lint]
preset = "vllm"

[tool.ruff]
line-length = 100
"""

SITE = """\
import torch


class Attn(torch.nn.Module):
    def __init__(self, quant_config=None):
        super().__init__()
        self.proj = Linear(4, 4, quant_config=quant_config)

    def forward(self, x):
        return self.proj(x.to(self.proj.weight.dtype))
"""


@pytest.fixture
def counted(monkeypatch):
    """The texts the TOML reader parses, in order, from a clean memo."""
    reader = importlib.import_module(TOML_MODULE)
    parsed: list[str] = []
    real = reader.loads

    def loads(text, **kwargs):
        parsed.append(text)
        return real(text, **kwargs)

    monkeypatch.setattr(reader, "loads", loads)
    monkeypatch.setattr(toml_docs, "_parsed", {})
    return parsed


def test_a_check_parses_the_project_s_pyproject_once(tmp_path: Path, counted):
    (tmp_path / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "proj" / "attn.py").write_text(SITE, encoding="utf-8")
    proc = dtl(tmp_path, "check", "--no-cache", "--diff", "proj/attn.py")
    assert proc.returncode in (0, 1), proc.stderr
    assert counted.count(PYPROJECT) == 1, len(counted)  # five before this module


def test_each_caller_gets_its_own_copy(counted):
    first = toml_docs.loads(PYPROJECT)
    first["tool"]["dtype-lint"]["preset"] = "changed"
    first["project"]["dependencies"].append("numpy")
    second = toml_docs.loads(PYPROJECT)
    assert second["tool"]["dtype-lint"]["preset"] == "vllm"
    assert second["project"]["dependencies"] == ["torch"]
    assert len(counted) == 1


def test_a_text_that_does_not_parse_raises_each_time_and_is_not_kept(counted):
    reader = toml_docs.reader()
    for _ in range(2):
        with pytest.raises(reader.TOMLDecodeError):
            toml_docs.loads("[tool\n")
    assert len(counted) == 2
    assert toml_docs.loads("a = 1\n") == {"a": 1}
