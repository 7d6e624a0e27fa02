#!/usr/bin/env python
"""The run-time guard's cost on a forward pass (issue #38: target ≤ 1.5x): the same model's
forward with and without `DtypeGuard(model)` around it, in one process, alternating.

    .venv/bin/python benchmarks/guard_overhead.py            # 7 rounds per row
    .venv/bin/python benchmarks/guard_overhead.py --save     # ... and results/guard/<date>-guard-overhead.{json,md}

Rows: LongT5 encoder-decoders built from configs (seeded, nothing downloaded; the tiny one is
`dtype_lint.ecosystems.hf.verify`'s, the others wider and deeper), unquantized and under bitsandbytes 4-bit on
CPU (the `hf` extra). One guard is around each round's forwards, so the ratio is the steady
cost per forward; entering and leaving a guard (patching, registering the model's packed weights,
restoring: what the pytest plugin adds to each test) is its own column.

The figure is CPU time (`time.process_time`, user + system of this process) per forward, the median
over rounds, because the shared machine's load moves wall time by more than the effect measured;
wall time is recorded too. The ratio is guarded / unguarded of the same row and round. What it
costs is per torch call (a dictionary look-up in a TorchFunctionMode, a wrapped
`Module.__getattr__`), not per FLOP: the smaller the tensors, the larger the ratio.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

# Apart from bench.py's runs: the README's table is read from the latest file of results/ itself.
RESULTS = Path(__file__).resolve().with_name("results") / "guard"
TARGET = 1.5

# (row name, LongT5 config overrides, batch, sequence length, forwards per round)
SIZES = [
    ("tiny (d_model 64, 1+1 layers, 2x8 tokens)", {}, 2, 8, 20),
    ("small (d_model 256, 4+4 layers, 4x64 tokens)", {"d_model": 256, "d_ff": 1024, "num_layers": 4,
                                                       "num_decoder_layers": 4, "num_heads": 8, "d_kv": 32}, 4, 64, 4),
    ("base-width (d_model 512, 2+2 layers, 2x128 tokens)", {"d_model": 512, "d_ff": 2048, "num_layers": 2,
                                                             "num_decoder_layers": 2, "num_heads": 8, "d_kv": 64},
     2, 128, 2),
]
QUANTIZERS = (None, "bnb-4bit")


def build(size: dict, quantizer: str | None, folder: str):
    import torch
    from transformers import LongT5Config, LongT5Model

    from dtype_lint.ecosystems.hf import verify as hf_verify

    base = dict(vocab_size=128, d_model=64, d_kv=16, d_ff=128, num_layers=1, num_decoder_layers=1, num_heads=4,
                decoder_start_token_id=0, pad_token_id=0, encoder_attention_type="local")
    config = LongT5Config(**{**base, **size})
    torch.manual_seed(0)
    LongT5Model(config).save_pretrained(folder)
    options = {"quantization_config": hf_verify.quantization_config(quantizer)} if quantizer else {}
    return LongT5Model.from_pretrained(folder, config=config, **options).eval()


def time_forwards(model, inputs: dict, count: int, guarded: bool) -> tuple[float, float, int]:
    """CPU and wall seconds per forward over `count` forwards (inside one guard when `guarded`),
    and the guard's sites."""
    import contextlib

    import torch

    from dtype_lint.guard import DtypeGuard

    guard = DtypeGuard(model) if guarded else contextlib.nullcontext()
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    with guard, torch.no_grad():
        for _ in range(count):
            model(**inputs)
    figures = (time.process_time() - cpu_start) / count, (time.perf_counter() - wall_start) / count
    return figures + (len(guard.sites) if guarded else 0,)


def enter_exit_seconds(model, times: int = 20) -> float:
    """CPU seconds to enter and leave a guard around nothing (patching and restoring, registering
    the model's packed weights): what the pytest plugin adds to each test besides the forwards."""
    from dtype_lint.guard import DtypeGuard

    start = time.process_time()
    for _ in range(times):
        with DtypeGuard(model):
            pass
    return (time.process_time() - start) / times


