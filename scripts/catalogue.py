"""Regenerate (or --check) the shipped storage-model catalogue of an engine release.

    python scripts/catalogue.py --dist vllm --version 0.33.0  # write ecosystems/vllm/catalogue-vllm-0.33.0.json
    python scripts/catalogue.py --dist vllm --version 0.33.0 --check  # exit 1 if the shipped file differs

The release is fetched once with `dtype_lint.releases` (pip download --no-deps, .py files only)
and its storage model computed by the tool itself (dtype_lint.run.catalogue_build): nothing
in the catalogue is typed by hand.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dtype_lint.releases import release_tree  # noqa: E402 - after the sys.path set-up
from dtype_lint.run.catalogue_build import compute  # noqa: E402 - after the sys.path set-up
from dtype_lint.run.catalogue_data import dumps  # noqa: E402 - after the sys.path set-up


def target(dist: str, version: str) -> Path:
    return REPO / "dtype_lint" / "ecosystems" / dist / f"catalogue-{dist}-{version}.json"


def fresh(dist: str, version: str) -> str:
    return dumps(compute(release_tree(dist, version), dist, version))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dist", default="vllm")
    ap.add_argument("--version", default="0.33.0")
    ap.add_argument("--check", action="store_true", help="exit 1 if the shipped catalogue differs from a fresh one")
    args = ap.parse_args(argv)
    text = fresh(args.dist, args.version)
    path = target(args.dist, args.version)
    if args.check:
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            print(f"{path.relative_to(REPO)} is stale: "
                  f"run scripts/catalogue.py --dist {args.dist} --version {args.version}")
            return 1
        return 0
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
