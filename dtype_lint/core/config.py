"""`[tool.dtype-lint]` in the nearest pyproject.toml, merged over a preset and under CLI flags."""

from __future__ import annotations

import json
import keyword
import os
import re
from dataclasses import field, fields
from functools import cache
from pathlib import Path, PurePosixPath, PureWindowsPath

from dtype_lint.core import digests
from dtype_lint.core.records import record
from dtype_lint.core.rule_registry import opt_in_codes
from dtype_lint.ecosystems.presets import EXEMPT_FUNCTIONS, NAME_HEURISTICS, PRESETS


class ConfigError(Exception):
    """A bad configuration: reported with exit code 2."""


_CODE = re.compile(r"^DTL\d{0,3}$|^ALL$")


@cache
def _names() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """A helper's `package.module:function` and a dotted class name; compiled on first use (only
    a configuration that names a helper or classes is checked for them)."""
    return (re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$"),
            re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*$"))


@record
class Config:
    """A run's settings: the defaults, then the configuration file's, then the command line's."""
    root: Path = field(default_factory=Path.cwd)
    source: str = "defaults"  # which file the settings came from, for messages
    preset: str = "vllm"
    select: list[str] = field(default_factory=lambda: ["DTL"])
    ignore: list[str] = field(default_factory=list)
    quantizable: list[str] = field(default_factory=list)
    exempt_classes: list[str] = field(default_factory=list)
    not_quantizable: list[str] = field(default_factory=list)
    exempt_functions: list[str] = field(default_factory=lambda: list(EXEMPT_FUNCTIONS))
    exclude: list[str] = field(default_factory=list)
    # `exclude` also applies to files named on the command line (pre-commit names every staged
    # file), as Ruff's `force-exclude`.
    force_exclude: bool = False
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    name_heuristics: bool = False
    name_patterns: list[str] = field(default_factory=lambda: list(NAME_HEURISTICS))
    # Constructor parameters that carry a quantization config (added to the preset's).
    config_params: list[str] = field(default_factory=list)
    helper: str = ""
    helper_template: str = ""
    fp8_input_default: bool = True
    # The release of the engine (vLLM) whose shipped catalogue describes the layers a project
    # imports without containing it; "" chooses from the environment and the pins (engine_source.py).
    engine_release: str = ""
    cache_dir: str = ".dtype_lint_cache"
    # Length a fix wraps its added lines to; 0: the project's formatter settings (fix/formatting.py).
    line_length: int = 0

    # ---- derived -------------------------------------------------------------------------
    @property
    def all_quantizable(self) -> list[str]:
        return PRESETS[self.preset]["quantizable"] + self.quantizable

    @property
    def all_not_quantizable(self) -> list[str]:
        return PRESETS[self.preset]["not-quantizable"] + self.not_quantizable

    @property
    def all_exempt_classes(self) -> list[str]:
        return PRESETS[self.preset]["exempt-classes"] + self.exempt_classes

    @property
    def all_config_params(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(PRESETS[self.preset]["config-params"] + self.config_params))

    @property
    def helper_spec(self) -> tuple[str, str]:
        module, func = (self.helper or PRESETS[self.preset]["helper"]).split(":")
        return module, func

    @property
    def template(self) -> str:
        return self.helper_template or PRESETS[self.preset]["helper-template"]

    def enabled(self, code: str, path: str | None = None) -> bool:
        def matches(prefixes):
            return any(p == "ALL" or code.startswith(p) for p in prefixes)

        if not matches(self.select) or matches(self.ignore):
            return False
        # An opt-in rule (`default_enabled = False`: not yet precise off the trees it was developed
        # on) runs only when `select` names its exact code or ALL: a prefix such as "DTL" does not
        # turn it on. The rule module says so; the registry reads it without importing the rule.
        if code in opt_in_codes() and not any(p in ("ALL", code) for p in self.select):
            return False
        if path is not None and self.per_file_ignores:
            import fnmatch

            rel = _relposix(path, self.root)
            for pattern, codes in self.per_file_ignores.items():
                if fnmatch.fnmatch(rel, pattern) and matches(codes):
                    return False
        return True

    def fingerprint(self) -> str:
        """Hash of everything that changes findings and their fixes: part of every cache key.

        Both halves are built from what the code reads, not from a list kept beside it: every
        setting of this class (but where the project is and where its cache goes), and the
        project's import and formatting style as the fixer itself reads it
        (`core.project_style.project_style`: isort's and Ruff's isort sections, the formatters'
        line length, the first-party names found at the root). A setting the fixer learns to
        read lands in its `ProjectStyle`, and so in this key, with no second edit."""
        from dtype_lint.core.project_style import project_style

        data = {f.name: getattr(self, f.name) for f in fields(self)
                if f.name not in ("root", "source", "cache_dir", "force_exclude")}
        # Read now, not the copy a long-lived process kept (the pipeline clears that one per run,
        # so the fixes it plans read what this key holds).
        style = project_style.__wrapped__(str(self.root))
        data["project-style"] = {f.name: sorted(value) if isinstance(value, frozenset) else value
                                 for f in fields(style) for value in [getattr(style, f.name)]}
        return digests.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _relposix(path: str, root: Path) -> str:
    try:
        return Path(path).resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return Path(path).as_posix()


# pyproject key -> (attribute, type check)
SETTING_KEYS = {
    "preset": ("preset", str),
    "select": ("select", list),
    "ignore": ("ignore", list),
    "extend-select": ("select", "extend"),
    "quantizable": ("quantizable", list),
    "exempt-classes": ("exempt_classes", list),
    "not-quantizable": ("not_quantizable", list),
    "exempt-functions": ("exempt_functions", list),
    "extend-exempt-functions": ("exempt_functions", "extend"),
    "exclude": ("exclude", list),
    "extend-exclude": ("exclude", "extend"),
    "force-exclude": ("force_exclude", bool),
    "per-file-ignores": ("per_file_ignores", dict),
    "name-heuristics": ("name_heuristics", bool),
    "name-patterns": ("name_patterns", list),
    "config-params": ("config_params", list),
    "helper": ("helper", str),
    "helper-template": ("helper_template", str),
    "fp8-input-default": ("fp8_input_default", bool),
    "cache-dir": ("cache_dir", str),
    "engine-release": ("engine_release", str),
    "line-length": ("line_length", int),
}


# A configuration file is a few hundred bytes; anything this large is not one (`/dev/zero`).
MAX_CONFIG_BYTES = 1 << 20


def __getattr__(name: str):
    """`config.tomllib`, the reader of this Python version (tests read it), imported when asked for."""
    if name == "tomllib":
        # imported when a configuration file is read, not with this module: a project without
        # one never needs it (tomllib brings datetime and its regexes, about 1 MiB of RSS)
        from dtype_lint.core.toml_docs import reader

        return reader()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def read_toml(path: Path) -> dict:
    """A TOML file's document; every way it can be bad (a FIFO, a device, huge, not UTF-8, not
    TOML) is a ConfigError, never a hang or a traceback."""
    from dtype_lint.core.source import read_bytes

    if os.path.realpath(path) == os.devnull:
        return {}  # `--config /dev/null`: no settings (the only device read as a file)
    try:
        data = read_bytes(path, MAX_CONFIG_BYTES)
    except (OSError, ValueError) as error:
        raise ConfigError(f"{path}: cannot read configuration: {getattr(error, 'strerror', None) or error}") from None
    from dtype_lint.core import toml_docs

    tomllib = toml_docs.reader()
    try:
        return toml_docs.loads(data.decode("utf-8"))  # parsed once a process per text
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: cannot read configuration: not UTF-8 (byte {error.start})") from None
    except (tomllib.TOMLDecodeError, RecursionError) as error:
        raise ConfigError(f"{path}: cannot read configuration: {error}") from None


def _tool_table(doc: dict, path: Path, default):
    """`[tool.dtype-lint]` of a document (`default` when absent), checked to be a table."""
    tool = doc.get("tool", {})
    if not isinstance(tool, dict):
        raise ConfigError(f"{path}: `tool` must be a table, got {_kind(tool)}")
    table = tool.get("dtype-lint", default)
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.dtype-lint] must be a table, got {_kind(table)}")
    return table


