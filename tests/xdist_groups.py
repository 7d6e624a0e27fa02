"""A pytest plugin: keep the tests of one `xdist_group` on one pytest-xdist worker under pytest 9.

`--dist loadgroup` (pyproject.toml) sends the tests of one group to one worker by a suffix on their
node ids, `test_x.py::test@group`. pytest-xdist 3.8 writes that suffix to `item._nodeid`, but
pytest 9 reads a node id from `item._id`, so every group was split across the workers: the vLLM
0.27.1 migration was built by both, and the two tests that pip-install the checkout could build in
the source tree at the same time. This writes the suffix where pytest 9 reads it; once xdist does
so itself, the id already holds an `@` and nothing changes. tests/conftest.py calls
`group_for_xdist`; `-p xdist_groups` loads it as a plugin (tests/test_xdist_groups.py).
"""

from __future__ import annotations

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items) -> None:
    group_for_xdist(config, items)


def group_for_xdist(config, items) -> None:
    """Writes each grouped item's `@group` suffix into its node id (tests/conftest.py calls it)."""
    if not getattr(config.option, "loadgroup", False):  # set on xdist's workers under loadgroup
        return
    from _pytest.nodeid import NodeId

    for item in items:
        names = sorted({str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                        for mark in item.iter_markers("xdist_group")})
        if names and "@" not in item.nodeid:
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")
