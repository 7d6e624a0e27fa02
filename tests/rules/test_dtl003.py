"""DTL003's guards that need more than one file or a closer look than its VALID/INVALID examples:
storage code recognised by the layer a method takes (the class and the layer class in other
files), dormant attributes (a base class in another file may turn them on), and the evaluation of
a test with a dormant attribute's constant."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from tiny_project import write_tree

from dtype_lint.analysis.guard_engine.dormant import truth
from dtype_lint.api import check_paths, make_config

LAYERS = """\
import torch


class LinearBase(torch.nn.Module):
    def __init__(self, n, quant_config=None):
        super().__init__()
        self.quant_method = quant_config.get_quant_method(self, "") if quant_config else None


class ReplicatedLinear(LinearBase):
    pass
"""


def _dtl003(root: Path, files: dict[str, str]) -> list[tuple[str, int]]:
    write_tree(root, {"pkg/__init__.py": "", "pkg/layers.py": LAYERS, **files})
    result = check_paths([str(root)], make_config({"select": ["DTL003"], "preset": "generic"}, root=root),
                         use_cache=False)
    return sorted((Path(f.path).relative_to(root).as_posix(), f.span.line) for f in result.findings)


KERNEL = """\
import torch
from pkg.layers import ReplicatedLinear


class FusedGemm:
    def apply(self, x, proj: ReplicatedLinear):
        return torch.mm(x, proj.weight.t())

    def can_run(self, proj: ReplicatedLinear) -> bool:
        return proj.weight.is_contiguous()
"""


def test_a_kernel_class_taking_an_annotated_layer_from_another_file_is_storage_code(tmp_path):
    assert _dtl003(tmp_path, {"pkg/kernel.py": KERNEL}) == []


def test_the_annotation_must_be_a_layer_class(tmp_path):
    # `apply(self, x, proj: Helper)`: Helper is no layer, so the class is not storage code, and
    # `can_run`'s read of its ReplicatedLinear is reported.
    code = KERNEL.replace("def apply(self, x, proj: ReplicatedLinear)", "def apply(self, x, proj: Helper)")
    code = "class Helper:\n    weight = None\n\n\n" + code
    assert _dtl003(tmp_path, {"pkg/kernel.py": code}) == [("pkg/kernel.py", 14)]


def test_a_storage_function_through_a_subclass_in_another_file(tmp_path):
    code = ("from pkg.layers import ReplicatedLinear\n\n\n"
            "def apply_w4_linear(qproj: ReplicatedLinear, x):\n    return x @ qproj.weight.t()\n\n\n"
            "def mix_w4_linear(qproj: ReplicatedLinear, x):\n    return x @ qproj.weight.t()\n")
    assert _dtl003(tmp_path, {"pkg/w4.py": code}) == [("pkg/w4.py", 9)]


DORMANT_MODEL = """\
import torch
from pkg.layers import ReplicatedLinear
from pkg.base import Base


class Mixer(Base):
    def __init__(self, quant_config):
        super().__init__()
        self.proj = ReplicatedLinear(8, quant_config=quant_config)
        self.fast_tokens = 0

    def forward(self, x):
        if 0 < x.shape[0] <= self.fast_tokens:
            return torch.mm(x, self.proj.weight.t())
        return self.proj(x)
"""


@pytest.mark.parametrize("base, reported", [
    ("class Base:\n    def __init__(self):\n        self.fast_tokens = 0\n", False),
    # A base class (another file) that turns the path on itself: live.
    ("class Base:\n    def enable(self):\n        self.fast_tokens = 64\n", True),
    # A class-level true default: live.
    ("class Base:\n    fast_tokens = 64\n", True),
])
def test_a_dormant_attribute_is_read_across_the_bases(tmp_path, base, reported):
    found = _dtl003(tmp_path, {"pkg/base.py": base, "pkg/mixer.py": DORMANT_MODEL})
    assert found == ([("pkg/mixer.py", 14)] if reported else [])


def test_a_dormant_attribute_turned_on_anywhere_in_the_file_is_live(tmp_path):
    enabler = DORMANT_MODEL + "\n\ndef enable(model):\n    for m in model.modules():\n        m.fast_tokens = 64\n"
    found = _dtl003(tmp_path, {"pkg/base.py": "class Base:\n    pass\n", "pkg/mixer.py": enabler})
    assert found == [("pkg/mixer.py", 14)]


@pytest.mark.parametrize("test, expected", [
    ("0 < n <= self.k", False),
    ("n <= self.k", None),
    ("self.k > 0", False),
    ("self.k >= 0", True),
    ("-1 < self.k", True),
    ("self.k >= n > 0", False),
    ("0 <= n <= self.k", None),
    ("self.m is not None", False),
    ("self.m is None", True),
    ("self.f and x", False),
    ("self.f or x", None),
    ("not self.f", True),
    ("x < 3 and 0 < y <= self.k", False),
    ("self.k + 1 > n", None),
])
def test_truth_with_dormant_constants(test, expected):
    assert truth(ast.parse(test, mode="eval").body, {"self.k": 0, "self.m": None, "self.f": False}) is expected


BACKENDS = """\
import abc


class QuantConfig(abc.ABC):
    @abc.abstractmethod
    def get_name(self) -> str: ...


class W4Config(QuantConfig):
    def get_name(self) -> str:
        return "w4"
"""

BACKEND_MODEL = """\
from pkg.layers import ReplicatedLinear
from pkg.quant import QuantConfig, W4Config


class Head:
    def __init__(self, quant_config):
        self.proj = ReplicatedLinear(8, quant_config=quant_config)
        self.quant_config = quant_config

    def named(self):
        if isinstance(self.quant_config, W4Config):
            return self.proj.weight.shape

    def any_quantized(self):
        if isinstance(self.quant_config, QuantConfig):
            return self.proj.weight.shape
"""


def test_a_backend_check_names_a_concrete_class_not_the_abstract_base(tmp_path):
    found = _dtl003(tmp_path, {"pkg/quant.py": BACKENDS, "pkg/head.py": BACKEND_MODEL})
    assert found == [("pkg/head.py", 16)]
