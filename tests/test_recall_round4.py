"""Issue #39, round 4: weight loaders are trusted with the storage, not with the layer's other
parameters.

A loader (`exempt-functions`: `*weight_loader*`, `load_weights`) that casts a checkpoint tensor,
or allocates one, in `L.weight.dtype` and installs it as another parameter of `L` that the layer
computes with (a bias, a scale) makes that parameter int8/uint8/fp8 under a quantized weight, or
fails where a backend keeps no `.weight` (the shape of a sequence-classification head's
`score.bias` loader). What becomes the weight itself stays exempt storage code. Every fixture is
our own small code."""

from __future__ import annotations

import textwrap

import pytest

from dtype_lint.api import check_source

HEAD = textwrap.dedent("""\
    import torch
    from vllm.model_executor.layers.linear import ReplicatedLinear


    class Head(torch.nn.Module):
        def __init__(self, quant_config):
            super().__init__()
            self.head = ReplicatedLinear(8, 2, bias=False, quant_config=QUANT)

""")

# name -> (the loader's body, the line of the site within it or None when it must stay silent)
LOADERS = {
    # a generator nested in `load_weights` that takes the checkpoint's bias for the head
    "nested-generator-bias": ("""\
    def load_weights(self, weights):
        def take_bias(weights):
            for name, tensor in weights:
                if name == "head.bias":
                    dtype = self.head.weight.dtype
                    bias = tensor.to(dtype)
                    self.head.bias = torch.nn.Parameter(bias)
                else:
                    yield name, tensor

        return list(take_bias(weights))
""", 6),
    "chained-to": ("""\
    def load_weights(self, weights):
        for name, tensor in weights:
            if name == "head.bias":
                bias = tensor.to("cuda").to(self.head.weight.dtype)
                self.head.bias = torch.nn.Parameter(bias, requires_grad=False)
""", 4),
    "register-parameter-scale": ("""\
    def scale_weight_loader(self, tensor):
        self.head.register_parameter(
            "out_scale", torch.nn.Parameter(torch.ones(2, dtype=self.head.weight.dtype)))
""", 3),
    "setattr-bias": ("""\
    def bias_weight_loader(self, tensor):
        setattr(self.head, "bias", torch.nn.Parameter(tensor.to(dtype=self.head.weight.dtype)))
""", 2),
    # the unchanged storage code: what becomes the weight takes the weight's storage dtype
    "weight-itself": ("""\
    def load_weights(self, weights):
        for name, tensor in weights:
            if name == "head.weight":
                weight = tensor.to(self.head.weight.dtype)
                self.head.weight = torch.nn.Parameter(weight, requires_grad=False)
""", None),
    "registered-weight": ("""\
    def head_weight_loader(self, tensor):
        del self.head.weight
        self.head.register_parameter(
            "weight", torch.nn.Parameter(torch.empty(tensor.shape, dtype=self.head.weight.dtype)))
""", None),
    "copied-into-weight": ("""\
    def head_weight_loader(self, tensor):
        self.head.weight.data.copy_(tensor.to(self.head.weight.dtype))
""", None),
    # a cast the loader keeps local (compared, logged) installs nothing
    "not-installed": ("""\
    def load_weights(self, weights):
        for name, tensor in weights:
            checked = tensor.to(self.head.weight.dtype)
            assert checked.shape == tensor.shape
""", None),
    # a bias installed on another object than the layer whose weight dtype was read
    "other-owner": ("""\
    def load_weights(self, weights):
        for name, tensor in weights:
            self.bias = torch.nn.Parameter(tensor.to(self.head.weight.dtype))
""", None),
}

LOADER_LINE = HEAD.count("\n") + 1  # the loader's first line in the file


def source(body: str, quant: str = "quant_config") -> str:
    return HEAD.replace("QUANT", quant) + textwrap.indent(textwrap.dedent(body), "    ")


@pytest.mark.parametrize("name", sorted(n for n, (_, line) in LOADERS.items() if line is not None))
def test_a_loader_installing_a_compute_parameter_in_the_storage_dtype_is_reported(name):
    body, line = LOADERS[name]
    findings = check_source(source(body), filename="head.py", settings={})
    assert [(f.code in ("DTL001", "DTL002"), f.span.line) for f in findings] == [(True, LOADER_LINE + line - 1)], \
        [(f.code, f.span.line, f.message) for f in findings]
    message = findings[0].message
    assert message.startswith("weight loader ") and "self.head." in message and "takes the compute dtype" in message
    assert findings[0].fix is None and "choose its dtype by hand" in findings[0].no_fix_reason


@pytest.mark.parametrize("name", sorted(n for n, (_, line) in LOADERS.items() if line is None))
def test_storage_code_in_a_loader_stays_exempt(name):
    body, _ = LOADERS[name]
    assert check_source(source(body), filename="head.py", settings={}) == []


@pytest.mark.parametrize("name", sorted(n for n, (_, line) in LOADERS.items() if line is not None))
def test_a_loader_of_an_unquantized_layer_is_silent(name):
    body, _ = LOADERS[name]
    assert check_source(source(body, quant="None"), filename="head.py", settings={}) == []


def test_an_exempt_functions_setting_decides_which_functions_are_loaders():
    """A loader the project names in `exempt-functions` gets the same narrowing: its bias install is
    reported as a loader's, its weight install stays exempt."""
    bias_body, line = LOADERS["chained-to"]
    settings = {"extend-exempt-functions": ["take_*"]}
    renamed = source(bias_body.replace("def load_weights", "def take_checkpoint"))
    findings = check_source(renamed, filename="head.py", settings=settings)
    assert [(f.span.line, f.message.startswith("weight loader ")) for f in findings] == [(LOADER_LINE + line - 1, True)]
    weight_body, _ = LOADERS["weight-itself"]
    renamed = source(weight_body.replace("def load_weights", "def take_checkpoint"))
    assert check_source(renamed, filename="head.py", settings=settings) == []
