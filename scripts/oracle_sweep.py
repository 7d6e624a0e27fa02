"""The oracle sweep (issue #38): the run-time guard's sites on every buildable transformers model
class, matched against `dtype-lint check`'s zero-configuration findings on the same release.

For each model type of transformers' auto mappings, one class (the causal LM if it has one, else
the seq2seq LM, else the base model) is built from its config class's defaults shrunk
(dtype_lint/tiny_models.py) with seeded random weights, saved to a tmpfs folder, and reloaded:
unquantized (the twin), and with the real transformers quantizers on CPU (bitsandbytes 4-bit and
8-bit; optimum-quanto int8 with `--quanto`). Each quantized model runs one forward (and a two-token
`generate` where the class can generate) under `dtype_lint.guard.DtypeGuard`, which records every
site where an activation is cast to a quantized layer's storage dtype.

The static side is `dtype-lint check` with zero configuration on the cached `.py` tree of the same
release (`python -m dtype_lint.releases transformers 5.23.0`); a run-time site is matched by its
file (relative to the package root) and a line within a finding's span.

A run-time site at a line `check --fix` can rewrite is re-run after the fix (the bridge): the
site's module is loaded with the finding's edits applied and the HF helper appended, the model
class taken from it, quantized, and run under the guard again: no report at that site, and the
output within the quantizer's own error of the unquantized twin.

Usage (docs in benchmarks/accuracy/README.md):
    .venv/bin/python scripts/oracle_sweep.py                      # every model type, 2 workers
    .venv/bin/python scripts/oracle_sweep.py --share              # the CI share (a few classes)
    .venv/bin/python scripts/oracle_sweep.py --classes 40 --json out.json --markdown out.md
    .venv/bin/python scripts/oracle_sweep.py --save               # benchmarks/accuracy/oracle-*.{json,md}
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

RELEASE = ("transformers", "5.23.0")
QUANTIZERS = ("bnb-4bit", "bnb-8bit")
# The CI share: classes whose release code casts to a bitsandbytes layer's storage dtype (the
# known-bad cases of docs/hf.md), and a clean decoder for contrast. Named, never sampled.
SHARE = ("LongT5Model", "Wav2Vec2ForPreTraining", "LlamaForCausalLM")
TIMEOUT_S = 60
ACCURACY = REPO / "benchmarks" / "accuracy"


@dataclass
class Site:
    path: str  # relative to the package root's parent (`transformers/models/...`)
    line: int
    function: str
    kind: str
    layer_class: str
    storage: str
    quantizers: list[str] = field(default_factory=list)
    classes: list[str] = field(default_factory=list)


@dataclass
class ClassRun:
    model_type: str
    model_class: str
    built: bool = False
    stage: str = ""  # where it stopped: config, build, save, inputs, twin, <quantizer>
    error: str = ""
    runs: dict = field(default_factory=dict)  # quantizer -> {forward, generate, rel_error, sites}
    seconds: float = 0.0


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:160] if text else ''}"


def model_classes() -> list[tuple[str, str]]:
    """(model type, class name): one class per model type of the auto mappings."""
    from transformers.models.auto import modeling_auto

    preferred = (modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
                 modeling_auto.MODEL_MAPPING_NAMES)
    types = sorted(set(modeling_auto.MODEL_MAPPING_NAMES) | set(modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES))
    out = []
    for model_type in types:
        for mapping in preferred:
            name = mapping.get(model_type)
            if isinstance(name, (list, tuple)):
                name = name[0]
            if name:
                out.append((model_type, name))
                break
    return out


class _Timeout(Exception):
    pass


def _alarm(_signum, _frame):
    raise _Timeout(f"past {TIMEOUT_S} s")


def _worker_init() -> None:
    import warnings

    import torch

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    signal.signal(signal.SIGALRM, _alarm)


def package_relative(path: str) -> str:
    """`.../site-packages/transformers/models/x.py` -> `transformers/models/x.py` (else as given)."""
    parts = Path(path).parts
    for index in range(len(parts) - 1, -1, -1):
        if parts[index] in ("transformers", "diffusers") and index + 1 < len(parts):
            return "/".join(parts[index:])
    return path


def _guard_sites(guard) -> list[dict]:
    return [{"path": package_relative(s.path), "line": s.line, "function": s.function, "kind": s.kind,
             "layer_class": s.layer_class, "storage": str(s.storage), "quantizer": str(s.quantizer)}
            for s in guard.sites]


def _run_quantized(model_cls, folder, config, inputs, quantizer, twin, module_override=None) -> dict:
    """Load `folder` quantized, one forward (and generate) under the guard: what happened."""
    import torch

    from dtype_lint.guard import DtypeGuard
    from dtype_lint.hf_verify import quantization_config, relative_error

    result: dict = {"forward": "", "generate": "", "rel_error": None, "sites": []}
    try:
        model = model_cls.from_pretrained(folder, config=config, quantization_config=quantization_config(quantizer)).eval()
    except _Timeout:
        raise
    except Exception as exc:  # noqa: BLE001 - a load failure is the row's result
        result["forward"] = "load failed: " + _first_line(exc)
        return result
    with DtypeGuard(model=model, strict=False) as guard:
        try:
            with torch.no_grad():
                out = model(**inputs)
            result["forward"] = "ok"
            tensor = _main_tensor(out)
            if tensor is not None and twin is not None:
                result["rel_error"] = relative_error(tensor, twin)
        except _Timeout:
            raise
        except Exception as exc:  # noqa: BLE001 - a crash under the quantizer is what the oracle looks for
            result["forward"] = _first_line(exc)
        if result["forward"] == "ok" and _can_generate(model) and "input_ids" in inputs:
            try:
                with torch.no_grad():
                    model.generate(**inputs, max_new_tokens=2, do_sample=False)
                result["generate"] = "ok"
            except _Timeout:
                raise
            except Exception as exc:  # noqa: BLE001
                result["generate"] = _first_line(exc)
    result["sites"] = _guard_sites(guard)
    return result


def _can_generate(model) -> bool:
    try:
        return bool(model.can_generate())
    except Exception:  # noqa: BLE001
        return False


def _main_tensor(out):
    import torch

    for name in ("logits", "last_hidden_state", "prediction_logits", "projected_quantized_states",
                 "pooler_output", "audio_values", "waveform", "spectrogram", "reconstruction"):
        value = getattr(out, name, None)
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value
    if isinstance(out, torch.Tensor):
        return out
    values = out.to_tuple() if hasattr(out, "to_tuple") else out if isinstance(out, tuple) else ()
    return next((v for v in values if isinstance(v, torch.Tensor) and v.is_floating_point()), None)


def run_class(model_type: str, class_name: str, quantizers: tuple[str, ...]) -> ClassRun:
    """Build, save, reload and run one class (in a worker; a SIGALRM bounds it)."""
    import torch
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from dtype_lint.tiny_models import dummy_inputs, tiny_config

    run = ClassRun(model_type, class_name)
    start = time.monotonic()
    signal.alarm(TIMEOUT_S)
    try:
        run.stage = "config"
        config = tiny_config(CONFIG_MAPPING[model_type])
        run.stage = "build"
        model_cls = getattr(transformers, class_name)
        torch.manual_seed(0)
        model = model_cls(config).eval()
        run.stage = "inputs"
        inputs = dummy_inputs(model, config)
        run.stage = "twin"
        with torch.no_grad():
            twin = _main_tensor(model(**inputs))
        run.built = True
        run.stage = "save"
        with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as folder:
            model.save_pretrained(folder)
            del model
            for quantizer in quantizers:
                run.stage = quantizer
                run.runs[quantizer] = _run_quantized(model_cls, folder, config, inputs, quantizer, twin)
        run.stage = "done"
    except _Timeout as exc:
        run.error = f"timeout: {exc}"
    except Exception as exc:  # noqa: BLE001 - why the class could not be built is the record
        run.error = _first_line(exc)
        if os.environ.get("DTL_SWEEP_DEBUG"):
            traceback.print_exc()
    finally:
        signal.alarm(0)
        run.seconds = round(time.monotonic() - start, 2)
    return run


def sweep(classes: list[tuple[str, str]], quantizers: tuple[str, ...], jobs: int, progress: bool = True) -> list[ClassRun]:
    # forkserver, not fork: workers are recycled (max_tasks_per_child) so that what a model leaves
    # behind (patched modules, memory) does not leak into the next 25 classes; torch and
    # transformers are imported once, in the server.
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["torch", "transformers"])
    runs: list[ClassRun] = []
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context, initializer=_worker_init,
                                                max_tasks_per_child=25) as pool:
        futures = {pool.submit(run_class, t, c, quantizers): (t, c) for t, c in classes}
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            model_type, class_name = futures[future]
            try:
                run = future.result()
            except Exception as exc:  # noqa: BLE001 - a worker that died (segfault, OOM) is a failed row
                run = ClassRun(model_type, class_name, stage="worker", error=_first_line(exc))
            runs.append(run)
            if progress:
                state = "built" if run.built else f"FAILED at {run.stage}: {run.error[:80]}"
                print(f"[{done}/{len(classes)}] {class_name}: {state} ({run.seconds} s)", file=sys.stderr, flush=True)
    return sorted(runs, key=lambda r: r.model_class)


# ---------------------------------------------------------------- the static side

def static_findings(tree: Path) -> list[dict]:
    """`dtype-lint check` with zero configuration on the release tree, as JSON findings."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "check.json"
        command = [sys.executable, "-m", "dtype_lint", "check", str(tree), "--output-format", "json",
                   "--exit-zero", "--no-progress", "-o", str(report)]
        subprocess.run(command, cwd=tmp, check=True, capture_output=True, text=True)
        findings = json.loads(report.read_text(encoding="utf-8"))["findings"]
    for finding in findings:
        finding["relpath"] = Path(finding["path"]).resolve().relative_to(tree.resolve()).as_posix()
    return findings


