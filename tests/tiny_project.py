"""The smallest project with one fixable site, for the tests that attack dtype-lint from outside
(bad input, hostile file systems, interrupted runs): `proj/attn.py` casts an activation to a
vLLM ColumnParallelLinear's weight dtype; `--fix` creates `proj/dtypes.py` and routes the cast
through it."""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path

PYPROJECT = '[tool.dtype-lint]\nhelper = "proj.dtypes:get_layer_input_dtype"\n'

ATTN = """\
import torch
from vllm.model_executor.layers.linear import ColumnParallelLinear


class Attn(torch.nn.Module):
    def __init__(self, kv_b_proj: ColumnParallelLinear):
        super().__init__()
        self.kv_b_proj = kv_b_proj

    def forward(self, x):
        x = x.to(self.kv_b_proj.weight.dtype)
        return self.kv_b_proj(x)
"""

FIXED_CALL = "get_layer_input_dtype(self.kv_b_proj, True)"


def tiny_project(root: Path, files: dict[str, str | bytes | None] | None = None, pyproject: str | bytes = PYPROJECT) -> Path:
    """`root` holding pyproject.toml, proj/__init__.py, proj/attn.py, and `files` (None: leave out)."""
    base: dict[str, str | bytes | None] = {"pyproject.toml": pyproject, "proj/__init__.py": "", "proj/attn.py": ATTN}
    base.update(files or {})
    for rel, data in base.items():
        if data is None:
            continue
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            p.write_bytes(data)
        else:
            p.write_text(data, encoding="utf-8", newline="")
    return root


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every regular file under `root` (links not followed) and its bytes, by relative path."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.is_symlink() and ".dtype_lint_cache" not in p.parts}


class Hang(BaseException):
    """Raised by `time_limit`: a BaseException, so no `except Exception` in the code under test
    can swallow it."""


@contextlib.contextmanager
def time_limit(seconds: int):
    """Fail (Hang) instead of hanging when the body blocks or runs away (POSIX: SIGALRM)."""

    def expired(*_):
        raise Hang(f"took more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
