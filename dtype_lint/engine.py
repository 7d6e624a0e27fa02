"""files → discovery → prefilter → class index → per-file facts → rules → findings.

Only files the prefilter passes are parsed (stdlib ast: ten times cheaper than libcst, DESIGN.md
§7); libcst is used by the fixer on the few files it rewrites. Per-file headers and findings are
cached by (mtime, size) and invalidated by the config, the class index and the tool version.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from . import __version__
from .cache import Cache
from .config import Config
from .discovery import changed_since, discover, module_name
from .facts import ProjectFacts
from .findings import PARSE_ERROR, Evidence, Finding, Span
from .index import ModuleHeader, QuantizableLayerIndex, extract_header
from .prefilter import might_match
from .source import SourceFile, decode


@dataclass
class RunResult:
    findings: list[Finding]
    files: list[str]
    analyzed: int
    elapsed_s: float
    index: QuantizableLayerIndex | None = None
    headers: list[ModuleHeader] = field(default_factory=list)
    suppression_files: list[str] = field(default_factory=list)


def read_text(path: str) -> str:
    with open(path, "rb") as f:
        return decode(f.read())


# ---- per-file work (runs in worker processes) -------------------------------------------------
_SUPPRESSION = re.compile(r"dtype-lint:|noqa[^\n]*DTL")


def _header_job(path: str) -> tuple[str, dict | None, bool, str | None]:
    """(path, header dict, prefilter verdict, error) for one file. The header dict also records
    whether the file holds a dtype-lint suppression comment (to report unused ones)."""
    try:
        text = read_text(path)
    except (OSError, UnicodeDecodeError, SyntaxError, LookupError) as e:
        return path, None, False, f"cannot read: {e}"
    module = module_name(path)
    is_pkg = os.path.basename(path) == "__init__.py"
    header = extract_header(text, module, path, is_pkg).to_dict()
    header["hash"] = hashlib.sha1(json.dumps(header, sort_keys=True).encode()).hexdigest()[:16]
    header["suppressions"] = _SUPPRESSION.search(text) is not None
    return path, header, might_match(text), None


_WORKER: dict = {}


def _init_worker(headers: list[dict], config: Config) -> None:
    _WORKER["index"] = build_index([ModuleHeader.from_dict(h) for h in headers], config)
    _WORKER["config"] = config


def _analyze_job(path: str) -> tuple[str, list[dict]]:
    return path, [f.to_dict() for f in analyze_file(path, _WORKER["index"], _WORKER["config"])]


def build_index(headers: list[ModuleHeader], config: Config) -> QuantizableLayerIndex:
    return QuantizableLayerIndex(headers, config.all_quantizable, config.all_exempt_classes, config.all_not_quantizable)


def analyze_file(path: str, index: QuantizableLayerIndex, config: Config, text: str | None = None,
                 module: str | None = None) -> list[Finding]:
    """Every rule's findings for one file. Never raises on user input: bad files become DTL900."""
    from dtype_lint.rule import FileContext
    from dtype_lint.rules import ALL_RULES

    try:
        if text is None:
            text = read_text(path)
        tree = ast.parse(text, filename=path)
    except SyntaxError as e:
        line = e.lineno or 1
        return [_parse_error(path, f"cannot parse: {e.msg}", line, (e.offset or 1))]
    except (OSError, UnicodeDecodeError, ValueError, LookupError) as e:
        return [_parse_error(path, f"cannot read: {e}", 1, 1)]
    if module is None:
        module = module_name(path) if os.path.exists(path) else ""
    src = SourceFile(path, text, module)
    is_pkg = os.path.basename(path) == "__init__.py"
    known = index.modules.get(module)
    imports = known.imports if known is not None and known.path == path else extract_header(text, module, path, is_pkg).imports
    project = ProjectFacts(index, load_file=_safe_read)
    project.register(tree, module, path, is_pkg, imports)
    ctx = FileContext(src, tree, config, project, imports)
    out: list[Finding] = []
    for rule_cls in ALL_RULES:
        if not config.enabled(rule_cls.code):
            continue
        try:
            out.extend(rule_cls().check(ctx))
        except RecursionError:
            out.append(_parse_error(path, f"{rule_cls.code} gave up: expression nesting too deep", 1, 1))
    return out


def _safe_read(path: str) -> str | None:
    try:
        return read_text(path)
    except (OSError, UnicodeDecodeError, SyntaxError, LookupError):
        return None


def _parse_error(path: str, message: str, line: int, col: int) -> Finding:
    return Finding(PARSE_ERROR, message, path, Span(line, col, line, col + 1),
                   evidence=(Evidence("the file was skipped; other files were checked", path, line),),
                   scope="<module>", expression=message)


def code_stamp() -> str:
    """Changes when dtype-lint's own code changes (an editable install under development), so a
    cache never outlives the rules that produced it."""
    import dtype_lint
    import dtype_lint.rules

    h = hashlib.sha1()
    for pkg in (dtype_lint, dtype_lint.rules):
        d = os.path.dirname(pkg.__file__)
        for name in sorted(os.listdir(d)):
            if name.endswith(".py"):
                st = os.stat(os.path.join(d, name))
                h.update(f"{name}:{st.st_mtime_ns}:{st.st_size};".encode())
    return h.hexdigest()[:10]


