"""The oracle sweep (issue #38): the run-time guard's sites on every buildable transformers model
class, matched against `dtype-lint check`'s zero-configuration findings on the same release.

For each model type of transformers' auto mappings, one class (the causal LM if it has one, else
the seq2seq LM, else the base model; and the pre-training class where it is another) is built
from its config class's defaults shrunk (dtype_lint/ecosystems/hf/tiny_models.py) with seeded random weights,
saved to a tmpfs folder, and reloaded: unquantized (the twin), and with the real transformers
quantizers on CPU (bitsandbytes 4-bit and 8-bit; optimum-quanto int8 with `--quanto`, whose
float `.dtype` makes the cast harmless: its silent findings are expected). Each quantized model
runs one forward (and a two-token `generate` where the class can generate) under
`dtype_lint.guard.DtypeGuard`, which records every site where an activation is cast to a
quantized layer's storage dtype.

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
SHARE = ("LongT5ForConditionalGeneration", "Wav2Vec2ForPreTraining", "LlamaForCausalLM")
TIMEOUT_S = 120  # per class: the first model of a family imports its modeling module
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
    twin_sites: list = field(default_factory=list)  # the guard on the unquantized model: none expected
    seconds: float = 0.0


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:160] if text else ''}"


def all_classes() -> list[tuple[str, str]]:
    """(model type, class name) for every class of every auto mapping."""
    from transformers.models.auto import modeling_auto

    pairs = set()
    for name in dir(modeling_auto):
        if name.startswith("MODEL_") and name.endswith("_MAPPING_NAMES"):
            for model_type, classes in getattr(modeling_auto, name).items():
                for class_name in classes if isinstance(classes, (list, tuple)) else (classes,):
                    pairs.add((model_type, class_name))
    return sorted(pairs)


def model_classes() -> list[tuple[str, str]]:
    """(model type, class name): for each model type of the auto mappings, the causal LM if it has
    one (it holds the base model and generates), else the seq2seq LM, else the base model; and the
    pre-training class where there is another (speech models' quantizer heads live there)."""
    from transformers.models.auto import modeling_auto

    preferred = (modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
                 modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES, modeling_auto.MODEL_MAPPING_NAMES)
    types = sorted(set(modeling_auto.MODEL_MAPPING_NAMES) | set(modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES))
    out = []
    for model_type in types:
        chosen = None
        for mapping in preferred:
            name = mapping.get(model_type)
            chosen = name[0] if isinstance(name, (list, tuple)) else name
            if chosen:
                out.append((model_type, chosen))
                break
        pretraining = modeling_auto.MODEL_FOR_PRETRAINING_MAPPING_NAMES.get(model_type)
        if pretraining and pretraining != chosen and "ForPreTraining" in pretraining:
            out.append((model_type, pretraining))
    return out


class _Timeout(BaseException):  # not Exception: library code catching Exception must not swallow it
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


class LineWatch:
    """Which of the static findings' lines ran (a finding that ran under a quantizer without a
    run-time site is a candidate FALSE). A trace function on the few files with findings only:
    every other frame is left untraced, so the forward is barely slower."""

    def __init__(self, lines_by_file: dict[str, set[int]]) -> None:
        self.lines_by_file = lines_by_file
        self.hit: set[tuple[str, int]] = set()

    def _global(self, frame, event, _arg):
        lines = self.lines_by_file.get(frame.f_code.co_filename)
        if lines is None:
            return None

        def local(frame, event, _arg):
            if event == "line" and frame.f_lineno in lines:
                self.hit.add((package_relative(frame.f_code.co_filename), frame.f_lineno))
            return local

        return local

    def __enter__(self) -> "LineWatch":
        self._previous = sys.gettrace()
        sys.settrace(self._global)
        return self

    def __exit__(self, *_exc) -> None:
        sys.settrace(self._previous)


def _guard_sites(guard) -> list[dict]:
    return [{"path": package_relative(s.path), "line": s.line, "function": s.function, "kind": s.kind,
             "layer_class": s.layer_class, "storage": str(s.storage), "quantizer": str(s.quantizer)}
            for s in guard.sites]


def _run_quantized(model_cls, folder, config, inputs, quantizer, twin, watch_lines) -> dict:
    """Load `folder` quantized, one forward (and generate) under the guard: what happened."""
    import torch

    from dtype_lint.ecosystems.hf.verify import quantization_config, relative_error
    from dtype_lint.guard import DtypeGuard

    result: dict = {"forward": "", "generate": "", "rel_error": None, "sites": [], "executed": []}
    try:
        model = model_cls.from_pretrained(folder, config=config,
                                          quantization_config=quantization_config(quantizer)).eval()
    except _Timeout:
        raise
    except Exception as exc:  # noqa: BLE001 - a load failure is the row's result
        result["forward"] = "load failed: " + _first_line(exc)
        return result
    with DtypeGuard(model=model, strict=False) as guard, LineWatch(watch_lines) as watch:
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
                    model.generate(**inputs, **_generation_kwargs(config))
                result["generate"] = "ok"
            except _Timeout:
                raise
            except Exception as exc:  # noqa: BLE001
                result["generate"] = _first_line(exc)
    result["sites"] = _guard_sites(guard)
    result["executed"] = sorted(watch.hit)
    return result


def _generation_kwargs(config) -> dict:
    """Two greedy tokens; an encoder-decoder whose tiny config names no start token starts at 0."""
    kwargs = {"max_new_tokens": 2, "do_sample": False}
    if getattr(config, "is_encoder_decoder", False) and getattr(config, "decoder_start_token_id", None) is None \
            and getattr(config, "bos_token_id", None) is None:
        kwargs["decoder_start_token_id"] = 0
    return kwargs


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


def _first_inputs(model, candidates: list[dict]):
    """The first inputs the unquantized model takes, and its output (the twin's); the last error
    when it takes none."""
    import torch

    for index, inputs in enumerate(candidates):
        try:
            with torch.no_grad():
                return inputs, _main_tensor(model(**inputs))
        except _Timeout:
            raise
        except Exception:
            if index == len(candidates) - 1:
                raise
    raise ValueError("no inputs")


def run_class(model_type: str, class_name: str, quantizers: tuple[str, ...],
              watch_lines: dict[str, set[int]] | None = None) -> ClassRun:
    """Build, save, reload and run one class (in a worker; a SIGALRM bounds it)."""
    import torch
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from dtype_lint.ecosystems.hf.tiny_models import input_candidates, tiny_config

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
        candidates = input_candidates(model, config)
        run.stage = "twin"
        from dtype_lint.guard import DtypeGuard

        with DtypeGuard(model=model, strict=False) as guard:
            inputs, twin = _first_inputs(model, candidates)
        run.twin_sites = _guard_sites(guard)
        run.built = True
        run.stage = "save"
        with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as folder:
            model.save_pretrained(folder)
            del model
            for quantizer in quantizers:
                run.stage = quantizer
                run.runs[quantizer] = _run_quantized(model_cls, folder, config, inputs, quantizer, twin,
                                                       watch_lines or {})
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


def sweep(classes: list[tuple[str, str]], quantizers: tuple[str, ...], jobs: int, progress: bool = True,
          watch_lines: dict[str, set[int]] | None = None) -> list[ClassRun]:
    """Every class in a pool of `jobs` forked workers (torch and transformers imported once, here).

    A worker that dies (a segfault in a kernel) breaks the pool: the classes still pending go to a
    fresh pool, and a class that was pending in two broken pools is recorded as killing its worker.
    (Not `max_tasks_per_child`: Python 3.11's executor can hang when it recycles a worker.)"""
    import transformers  # noqa: F401 - imported before the fork, once

    context = multiprocessing.get_context("fork")
    runs: dict[tuple[str, str], ClassRun] = {}
    pending = list(classes)
    broken_before: set[tuple[str, str]] = set()
    while pending:
        broken_now: list[tuple[str, str]] = []
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context, initializer=_worker_init) as pool:
            futures = {pool.submit(run_class, t, c, quantizers, watch_lines): (t, c) for t, c in pending}
            for future in concurrent.futures.as_completed(futures):
                key = futures[future]
                try:
                    run = future.result()
                except concurrent.futures.process.BrokenProcessPool:
                    if key in broken_before:
                        runs[key] = ClassRun(*key, stage="worker", error="the worker died (in two pools)")
                    else:
                        broken_now.append(key)
                    continue
                runs[key] = run
                if progress:
                    state = "built" if run.built else f"FAILED at {run.stage}: {run.error[:80]}"
                    print(f"[{len(runs)}/{len(classes)}] {run.model_class}: {state} ({run.seconds} s)",
                          file=sys.stderr, flush=True)
        broken_before.update(broken_now)
        pending = broken_now
    return sorted(runs.values(), key=lambda r: r.model_class)


