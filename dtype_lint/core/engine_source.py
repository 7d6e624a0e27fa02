"""Which release of an engine a project outside it (a plugin) will run with (#39).

A plugin imports vLLM's layers without containing vLLM, so what those layers' backends leave in
`.weight` comes from a description of one release of vLLM: the code of the vLLM installed in the
project's own environment, where there is one, else the shipped catalogue of the release the
project pins. In that order, because the installed code is what the plugin runs against today
and the pin only bounds it:

1. the `engine-release` setting of `[tool.dtype-lint]`, when the project names one (a shipped
   release: the user knows better than any file we read);
2. an installed vLLM in the project's environment: the site-packages of `.venv` or `venv` in the
   project root, else of `$VIRTUAL_ENV`, holding a `vllm/` package and a `vllm-X.dist-info`
   (read as files, never imported: importing vLLM takes seconds and initialises CUDA);
3. the project's pin: a `vllm` requirement in pyproject.toml (`[project] dependencies`, then
   `optional-dependencies`), setup.cfg (`install_requires`, then `extras_require`), then
   `requirements*.txt`: the shipped catalogue of that release, or the newest shipped one the pin
   allows, or, when it allows none, the shipped release nearest to it (and the words say so);
4. no pin: the newest shipped catalogue.

Choosing reads a handful of small files and lists two folders, and only runs that ask the model
about a layer of an engine outside the tree choose at all. What it looked at (`witnesses`) is
recorded as read by the answers that used the choice, so a cached finding is stale when a pin is
edited or vLLM is installed, upgraded or removed.
"""

from __future__ import annotations

import os
import re
from dataclasses import field
from pathlib import Path

from dtype_lint.core.records import record

# The engines a shipped catalogue describes: distribution -> its top-level package.
ENGINES = {"vllm": "vllm"}
SETTING = "engine-release"