def _kind(value) -> str:
    if isinstance(value, list):
        return "an array" + (" of tables (`[[tool.dtype-lint]]`)" if value and isinstance(value[0], dict) else "")
    return f"a {type(value).__name__}"


# Standalone configuration files, in the order they win within one folder (as Ruff's `.ruff.toml`
# > `ruff.toml` > `pyproject.toml`): their settings sit at the top level, no `[tool.dtype-lint]`.
STANDALONE_CONFIGS = (".dtype-lint.toml", "dtype-lint.toml")


def _folders_up(start: Path) -> list[Path]:
    start = start.resolve()
    return [start, *start.parents] if start.is_dir() else [start.parent, *start.parent.parents]


def find_pyproject(start: Path) -> Path | None:
    """The nearest configuration of ours: in each folder from `start` up, `.dtype-lint.toml`,
    then `dtype-lint.toml`, then a pyproject.toml with a [tool.dtype-lint] table (as ruff does
    for its own); else the nearest pyproject.toml at all (its directory is the project root),
    else None."""
    first = None
    for d in _folders_up(start):
        for name in STANDALONE_CONFIGS:
            if (d / name).is_file():
                return d / name
        candidate = d / "pyproject.toml"
        if candidate.is_file():
            first = first or candidate
            try:
                from dtype_lint.core.source import read_bytes

                try:
                    mentions = b"dtype-lint" in read_bytes(candidate, MAX_CONFIG_BYTES)
                except ValueError as error:  # too large: load_config says so
                    raise ConfigError(str(error)) from None
                if mentions:
                    tool = read_toml(candidate).get("tool", {})
                    if not isinstance(tool, dict) or "dtype-lint" in tool:
                        return candidate  # ours (a malformed `tool` too: load_config reports it)
            except (OSError, ConfigError):
                return candidate  # unreadable or malformed: let load_config report it
    return first


