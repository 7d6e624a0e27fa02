"""One text that is not (or not yet) what is on disk, judged in its project: what `check -` (stdin
with `--stdin-filename`) and the language server (`dtype-lint server`, an editor's unsaved buffer)
analyse and fix.

The class index is the project's, as a check of the named file would build it (the file's
project, per-file ignores, excludes and the helper settings all come from the configuration found
for `filename`); only the text of `filename` itself is replaced. A name that exists nowhere on
disk is judged alone, as the API's `check_text` does.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from dtype_lint.core.config import Config
from dtype_lint.core.findings import Finding
from dtype_lint.core.records import record

if TYPE_CHECKING:
    from dtype_lint.analysis.index.class_index import QuantizableLayerIndex


@record
class Buffer:
    """The analysis context of one file name: reused for every version of its text."""

    path: str  # as findings name it (cwd-relative when inside the cwd)
    config: Config
    index: QuantizableLayerIndex | None  # None: no such file on disk (the text is judged alone)
    module: str
    excluded: bool = False  # `exclude` matches the name (the server and --force-exclude skip it)

    def _analyze(self, text: str) -> list[Finding]:
        from dtype_lint.run.file_analysis import analyze
        from dtype_lint.run.pipeline import single_file_index

        if self.index is None:  # no such file on disk: the text alone, its own classes indexed
            index = single_file_index(text, self.path, self.config)
            found = analyze(self.path, text, index, self.config, "", load_file=_no_file)
        else:
            found = analyze(self.path, text, self.index, self.config, self.module, load_file=self._load)
        return [f for f in found if self.config.enabled(f.code, f.path)]

    def findings(self, text: str) -> list[Finding]:
        return [] if self.excluded else self._analyze(text)

    def fix(self, text: str, unsafe: bool = False, only=None):
        """The FixOutcome of fixing `text` (its `.text` is the fixed source). `only(finding)`:
        fix just the findings it selects (an editor's quick-fix for one diagnostic)."""
        from dtype_lint.core.project_style import line_length_for
        from dtype_lint.fix.fixer import fix_text

        length = line_length_for(self.config)
        if only is None:
            return fix_text(self.path, text, self._analyze, unsafe, line_length=length)
        outcome = fix_text(self.path, text, lambda t: [f for f in self._analyze(t) if only(f)], unsafe,
                           line_length=length)
        outcome.remaining = self._analyze(outcome.text) if outcome.changed else self._analyze(text)
        return outcome

    def helper_to_create(self, applied: list[Finding]):
        """The HelperLocation the fixes in `applied` import from, when it does not exist yet
        (so that whoever applies them creates it too); else None."""
        from dtype_lint.ecosystems.registry import helper_of
        from dtype_lint.fix.helper_home import choose_helper
        from dtype_lint.fix.helper_template import HelperError

        needing = [f for f in applied if f.fix is not None and f.fix.imports]
        if not needing:
            return None
        # A fix through an ecosystem's own helper (the HF helper) creates that helper where
        # `--fix` would, never the shared one.
        ecosystem_helper = helper_of(needing[0])
        if ecosystem_helper is not None:
            location = ecosystem_helper.helper_location(needing[0], self.index, self.config.root)
            return None if location.exists else location
        try:
            location = choose_helper(self.config, [self.path], needing).location
        except HelperError:
            return None
        return location if location is not None and not location.exists else None

    def _load(self, path: str) -> str | None:
        from dtype_lint.run.file_analysis import safe_read

        return None if os.path.realpath(path) == os.path.realpath(self.path) else safe_read(path)


def open_buffer(filename: str, config: Config, use_cache: bool = True) -> Buffer:
    """The context `filename` is judged in (see the module docstring). Raises UserError."""
    from dtype_lint.core.discovery import module_name, path_excluded
    from dtype_lint.run.pipeline import RunOptions, run

    path = display_path(filename)
    rel = os.path.relpath(os.path.abspath(filename), config.root)
    excluded = not rel.startswith("..") and path_excluded(filename, tuple(config.exclude), config.root)
    if os.path.isfile(filename):
        result = run(config, RunOptions(paths=[filename], use_cache=use_cache, jobs=1))
        return Buffer(path, result.config, result.index, module_name(filename, config.root), excluded)
    return Buffer(path, config, None, "", excluded)


def _no_file(_path: str) -> None:
    return None


def display_path(filename: str) -> str:
    """A file's name as every output shows it: relative to the cwd when below it (as Ruff)."""
    absolute = os.path.abspath(filename)
    rel = os.path.relpath(absolute)
    return absolute if rel.startswith("..") else rel
