"""The run-time oracle for vLLM-style code on CPU (issue #38): vLLM's MLA prefill functions, as
`dtype-lint verify` extracts them from the release trees (kernels_ref/harness/upstream_source.py)
and runs them on the reference kernels with a stub `kv_b_proj` of every storage
(kernels_ref/harness/backends.py), run again under `dtype_lint.guard.DtypeGuard` for vLLM 0.27.1
(before the fix) and 0.28.0 (after), each site matched against `dtype-lint check`'s
zero-configuration findings on the same release's `mla_attention.py`.

The extracted code is compiled per unit with the file name `<LABEL:ORIGIN:LINE NAME>` (LINE: the
unit's first line in the release), so a guard site's frame line maps back to the release's line:
LINE + frame line - 1.

Usage (docs in benchmarks/accuracy/README.md):
    .venv/bin/python scripts/oracle_vllm.py --save        # benchmarks/accuracy/oracle-vllm-mla.{json,md}
    .venv/bin/python scripts/oracle_vllm.py --backends marlin,int8
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import oracle_sweep  # noqa: E402 - scripts/ is not a package

RELEASES = ("0.27.1", "0.28.0")
PATHS = ("main", "cp")  # one rank; rank 0 of two decode-context-parallel ranks
SCENARIO = "A"
ACCURACY = oracle_sweep.ACCURACY
_UNIT_NAME = re.compile(r"^<(?P<label>[^:>]+):(?P<origin>[^:>]+):(?P<line>\d+) (?P<name>[^>]+)>$")
# (release, file, line) of a run-time site `check` does not report -> the known limit it falls under.
MISS_LIMITS: dict[tuple[str, str, int], str] = {
    (version, "vllm/model_executor/layers/attention/mla_attention.py", line): (
        "known limit \"Value flow is one step deep\" (docs/quantizability.md): the cast's dtype is the return "
        "value of `_get_kv_b_proj_input_dtype(self.kv_b_proj, ...)`, a module-level function the layer is "
        "passed to, which returns `weight.dtype` for every storage it does not list (int32 and uint8 are "
        "listed, W8A8's int8 is not); a dtype that comes back as another call's return value is not followed. "
        "A real bug in 0.28.0 (docs/kernels.md: 0.28.0 casts the int8 row's latent to int8)")
    for version, line in (("0.28.0", 2650), ("0.28.0", 2788))
}

_FP8_PREFILL = ("not a bug (a false site of the guard, judged): the fp8 prefill's own cast of `kv_nope`/`k_pe` to "
                "the query's fp8 dtype (`prefill_metadata.q_data_type`), which vLLM means (the fp8 rows of `verify` "
                "pass). fp8 is one dtype object: the guard ties the cast to the `kv_b_proj.weight.dtype` read "
                "earlier in the same function (docs/guard.md, \"What it cannot tell apart\"); `check` rightly "
                "stays silent")
# (release, file, line) of a run-time site that is not the bug -> why (kept out of the recall).
GUARD_FALSE: dict[tuple[str, str, int], str] = {
    (version, "vllm/model_executor/layers/attention/mla_attention.py", line): _FP8_PREFILL
    for version, line in (("0.27.1", 2382), ("0.27.1", 2540), ("0.27.1", 2541),
                          ("0.28.0", 2659), ("0.28.0", 2794), ("0.28.0", 2795))
}


def release_site(site) -> tuple[str, int] | None:
    """(file in the release, line in the release) of a guard site in extracted code, else None."""
    found = _UNIT_NAME.match(site.path)
    if found is None:
        return None
    return found["origin"], int(found["line"]) + site.line - 1


def run_release(label: str, backend_ids: list[str], compiled) -> list[dict]:
    """Each (storage, path) of `label`'s extracted functions under the guard: outcome and sites."""
    from dtype_lint.guard import DtypeGuard
    from dtype_lint.kernels_ref.harness import matrix
    from dtype_lint.kernels_ref.harness import upstream_runtime as runtime
    from dtype_lint.kernels_ref.harness.backends import BACKENDS

    scenario_run = matrix.ScenarioRun(SCENARIO, 0, "cpu")
    rows = []
    for backend_id in backend_ids:
        backend = BACKENDS[backend_id]
        if backend.shape_problem(scenario_run.scenario):
            continue
        layer = scenario_run.layer(backend)
        for path in PATHS:
            inputs = scenario_run.upstream_inputs(backend, layer, path)
            with DtypeGuard(model=layer, strict=False) as guard:
                try:
                    runtime.run(compiled, path, scenario_run.scenario, inputs)
                    outcome = "ok"
                except Exception as exc:  # noqa: BLE001 - a crash is the row's result
                    outcome = oracle_sweep._first_line(exc)
            sites = []
            for site in guard.sites:
                mapped = release_site(site)
                file, line = mapped if mapped else (site.path, site.line)
                sites.append({"path": file, "line": line, "function": site.function, "kind": site.kind,
                              "storage": str(site.storage), "layer_class": site.layer_class})
            rows.append({"release": label, "backend": backend_id, "storage": backend.layer_kind,
                         "fp8_prefill": backend.fp8_prefill, "path": path, "outcome": outcome, "sites": sites})
    return rows