def measure(rounds: int, scale: float, quiet: bool) -> list[dict]:
    import torch

    torch.set_num_threads(1)  # one thread: the figures do not depend on how busy the other cores are
    rows = []
    for label, size, batch, length, per_round in SIZES:
        forwards = max(1, round(per_round * scale))
        for quantizer in QUANTIZERS:
            with tempfile.TemporaryDirectory() as folder:
                model = build(size, quantizer, folder)
            ids = torch.randint(0, 128, (batch, length), generator=torch.Generator().manual_seed(1))
            inputs = {"input_ids": ids, "decoder_input_ids": ids}
            time_forwards(model, inputs, 1, True)  # warm-up: caches, the static check of a site's file
            time_forwards(model, inputs, 1, False)
            plain_cpu, guarded_cpu, plain_wall, guarded_wall, ratios = [], [], [], [], []
            sites = 0
            for round_index in range(rounds):
                order = (False, True) if round_index % 2 == 0 else (True, False)
                figures = {}
                for guarded in order:
                    figures[guarded] = time_forwards(model, inputs, forwards, guarded)
                plain_cpu.append(figures[False][0])
                guarded_cpu.append(figures[True][0])
                plain_wall.append(figures[False][1])
                guarded_wall.append(figures[True][1])
                ratios.append(figures[True][0] / figures[False][0])
                sites = figures[True][2]
            row = {"model": f"LongT5 {label}", "quantizer": quantizer or "none", "forwards": forwards,
                   "rounds": rounds, "plain_cpu_ms": statistics.median(plain_cpu) * 1e3,
                   "guarded_cpu_ms": statistics.median(guarded_cpu) * 1e3,
                   "plain_wall_ms": statistics.median(plain_wall) * 1e3,
                   "guarded_wall_ms": statistics.median(guarded_wall) * 1e3,
                   "ratio_cpu": statistics.median(ratios), "enter_exit_ms": enter_exit_seconds(model) * 1e3,
                   "sites": sites, "samples": {"plain_cpu_s": plain_cpu, "guarded_cpu_s": guarded_cpu}}
            rows.append(row)
            if not quiet:
                print(f"{row['model']} [{row['quantizer']}]: {row['plain_cpu_ms']:.2f} ms -> "
                      f"{row['guarded_cpu_ms']:.2f} ms CPU per forward, {row['ratio_cpu']:.2f}x; enter+exit "
                      f"{row['enter_exit_ms']:.2f} ms; {sites} site(s)", file=sys.stderr)
    return rows


def markdown(document: dict) -> str:
    lines = [f"# Guard overhead, {document['date']}", "",
             f"{document['machine']['host']}, {document['machine']['cpus']} CPUs, torch "
             f"{document['machine']['torch']} (one thread), load {document['machine']['load_start']:.1f} -> "
             f"{document['machine']['load_end']:.1f}; median of {document['rounds']} rounds of "
             "forwards (one guard around each round's), CPU time per forward; target ≤ "
             f"{TARGET}x. Entering and leaving a guard: its own column.", "",
             "| model | quantizer | forwards/round | unguarded ms | guarded ms | ratio | met | enter+exit ms | sites |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in document["rows"]:
        met = "yes" if row["ratio_cpu"] <= TARGET else "no"
        lines.append(f"| {row['model']} | {row['quantizer']} | {row['forwards']} | {row['plain_cpu_ms']:.2f} "
                     f"| {row['guarded_cpu_ms']:.2f} | {row['ratio_cpu']:.2f}x | {met} | {row['enter_exit_ms']:.2f} "
                     f"| {row['sites']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply each row's forwards per round")
    parser.add_argument("--save", action="store_true", help="write results/guard/<date>-guard-overhead.{json,md}")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.scale <= 0:
        parser.error("--rounds must be at least 1 and --scale positive")
    import torch

    load_start = os.getloadavg()[0]
    rows = measure(args.rounds, args.scale, args.quiet)
    document = {"version": 1, "date": datetime.date.today().isoformat(), "rounds": args.rounds,
                "scale": args.scale, "target": TARGET,
                "machine": {"host": socket.gethostname(), "cpus": os.cpu_count(), "python": platform.python_version(),
                            "torch": torch.__version__, "load_start": load_start, "load_end": os.getloadavg()[0]},
                "rows": rows}
    text = markdown(document)
    print(text)
    if args.save:
        RESULTS.mkdir(exist_ok=True)
        stem = RESULTS / f"{document['date']}-guard-overhead"
        stem.with_suffix(".json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        stem.with_suffix(".md").write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
