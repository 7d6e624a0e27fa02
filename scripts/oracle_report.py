"""The oracle sweep's tables (scripts/oracle_sweep.py writes the data; this writes the markdown).

The judgments are people's, recorded here by site so that a re-run keeps them and a new site
shows up as not yet judged: `MISS_LIMITS` names the known limit (docs/quantizability.md "Known
limits") each run-time site `check` misses falls under, `FALSE_JUDGMENTS` says of each static
finding that ran under a quantizer without a run-time report whether it is a false positive.
"""

from __future__ import annotations

from collections import Counter

# (file, line) of a run-time site `check` does not report -> the known limit it falls under.
MISS_LIMITS: dict[tuple[str, int], str] = {}
# (file, line) of a finding that ran under a quantizer without a run-time site -> the judgment.
_KEPT_FP32 = ("not FALSE: bitsandbytes (and every transformers quantizer that reads the model's "
              "`_keep_in_fp32_modules = [\"indexer.weights_proj\"]`) keeps this layer a float `nn.Linear`, so the "
              "cast is harmless here; GPTQ's and HQQ's quantizers do not read that list, and the finding names "
              "them (absent `.weight`). dtype-lint does not read `_keep_in_fp32_modules` (a known limit)")
FALSE_JUDGMENTS: dict[tuple[str, int], str] = {
    ("transformers/models/axk2/modeling_axk2.py", 267): _KEPT_FP32,
    ("transformers/models/deepseek_v32/modeling_deepseek_v32.py", 231): _KEPT_FP32,
    ("transformers/models/glm_moe_dsa/modeling_glm_moe_dsa.py", 232): _KEPT_FP32,
    ("transformers/models/mistral_large4/modeling_mistral_large4.py", 264): _KEPT_FP32,
    ("transformers/models/pocket_tts/modeling_pocket_tts.py", 625): (
        "not FALSE: `audio_latent_proj` is the model's last registered parameter, which transformers' default "
        "skip (`get_keys_to_not_convert`) keeps in float when the quantization config names no skip modules; "
        "with `llm_int8_skip_modules` set, or under GPTQ/HQQ, it is quantized and the cast breaks"),
}
# A forward that crashed under a quantizer with no run-time site: (error text, quantizer or "") -> why.
CRASH_CAUSES: list[tuple[str, str, str]] = [
    ("must match the size of tensor b", "bnb-8bit",
     "bitsandbytes 8-bit on CPU: its int8 row quantization (`backends/default/ops.py`) fails on a linear's "
     "input of more than 3 dimensions; no cast on the way (not this bug)"),
    ("expected to be in range of [-1, 0], but got 1", "bnb-8bit",
     "bitsandbytes 8-bit on CPU: its int8 row quantization (`backends/default/ops.py`) fails on a 1-D linear "
     "input; no cast on the way (not this bug)"),
    ("expecting query weights shape", "",
     "the model passes `q_proj.weight` itself to `F.multi_head_attention_forward`: a packed weight used as a "
     "matrix, not a dtype cast (no DTL rule's shape; DTL003, opt-in, asks about `.weight` reads)"),
    ("Expected size for first two dimensions of batch2", "",
     "the slow path multiplies `self.dt_proj.weight @ ...` (modeling_mamba.py 438): a packed weight used as a "
     "matrix, not a dtype cast"),
    ("expected scalar type Float but found Char", "",
     "the slow path multiplies `self.dt_proj.weight @ ...` (modeling_mamba.py 438): a packed weight used as a "
     "matrix, not a dtype cast"),
]


def crash_cause(error: str, quantizer: str) -> str:
    return next((why for text, only, why in CRASH_CAUSES if text in error and only in ("", quantizer)), NOT_JUDGED)
NOT_JUDGED = "NOT YET JUDGED"
_TRIED = "one per model type of the auto mappings, and the pre-training class where it is another"


def _pct(numerator: int, denominator: int) -> str:
    return f"{100.0 * numerator / denominator:.1f}%" if denominator else "n/a (no run-time site)"


def _matches(site: dict, findings: list[dict]) -> dict | None:
    return next((f for f in findings if f["relpath"] == site["path"]
                 and f["line"] <= site["line"] <= (f.get("end_line") or f["line"])), None)


