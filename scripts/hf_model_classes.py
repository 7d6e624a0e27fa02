"""Regenerate (or --check) the shipped lists of transformers' and diffusers' model class names.

    python scripts/hf_model_classes.py          # write dtype_lint/ecosystems/hf/model-classes-*.txt
                                                # and linear-attributes-transformers-*.txt
    python scripts/hf_model_classes.py --check  # exit 1 if a shipped list differs from a fresh one

Each release is fetched once with `dtype_lint.releases` (pip download --no-deps, .py files only);
the names (and the `nn.Linear` attributes of transformers' other modeling classes) are computed
from its code (dtype_lint/ecosystems/hf/model_classes.py), never typed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dtype_lint.ecosystems.hf.model_classes import (  # noqa: E402
    PINNED,
    build_catalogue,
    build_linear_attributes,
    catalogue_path,
    linear_attributes_path,
    render,
    render_linear_attributes,
)
from dtype_lint.releases import release_tree  # noqa: E402 - after the sys.path set-up


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a shipped list differs from a fresh one")
    args = ap.parse_args(argv)
    stale = 0
    outputs = []
    for library, version in PINNED.items():
        tree = release_tree(library, version)
        outputs.append((catalogue_path(library), render(library, version, build_catalogue(tree, library))))
        if library == "transformers":
            outputs.append((linear_attributes_path(library),
                            render_linear_attributes(library, version, build_linear_attributes(tree, library))))
    for path, text in outputs:
        if args.check:
            same = path.is_file() and path.read_text(encoding="utf-8") == text
            stale += not same
            print(f"{path.name}: {'fresh' if same else 'STALE'}")
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(REPO)} ({len(text.splitlines()) - 2} names)")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