# ---------------------------------------------------------------- the static side

def static_findings(tree: Path, paths: list[str] | None = None) -> list[dict]:
    """`dtype-lint check` with zero configuration on the release tree (or on `paths` in it, for
    the CI share), as JSON findings."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "check.json"
        targets = [str(tree / p) for p in paths] if paths else [str(tree)]
        command = [sys.executable, "-m", "dtype_lint", "check", *targets, "--output-format", "json",
                   "--exit-zero", "--no-progress", "-o", str(report)]
        subprocess.run(command, cwd=tmp, check=True, capture_output=True, text=True)
        findings = json.loads(report.read_text(encoding="utf-8"))["findings"]
    for finding in findings:
        finding["relpath"] = Path(finding["path"]).resolve().relative_to(tree.resolve()).as_posix()
        fix = finding.get("fix") or {}
        finding["edits"] = fix.get("edits", [])
        finding["applicability"] = fix.get("applicability", "")
    return findings


def match(site: dict, findings: list[dict]) -> dict | None:
    """The static finding that reports `site`: same file, the site's line within its span."""
    for finding in findings:
        if finding["relpath"] == site["path"] and \
                finding["line"] <= site["line"] <= finding.get("end_line", finding["line"]):
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


def installed_root() -> Path:
    """The folder holding the installed `transformers` package (the frames' file names start here)."""
    import transformers

    return Path(transformers.__file__).parent.parent