def failure_reason(run: dict) -> str:
    """A short class of why a model could not be built or run unquantized."""
    error = run["error"]
    if error.startswith("timeout"):
        return "timeout (per class)"
    if error.startswith(("ImportError", "ModuleNotFoundError")):
        return "needs a package the `hf` extra does not install (PIL, timm, ...)"
    if error.startswith("ValueError: still ") and "parameters after shrinking" in error:
        return "still too large after shrinking (sizes under names the shrinker does not know)"
    if "missing" in error and "required positional argument" in error:
        return "its `__init__` has required arguments (no defaults to shrink: sub-models, wrappers)"
    if error.startswith("StrictDataclassClassValidationError") or run["stage"] == "config":
        return "its config rejects the shrunk sizes (a relation between sizes the shrinker does not keep)"
    if run["stage"] == "build":
        return "its model rejects the shrunk config (a size relation the config does not check)"
    if run["stage"] == "inputs":
        return "a main input the sweep has no dummy for"
    if run["stage"] == "twin":
        return "its forward needs more than the main input (a processor's inputs), or the shrunk sizes break it"
    return f"stopped at {run['stage']}"


def report(data: dict) -> str:
    runs, sites, findings = data["runs"], data["sites"], data["findings"]
    quantizers = data["quantizers"]
    built = [r for r in runs if r["built"]]
    lines = [f"# Run-time oracle: {data['release']}", "",
             f"{len(runs)} model classes tried ({data.get('tried', _TRIED)}), **{len(built)} built** "
             f"and run unquantized; quantizers: {', '.join(quantizers)}; {data['seconds']} s with {data['jobs']} "
             f"workers. Generated by `{data.get('script', 'scripts/oracle_sweep.py')}` "
             "(benchmarks/accuracy/README.md).", ""]
    if data.get("differing_files"):
        differing = ", ".join(data["differing_files"])
        lines += [f"Installed files that differ from the release tree (not matched): {differing}", ""]

    # Recall.
    matched = [s for s in sites if _matches(s, findings)]
    lines += ["## Static recall against the run-time oracle", "",
              "| run-time sites | reported by `check` | recall |", "|---|---|---|",
              f"| {len(sites)} | {len(matched)} | {_pct(len(matched), len(sites))} |", ""]
    by_kind = Counter(s["kind"] for s in sites)
    if by_kind:
        lines += ["| kind | sites | reported |", "|---|---|---|"]
        for kind, count in sorted(by_kind.items()):
            lines.append(f"| {kind} | {count} | {sum(1 for s in matched if s['kind'] == kind)} |")
        lines.append("")

    # Per-quantizer run outcomes.
    lines += ["## Quantized runs", "",
              "| quantizer | loaded | forward ran | forward crashed | generate ran | with a site |",
              "|---|---|---|---|---|---|"]
    for quantizer in quantizers:
        results = [r["runs"][quantizer] for r in built if quantizer in r["runs"]]
        loaded = [x for x in results if not x["forward"].startswith("load failed")]
        ok = sum(1 for x in loaded if x["forward"] == "ok")
        lines.append(f"| {quantizer} | {len(loaded)} | {ok} | {len(loaded) - ok} | "
                     f"{sum(1 for x in loaded if x['generate'] == 'ok')} | {sum(1 for x in loaded if x['sites'])} |")
    lines.append("")

    # Each site.
    lines += ["## Run-time sites", "", "| site | function | kind | layer | quantizers | classes | `check` |",
              "|---|---|---|---|---|---|---|"]
    for site in sites:
        finding = _matches(site, findings)
        verdict = (f"{finding['code']} (line {finding['line']})" if finding else
                   "MISS: " + MISS_LIMITS.get((site["path"], site["line"]), NOT_JUDGED))
        more = len(site["classes"]) - 3
        classes = ", ".join(site["classes"][:3]) + (f" (+{more})" if more > 0 else "")
        lines.append(f"| `{site['path']}:{site['line']}` | `{site['function']}` | {site['kind']} | "
                     f"{site['layer_class']} ({site['storage']}) | {', '.join(site['quantizers'])} | {classes} | "
                     f"{verdict} |")
    lines.append("")

    # Findings that ran without a run-time site.
    site_keys = {(s["path"], s["line"], q) for s in sites for q in s["quantizers"]}
    silent: dict[tuple[str, int], dict] = {}
    for run in built:
        for quantizer, result in run["runs"].items():
            for path, line in result.get("executed", []):
                finding = _matches({"path": path, "line": line}, findings)
                if finding is None:
                    continue
                span = range(finding["line"], (finding.get("end_line") or finding["line"]) + 1)
                if any((path, number, quantizer) in site_keys for number in span):
                    continue
                key = (finding["relpath"], finding["line"])
                entry = silent.setdefault(key, {"finding": finding, "classes": set(), "quantizers": set()})
                entry["classes"].add(run["model_class"])
                entry["quantizers"].add(quantizer)
    lines += ["## Static findings that ran without a run-time site (candidates for FALSE)", ""]
    if silent:
        lines += ["| finding | expression | ran under | classes | judgment |", "|---|---|---|---|---|"]
        for key, entry in sorted(silent.items()):
            finding = entry["finding"]
            lines.append(f"| `{key[0]}:{key[1]}` {finding['code']} | `{finding['expression']}` | "
                         f"{', '.join(sorted(entry['quantizers']))} | {', '.join(sorted(entry['classes'])[:3])} | "
                         f"{FALSE_JUDGMENTS.get(key, NOT_JUDGED)} |")
    else:
        lines.append("None.")
    lines.append("")

    # Crashes the guard saw nothing in.
    crashes = [(run["model_class"], quantizer, result["forward"]) for run in built
               for quantizer, result in run["runs"].items()
               if result["forward"] not in ("ok", "") and not result["forward"].startswith("load failed")
               and not result["sites"]]
    lines += ["## Forwards that crashed under a quantizer without a run-time site", "",
              "Each is a possible miss of the oracle itself; each is judged.", ""]
    if crashes:
        lines += ["| class | quantizer | error | judgment |", "|---|---|---|---|"]
        for class_name, quantizer, error in sorted(crashes):
            shown = error.replace("|", "\\|")[:110]
            lines.append(f"| {class_name} | {quantizer} | {shown} | {crash_cause(error, quantizer)} |")
    else:
        lines.append("None.")
    lines.append("")

    # The bridge.
    lines += ["## The bridge to fixes", "",
              "Each run-time site whose finding has a safe fix, re-run with the fix applied (the site's module "
              "loaded with the finding's edits and the HF helper), quantized, under the guard: no site there, "
              "and the output within the quantizer's own error of the unquantized twin.", ""]
    if data.get("bridges"):
        lines += ["| site | class | quantizer | forward | rel. error | sites after | verdict |",
                  "|---|---|---|---|---|---|---|"]
        for row in data["bridges"]:
            error = row.get("rel_error")
            shown = "-" if error is None else f"{error:.3g}"
            verdict = row["verdict"]
            if verdict == "NOT fixed" and row.get("sites_after") == 0 and row.get("forward") != "ok":
                cause = crash_cause(row["forward"], row["quantizer"])
                verdict = f"no site after the fix; the forward still fails: {cause}"
            lines.append(f"| `{row['path']}:{row['line']}` | {row['class']} | {row['quantizer']} | "
                         f"{row.get('forward', '-')} | {shown} | {row.get('sites_after', '-')} | {verdict} |")
    else:
        lines.append("No run-time site with a safe fix in this run.")
    lines.append("")

    # Why the rest could not be built.
    failed = [r for r in runs if not r["built"]]
    lines += ["## Classes that could not be built", "",
              f"{len(failed)} of {len(runs)}; by reason:", "", "| reason | classes |", "|---|---|"]
    for reason, count in Counter(failure_reason(r) for r in failed).most_common():
        lines.append(f"| {reason} | {count} |")
    lines += ["", "<details><summary>Each class, with the first line of its error</summary>", "",
              "| class | stage | error |", "|---|---|---|"]
    for run in failed:
        error = run["error"].replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {run['model_class']} | {run['stage']} | {error} |")
    lines += ["", "</details>", ""]
    return "\n".join(lines)
