"""Shared fixtures.

vLLM releases: `vllm_0271` (the last release before the MLA prefill fix, vLLM PR #38771) and
`vllm_0280` (the first with it) are the roots of those releases' `.py` trees, fetched once per
machine by tests/vllm_release.py into a cache outside the repo. A test that uses either fixture is
given the `network` marker automatically (and should say `@pytest.mark.network` itself as well),
so `-m "not network"` deselects it; when the index cannot be reached the fixture fails with pip's
reason instead of hanging on or skipping silently.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_TESTS = Path(__file__).resolve().parent
if str(_TESTS) not in sys.path:
    sys.path.insert(0, str(_TESTS))

import vllm_release  # noqa: E402  (needs the path above)

# fixture name -> vLLM version
VLLM_RELEASE_FIXTURES = {"vllm_0271": "0.27.1", "vllm_0280": "0.28.0"}


def _vllm(version: str) -> Path:
    try:
        return vllm_release.vllm_tree(version)
    except vllm_release.VllmFetchError as exc:
        pytest.fail(f"vLLM {version} is needed and could not be fetched: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def vllm_0271() -> Path:
    """Root of vLLM 0.27.1's `.py` tree (holds `vllm/`): MLA prefill casts to kv_b_proj's dtype."""
    return _vllm("0.27.1")


@pytest.fixture(scope="session")
def vllm_0280() -> Path:
    """Root of vLLM 0.28.0's `.py` tree: the casts go through `_get_kv_b_proj_input_dtype`."""
    return _vllm("0.28.0")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    # tryfirst: the marker must be on the item before `-m` deselection looks at it.
    for item in items:
        if set(getattr(item, "fixturenames", ())) & VLLM_RELEASE_FIXTURES.keys():
            if item.get_closest_marker("network") is None:
                item.add_marker(pytest.mark.network)