def lines_to_watch(findings: list[dict]) -> dict[str, set[int]]:
    """The installed file -> the lines of its findings (what LineWatch records when they run)."""
    root = installed_root()
    watch: dict[str, set[int]] = {}
    for finding in findings:
        lines = range(finding["line"], finding.get("end_line", finding["line"]) + 1)
        watch.setdefault(str(root / finding["relpath"]), set()).update(lines)
    return watch


def differing_files(tree: Path, relpaths: set[str]) -> list[str]:
    """The files whose installed text is not the release tree's (their lines could not be matched)."""
    root = installed_root()
    return sorted(p for p in relpaths if not (root / p).is_file() or (tree / p).read_bytes() != (root / p).read_bytes())


# ---------------------------------------------------------------- the bridge to fixes

def fixed_text(text: str, finding: dict) -> str:
    """The file's text with the finding's fix applied, minus the helper's import (the helper is
    appended to the module instead, as hf_verify does: the release has no such function yet).
    A site after the fix is looked for in the same function (an edit may change the line count)."""
    edits = [e for e in finding["edits"] if "import get_module_input_dtype" not in e["text"]]
    # Back to front; insertions at one offset keep their listed order (as the fixer applies them).
    order = sorted(range(len(edits)), key=lambda i: (edits[i]["start"], edits[i]["end"], i), reverse=True)
    for index in order:
        edit = edits[index]
        text = text[:edit["start"]] + edit["text"] + text[edit["end"]:]
    return text


def run_bridge(model_type: str, class_name: str, quantizer: str, site: dict, finding: dict) -> dict:
    """Re-run one class with the site's finding fixed: the fixed module's sites and output error."""
    import importlib

    import torch
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from dtype_lint.ecosystems.hf.tiny_models import input_candidates, tiny_config
    from dtype_lint.ecosystems.hf.verify import MAX_OWN_ERROR, load_fixed_module

    out = {"class": class_name, "quantizer": quantizer, "path": site["path"], "line": site["line"], "verdict": ""}
    signal.alarm(TIMEOUT_S)
    try:
        module_name = site["path"].removesuffix(".py").replace("/", ".")
        original = importlib.import_module(module_name)
        if not hasattr(original, class_name):
            out["verdict"] = f"not re-run: {class_name} is not defined in the site's module"
            return out
        text = Path(original.__file__).read_text(encoding="utf-8")
        _original, fixed = load_fixed_module(module_name, fixed_text(text, finding))
        model_cls = getattr(fixed, class_name)
        config = tiny_config(CONFIG_MAPPING[model_type])
        torch.manual_seed(0)
        model = model_cls(config).eval()
        inputs, twin = _first_inputs(model, input_candidates(model, config))
        with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as folder:
            model.save_pretrained(folder)
            result = _run_quantized(model_cls, folder, config, inputs, quantizer, twin, {})
        same = [s for s in result["sites"] if s["path"].removesuffix(" (fixed)") == site["path"]
                and s["function"] == site["function"]]
        tolerance = MAX_OWN_ERROR[quantizer]
        out.update(forward=result["forward"], rel_error=result["rel_error"], sites_after=len(same))
        error = result["rel_error"]
        ok = result["forward"] == "ok" and not same and error is not None and error <= tolerance
        out["verdict"] = "fixed" if ok else "NOT fixed"
    except _Timeout as exc:
        out["verdict"] = f"timeout: {exc}"
    except Exception as exc:  # noqa: BLE001 - the bridge's failure is its row
        out["verdict"] = "error: " + _first_line(exc)
    finally:
        signal.alarm(0)
    return out