def project_root(start: Path, found: Path | None) -> Path:
    """The folder a run's paths, cache and helper are relative to: the folder of the configuration
    found; without one, the nearest folder at or above `start` that is not a package (has no
    `__init__.py`), so that `dtype-lint check vllm/` on a tree without pyproject.toml roots the
    project (and its cache) next to `vllm/`, never inside it."""
    if found is not None:
        return found.parent
    folders = _folders_up(start)
    for folder in folders:
        if not (folder / "__init__.py").exists():
            return folder
    return folders[-1]


def load_config(start: Path, explicit: Path | None = None, overrides: dict | None = None) -> Config:
    """Settings from `explicit` or the nearest configuration above `start` (see find_pyproject),
    then `overrides`.

    The project root always comes from `start` (the files being checked), never from
    `explicit`: a shared settings file elsewhere (pre-commit's `--config path/outside`) must not
    move the project, its cache or its helper next to that file."""
    cfg = Config()
    found = find_pyproject(start)
    path = explicit or found
    table: dict = {}
    if path is not None:
        doc = read_toml(path)
        if path.name != "pyproject.toml":
            table = _tool_table(doc, path, doc)
        else:
            table = _tool_table(doc, path, {})
        cfg.source = str(path)
    cfg.root = project_root(start, found)
    apply_settings(cfg, table, where=cfg.source)
    if overrides:
        apply_settings(cfg, overrides, where="command line")
    return cfg


