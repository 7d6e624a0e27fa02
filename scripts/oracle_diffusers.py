"""The oracle sweep for diffusers 0.42.1 (issue #38): the run-time guard's sites on every
buildable `diffusers.models` class, matched against `dtype-lint check`'s zero-configuration
findings on the same release. The transformers sweep's machinery (scripts/oracle_sweep.py) and
tables (scripts/oracle_report.py) are reused; what differs is here.

Each `ModelMixin` class that `diffusers.models` exports is built from its `__init__` defaults
shrunk (dtype_lint/ecosystems/hf/tiny_diffusers.py) with seeded random weights, run unquantized on dummy inputs
read from its forward signature (the first combination that runs is kept, with its output: the
twin), saved to a tmpfs folder, and reloaded with diffusers' own `BitsAndBytesConfig` (4-bit and
8-bit) through `from_pretrained`, then one forward under `dtype_lint.guard.DtypeGuard`.

diffusers' bitsandbytes quantizer refuses to load without a GPU (`validate_environment` raises
"No GPU found", and its default device map names `cuda:0`); bitsandbytes itself quantizes and
runs on CPU, so the sweep skips that check and maps the model to the CPU. Everything else on the
load path (which layers are replaced, `_keep_in_fp32_modules`, the skip list) is diffusers' own.

Usage (docs in benchmarks/accuracy/README.md):
    .venv/bin/python scripts/oracle_diffusers.py --save           # benchmarks/accuracy/oracle-diffusers-0.42.1.*
    .venv/bin/python scripts/oracle_diffusers.py --only WanTransformer3DModel
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import signal
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import oracle_sweep  # noqa: E402 - scripts/ is not a package
from oracle_sweep import ClassRun, LineWatch, _first_line, _guard_sites, _main_tensor, _Timeout  # noqa: E402

RELEASE = ("diffusers", "0.42.1")
QUANTIZERS = ("bnb-4bit", "bnb-8bit")
TIMEOUT_S = 40  # per class; the sweep must stay well under 15 minutes on 2 cores
MAX_PARAMETERS = 30_000_000  # a class whose shrunk build is still larger is not run (time, not memory)
ACCURACY = oracle_sweep.ACCURACY


def model_classes() -> list[str]:
    """Every `ModelMixin` subclass that `diffusers.models` exports (multi-model wrappers included:
    they fail at build, and are counted)."""
    import inspect

    import diffusers.models
    from diffusers.models import _import_structure
    from diffusers.models.modeling_utils import ModelMixin

    names = []
    for exported in _import_structure.values():
        for name in exported:
            try:
                obj = getattr(diffusers.models, name)
            except Exception:  # noqa: BLE001 - an optional dependency missing: not a class we can build
                continue
            if inspect.isclass(obj) and issubclass(obj, ModelMixin) and obj is not ModelMixin:
                names.append(name)
    return sorted(set(names))


def allow_cpu_bitsandbytes() -> None:
    """Let diffusers' bitsandbytes quantizers load on CPU (see the module's docstring)."""
    from diffusers.quantizers.bitsandbytes import bnb_quantizer

    for quantizer_cls in (bnb_quantizer.BnB4BitDiffusersQuantizer, bnb_quantizer.BnB8BitDiffusersQuantizer):
        quantizer_cls.validate_environment = lambda self, *args, **kwargs: None
        quantizer_cls.update_device_map = lambda self, device_map: device_map or {"": "cpu"}


def quantization_config(quantizer: str):
    import torch
    from diffusers import BitsAndBytesConfig

    if quantizer == "bnb-4bit":
        return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.float32)
    if quantizer == "bnb-8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    raise ValueError(f"unknown quantizer {quantizer!r}")


def _worker_init() -> None:
    oracle_sweep._worker_init()
    from diffusers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    allow_cpu_bitsandbytes()


def _run_quantized(model_cls, folder: str, inputs: dict, quantizer: str, twin, watch_lines) -> dict:
    import torch

    from dtype_lint.ecosystems.hf.verify import relative_error
    from dtype_lint.guard import DtypeGuard

    result: dict = {"forward": "", "generate": "", "rel_error": None, "sites": [], "executed": []}
    try:
        model = model_cls.from_pretrained(folder, quantization_config=quantization_config(quantizer),
                                          torch_dtype=torch.float32).eval()
    except _Timeout:
        raise
    except Exception as exc:  # noqa: BLE001 - a load failure is the row's result
        result["forward"] = "load failed: " + _first_line(exc)
        return result
    with DtypeGuard(model=model, strict=False) as guard, LineWatch(watch_lines) as watch:
        try:
            with torch.no_grad():
                tensor = _main_tensor(model(**inputs))
            result["forward"] = "ok"
            if tensor is not None and twin is not None and tensor.shape == twin.shape:
                result["rel_error"] = relative_error(tensor, twin)
        except _Timeout:
            raise
        except Exception as exc:  # noqa: BLE001 - a crash under the quantizer is what the oracle looks for
            result["forward"] = _first_line(exc)
    result["sites"] = _guard_sites(guard)
    result["executed"] = sorted(watch.hit)
    return result


def run_class(_model_type: str, class_name: str, quantizers: tuple[str, ...],
              watch_lines: dict[str, set[int]] | None = None) -> ClassRun:
    """Build, run, save, reload quantized and run one class (in a worker; a SIGALRM bounds it)."""
    import diffusers
    import torch

    from dtype_lint.ecosystems.hf.tiny_diffusers import input_candidates, tiny_kwargs
    from dtype_lint.guard import DtypeGuard

    run = ClassRun("diffusers", class_name)
    start = time.monotonic()
    oracle_sweep.TIMEOUT_S = TIMEOUT_S
    signal.alarm(TIMEOUT_S)
    try:
        run.stage = "config"
        model_cls = getattr(diffusers, class_name)
        kwargs = tiny_kwargs(model_cls)
        run.stage = "build"
        with torch.device("meta"):  # counted without allocating: a large build costs seconds
            size = sum(p.numel() for p in model_cls(**kwargs).parameters())
        if size > MAX_PARAMETERS:
            raise ValueError(f"still {size / 1e6:.0f}M parameters after shrinking (limit "
                             f"{MAX_PARAMETERS / 1e6:.0f}M: sizes the shrinker does not know)")
        torch.manual_seed(0)
        model = model_cls(**kwargs).eval()
        run.stage = "inputs"
        candidates = input_candidates(model, kwargs)
        run.stage = "twin"
        with DtypeGuard(model=model, strict=False) as guard:
            inputs, twin = oracle_sweep._first_inputs(model, candidates)
        run.twin_sites = _guard_sites(guard)
        run.built = True
        run.stage = "save"
        with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as folder:
            model.save_pretrained(folder)
            del model
            for quantizer in quantizers:
                run.stage = quantizer
                run.runs[quantizer] = _run_quantized(model_cls, folder, inputs, quantizer, twin, watch_lines or {})
        run.stage = "done"
    except _Timeout as exc:
        run.error = f"timeout: {exc}"
    except Exception as exc:  # noqa: BLE001 - why the class could not be built is the record
        run.error = _first_line(exc)
    finally:
        signal.alarm(0)
        run.seconds = round(time.monotonic() - start, 2)
    return run


def sweep(classes: list[str], quantizers: tuple[str, ...], jobs: int, watch_lines, progress: bool) -> list[ClassRun]:
    """Every class in a pool of forked workers; a class whose worker dies is recorded as such."""
    import diffusers  # noqa: F401 - imported before the fork, once

    context = multiprocessing.get_context("fork")
    runs: dict[str, ClassRun] = {}
    pending, broken_before = list(classes), set()
    while pending:
        broken_now = []
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context, initializer=_worker_init) as pool:
            futures = {pool.submit(run_class, "diffusers", name, quantizers, watch_lines): name for name in pending}
            for future in concurrent.futures.as_completed(futures):
                name = futures[future]
                try:
                    run = future.result()
                except concurrent.futures.process.BrokenProcessPool:
                    if name in broken_before:
                        runs[name] = ClassRun("diffusers", name, stage="worker", error="the worker died (in two pools)")
                    else:
                        broken_now.append(name)
                    continue
                runs[name] = run
                if progress:
                    state = "built" if run.built else f"FAILED at {run.stage}: {run.error[:80]}"
                    print(f"[{len(runs)}/{len(classes)}] {name}: {state} ({run.seconds} s)", file=sys.stderr,
                          flush=True)
        broken_before.update(broken_now)
        pending = broken_now
    return sorted(runs.values(), key=lambda r: r.model_class)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="comma-separated class names to run")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--json", type=Path, help="write every row and site as JSON")
    parser.add_argument("--markdown", type=Path, help="write the tables as markdown")
    parser.add_argument("--save", action="store_true", help="write benchmarks/accuracy/oracle-diffusers-0.42.1.*")
    parser.add_argument("--from", dest="from_json", type=Path, help="no sweep: rewrite the tables from a saved --json")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)

    from oracle_report import report

    from dtype_lint import releases

    if args.from_json:
        text = report(json.loads(args.from_json.read_text(encoding="utf-8")))
        if args.markdown:
            args.markdown.write_text(text, encoding="utf-8")
        print(text)
        return 0

    classes = model_classes()
    wanted = {c for c in args.only.split(",") if c}
    if wanted - set(classes):
        print(f"oracle_diffusers: not a diffusers model class: {', '.join(sorted(wanted - set(classes)))}",
              file=sys.stderr)
        return 2
    classes = sorted(wanted) if wanted else classes
    start = time.monotonic()
    tree = releases.release_tree(*RELEASE)
    findings = oracle_sweep.static_findings(tree)
    runs = sweep(classes, QUANTIZERS, args.jobs, oracle_sweep.lines_to_watch(findings), not args.quiet)
    sites = oracle_sweep.merge_sites(runs)
    seconds = time.monotonic() - start
    data = {"release": "-".join(RELEASE), "quantizers": list(QUANTIZERS), "seconds": round(seconds, 1),
            "jobs": args.jobs, "script": "scripts/oracle_diffusers.py",
            "tried": "every `ModelMixin` class `diffusers.models` exports, built from its "
            f"`__init__` defaults shrunk ({TIMEOUT_S} s and {MAX_PARAMETERS // 1_000_000}M parameters at most each)",
            "runs": [asdict(r) for r in runs], "sites": [asdict(s) for s in sites],
            "findings": [{k: f.get(k) for k in ("code", "relpath", "line", "end_line", "scope", "expression",
                                                 "applicability")} for f in findings],
            "differing_files": oracle_sweep.differing_files(tree, {f["relpath"] for f in findings} |
                                                            {s.path for s in sites}),
            "bridges": []}
    text = report(data)
    if args.save:
        args.json = args.json or ACCURACY / "oracle-diffusers-0.42.1.json"
        args.markdown = args.markdown or ACCURACY / "oracle-diffusers-0.42.1.md"
    if args.json:
        args.json.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    if args.markdown:
        args.markdown.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGALRM, oracle_sweep._alarm)
    raise SystemExit(main())