def bridges(runs: list[ClassRun], sites: list[Site], findings: list[dict], jobs: int) -> list[dict]:
    """One re-run per run-time site that a safe fix rewrites and quantizer that hit it (its first class)."""
    by_type = {r.model_class: r.model_type for r in runs}
    tasks = []
    for site in sites:
        finding = match(asdict(site), findings)
        if finding is None or not finding.get("edits") or finding.get("applicability") != "safe":
            continue
        for quantizer in site.quantizers:
            tasks.append((by_type[site.classes[0]], site.classes[0], quantizer, asdict(site), finding))
    if not tasks:
        return []
    context = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context, initializer=_worker_init) as pool:
        return list(pool.map(run_bridge, *zip(*tasks)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--classes", type=int, default=0, help="run only the first N model types (0: all)")
    parser.add_argument("--share", action="store_true", help="the CI share: " + ", ".join(SHARE))
    parser.add_argument("--only", default="", help="comma-separated class names to run")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--quanto", action="store_true", help="also optimum-quanto int8")
    parser.add_argument("--json", type=Path, help="write every row and site as JSON")
    parser.add_argument("--markdown", type=Path, help="write the tables as markdown")
    parser.add_argument("--save", action="store_true",
                        help="write benchmarks/accuracy/oracle-transformers-5.23.0.{json,md}")
    parser.add_argument("--timeout", type=int, default=TIMEOUT_S, help=f"seconds per class (default {TIMEOUT_S})")
    parser.add_argument("--from", dest="from_json", type=Path,
                        help="no sweep: re-run the bridge and rewrite the tables from a saved --json")
    parser.add_argument("--keep-bridges", action="store_true", help="with --from: reuse its bridge rows too")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)

    from oracle_report import report  # scripts/oracle_report.py: the tables

    classes = model_classes()
    wanted = set(SHARE) if args.share else {c for c in args.only.split(",") if c}
    if wanted:
        every = all_classes()
        unknown = wanted - {c for _t, c in every}
        if unknown:
            print(f"oracle_sweep: not a transformers model class: {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        classes = sorted({(t, c) for t, c in every if c in wanted}, key=lambda pair: pair[1])
        classes = list({c: (t, c) for t, c in classes}.values())  # one model type per class
    if args.classes:
        classes = classes[:args.classes]
    quantizers = QUANTIZERS + (("quanto-int8",) if args.quanto else ())
    globals()["TIMEOUT_S"] = args.timeout  # read by the forked workers
    start = time.monotonic()
    from dtype_lint import releases

    tree = releases.release_tree(*RELEASE)
    findings = static_findings(tree)
    watch_lines = lines_to_watch(findings)
    if args.from_json:
        saved = json.loads(args.from_json.read_text(encoding="utf-8"))
        runs = [ClassRun(**r) for r in saved["runs"]]
        quantizers, seconds = tuple(saved["quantizers"]), saved["seconds"]
    else:
        runs = sweep(classes, quantizers, args.jobs, progress=not args.quiet, watch_lines=watch_lines)
    sites = merge_sites(runs)
    if args.from_json and args.keep_bridges:
        bridge_rows = saved.get("bridges", [])
    else:
        bridge_rows = bridges(runs, sites, findings, args.jobs)
    if not args.from_json:
        seconds = time.monotonic() - start
    data = {"release": "-".join(RELEASE), "quantizers": list(quantizers), "seconds": round(seconds, 1),
            "jobs": args.jobs, "runs": [asdict(r) for r in runs], "sites": [asdict(s) for s in sites],
            "findings": [{k: f.get(k) for k in ("code", "relpath", "line", "end_line", "scope", "expression",
                                                 "applicability")} for f in findings],
            "differing_files": differing_files(tree, {f["relpath"] for f in findings} | {s.path for s in sites}),
            "bridges": bridge_rows}
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