def apply_settings(cfg: Config, table: dict, where: str) -> Config:
    for key, value in table.items():
        if key not in SETTING_KEYS:
            import difflib  # only for this message: a run with valid settings does not pay its import

            hint = difflib.get_close_matches(key, list(SETTING_KEYS), n=1)
            extra = f" (did you mean `{hint[0]}`?)" if hint else ""
            raise ConfigError(f"{where}: unknown [tool.dtype-lint] key `{key}`{extra}")
        attr, kind = SETTING_KEYS[key]
        if kind == "extend":
            _check_type(where, key, value, list)
            setattr(cfg, attr, list(getattr(cfg, attr)) + list(value))
        else:
            _check_type(where, key, value, kind)
            setattr(cfg, attr, value)
    _validate(cfg, where)
    return cfg


def _check_type(where, key, value, kind):
    if not isinstance(value, kind):
        raise ConfigError(f"{where}: `{key}` must be a {kind.__name__}, got {type(value).__name__}")
    if kind is list and not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: `{key}` must be a list of strings")


def _validate(cfg: Config, where: str) -> None:
    if cfg.preset not in PRESETS:
        raise ConfigError(f"{where}: unknown preset `{cfg.preset}`; choose one of {', '.join(PRESETS)}")
    for key in ("select", "ignore"):
        for code in getattr(cfg, key):
            if not _CODE.match(code):
                raise ConfigError(f"{where}: `{key}` has `{code}`, not a rule code or prefix like DTL001")
    for pattern, codes in cfg.per_file_ignores.items():
        if not isinstance(codes, list) or not all(isinstance(c, str) and _CODE.match(c) for c in codes):
            raise ConfigError(f"{where}: per-file-ignores `{pattern}` must map to a list of codes")
    for key in ("quantizable", "exempt_classes", "not_quantizable"):
        for name in getattr(cfg, key):
            if not _names()[1].match(name):
                raise ConfigError(f"{where}: `{key.replace('_', '-')}` entry `{name}` is not a dotted class name")
    if cfg.helper and (not _names()[0].match(cfg.helper)
                       or any(keyword.iskeyword(p) for p in re.split(r"[.:]", cfg.helper))):
        raise ConfigError(f"{where}: `helper` must look like `package.module:function`, got `{cfg.helper}` "
                          "(dotted Python names, none empty)")
    _validate_cache_dir(cfg.cache_dir, where)
    if cfg.engine_release:
        from dtype_lint.core.engine_source import shipped_releases

        releases = shipped_releases("vllm")
        if cfg.engine_release not in releases:
            raise ConfigError(f"{where}: `engine-release` must be a vLLM release whose catalogue ships with "
                              f"dtype-lint ({', '.join(releases)}), got `{cfg.engine_release}`")
    if isinstance(cfg.line_length, bool) or not 0 <= cfg.line_length <= 320:
        raise ConfigError(f"{where}: `line-length` must be a whole number from 1 to 320 (0: the project's own)")
    if cfg.helper_template and cfg.helper_template not in ("vllm", "torch"):
        raise ConfigError(f"{where}: `helper-template` must be `vllm` or `torch`")


def _validate_cache_dir(value: str, where: str) -> None:
    """The cache folder is a folder of its own inside the project: a relative path without `..`
    (never the root itself, which would get a `.gitignore` of `*`, nor anywhere outside)."""
    parts = PurePosixPath(value.replace("\\", "/")).parts
    if (not value.strip() or "\0" in value or PurePosixPath(value.replace("\\", "/")).is_absolute()
            or PureWindowsPath(value).drive or ".." in parts or not parts or parts == (".",)):
        raise ConfigError(f"{where}: `cache-dir` must be a folder inside the project, relative to its root "
                          f"(like `.dtype_lint_cache`), got `{value}`")


def load_for_run(paths: list[str], config_file: str | None = None, overrides: dict | None = None,
                 extra_exclude: list[str] | None = None) -> Config:
    """The configuration a run over `paths` uses: `config_file`, else the nearest pyproject.toml
    above the first path (or the current folder), then `overrides` (command-line flags)."""
    start = Path(paths[0]) if paths else Path.cwd()
    cfg = load_config(start if start.exists() else Path.cwd(),
                      Path(config_file) if config_file else None, overrides or {})
    if extra_exclude:
        cfg.exclude = list(cfg.exclude) + list(extra_exclude)
    return cfg
