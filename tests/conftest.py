"""Shared fixtures.

Real trees: `vllm_0271` (the last release before the MLA prefill fix, vLLM PR #38771), `vllm_0280`
(the first with it), `vllm_0330`, and the peers `sglang_0523`, `aphrodite_0241`, `lmdeploy_0180`
are the roots of those releases' `.py` trees, fetched once per machine by `dtype_lint.releases`
into a cache outside the repo. A test that uses one is given the `network` marker automatically
(and should say `@pytest.mark.network` itself as well), so `-m "not network"` deselects it; when
the index cannot be reached the fixture fails with pip's reason instead of hanging on or
skipping silently.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_TESTS = Path(__file__).resolve().parent
if str(_TESTS) not in sys.path:
    sys.path.insert(0, str(_TESTS))

from dtype_lint import releases  # noqa: E402

# fixture name -> (distribution, version)
RELEASE_FIXTURES = {
    "vllm_0271": ("vllm", "0.27.1"),
    "vllm_0280": ("vllm", "0.28.0"),
    "vllm_0330": ("vllm", "0.33.0"),
    "sglang_0523": ("sglang", "0.5.23"),
    "aphrodite_0241": ("aphrodite-engine", "0.24.1"),
    "lmdeploy_0180": ("lmdeploy", "0.18.0"),
    "transformers_5230": ("transformers", "5.23.0"),
    "diffusers_0421": ("diffusers", "0.42.1"),
}
VLLM_RELEASE_FIXTURES = RELEASE_FIXTURES  # older name


def _release(dist: str, version: str) -> Path:
    try:
        return releases.release_tree(dist, version)
    except releases.ReleaseFetchError as exc:
        pytest.fail(f"{dist} {version} is needed and could not be fetched: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def vllm_0271() -> Path:
    """Root of vLLM 0.27.1's `.py` tree (holds `vllm/`): MLA prefill casts to kv_b_proj's dtype."""
    return _release("vllm", "0.27.1")


@pytest.fixture(scope="session")
def vllm_0280() -> Path:
    """Root of vLLM 0.28.0's `.py` tree: the casts go through `_get_kv_b_proj_input_dtype`."""
    return _release("vllm", "0.28.0")


@pytest.fixture(scope="session")
def vllm_0330() -> Path:
    """Root of vLLM 0.33.0's `.py` tree: the current release, the patch series' target."""
    return _release("vllm", "0.33.0")


@pytest.fixture(scope="session")
def sglang_0523() -> Path:
    """Root of sglang 0.5.23's `.py` tree: a peer with namespace packages (no `__init__.py`)."""
    return _release("sglang", "0.5.23")


@pytest.fixture(scope="session")
def aphrodite_0241() -> Path:
    """Root of aphrodite-engine 0.24.1's `.py` tree: a vLLM fork under another package name."""
    return _release("aphrodite-engine", "0.24.1")


@pytest.fixture(scope="session")
def lmdeploy_0180() -> Path:
    """Root of lmdeploy 0.18.0's `.py` tree: a peer with nothing to fix."""
    return _release("lmdeploy", "0.18.0")


@pytest.fixture(scope="session")
def transformers_5230() -> Path:
    """Root of transformers 5.23.0's `.py` tree: Hugging Face model code (docs/hf.md)."""
    return _release("transformers", "5.23.0")


@pytest.fixture(scope="session")
def diffusers_0421() -> Path:
    """Root of diffusers 0.42.1's `.py` tree: Hugging Face model code (docs/hf.md)."""
    return _release("diffusers", "0.42.1")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    # tryfirst: the marker must be on the item before `-m` deselection looks at it.
    for item in items:
        if set(getattr(item, "fixturenames", ())) & RELEASE_FIXTURES.keys():
            if item.get_closest_marker("network") is None:
                item.add_marker(pytest.mark.network)
