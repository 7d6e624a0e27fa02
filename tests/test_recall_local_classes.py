"""Classes defined inside a function or a class body (issue #39): their layers resolve like a
module-level class's.

vLLM builds classification models at run time: a function takes a model class and returns a
subclass defined in its own body, whose method attaches a quantizable head and whose weight
loader (a generator nested in `load_weights`) turns a checkpoint bias into a parameter in the
head's weight dtype. The class index located only module-level classes, so `self.score` in such a
class resolved to nothing and the site was missed. The code here is our own, in that shape; each
reported site has a silent twin that differs only in what makes it safe (an unquantized layer, a
guard, a float-only layer).
"""

from __future__ import annotations

import textwrap

import pytest
from tiny_project import write_tree

from dtype_lint.analysis.index.class_index import QuantizableLayerIndex, extract_header
from dtype_lint.api import check_source, make_config
from dtype_lint.run import pipeline
from dtype_lint.run.pipeline import RunOptions

LINEAR = """
    from torch import nn


    class LinearBase(nn.Module):
        def __init__(self, input_size, output_size, bias=False, params_dtype=None, quant_config=None, prefix=""):
            super().__init__()


    class ColumnParallelLinear(LinearBase):
        pass
"""

# Each reported line ends with `# reported`; every other cast must stay silent.
HEADS = """
    import torch
    from torch import nn

    from pkg.layers.linear import ColumnParallelLinear


    def with_score_head(base):
        class WithScoreHead(base):
            def init_head(self, quant_config):
                self.score = ColumnParallelLinear(8, 2, quant_config=quant_config)

            def forward(self, x):
                return self.score(x.to(self.score.weight.dtype))  # reported

            def load_weights(self, weights):
                def install_bias(weights):
                    for name, tensor in weights:
                        if name == "score.bias":
                            dtype = self.score.weight.dtype
                            self.score.bias = torch.nn.Parameter(tensor.to(dtype))  # reported
                        else:
                            yield name, tensor

                return list(install_bias(weights))

        return WithScoreHead


    def with_plain_head(base):
        class WithPlainHead(base):
            def init_head(self):
                self.score = ColumnParallelLinear(8, 2, quant_config=None)

            def forward(self, x):
                return self.score(x.to(self.score.weight.dtype))

            def load_weights(self, weights):
                def install_bias(weights):
                    for name, tensor in weights:
                        if name == "score.bias":
                            dtype = self.score.weight.dtype
                            self.score.bias = torch.nn.Parameter(tensor.to(dtype))
                        else:
                            yield name, tensor

                return list(install_bias(weights))

        return WithPlainHead


    def with_guarded_head(base):
        class WithGuardedHead(base):
            def init_head(self, quant_config):
                self.score = ColumnParallelLinear(8, 2, quant_config=quant_config)

            def forward(self, x):
                if self.score.weight.dtype in (torch.float16, torch.bfloat16, torch.float32):
                    x = x.to(self.score.weight.dtype)
                return self.score(x)

        return WithGuardedHead


    def with_norm(base):
        class WithNorm(base):
            def __init__(self):
                super().__init__()
                self.norm = nn.LayerNorm(8)

            def forward(self, x):
                return self.norm(x.to(self.norm.weight.dtype))

        return WithNorm


    class Tower(nn.Module):
        class Projector(nn.Module):
            def __init__(self, quant_config):
                super().__init__()
                self.proj = ColumnParallelLinear(8, 8, quant_config=quant_config)

            def forward(self, x):
                return self.proj(x.to(self.proj.weight.dtype))  # reported

        class Norm(nn.Module):
            def __init__(self):
                super().__init__()
                self.norm = nn.LayerNorm(8)

            def forward(self, x):
                return self.norm(x.to(self.norm.weight.dtype))

        def build(self):
            class Adapter(nn.Module):
                def __init__(self, quant_config):
                    super().__init__()
                    self.down = ColumnParallelLinear(8, 4, quant_config=quant_config)

                def forward(self, x):
                    return self.down(x.to(self.down.weight.dtype))  # reported

            return Adapter
"""