_VERSION = re.compile(r"^\d+(?:\.\d+)*$")
# `name[extras] specifiers ; markers`, as PEP 508 writes a requirement (no URL form: a plugin that
# installs vLLM from a URL pins no release we can name).
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(\(?[^;#@]*?\)?)\s*(?:;.*)?$")
_SPECIFIER = re.compile(r"^\s*(===|==|!=|~=|>=|<=|>|<)\s*([0-9][0-9A-Za-z.*+!-]*)\s*$")


@record(frozen=True)
class EngineSource:
    """The release of `dist` a plugin's layers are judged against, and why.

    `kind`: "setting", "installed", "pinned", "nearest" (a pin no shipped release satisfies) or
    "newest" (no pin). `words`: how evidence names it ("vllm 0.34.0, the release pyproject.toml
    pins"). `why`: doctor's sentence. `site`: for "installed", the site-packages folder holding
    the package; `stamp`: a digest of its dist-info's RECORD (pip lists every installed file's hash
    there), which keys the computed description on disk. `witnesses`: the files the choice
    looked at (present or not), recorded as read by every answer that used it."""

    dist: str
    version: str
    kind: str
    words: str
    why: str
    site: str = ""
    stamp: str = ""
    witnesses: tuple[str, ...] = field(default=(), compare=False)


def shipped_releases(dist: str) -> list[str]:
    """The releases of `dist` whose catalogue ships with the tool, oldest first (from the file
    names alone: nothing is parsed)."""
    folder = Path(__file__).resolve().parents[1] / "ecosystems" / dist
    prefix = f"catalogue-{dist}-"
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    versions = [n[len(prefix):-len(".json")] for n in names if n.startswith(prefix) and n.endswith(".json")]
    return sorted((v for v in versions if _VERSION.match(v)), key=version_key)


def version_key(version: str) -> tuple[int, ...]:
    """A release's number as a tuple (`0.34.0` -> (0, 34, 0)); only its leading release segment
    counts (`0.34.0rc1` -> (0, 34, 0)), trailing zeros dropped so `0.34` equals `0.34.0`."""
    parts = []
    for piece in version.split("."):
        digits = re.match(r"\d+", piece)
        if digits is None:
            break
        parts.append(int(digits.group()))
        if digits.end() != len(piece):
            break
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


# ---- reading a pin ---------------------------------------------------------------------------------
def requirement_specifiers(line: str, dist: str) -> list[tuple[str, str]] | None:
    """The version specifiers of a requirement line for `dist` (`vllm>=0.33,<0.35` ->
    [(">=", "0.33"), ("<", "0.35")]); None when the line does not name `dist` or its specifiers
    cannot be read."""
    got = _REQUIREMENT.match(line.split(" #", 1)[0])
    if got is None or _normalise(got.group(1)) != _normalise(dist):
        return None
    text = got.group(2).strip().strip("()")
    if not text:
        return []
    out = []
    for part in text.split(","):
        spec = _SPECIFIER.match(part)
        if spec is None:
            return None
        out.append((spec.group(1), spec.group(2)))
    return out


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def allows(specifiers: list[tuple[str, str]], version: str) -> bool:
    """Does every specifier admit `version`? (PEP 440's comparisons on release numbers: `==X.*`
    is a prefix, `~=X.Y` is `>=X.Y, ==X.*`.)"""
    have = version_key(version)
    for op, wanted in specifiers:
        if op in ("==", "===", "!=") and wanted.endswith(".*"):
            prefix = tuple(int(p) for p in wanted[:-2].split(".") if p.isdigit())
            padded = have + (0,) * max(0, len(prefix) - len(have))
            match = padded[:len(prefix)] == prefix
            if match != (op != "!="):
                return False
            continue
        want = version_key(wanted)
        if op in ("==", "===") and have != want or op == "!=" and have == want:
            return False
        if op == ">=" and have < want or op == "<=" and have > want:
            return False
        if op == ">" and have <= want or op == "<" and have >= want:
            return False
        if op == "~=":
            prefix = tuple(int(p) for p in wanted.split(".")[:-1] if p.isdigit())
            padded = have + (0,) * max(0, len(prefix) - len(have))
            if have < want or padded[:len(prefix)] != prefix:
                return False
    return True


def _target(specifiers: list[tuple[str, str]]) -> tuple[int, ...] | None:
    """The release a pin points at, to find the nearest shipped one when it allows none: the
    version it names with `==`/`~=`/`>=`/`>`, else its upper bound."""
    for wanted_ops in (("==", "===", "~="), (">=", ">"), ("<=", "<")):
        for op, wanted in specifiers:
            if op in wanted_ops:
                return version_key(wanted.rstrip(".*"))
    return None


def _pins_in_pyproject(path: Path, dist: str) -> list[str]:
    # Parsed here, not with config.read_toml (config validates `engine-release` with this module):
    # a pyproject.toml that cannot be read pins nothing, and the configuration reports its errors.
    from dtype_lint.core import toml_docs

    try:
        project = toml_docs.loads(_text(path)).get("project", {})
    except (toml_docs.reader().TOMLDecodeError, RecursionError):
        return []
    if not isinstance(project, dict):
        return []
    lines = list(project.get("dependencies", []) or [])
    extras = project.get("optional-dependencies", {})
    if isinstance(extras, dict):
        for group in extras.values():
            lines += list(group) if isinstance(group, list) else []
    return [line for line in lines if isinstance(line, str) and requirement_specifiers(line, dist) is not None]


def _pins_in_setup_cfg(path: Path, dist: str) -> list[str]:
    import configparser

    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(_text(path))
    except (configparser.Error, ValueError):
        return []
    lines: list[str] = []
    if parser.has_option("options", "install_requires"):
        lines += parser.get("options", "install_requires").splitlines()
    if parser.has_section("options.extras_require"):
        for _, value in parser.items("options.extras_require"):
            lines += value.splitlines()
    return [line.strip() for line in lines if requirement_specifiers(line.strip(), dist) is not None]


def _pins_in_requirements(path: Path, dist: str) -> list[str]:
    return [line.strip() for line in _text(path).splitlines()
            if not line.lstrip().startswith(("#", "-")) and requirement_specifiers(line.strip(), dist) is not None]


def _text(path: Path) -> str:
    from dtype_lint.core.safe_read import read_bytes

    try:
        return read_bytes(str(path), 1 << 20).decode("utf-8", "replace")
    except (OSError, ValueError):
        return ""


def pin_files(root: Path) -> list[Path]:
    """Where a project states its requirements, in the order a pin is looked for."""
    try:
        requirements = sorted((n for n in os.listdir(root) if n.startswith("requirements") and n.endswith(".txt")),
                              key=lambda n: (n != "requirements.txt", n))
    except OSError:
        requirements = []
    return [root / "pyproject.toml", root / "setup.cfg", *(root / n for n in requirements)]


def find_pin(root: Path, dist: str) -> tuple[Path, str] | None:
    """(the file, the requirement) of the first requirement of `dist` the project states."""
    readers = {"pyproject.toml": _pins_in_pyproject, "setup.cfg": _pins_in_setup_cfg}
    for path in pin_files(root):
        if not path.is_file():
            continue
        found = readers.get(path.name, _pins_in_requirements)(path, dist)
        if found:
            return path, found[0]
    return None


# ---- an installed engine -------------------------------------------------------------------------
def environments(root: Path) -> list[Path]:
    """The virtual environments a project runs in: `.venv` and `venv` in its root, then
    `$VIRTUAL_ENV` (the one active where the tool runs)."""
    out = [root / ".venv", root / "venv"]
    active = os.environ.get("VIRTUAL_ENV")
    if active:
        out.append(Path(active))
    return out


def site_packages(environment: Path) -> list[Path]:
    """The site-packages folders of a virtual environment (POSIX `lib/pythonX.Y/`, Windows `Lib/`)."""
    found = []
    for lib in ("lib", "lib64", "Lib"):
        folder = environment / lib
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        if lib == "Lib":
            found.append(folder / "site-packages")
        found += [folder / n / "site-packages" for n in names if n.startswith("python")]
    return [f for f in dict.fromkeys(found) if f.is_dir()]


def installed(root: Path, dist: str, witnesses: list[str]) -> tuple[Path, str, Path] | None:
    """(site-packages, version, dist-info folder) of `dist` installed in the project's
    environment, or None. Appends to `witnesses` what a change to the answer would change."""
    package = ENGINES[dist]
    seen: set[str] = set()
    for environment in environments(root):
        real = os.path.realpath(environment)
        if real in seen:
            continue
        seen.add(real)
        sites = site_packages(environment)
        if not sites:
            witnesses.append(str(environment / "pyvenv.cfg"))  # a venv created later
        for site in sites:
            witnesses.append(str(site / package / "__init__.py"))
            if not (site / package / "__init__.py").is_file():
                continue
            prefix = f"{package}-"
            try:
                infos = [n for n in os.listdir(site) if n.startswith(prefix) and n.endswith(".dist-info")]
            except OSError:
                continue
            # The newest first: an interrupted upgrade can leave the old release's dist-info behind.
            infos.sort(key=lambda n: version_key(n[len(prefix):-len(".dist-info")]), reverse=True)
            for info in infos:
                version = info[len(prefix):-len(".dist-info")]
                if version[:1].isdigit():
                    record = site / info / "RECORD"
                    witnesses.append(str(record))
                    return site, version, site / info
    return None


def _record_stamp(dist_info: Path) -> str:
    from dtype_lint.core import digests
    from dtype_lint.core.file_stamp import file_stamp

    stamp = file_stamp(str(dist_info / "RECORD"))
    if stamp == "missing":
        stamp = file_stamp(str(dist_info / "METADATA"))
    where = os.path.realpath(dist_info.parent)
    return digests.blake2b(f"{where}\0{stamp}".encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def tool_cache_root() -> Path:
    """The tool's own cache folder, outside every project: `${DTYPE_LINT_CACHE_DIR:-~/.cache/dtype-lint}`
    (release trees, descriptions of installed engines)."""
    env = os.environ.get("DTYPE_LINT_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "dtype-lint"


# ---- the choice ------------------------------------------------------------------------------------
def choose(root: str | Path, setting: str = "", dist: str = "vllm") -> EngineSource | None:
    """The release of `dist` a project at `root` outside the engine runs with; None when no
    catalogue of `dist` ships (nothing to choose from, and nothing installed)."""
    root = Path(root)
    releases = shipped_releases(dist)
    witnesses: list[str] = []
    if setting:
        return EngineSource(dist, setting, "setting", f"{dist} {setting}, the release [tool.dtype-lint] "
                            f"`{SETTING}` names", f"`{SETTING} = \"{setting}\"` in the configuration")
    found = installed(root, dist, witnesses)
    if found is not None:
        site, version, dist_info = found
        where = _shown(site / ENGINES[dist], root)
        return EngineSource(dist, version, "installed", f"the installed {dist} {version}",
                            f"{dist} {version} is installed in the project's environment ({where}); its code is read",
                            site=str(site), stamp=_record_stamp(dist_info), witnesses=tuple(witnesses))
    if not releases:
        return None
    pin = find_pin(root, dist)
    # The pin files there are, and requirements.txt even where there is none: one added later
    # makes what was chosen from their absence stale.
    witnesses += list(dict.fromkeys([*(str(p) for p in pin_files(root)), str(root / "requirements.txt")]))
    if pin is None:
        newest = releases[-1]
        return EngineSource(dist, newest, "newest",
                            f"{dist} {newest}, the newest shipped release: the project pins none",
                            f"no {dist} installed in the project's environment and no pin of it (pyproject.toml, "
                            f"setup.cfg, requirements*.txt): the newest catalogue shipped", witnesses=tuple(witnesses))
    path, requirement = pin
    specifiers = requirement_specifiers(requirement, dist) or []
    allowed = [v for v in releases if allows(specifiers, v)]
    what = f"`{requirement.strip()}` in {path.name}"
    if allowed:
        chosen = allowed[-1]
        return EngineSource(dist, chosen, "pinned", f"{dist} {chosen}, the release {path.name} pins",
                            f"no {dist} installed in the project's environment; {what}: the shipped catalogue "
                            f"of {dist} {chosen}" + ("" if len(allowed) == 1 else " (the newest it allows)"),
                            witnesses=tuple(witnesses))
    target = _target(specifiers)
    below = [v for v in releases if target is not None and version_key(v) <= target]
    nearest = below[-1] if below else releases[0]
    return EngineSource(dist, nearest, "nearest", f"{dist} {nearest}, the shipped release nearest to the pin "
                        f"`{requirement.strip()}` of {path.name}",
                        f"no {dist} installed in the project's environment; {what} allows no shipped catalogue "
                        f"({', '.join(releases)}): the nearest, {dist} {nearest}", witnesses=tuple(witnesses))


def _shown(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)