def match(site: dict, findings: list[dict]) -> dict | None:
    """The static finding that reports `site`: same file, the site's line within its span."""
    for finding in findings:
        if finding["relpath"] == site["path"] and finding["line"] <= site["line"] <= finding.get("end_line", finding["line"]):
            return finding
    return None


def merge_sites(runs: list[ClassRun]) -> list[Site]:
    """Every distinct run-time site (file, line), with the quantizers and classes that hit it."""
    sites: dict[tuple[str, int], Site] = {}
    for run in runs:
        for quantizer, result in run.runs.items():
            for raw in result.get("sites", []):
                key = (raw["path"], raw["line"])
                site = sites.setdefault(key, Site(raw["path"], raw["line"], raw["function"], raw["kind"],
                                                  raw["layer_class"], raw["storage"]))
                if quantizer not in site.quantizers:
                    site.quantizers.append(quantizer)
                if run.model_class not in site.classes:
                    site.classes.append(run.model_class)
    return sorted(sites.values(), key=lambda s: (s.path, s.line))


def executed_lines(runs: list[ClassRun]) -> set[str]:
    """The files whose classes the sweep ran (a finding there without a run-time site is a FALSE candidate)."""
    return {raw["path"] for run in runs for result in run.runs.values() for raw in result.get("sites", [])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--classes", type=int, default=0, help="run only the first N model types (0: all)")
    parser.add_argument("--share", action="store_true", help="the CI share: " + ", ".join(SHARE))
    parser.add_argument("--only", default="", help="comma-separated class names to run")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--quanto", action="store_true", help="also optimum-quanto int8")
    parser.add_argument("--json", type=Path, help="write every row and site as JSON")
    parser.add_argument("--markdown", type=Path, help="write the tables as markdown")
    parser.add_argument("--save", action="store_true", help="write benchmarks/accuracy/oracle-transformers-5.23.0.{json,md}")
    parser.add_argument("--no-static", action="store_true", help="skip the static side (run-time sites only)")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)

    from oracle_report import report  # scripts/oracle_report.py: the tables

    classes = model_classes()
    wanted = set(SHARE) if args.share else {c for c in args.only.split(",") if c}
    if wanted:
        unknown = wanted - {c for _t, c in classes}
        classes = [(t, c) for t, c in classes if c in wanted]
        if unknown:
            print(f"oracle_sweep: not a swept class: {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
    if args.classes:
        classes = classes[:args.classes]
    quantizers = QUANTIZERS + (("quanto-int8",) if args.quanto else ())
    start = time.monotonic()
    runs = sweep(classes, quantizers, args.jobs, progress=not args.quiet)
    seconds = time.monotonic() - start
    findings = []
    if not args.no_static:
        from dtype_lint import releases

        findings = static_findings(releases.release_tree(*RELEASE))
    data = {"release": "-".join(RELEASE), "quantizers": list(quantizers), "seconds": round(seconds, 1),
            "jobs": args.jobs, "runs": [asdict(r) for r in runs],
            "sites": [asdict(s) for s in merge_sites(runs)],
            "findings": [{k: f[k] for k in ("code", "relpath", "line", "end_line", "scope", "expression")}
                         | {"fixable": f.get("fix") is not None} for f in findings]}
    text = report(data)
    if args.save:
        args.json = args.json or ACCURACY / "oracle-transformers-5.23.0.json"
        args.markdown = args.markdown or ACCURACY / "oracle-transformers-5.23.0.md"
    if args.json:
        args.json.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    if args.markdown:
        args.markdown.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    raise SystemExit(main())