# ---- the run ---------------------------------------------------------------------------
class Engine:
    def __init__(self, config: Config, jobs: int | None = None, use_cache: bool = True, progress=None):
        self.config = config
        self.jobs = max(1, jobs or os.cpu_count() or 1)
        self.use_cache = use_cache
        self.progress = progress  # callable(done, total, stage) or None

    def run(self, paths: list[str], changed_ref: str | None = None) -> RunResult:
        t0 = time.perf_counter()
        cfg = self.config
        files = discover(paths, tuple(cfg.exclude), cfg.root)
        # Named files (pre-commit passes only the staged ones) are checked against the class index
        # of their whole project, so a layer defined in an unstaged file still resolves.
        index_files = files
        if cfg.source != "defaults" and any(os.path.isfile(p) for p in paths):
            seen = {os.path.realpath(f) for f in files}
            root = os.path.relpath(cfg.root) if not os.path.relpath(cfg.root).startswith("..") else str(cfg.root)
            extra = [f for f in discover([root], tuple(cfg.exclude), cfg.root)
                     if os.path.realpath(f) not in seen]
            index_files = files + extra
        cache = Cache(cfg.root / cfg.cache_dir, key=f"{__version__}-{code_stamp()}-{cfg.fingerprint()}",
                      enabled=self.use_cache)
        stats = {}
        for p in index_files:
            try:
                st = os.stat(p)
                stats[p] = f"{st.st_mtime_ns}:{st.st_size}"
            except OSError:
                stats[p] = "missing"

        # Headers and prefilter verdicts for every file (cheap; cached).
        headers: dict[str, ModuleHeader] = {}
        passes: dict[str, bool] = {}
        suppressing: set[str] = set()
        header_hashes: dict[str, str] = {}
        errors: dict[str, str] = {}
        misses = []
        for p in index_files:
            hit = cache.header(p, stats[p])
            if hit is None:
                misses.append(p)
            else:
                headers[p], passes[p] = ModuleHeader.from_dict(hit[0]), hit[1]
                header_hashes[p] = hit[0].get("hash", "")
                if hit[0].get("suppressions"):
                    suppressing.add(p)
        for path, hdr, ok, err in self._map(_header_job, misses, "index"):
            if err:
                errors[path] = err
                continue
            headers[path], passes[path] = ModuleHeader.from_dict(hdr), ok
            header_hashes[path] = hdr["hash"]
            if hdr.get("suppressions"):
                suppressing.add(path)
            cache.put_header(path, stats[path], hdr, ok)
        index = build_index(list(headers.values()), cfg)
        digest = hashlib.sha1("".join(sorted(f"{h.module}:{header_hashes.get(p, '')};" for p, h in headers.items())).encode()).hexdigest()[:16]

        targets = [p for p in files if passes.get(p)]
        if changed_ref is not None:
            changed = changed_since(changed_ref, cfg.root)
            targets = [p for p in targets if os.path.realpath(p) in changed]
            files_in_scope = [p for p in files if os.path.realpath(p) in changed]
        else:
            files_in_scope = files

        findings: list[Finding] = [
            _parse_error(p, errors[p], 1, 1) for p in files_in_scope if p in errors
        ]
        todo = []
        for p in targets:
            hit = cache.findings(p, stats[p], digest)
            if hit is None:
                todo.append(p)
            else:
                findings.extend(Finding.from_dict(d) for d in hit)
        if todo:
            if len(todo) >= 4 and self.jobs > 1:
                results = self._map(_analyze_job, todo, "analyze", init=(_init_worker, ([h.to_dict() for h in headers.values()], cfg)))
            else:
                results = ((p, [f.to_dict() for f in analyze_file(p, index, cfg)]) for p in self._tick(todo, "analyze"))
            for path, dicts in results:
                cache.put_findings(path, stats[path], digest, dicts)
                findings.extend(Finding.from_dict(d) for d in dicts)
        cache.save()
        findings = [f for f in findings if cfg.enabled(f.code, f.path)]
        findings.sort(key=Finding.sort_key)
        return RunResult(findings, files_in_scope, len(targets), time.perf_counter() - t0, index,
                         list(headers.values()), [p for p in files_in_scope if p in suppressing])

    def _tick(self, items, stage):
        for i, item in enumerate(items, 1):
            yield item
            if self.progress:
                self.progress(i, len(items), stage)

    def _map(self, fn, items: list, stage: str, init=None):
        if not items:
            return []
        if self.jobs == 1 or len(items) < 64 and init is None:
            if init is not None:
                init[0](*init[1])
            return [fn(x) for x in self._tick(items, stage)]
        import multiprocessing

        ctx = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
        chunk = max(1, len(items) // (self.jobs * 8))
        kwargs = {"initializer": init[0], "initargs": init[1]} if init else {}
        with ProcessPoolExecutor(max_workers=self.jobs, mp_context=ctx, **kwargs) as pool:
            out = []
            for i, r in enumerate(pool.map(fn, items, chunksize=chunk), 1):
                out.append(r)
                if self.progress:
                    self.progress(i, len(items), stage)
            return out
