"""Can a file's text script or trace anything? The compiled-code census's test of every file.

A test of the text alone, with the standard library's `re`: the scan asks it of each file it
reads, and the pre-commit replay (run/replay_index.py, which imports nothing else) asks it again
of a file the census passed over and that changed since (core/passed_over.py).
"""

from __future__ import annotations

import re

# The spellings through which code can name one of the compilers' entry points (a decorator, a
# call, an alias, a base class) as analysis/compiled_code.py's CompiledCode reads them: a file
# whose text has none compiles nothing, so the census of the project (analysis/compiled_elsewhere.py)
# need not parse it. The scan asks every file it reads, so the test is three substring passes over
# most texts (`jit`, `trace`, `quantize_fx`) and a look at each `jit` of the few that say it: 0.48 G
# instructions over vLLM 0.34.0's 56 MB, where patterns searched over whole texts took 0.75 G. Each
# form CompiledCode knows needs one: `jit.script`/`jit.export`... written out, an import from
# `torch.jit` (`script as S`) or of it (`import torch.jit as J`), `getattr(torch.jit, ...)`, a
# `ScriptModule` (whose methods compile only under `torch.jit.script_method`: `jit` again),
# `symbolic_trace`, a `Tracer` and its `.trace`, a quantize_fx entry point (which torch exports
# from `quantize_fx` only).
_JIT_AT = re.compile(r"jit\.(?:script|script_method|export|interface)\b|(?<=torch\.)jit[\s\\]+(?:import|as)\b")
_GETATTR_JIT = re.compile(r"getattr\(\s*(?:torch\s*\.\s*)?jit\s*,")
_TRACE_CALL = re.compile(r"\.trace\s*\(")
_QUANTIZE_ENTRY = re.compile(r"(?:prepare|prepare_qat|fuse|prepare_standalone_module)_fx\b")


def might_compile(text: str) -> bool:
    """Can the code of `text` script or trace anything (a superset: CompiledCode says what)?"""
    if "jit" in text and (_names_jit(text) or "ScriptModule" in text
                          or ("getattr(" in text and _GETATTR_JIT.search(text) is not None)):
        return True
    if "trace" in text and ("symbolic_trace" in text or ("Tracer" in text and _TRACE_CALL.search(text) is not None)):
        return True
    return "quantize_fx" in text and _QUANTIZE_ENTRY.search(text) is not None


def _names_jit(text: str) -> bool:
    """Does some `jit` of `text` name a TorchScript entry point (`_JIT_AT` tried at each)?"""
    start = text.find("jit")
    while start >= 0:
        if _JIT_AT.match(text, start) is not None:
            return True
        start = text.find("jit", start + 3)
    return False
