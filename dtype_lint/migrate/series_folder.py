"""The folder `migrate --series DIR` writes into: never over a file the user has.

`--series docs` once overwrote a project's own `docs/README.md` and `docs/PR.md`, and the
printed `git am docs/*.patch` picked up the user's own patches in that folder. So:

- DIR may be new, empty, or a folder this tool made. A tool-made folder is recognised by its
  manifest (MANIFEST, written last), which records each file the series wrote and its SHA-256.
- In a folder holding other files, the series writes only names that are free, or that its
  manifest lists with the bytes it wrote (an earlier series, unedited since). A name the user
  has (or edited after the tool wrote it) refuses the whole series before anything is written:
  one line, exit 2.
- Patches an earlier series wrote and this one does not (unedited, listed in the manifest) are
  removed: the folder never holds a stale patch of the tool's that `git am` would apply.
- What to apply is named exactly (`apply_command`): the patch files of this run, in order,
  never a glob that takes in the user's files.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import field
from pathlib import Path
from typing import Iterable

from dtype_lint.core import digests
from dtype_lint.core.records import record

# Hidden, and not a *.patch: neither `ls` nor `git am DIR/*.patch` shows it.
MANIFEST = ".dtype-lint-series.json"
_KIND = "dtype-lint migrate --series"
# The descriptions every series writes beside its patches.
FIXED_NAMES = ("PR.md", "README.md")


def _digest(data: bytes) -> str:
    return digests.sha256(data).hexdigest()


def _read_manifest(folder: Path) -> dict[str, str] | None:
    """name -> SHA-256 of the files an earlier series wrote here, or None when `folder` is not
    tool-made (no manifest, or one this tool did not write)."""
    try:
        doc = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    files = doc.get("files") if isinstance(doc, dict) and doc.get("kind") == _KIND else None
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        return None
    # Only plain names: a manifest naming `../x` must not make the tool remove or overwrite it.
    return {name: sha for name, sha in files.items() if name == os.path.basename(name) and name not in ("", ".", "..")}


def _unedited(path: Path, recorded: str | None) -> bool:
    """`path` is a regular file holding exactly the bytes the tool recorded for it."""
    if recorded is None or path.is_symlink() or not path.is_file():
        return False
    try:
        return _digest(path.read_bytes()) == recorded
    except OSError:
        return False


@record
class SeriesFolder:
    """DIR as the series found it: which of its files the tool may replace or remove."""

    path: Path
    shown: str  # DIR as the user typed it, for messages
    earlier: dict[str, str] = field(default_factory=dict)  # the manifest's records (empty: none)

    @classmethod
    def open(cls, shown: str) -> "SeriesFolder":
        path = Path(shown)
        earlier = _read_manifest(path) if path.is_dir() else None
        return cls(path, shown, earlier or {})

    def problem(self, names: Iterable[str]) -> str | None:
        """Why writing `names` into the folder would overwrite a file the user has, or None."""
        for name in [*names, MANIFEST]:
            target = self.path / name
            if not (target.exists() or target.is_symlink()):
                continue
            if name == MANIFEST and self.earlier:
                continue  # the tool's own manifest, rewritten last
            if _unedited(target, self.earlier.get(name)):
                continue
            shown = os.path.join(self.shown, name)
            why = ("was edited after dtype-lint wrote it" if name in self.earlier
                   else "is not a file an earlier series wrote")
            return (f"--series {self.shown}: {shown} exists and {why}; nothing written "
                    "(name a new or empty folder, or one an earlier --series run made)")
        return None

    def stale(self, names: Iterable[str]) -> list[Path]:
        """The earlier series' files, unedited, that this series does not write again."""
        keep = set(names)
        return [self.path / name for name, sha in sorted(self.earlier.items())
                if name not in keep and _unedited(self.path / name, sha)]

    def manifest(self, written: dict[str, bytes]) -> bytes:
        doc = {"kind": _KIND, "note": "dtype-lint wrote the files below; a later --series run may replace them",
               "files": {name: _digest(data) for name, data in sorted(written.items())}}
        return (json.dumps(doc, indent=2) + "\n").encode("utf-8")


def apply_command(files: Iterable[str | os.PathLike]) -> str:
    """`git am` on exactly these patch files, in order, quoted for a POSIX shell."""
    return "git am " + " ".join(shlex.quote(os.fspath(f)) for f in files)