@pytest.fixture(scope="module")
def heads(tmp_path_factory) -> tuple[list[str], list[tuple[int, str]]]:
    """(the lines of pkg/heads.py, (line, code) of each finding): one run shared by the tests."""
    root = tmp_path_factory.mktemp("local_classes")
    write_tree(root, {"pkg/__init__.py": "", "pkg/layers/__init__.py": "", "pkg/layers/linear.py": LINEAR,
                      "pkg/heads.py": HEADS}, dedent=True)
    cfg = make_config({"preset": "generic", "quantizable": ["pkg.layers.linear.LinearBase"]}, root=root)
    result = pipeline.run(cfg, RunOptions(paths=[str(root)], jobs=1, use_cache=False))
    lines = (root / "pkg" / "heads.py").read_text().splitlines()
    return lines, [(f.span.line, f.code) for f in result.findings if f.path.endswith("heads.py")]


def test_layers_of_function_local_and_nested_classes_are_resolved(heads):
    """Every `# reported` line is found, once, as DTL001: the activation casts and the weight
    loader's bias in a function's class, the casts in a class body's class and in a method's."""
    lines, found = heads
    expected = [number for number, line in enumerate(lines, 1) if line.endswith("# reported")]
    assert sorted(line for line, _code in found) == expected
    assert {code for _line, code in found} == {"DTL001"}


def test_silent_twins_stay_silent(heads):
    """The same shapes with an unquantized head (`quant_config=None`), a cast guarded by the
    weight's float dtypes, and float-only norms (in a function's class and a class body's): no
    finding in them (as before local classes resolved)."""
    lines, found = heads
    twins = [(lines.index(start) + 1, lines.index(end) + 1) for start, end in (
        ("def with_plain_head(base):", "def with_norm(base):"),
        ("def with_norm(base):", "class Tower(nn.Module):"),
        ("    class Norm(nn.Module):", "    def build(self):"))]
    assert not [line for line, _code in found if any(first <= line < last for first, last in twins)]


def test_the_index_locates_a_nested_class_only_when_its_name_is_unique(tmp_path):
    """`outer.<locals>.Inner` and `Outer.Inner` locate the one `class Inner` of the module; a
    name two class statements share is not located (which of them the qualified name means is
    not read from the text), nor is a name the module does not define."""
    text = textwrap.dedent("""
        class Outer:
            class Inner(Base):
                pass


        def make(base):
            class Made(base, Mixin):
                pass

            class Twice:
                pass
            return Made


        def other():
            class Twice:
                pass
    """)
    header = extract_header(text, "pkg.mod", "pkg/mod.py", False)
    assert header.nested == {"Inner", "Made"}
    index = QuantizableLayerIndex([header], [], [])
    inner = index.class_location("pkg.mod.Outer.Inner")
    made = index.class_location("pkg.mod.make.<locals>.Made")
    assert inner is not None and inner[1] == "Inner" and header.classes["Inner"] == (["Base"], 3)
    assert made is not None and made[1] == "Made" and header.classes["Made"] == (["base", "Mixin"], 8)
    assert index.class_location("pkg.mod.Outer.Outer.Inner") is not None  # every class on the path is the module's
    assert index.class_location("pkg.mod.Missing.Inner") is None
    assert index.class_location("pkg.mod.make.<locals>.Twice") is None
    assert index.class_location("pkg.mod.other.<locals>.Twice") is None
    assert index.class_location("pkg.other.make.<locals>.Made") is None
    # the header survives the cache's round trip
    assert type(header).from_dict(header.to_dict()).nested == header.nested


FACTORY = textwrap.dedent("""\
    import torch
    from vllm.model_executor.layers.linear import ReplicatedLinear


    def as_classifier(cls):
        class Classifier(cls):
            def make_head(self, quant_config):
                self.head = ReplicatedLinear(8, 2, bias=False, quant_config=QUANT)

            def forward(self, x):
                return self.head(x.to(self.head.weight.dtype))

        return Classifier
""")


def test_a_text_checked_alone_resolves_its_function_s_class():
    """`check_source` indexes the text alone, as module "": the factory's class is found there too
    (the cast is reported with the model's quant config, not with `quant_config=None`)."""
    reported = check_source(FACTORY.replace("QUANT", "quant_config"), filename="cls.py", settings={})
    assert [(f.span.line, f.code) for f in reported] == [(11, "DTL001")]
    assert check_source(FACTORY.replace("QUANT", "None"), filename="cls.py", settings={}) == []