def sweep(backend_ids: list[str]) -> dict:
    """Both releases: the extracted functions' run-time sites and `check`'s findings on each tree."""
    from dtype_lint import releases
    from dtype_lint.kernels_ref.harness import upstream_runtime as runtime
    from dtype_lint.kernels_ref.harness import variants
    from dtype_lint.kernels_ref.harness.upstream_source import MLA_MODULE

    start = time.monotonic()
    extracted = variants.upstream_sources().releases
    rows, findings = [], {}
    for label in RELEASES:
        rows += run_release(label, backend_ids, runtime.CompiledRelease(extracted[label]))
        found = oracle_sweep.static_findings(releases.release_tree("vllm", label), [MLA_MODULE])
        findings[label] = [{k: f.get(k) for k in ("code", "relpath", "line", "end_line", "scope", "expression",
                                                   "applicability")} for f in found]
    return {"releases": list(RELEASES), "scenario": SCENARIO, "rows": rows, "findings": findings,
            "seconds": round(time.monotonic() - start, 1)}




def sites_of(data: dict, label: str) -> list[dict]:
    """The distinct (file, line) run-time sites of one release, with the storages that hit them."""
    merged: dict[tuple[str, int], dict] = {}
    for row in data["rows"]:
        if row["release"] != label:
            continue
        for site in row["sites"]:
            entry = merged.setdefault((site["path"], site["line"]), dict(site, storages=[], paths=[]))
            for key, value in (("storages", f"{row['backend']} ({site['storage']})"), ("paths", row["path"])):
                if value not in entry[key]:
                    entry[key].append(value)
    return sorted(merged.values(), key=lambda s: (s["path"], s["line"]))


def report(data: dict) -> str:
    lines = ["# Run-time oracle: vLLM's MLA prefill (extracted functions, CPU)", "",
             f"vLLM {' and '.join(data['releases'])}: `_compute_prefill_context` (main) and "
             "`_context_parallel_compute_prefill_context` (cp, rank 0 of 2) as `dtype-lint verify` extracts and runs "
             f"them, scenario {data['scenario']}, a stub `kv_b_proj` of each storage, under the run-time guard; "
             f"{data['seconds']} s. Generated by `scripts/oracle_vllm.py` (benchmarks/accuracy/README.md).", "",
             "## Static recall against the run-time oracle", "",
             "| release | run-time sites | reported by `check` | recall | `check` findings | findings without a site "
             "(candidates for FALSE) |",
             "|---|---|---|---|---|---|"]
    for label in data["releases"]:
        every, findings = sites_of(data, label), data["findings"][label]
        sites = [s for s in every if (label, s["path"], s["line"]) not in GUARD_FALSE]
        matched = [s for s in sites if oracle_sweep.match(s, findings)]
        unmatched_findings = [f for f in findings if not any(oracle_sweep.match(s, [f]) for s in sites)]
        recall = f"{100.0 * len(matched) / len(sites):.1f}%" if sites else "n/a (no run-time site)"
        lines.append(f"| {label} | {len(sites)} (+{len(every) - len(sites)} judged not the bug) | {len(matched)} | "
                     f"{recall} | {len(findings)} | {len(unmatched_findings)} |")
    lines += ["", "## Run-time sites", "", "| release | site | function | kind | storages | paths | `check` |",
              "|---|---|---|---|---|---|---|"]
    for label in data["releases"]:
        for site in sites_of(data, label):
            finding = oracle_sweep.match(site, data["findings"][label])
            key = (label, site["path"], site["line"])
            verdict = (f"{finding['code']} (line {finding['line']})" if finding else
                       f"silent; {GUARD_FALSE[key]}" if key in GUARD_FALSE else
                       "MISS: " + MISS_LIMITS.get(key, "NOT YET JUDGED"))
            lines.append(f"| {label} | `{site['path']}:{site['line']}` | `{site['function']}` | {site['kind']} | "
                         f"{', '.join(site['storages'])} | {', '.join(site['paths'])} | {verdict} |")
    lines += ["", "## Each run", "", "| release | storage | fp8 prefill | path | outcome | sites |",
              "|---|---|---|---|---|---|"]
    for row in data["rows"]:
        shown = ", ".join(f"{s['line']} ({s['kind']})" for s in row["sites"]) or "-"
        outcome = row["outcome"].replace("|", "\\|")[:100]
        prefill = "yes" if row["fp8_prefill"] else "no"
        lines.append(f"| {row['release']} | {row['backend']}: {row['storage']} | {prefill} "
                     f"| {row['path']} | {outcome} | {shown} |")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from dtype_lint.kernels_ref.harness.backends import BACKENDS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="", help="comma-separated storage rows (default: every row)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--save", action="store_true", help="write benchmarks/accuracy/oracle-vllm-mla.{json,md}")
    args = parser.parse_args(argv)
    backend_ids = [b for b in args.backends.split(",") if b] or list(BACKENDS)
    unknown = sorted(set(backend_ids) - set(BACKENDS))
    if unknown:
        print(f"oracle_vllm: unknown storage row(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    data = sweep(backend_ids)
    text = report(data)
    if args.save:
        args.json = args.json or ACCURACY / "oracle-vllm-mla.json"
        args.markdown = args.markdown or ACCURACY / "oracle-vllm-mla.md"
    if args.json:
        args.json.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    if args.markdown:
        args.markdown.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
