"""Per-class facts, read from a module's AST: what a class's code says about its instances.

For each class: where its attributes come from (`self.X = Cls(...)`, `self.X = param` with
`param: Cls`, `X: Cls` annotations, `@property` getters), its `__init__` signature and the
`super().__init__(...)` call (so a quantization config can be followed through constructors),
whether its own code obtains a quant method for `self` or lets one create its weights (it is a
quantizable layer), and whether it is storage-format code (a quant method: methods that take the
`layer` whose weights they own). Files defining base classes are parsed lazily, once per index.
Layer resolution over these facts lives in layers.py.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import field, replace

from dtype_lint.analysis.function_walk import nodes_of, parameter_names, walk
from dtype_lint.analysis.index.class_index import LOCALS, QuantizableLayerIndex, dotted, record_import
from dtype_lint.analysis.index.construction_forms import (
    MODULE_CONTAINERS,
    container_fill,
    handed_locals,
    leaves,
    named_attribute,
)
from dtype_lint.core import regions, trees
from dtype_lint.core.findings import Evidence
from dtype_lint.core.records import record
from dtype_lint.core.regions import Defs

# Methods that receive the layer whose storage they own: a class defining one is storage code.
STORAGE_METHODS = frozenset({"create_weights", "process_weights_after_loading", "apply", "apply_weights",
                             "get_quant_method", "embedding"})
# A class's own storage method is a `def` of one of those names in its body (visit_class reads
# no other): a text without one defines none (`ProjectFacts.may_hold`). `apply` alone is in the
# text of many classes that define no storage method (a call, a comment); a pattern that starts
# with its literal `def` is searched from it (one starting with `\b` made re try every position).
STORAGE_METHOD_DEFS = re.compile(r"def[\s\\]+(?:%s)\b" % "|".join(sorted(STORAGE_METHODS)))
# The name a storage method gives the layer it owns when no annotation says it is one.
LAYER_PARAM = "layer"


def storage_method_name(name: str, prefixed: bool = False) -> bool:
    """A storage method's name; with `prefixed`, also one followed by `_...` (a module-level
    function split out of a quant method or kernel: `apply_<format>_linear(layer, x)`)."""
    return name in STORAGE_METHODS or (prefixed and any(name.startswith(f"{m}_") for m in STORAGE_METHODS))


def layer_params(fn: ast.FunctionDef | ast.AsyncFunctionDef, skip_first: bool) -> list[tuple[str, ast.expr | None]]:
    """(name, annotation) of the parameters that may be the layer a storage method owns: one named
    `layer`, or any annotated one (whether its annotation is a layer class is the resolver's call)."""
    args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
    if skip_first:
        args = args[1:]
    return [(a.arg, a.annotation) for a in args if a.arg == LAYER_PARAM or a.annotation is not None]


@record(frozen=True)
class AttrOrigin:
    """One assignment of `self.<attr>` in a class's code."""

    kind: str  # "call": built by a constructor call; "annotation": declared type; "param": a parameter's type
    type_name: str | None  # qualified class name, None when not resolvable
    how: str  # human words for the evidence line
    path: str
    line: int
    call: ast.Call | None = None  # the construction, for kind "call"
    method: str = ""  # the method that made the assignment
    method_params: frozenset[str] = frozenset()  # its parameters
    locals: tuple = ()  # (name, value) of its single-assignment locals


def local_call(origin: AttrOrigin, element: ast.expr) -> ast.Call | None:
    """The construction an element of a container literal stands for: the call itself, or the
    single-assignment local of the building method it names (`linear_1 = ColumnParallelLinear(...)`
    then `nn.ModuleList([linear_1, act, linear_2])`)."""
    # `A(...).to(...)`, `(a := A(...))`, `A(...) if c else B(...)`, a local bound to one (`a.cuda()`)
    return next((leaf for leaf in leaves(element, dict(origin.locals)) if isinstance(leaf, ast.Call)), None)


@record(frozen=True)
class ContainerItem:
    """One slot of a container the class fills after making it (`self.layers.append(A(...))`,
    `self.heads["k"] = A(...)`; construction_forms.Fill): the constructions it may hold (both
    arms of a conditional), its literal key for a dict-like fill, and whether it is one counted
    slot at the end of the sequence (not one of a loop's, an `.insert`'s or a comprehension's)."""

    origins: tuple[AttrOrigin, ...]
    key: str | None
    counted: bool
    anywhere: bool = False  # an `.insert`: it may stand before every other slot


@record
class Signature:
    """A constructor's parameters after `self`."""

    positional: list[str]  # positional-or-keyword, in order
    kwonly: list[str]
    defaults: dict[str, ast.expr]  # parameters with a default, and what it is
    varargs: bool
    varkw: bool

    def has(self, name: str) -> bool:
        return name in self.positional or name in self.kwonly

    def bind(self, call: ast.Call, spread_keys: set[str] | None = None) -> dict[str, ast.expr | str]:
        """Parameter → argument expression, "default", or "unknown" (hidden behind */**).
        `spread_keys`: the keys every `**mapping` of the call is known to hold (None: unknown)."""
        bound: dict[str, ast.expr | str] = {}
        starred = any(isinstance(a, ast.Starred) for a in call.args)
        for i, arg in enumerate(call.args):
            if isinstance(arg, ast.Starred):
                break
            if i < len(self.positional):
                bound[self.positional[i]] = arg
        for keyword in call.keywords:
            if keyword.arg is not None and self.has(keyword.arg):
                bound[keyword.arg] = keyword.value
        spread = any(kw.arg is None for kw in call.keywords)
        for name in self.positional + self.kwonly:
            if name not in bound:
                if starred or (spread and (spread_keys is None or name in spread_keys)):
                    bound[name] = "unknown"
                else:
                    bound[name] = "default"
        return bound


@record
class BodyFacts:
    """What a class's method bodies' statements say (walking them costs; see ClassFacts)."""

    attrs: dict[str, list[AttrOrigin]] = field(default_factory=dict)
    super_init: ast.Call | None = None  # `super().__init__(...)` in __init__
    # @property getters and argument-less methods with one `return <expr>`.
    getters: dict[str, ast.expr] = field(default_factory=dict)
    # Every `self.X = <value>` (any method), for guards such as `self.is_unquantized = isinstance(...)`.
    assigned: dict[str, list[ast.expr]] = field(default_factory=dict)
    # `self.X = <param of __init__>`: X → the parameter.
    param_attrs: dict[str, str] = field(default_factory=dict)
    # Containers filled after they are made (`self.layers.append(A(...))`), attribute -> slots in
    # statement order: what `self.layers[0]` / `self.heads["k"]` may hold.
    items: dict[str, list[ContainerItem]] = field(default_factory=dict)


@record
class CallFacts:
    """What the calls anywhere in a class's methods say: found by walking every node of them,
    which costs several times the statements' walk (BodyFacts), for two facts that a question
    about the class's attributes never reads."""

    # Where this class's own code obtains a quant method for `self` or lets one create its
    # weights: `quant_config.get_quant_method(self, ...)`, `resolve_quant_method(cfg, self, ...)`,
    # `self.quant_method.create_weights(self, ...)`.
    quant_root: Evidence | None = None
    # Classes its methods test a parameter against (`isinstance(layer, LinearBase)`,
    # `issubclass(layer_type, RoutedExperts)`): for a quantization config, the layer types it handles.
    dispatch: set[str] = field(default_factory=set)


def _body_fact(name: str):
    return property(lambda self: getattr(self.body, name), doc=BodyFacts.__doc__)


def _call_fact(name: str):
    return property(lambda self: getattr(self.calls, name), doc=CallFacts.__doc__)


class ClassFacts:
    """One class, read from its statements: the signatures in its body (cheap: methods, the
    `__init__` signature, storage-format methods, class-level values) at once, what its method
    bodies' statements say (BodyFacts: attribute origins, getters...) the first time one of those
    is read, and what the calls in them say (CallFacts: quant-method calls, dispatch) the first
    time one of those is: deciding that a class is storage code or where its `__init__` is needs
    no walk of its bodies, and an attribute's origins no walk of every node of them.

    `statement`: the class statement those are read from; `reparse`: how to parse that same
    statement again from the class's own text, for a class parsed from it (trees.parse_class),
    whose statement `compact` lets go (a statement of a module's tree is held by the tree)."""

    def __init__(self, qualname: str, path: str, line: int, complete=None, complete_calls=None,
                 statement: ast.ClassDef | None = None, reparse=None):
        self.qualname = qualname
        self.path = path
        self.line = line
        self.init: Signature | None = None
        # Where it shows it is storage-format code: a method taking the `layer` it owns.
        self.storage_code: Evidence | None = None
        # Storage methods' annotated parameters (method, parameter, annotated class, line): storage
        # code too when that class is a layer's (`apply(self, x, linear: LinearBase)`).
        self.storage_params: list[tuple[str, str, str, int]] = []
        self.methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        # Class-level `NAME = value` (vLLM's `supported_quantization_configs = (QuarkConfig,)`).
        self.class_values: dict[str, ast.expr] = {}
        self._complete = complete  # fills BodyFacts
        self._body: BodyFacts | None = None
        self._complete_calls = complete_calls  # fills CallFacts
        self._calls: CallFacts | None = None
        self._statement = statement
        self._reparse = reparse
        self.used = 0  # the last analysis that asked for it (QuantizableLayerIndex.facts_round)

    @property
    def body(self) -> BodyFacts:
        if self._body is None:
            self._body = BodyFacts()
            if self._complete is not None:
                complete, self._complete = self._complete, None
                complete(self, self._body)
        return self._body

    @property
    def calls(self) -> CallFacts:
        if self._calls is None:
            self._calls = CallFacts()
            if self._complete_calls is not None:
                complete, self._complete_calls = self._complete_calls, None
                complete(self, self._calls)
        return self._calls

    def statement(self) -> ast.ClassDef:
        """The class statement its lazy facts are read from: the one held, or after `compact`
        the same statement parsed again from the class's own text."""
        cls = self._statement
        if cls is None and self._reparse is not None:
            cls = self._reparse()
        if cls is None:  # (not met: the same parse of the same text gave one before)
            raise KeyError(self.qualname)
        return cls

    def compact(self) -> None:
        """Let go of the class statement parsed from the class's own text: its methods stand as
        blanked nodes (trees.stub_of), which `methods` reads back from their own lines when
        one is asked for, and a lazy fact not read yet parses the class again. Facts in the
        index's recently-used lists held their classes' whole trees while no analysis read
        them. Called between two files' analyses, never during one
        (QuantizableLayerIndex.compact_facts): what an analysis keeps about a method node it
        was given (a memo keyed by the node's id) is gone by then."""
        if self._statement is None or self._reparse is None:
            return
        self._statement = None
        methods = self.methods
        for name, fn in list(dict.items(methods)):
            dict.__setitem__(methods, name, trees.stub_of(fn))
        if self._complete is None and self._complete_calls is None:
            self._reparse = None  # every lazy fact is read: nothing parses the class again

    attrs = _body_fact("attrs")
    super_init = _body_fact("super_init")
    quant_root = _call_fact("quant_root")
    getters = _body_fact("getters")
    assigned = _body_fact("assigned")
    param_attrs = _body_fact("param_attrs")
    dispatch = _call_fact("dispatch")
    items = _body_fact("items")

    def __repr__(self) -> str:
        return f"ClassFacts({self.qualname!r}, {self.path!r}, {self.line})"


class LazyClasses(Mapping):
    """Class qualname → ClassFacts, each built the first time it is asked for: a file parsed for
    one base class often defines dozens of others that no analysis needs."""

    def __init__(self, build, index: QuantizableLayerIndex, find_local=None, text: str | None = None):
        self._build = build
        self._index = index
        self._text = text  # the file's text, where a class may stand as a region not yet parsed
        self._nodes: dict[str, tuple] = {}
        self._built: dict[str, tuple] = {}
        # Classes defined in functions (`module.outer.<locals>.Inner`), found by `find_local()`
        # (a walk of the file's statements) the first time one is asked for by name. Kept apart
        # from `_nodes`: iterating a file's classes gives its module-level ones whatever was asked.
        self._find_local = find_local
        self._local: dict[str, tuple] = {}
        self._held: dict[tuple, bool] = {}  # (qualname, words) -> text_holds's answer

    def register(self, qualname: str, *node) -> None:
        self._nodes[qualname] = node  # a later definition of the same name wins, as at run time
        self._built.pop(qualname, None)
        self._held.clear()

    def _node(self, qualname: str) -> tuple:
        node = self._nodes.get(qualname)
        if node is not None:
            return node
        if self._find_local is not None and LOCALS in qualname:
            find, self._find_local = self._find_local, None
            self._local.update((qual, (stmt, local)) for qual, stmt, local in find())
        return self._local[qualname]

    def __getitem__(self, qualname: str) -> ClassFacts:
        # What building a class's facts read (names resolved through the index, now or when its
        # bodies are first read) counts as read by every analysis that uses them.
        built = self._built.get(qualname)
        if built is None:
            node = self._node(qualname)
            with self._index.reading() as reads:
                class_facts = self._build(qualname, node, reads)
            built = self._built[qualname] = (class_facts, reads)
        self._index.replay(built[1])
        built[0].used = self._index.facts_round
        return built[0]

    def unparsed_text(self, qualname: str) -> str | None:
        """The text of a class registered as a region (regions.ClassRegion) whose facts are not
        built yet: a test on text may spare its parse. None when it is parsed or unknown."""
        if self._text is None or qualname in self._built:
            return None
        node = self._nodes.get(qualname)
        if node is None or isinstance(node[0], ast.ClassDef):
            return None
        return self._text[node[0].start:node[0].end]

    def text_holds(self, qualname: str, words: "re.Pattern[str]") -> bool | None:
        """Does the class's unparsed text hold a match of `words` (a compiled pattern)? None when
        it is parsed or unknown (unparsed_text). Kept: a base class shared by many layers is asked
        about by each (vLLM 0.34.0: 2,127 questions about 692 classes). A kept answer stays true
        once the class is parsed: its facts come from that same text."""
        key = (qualname, words)
        held = self._held.get(key)
        if held is None:
            text = self.unparsed_text(qualname)
            if text is None:
                return None
            # A name spelled in other characters than ASCII may normalise to one of the words
            # (NFKC, as the parser reads identifiers): such a text is parsed.
            held = self._held[key] = not text.isascii() or words.search(text) is not None
        return held

    def __contains__(self, qualname) -> bool:
        try:
            self._node(qualname)
        except KeyError:
            return False
        return True

    def __iter__(self):
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)


@record
class FileFacts:
    """One file's facts: its module name, imports, classes (built when first asked for) and module-level functions."""
    module: str
    path: str
    imports: dict[str, str]
    classes: "LazyClasses | dict[str, ClassFacts]"
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    tree: ast.Module | None = None


def annotation_name(node: ast.AST | None) -> str | None:
    """`X`, `a.X`, `"X"`, `Optional[X]`, `X | None` → dotted `X`."""
    if node is None:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        for side in (node.left, node.right):
            if not (isinstance(side, ast.Constant) and side.value is None):
                return annotation_name(side)
        return None
    if isinstance(node, ast.Subscript):
        base = dotted(node.value) or ""
        if base.rsplit(".", 1)[-1] in ("Optional", "Union"):
            inner = node.slice
            elts = inner.elts if isinstance(inner, ast.Tuple) else [inner]
            for element in elts:
                if not (isinstance(element, ast.Constant) and element.value is None):
                    return annotation_name(element)
        return None
    return dotted(node)


def collect_imports(tree: ast.Module, module: str, is_package: bool) -> dict[str, str]:
    imports: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            record_import(node, imports, module, is_package)
    return imports


def signature_of(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Signature:
    a = fn.args
    positional = [p.arg for p in a.posonlyargs + a.args][1:]
    defaults: dict[str, ast.expr] = {}
    pos_all = a.posonlyargs + a.args
    for p, d in zip(pos_all[len(pos_all) - len(a.defaults):], a.defaults):
        defaults[p.arg] = d
    for p, kw_default in zip(a.kwonlyargs, a.kw_defaults):
        if kw_default is not None:
            defaults[p.arg] = kw_default
    return Signature(positional, [p.arg for p in a.kwonlyargs], defaults, a.vararg is not None, a.kwarg is not None)


def _is_super_init(call: ast.Call) -> bool:
    callee = call.func
    if not (isinstance(callee, ast.Attribute) and callee.attr == "__init__"):
        return False
    v = callee.value
    return (isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "super") or \
        isinstance(v, (ast.Name, ast.Attribute))  # `Base.__init__(self, ...)`


class TextFunctions:
    """The module-level functions of one file, each parsed from its own lines when first asked
    for (trees.parse_function): (facts, node), None when the file defines no such function, or
    regions.UNTOLD when its text cannot tell. With an `index`, the functions it parsed are let go
    once an analysis has not asked for one (QuantizableLayerIndex.compact_facts)."""

    __slots__ = ("facts", "text", "_found", "_index", "used", "__weakref__")

    def __init__(self, facts: FileFacts, text: str, index: QuantizableLayerIndex | None = None):
        self.facts, self.text = facts, text
        self._found: dict[str, object] = {}
        self._index = index
        self.used = 0  # the last analysis that asked (QuantizableLayerIndex.facts_round)

    def get(self, name: str):
        index = self._index
        if index is not None:
            self.used = index.facts_round
        if name not in self._found:
            node = trees.parse_function(self.facts.path, self.text, name)
            self._found[name] = (self.facts, node) if isinstance(node, ast.AST) else node
            if isinstance(node, ast.AST) and index is not None:
                index.note_fresh(self)
        return self._found[name]

    def compact(self) -> None:
        """Let the parsed functions go (one asked for again is parsed again), keeping what the
        text told without a parse (no such function, or UNTOLD): an analysis follows a call into
        another file's function, and the function's tree stayed with the index's recently used
        facts while other files were analysed (called between two analyses, as ClassFacts.compact)."""
        self._found = {name: got for name, got in self._found.items() if not isinstance(got, tuple)}


class ClassesFirst(FileFacts):
    """The facts of a file read for its classes (core/regions.class_regions): each class parsed
    from its own text when its facts are first asked for; the module's functions and tree (the
    file parsed, reduced) only if something asks for them."""

    def __init__(self, module: str, path: str, imports: dict[str, str], classes: LazyClasses | dict[str, ClassFacts],
                 whole):
        self.module, self.path, self.imports, self.classes = module, path, imports, classes
        self._whole = whole  # () -> FileFacts of the file's tree
        self._full: FileFacts | None = None

    @property
    def loaded(self) -> bool:
        """Were the module's functions and tree read (the file parsed)?"""
        return self._full is not None

    def _load(self) -> FileFacts:
        if self._full is None:
            self._full = self._whole()
        return self._full

    # The fields of FileFacts read on first use instead: a property over a dataclass field is what
    # this class is for, and mypy cannot tell it from an accidental override.
    @property
    def functions(self):  # type: ignore[override]
        return self._load().functions

    @property
    def tree(self):  # type: ignore[override]
        return self._load().tree


def build_class_file_facts(text: str, class_regions: list, module: str, path: str, is_package: bool,
                           index: QuantizableLayerIndex, imports: dict[str, str], parse_file,
                           reduce: bool = True) -> FileFacts:
    """FileFacts of a module read for its class facts whose classes are all top-level
    (`class_regions`, from its text): nothing is parsed until a class's facts are asked for.
    `parse_file()`: the module's (reduced) tree, for its functions and tree, or a class whose own
    text does not parse as that class alone. `reduce` False (a run whose rules read whole trees):
    each class is parsed whole from its own text, and `parse_file()` is the whole module."""
    def whole() -> FileFacts:
        try:
            return build_file_facts(parse_file(), module, path, is_package, index, imports)
        except (SyntaxError, ValueError, RecursionError, MemoryError):  # what a whole parse would not read
            return FileFacts(module, path, imports, {}, Defs(), None)

    facts = build_file_facts(None, module, path, is_package, index, imports, (text, class_regions, parse_file, reduce))
    return ClassesFirst(module, path, imports, facts.classes, whole)


def build_file_facts(tree: ast.Module | None, module: str, path: str, is_package: bool,
                     index: QuantizableLayerIndex, imports: dict[str, str] | None = None,
                     by_class=None) -> FileFacts:
    """`by_class`: (text, class regions, parse_file, reduce) for build_class_file_facts (`tree` None)."""
    if imports is None:
        imports = collect_imports(tree, module, is_package) if tree is not None else {}
    # A reduced tree (core/regions.py) hands out the whole file's function when a blanked one is read.
    source = getattr(tree, trees.SOURCE, None) if by_class is None else (path, by_class[0])
    classes = LazyClasses(lambda q, node, reads: visit_class(q, node[0], node[1], reads), index,
                          (lambda: local_classes(tree, module)) if tree is not None else None,
                          by_class[0] if by_class else source[1] if source is not None else None)
    facts = FileFacts(module, path, imports, classes, functions=Defs(source, trees.whole_function), tree=tree)

    def resolve(name: str | None) -> str | None:
        return index.resolve(module, name, imports) if name else None

    # No local function here calls itself: a closure referring to itself is a reference cycle,
    # and one holding `facts` kept every parsed tree alive until the cycle collector ran.
    lazy = getattr(tree, trees.LAZY, None) if tree is not None else None

    def register_class(cls: ast.ClassDef):
        if lazy and cls.lineno in lazy and cls.name == lazy[cls.lineno].name:  # its methods are blanked
            classes.register(f"{module}.{cls.name}" if module else cls.name, lazy[cls.lineno], cls.name)
            return
        todo = [(cls, "")]
        while todo:  # the class, then its nested classes, depth first in order
            node, prefix = todo.pop()
            qual = f"{prefix}.{node.name}" if prefix else node.name
            classes.register(f"{module}.{qual}" if module else qual, node, qual)
            todo.extend(reversed([(stmt, qual) for stmt in node.body if isinstance(stmt, ast.ClassDef)]))

    def visit_class(qualname: str, cls, qual: str, reads) -> ClassFacts:
        reparse = text = region = None
        if not isinstance(cls, ast.ClassDef):  # a ClassRegion: parse the class now
            if by_class:
                text, parse_file = by_class[0], by_class[2]
            elif source is not None:  # a region comes with the reduced tree's source
                text, parse_file = source[1], lambda: trees.parse(*source)
            else:
                raise KeyError(qualname)  # nothing to parse the class from: no facts
            region, reduce = cls, not by_class or by_class[3]

            def reparse() -> ast.ClassDef | None:  # the same parse of the same text: the same statement
                return trees.parse_class(path, text, region, parse_file, reduce=reduce)

            cls = reparse()
            if cls is None:
                raise KeyError(qualname)  # the file does not parse: no facts, as for a whole parse
        def complete(cf: ClassFacts, body: BodyFacts) -> None:
            with index.reading() as more:
                complete_class(cf.statement(), cf, body)
            reads.update(more)

        def complete_calls(cf: ClassFacts, calls: CallFacts) -> None:
            with index.reading() as more:
                for stmt in cf.statement().body:
                    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        visit_calls(calls, stmt)
            reads.update(more)

        # A class parsed from its own text that names no call CallFacts read has none: no walk
        # of its methods (nor, once its statement is let go, a parse) to learn that.
        has_calls = reparse is None or names_a_call(text, region)
        class_facts = ClassFacts(qualname, path, cls.lineno, complete, complete_calls if has_calls else None,
                                 cls, reparse)
        if reparse is not None:
            index.note_fresh(class_facts)
        class_facts.methods = Defs(source, trees.whole_function)
        for stmt in cls.body:
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
                for t in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
                    if isinstance(t, ast.Name):
                        class_facts.class_values[t.id] = stmt.value
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                class_facts.methods.setdefault(stmt.name, stmt)
                args = stmt.args.posonlyargs + stmt.args.args + stmt.args.kwonlyargs
                if not args or any(dotted(d) == "staticmethod" for d in stmt.decorator_list):
                    continue
                if stmt.name == "__init__":
                    class_facts.init = signature_of(stmt)
                if class_facts.storage_code is None and storage_method_name(stmt.name):
                    for name, ann in layer_params(stmt, skip_first=True):
                        if name == LAYER_PARAM:
                            class_facts.storage_code = Evidence(
                                f"`{stmt.name}(self, ..., layer, ...)`: storage-format code for the layer it is given",
                                path, stmt.lineno)
                            break
                        layer_class = resolve(annotation_name(ann))
                        if layer_class:  # a layer class or not: the resolver decides (layers.storage_code)
                            class_facts.storage_params.append((stmt.name, name, layer_class, stmt.lineno))
        return class_facts

    def complete_class(cls: ast.ClassDef, cf: ClassFacts, body: BodyFacts) -> None:
        for stmt in cls.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                t = resolve(annotation_name(stmt.annotation))
                if t:
                    body.attrs.setdefault(stmt.target.id, []).append(AttrOrigin(
                        "annotation", t, f"class attribute `{stmt.target.id}: {t.rsplit('.', 1)[-1]}`",
                        path, stmt.lineno))
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit_method(body, stmt)

    def visit_calls(cf: CallFacts, fn: ast.FunctionDef | ast.AsyncFunctionDef):
        args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
        if not args or any(dotted(d) == "staticmethod" for d in fn.decorator_list):
            return
        self_name = args[0].arg
        params = {a.arg for a in args[1:]}
        for node in nodes_of(fn, ast.Call):  # ast.walk's calls, in its order
            if cf.quant_root is None:
                why = _quant_root_call(node, self_name)
                if why:
                    cf.quant_root = Evidence(why, path, node.lineno)
            if isinstance(node.func, ast.Name) and node.func.id in ("isinstance", "issubclass") \
                    and len(node.args) == 2 and isinstance(node.args[0], ast.Name) and node.args[0].id in params:
                kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
                cf.dispatch.update(t for t in (resolve(dotted(k)) for k in kinds) if t)

    def visit_method(cf: BodyFacts, fn: ast.FunctionDef | ast.AsyncFunctionDef):
        args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
        decorators = {dotted(d) for d in fn.decorator_list}
        if "staticmethod" in decorators or not args:
            return
        self_name = args[0].arg
        params = {a.arg: a.annotation for a in args[1:]}
        returned = _single_return(fn)
        if returned is not None and (len(args) == 1 or "property" in decorators or
                                     "cached_property" in decorators or
                                     "functools.cached_property" in decorators):
            cf.getters[fn.name] = returned
        # One walk of the statements for every pass below (they were three, and one per loop).
        statements, repeated = statements_and_repeated(fn.body)
        local_values: dict[str, list[ast.expr]] = {}
        for node in statements:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(t, ast.Name):
                        local_values.setdefault(t.id, []).append(node.value)
        single = tuple((k, v[0]) for k, v in local_values.items() if len(v) == 1)
        # What a local stands for in a construction expression (`proj = A(...)`, `self.proj =
        # proj.to(...)`); a parameter's name is its annotation's, never a local's (`_origin_of`).
        construction_locals = {name: bound for name, bound in single if name not in params}

        def origins_of(value: ast.expr, attr: str, line: int, how: str) -> list[AttrOrigin]:
            """The constructions `value` may be (a single-assignment local followed to its value)."""
            found = []
            for inner in leaves(value, construction_locals):
                origin = _origin_of(inner, None, params, resolve, path, line, attr, fn.name,
                                    frozenset(params), single, lambda q: index.class_location(q) is not None)
                if origin is not None:
                    name = dotted(inner.func) if isinstance(inner, ast.Call) else None
                    found.append(replace(origin, how=how.replace("{name}", name)) if name else origin)
            return found
        # The local containers' slots, found when a local container is first handed to `self`:
        # most methods (`forward`, a pipeline's `__call__`) hand none, and finding every local's
        # slots (their constructions resolved) was a fifth of reading the methods on diffusers 0.42.1.
        local_items: dict[str, list[ContainerItem]] | None = None
        for node in statements:
            fill = container_fill(node, self_name)
            if fill is not None:
                what = f"`self.{fill.attr}[{fill.key!r}] = {{name}}(...)`" if fill.key is not None else \
                    f"`self.{fill.attr}` filled with `{{name}}(...)`"
                for element in fill.elements:
                    cf.items.setdefault(fill.attr, []).append(ContainerItem(
                        tuple(origins_of(element, fill.attr, node.lineno, what)), fill.key,
                        fill.counted and id(node) not in repeated, fill.anywhere))
                continue
            named = named_attribute(node, self_name)
            if named is not None:
                name, named_value = named
                cf.attrs.setdefault(name, []).extend(
                    origins_of(named_value, name, node.lineno, f"`self.{name}` added as `{{name}}(...)`"))
                continue
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                if fn.name == "__init__" and cf.super_init is None and _is_super_init(node.value):
                    cf.super_init = node.value
                continue
            value: ast.expr | None
            ann: ast.expr | None
            if isinstance(node, ast.Assign):
                targets, value, ann = node.targets, node.value, None
            elif isinstance(node, ast.AnnAssign):
                targets, value, ann = [node.target], node.value, node.annotation
            else:
                continue
            for tgt in targets:
                if not (isinstance(tgt, ast.Attribute) and isinstance(tgt.value, ast.Name)
                        and tgt.value.id == self_name):
                    continue
                if value is not None:
                    cf.assigned.setdefault(tgt.attr, []).append(value)
                    for local in handed_locals(value):  # `self.layers = nn.ModuleList(layers)`
                        if local_items is None and local in construction_locals:  # (none else has slots)
                            local_items = _local_items(construction_locals, self_name, statements, repeated,
                                                       origins_of)
                        cf.items.setdefault(tgt.attr, []).extend(
                            local_items.get(local, ()) if local_items is not None else ())
                    if fn.name == "__init__" and isinstance(value, ast.Name) and value.id in params:
                        cf.param_attrs.setdefault(tgt.attr, value.id)
                # `X(...) if cond else None`: each branch is a possible origin; `X(...).to(...)`
                # and `(x := X(...))` are X's construction (construction_forms.leaves).
                # A single-assignment local stands for its value (`proj = X(...)`, `self.p = proj`).
                branches = leaves(value, construction_locals) if value is not None else [value]
                written = {id(part) for part in walk(value)} if value is not None else set()
                for branch in branches:
                    origin = _origin_of(branch, ann, params, resolve, path, node.lineno, tgt.attr,
                                        fn.name, frozenset(params), single,
                                        lambda q: index.class_location(q) is not None)
                    # a "call" origin is made of an ast.Call only (_origin_of)
                    if origin is not None and origin.kind == "call" and isinstance(branch, ast.Call) \
                            and value is not None and id(branch) not in written:  # (a call branch has a value)
                        # reached through a local: the evidence quotes both statements
                        origin = replace(origin, how=f"`self.{tgt.attr} = {_short(value)}`, built as "
                                                     f"`{dotted(branch.func)}(...)` (line {branch.lineno})")
                    elif origin is not None and origin.kind == "call" and isinstance(value, ast.Call) \
                            and isinstance(value.func, ast.Attribute) \
                            and branch is not value:  # `nn.Linear(...).to(...)`: say what was unwrapped
                        origin = replace(origin, how=f"{origin.how[:-1]}.{value.func.attr}(...)`")
                    if origin is not None:
                        cf.attrs.setdefault(tgt.attr, []).append(origin)

    if by_class is not None:
        for region in by_class[1]:  # a later definition of the same name wins, as at run time
            classes.register(f"{module}.{region.name}" if module else region.name, region, region.name)
        return facts
    if tree is None:  # neither a tree nor class regions: nothing to read
        return facts
    blocks = [iter(tree.body)]
    while blocks:  # statements in order, entering if/try blocks where they stand
        for stmt in blocks[-1]:
            if isinstance(stmt, ast.ClassDef):
                register_class(stmt)
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                facts.functions.setdefault(stmt.name, stmt)
            elif isinstance(stmt, (ast.If, ast.Try)):  # under `if TYPE_CHECKING:`, platform checks
                blocks.append(iter(stmt.body + stmt.orelse))
                break
        else:
            blocks.pop()
    return facts


def local_classes(tree: ast.Module, module: str):
    """(qualified name, node, name within the module) of each class defined in a function, at
    any depth (and each class nested in one): Python's qualified names, `outer.<locals>.Inner`,
    as function_walk.iter_functions gives their methods. Statements only, as `iter_statements`."""
    todo: list[tuple[list[ast.stmt], str, bool]] = [(tree.body, "", False)]
    while todo:
        body, qual, in_function = todo.pop()
        for stmt in body:
            if isinstance(stmt, ast.ClassDef):
                inner = f"{qual}.{stmt.name}" if qual else stmt.name
                if in_function:
                    yield (f"{module}.{inner}" if module else inner), stmt, inner
                todo.append((stmt.body, inner, in_function))
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                todo.append((stmt.body, f"{qual}.{stmt.name}.{LOCALS}" if qual else f"{stmt.name}.{LOCALS}", True))
            else:
                blocks = [getattr(stmt, name, None) or [] for name in ("body", "orelse", "finalbody")]
                blocks += [handler.body for handler in getattr(stmt, "handlers", None) or []]
                blocks += [case.body for case in getattr(stmt, "cases", None) or []]
                todo.extend((block, qual, in_function) for block in blocks if block)


def _local_items(construction_locals: dict[str, ast.expr], self_name: str, statements: list[ast.stmt],
                 repeated: set[int], origins_of) -> dict[str, list[ContainerItem]]:
    """The slots of each local container a method fills before handing it to `self`: `layers = [A(...)]`
    (or a comprehension), `nn.ModuleList()` / `{}`, then `layers.append(B(...))`, `heads["k"] = C(...)` (in statement
    order; a fill in a loop is uncounted). Only locals bound once to a list, tuple or dict display,
    a comprehension or a module container call: what `handed_locals` may give to `self.X`."""
    items: dict[str, list[ContainerItem]] = {}
    for name, bound in construction_locals.items():
        if isinstance(bound, (ast.List, ast.Tuple)) and not any(isinstance(e, ast.Starred) for e in bound.elts):
            made = f"`{name}` made with `{{name}}(...)`"
            items[name] = [ContainerItem(tuple(origins_of(element, name, bound.lineno, made)), None, True)
                           for element in bound.elts]
        elif isinstance(bound, (ast.ListComp, ast.GeneratorExp)):  # every item built alike, none counted
            items[name] = [ContainerItem(tuple(origins_of(bound.elt, name, bound.lineno,
                                                          f"`{name}` made of `{{name}}(...)`")), None, False)]
        elif isinstance(bound, ast.Dict):
            keys = [k.value if isinstance(k, ast.Constant) and isinstance(k.value, str) else None for k in bound.keys]
            if None not in keys:  # literal string keys only: a `**spread` or a computed key is unknown
                items[name] = [ContainerItem(tuple(origins_of(element, name, bound.lineno,
                                                              f"`{name}[{key!r}]` is `{{name}}(...)`")), key, False)
                               for key, element in zip(keys, bound.values)]
        elif isinstance(bound, ast.Call) and (dotted(bound.func) or "").rsplit(".", 1)[-1] in MODULE_CONTAINERS \
                and not bound.args and not bound.keywords:
            items[name] = []
    for node in statements:
        fill = container_fill(node, self_name, local=True)
        if fill is None or fill.attr not in items:
            continue
        what = f"`{fill.attr}[{fill.key!r}] = {{name}}(...)`" if fill.key is not None else \
            f"`{fill.attr}` filled with `{{name}}(...)`"
        for element in fill.elements:
            items[fill.attr].append(ContainerItem(tuple(origins_of(element, fill.attr, node.lineno, what)), fill.key,
                                                  fill.counted and id(node) not in repeated, fill.anywhere))
    return items


def _short(value: ast.expr, limit: int = 40) -> str:
    """An expression's source for an evidence line, cut to `limit` characters."""
    text = ast.unparse(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _single_return(fn) -> ast.expr | None:
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
        return body[0].value
    return None


# The names a call must have for CallFacts to read it (`_quant_root_call`; visit_calls'
# `isinstance`/`issubclass`).
CALL_WORDS = ("isinstance", "issubclass", "get_quant_method", "resolve_quant_method", "create_weights")


def names_a_call(text: str | None, region: regions.ClassRegion | None) -> bool:
    """Could the class's text hold a call CallFacts read? True unless that text (`region` of
    `text`) is ASCII (the parser reads other characters as these names) and names none of
    CALL_WORDS."""
    if text is None or region is None:
        return True
    start, end = region.start, region.end
    if not text.isascii() and not text[start:end].isascii():  # (a str knows whether it is ASCII)
        return True
    return any(text.find(word, start, end) >= 0 for word in CALL_WORDS)


def _quant_root_call(call: ast.Call, self_name: str) -> str:
    """Why this call makes the calling class a quantizable layer ("" when it does not)."""
    passes_self = any(isinstance(a, ast.Name) and a.id == self_name for a in call.args) or any(
        isinstance(k.value, ast.Name) and k.value.id == self_name and k.arg in ("layer", "module")
        for k in call.keywords)
    if not passes_self:
        return ""
    name = dotted(call.func) or ""
    last = name.rsplit(".", 1)[-1]
    if last in ("get_quant_method", "resolve_quant_method"):
        return f"`{name}(..., {self_name}, ...)` gives it a quant method, which decides its weight storage"
    if last == "create_weights":
        return f"`{name}({self_name}, ...)` lets a quant method create its weights"
    return ""


def iter_statements(body):
    """Statements only, through compound statements but not into nested defs: far cheaper than
    ast.walk, and attribute facts live in statements."""
    todo = list(reversed(body))
    while todo:
        stmt = todo.pop()
        yield stmt
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for name in ("body", "orelse", "finalbody"):
            todo.extend(reversed(getattr(stmt, name, None) or []))
        for h in getattr(stmt, "handlers", None) or []:
            todo.extend(reversed(h.body))
        for c in getattr(stmt, "cases", None) or []:
            todo.extend(reversed(c.body))


def statements_and_repeated(body: list[ast.stmt]) -> tuple[list[ast.stmt], set[int]]:
    """`list(iter_statements(body))`, in its order, and the ids of those statements that may run
    more than once (under a `for` or `while` body at any depth, a nested `def` itself included but
    not its body): a fill there adds an unknown number of slots. One walk for the three passes
    over a method's statements, which walked them each (and each loop's body once more)."""
    statements: list[ast.stmt] = []
    repeated: set[int] = set()
    # iter_statements' stack, each statement carrying whether a loop body holds it.
    todo = [(stmt, False) for stmt in reversed(body)]
    append, pop, push = statements.append, todo.pop, todo.extend
    while todo:
        stmt, looped = pop()
        append(stmt)
        if looped:
            repeated.add(id(stmt))
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        block = getattr(stmt, "body", None)
        if block:
            inner = looped or isinstance(stmt, (ast.For, ast.AsyncFor, ast.While))
            push([(s, inner) for s in reversed(block)])
        for name in ("orelse", "finalbody"):
            block = getattr(stmt, name, None)
            if block:
                push([(s, looped) for s in reversed(block)])
        for h in getattr(stmt, "handlers", None) or []:
            push([(s, looped) for s in reversed(h.body)])
        for c in getattr(stmt, "cases", None) or []:
            push([(s, looped) for s in reversed(c.body)])
    return statements, repeated


def _origin_of(value, ann, params, resolve, path, line, attr, method, method_params, single,
               is_class=lambda _q: False) -> AttrOrigin | None:
    # `self.x: Base | None = Cls(..., quant_config=None)`: the construction says more than the
    # annotation (it carries the config), so it wins when its class resolves.
    call_name = dotted(value.func) if isinstance(value, ast.Call) else None
    call_type = resolve(call_name) if call_name else None
    if ann is not None and not (call_type and is_class(call_type)):
        t = resolve(annotation_name(ann))
        if t:
            return AttrOrigin("annotation", t, f"`self.{attr}: {t.rsplit('.', 1)[-1]}` annotation", path, line)
    if isinstance(value, ast.Call):
        name = call_name
        if name:
            return AttrOrigin("call", resolve(name), f"`self.{attr} = {name}(...)`", path, line, value,
                              method, method_params, single)
    if isinstance(value, ast.Name) and value.id in params:
        t = resolve(annotation_name(params[value.id]))
        if t:
            return AttrOrigin("param", t, f"`self.{attr}` is set from parameter `{value.id}: {t.rsplit('.', 1)[-1]}`",
                              path, line)
    return None


class ProjectFacts:
    """Facts of the analysed file, built only if a site needs them, plus lazily parsed files
    that define base classes (kept on the index, so every file analysed against it shares them:
    many files' layers are defined in one `linear.py`). The index records which files were read
    (`QuantizableLayerIndex.reading`), so a cached result can be invalidated when one changes."""

    def __init__(self, index: QuantizableLayerIndex, load_file=None, reduce: bool = False):
        self.index = index
        # Files read for their class facts parsed with unread function bodies blanked
        # (core/regions.py): only in runs whose rules' reads of a tree are known.
        self.reduce = reduce
        self._by_module: dict[str, FileFacts] = {}
        self._pending: dict[str, tuple] = {}
        # The modules whose facts come from an analysed text (which may not be the file's).
        self._registered: set[str] = set()
        self._load_file = load_file  # path -> text or None

    @property
    def load_file(self):
        """path -> text or None: how facts of other project files are read."""
        return self._load_file

    def register(self, tree: ast.Module, module: str, path: str, is_package: bool, imports: dict[str, str]) -> None:
        self._pending[module] = (tree, module, path, is_package, imports)
        self._registered.add(module)

    def add(self, facts: FileFacts) -> None:
        self._by_module[facts.module] = facts

    def module_text(self, module: str) -> str | None:
        """The text `file_facts(module)` would parse, read for a test on text before it; None when
        its facts come from the analysed text (registered here, which may not be the file's) or it
        cannot be read. A module whose facts were already read from its file gives its text too: the
        tests on text then spare a whole-module parse and read (the guard engine's imported
        predicates, lazy exports), which with every rule on cost more than a fifth of a run."""
        if module in self._registered or self._load_file is None:
            return None
        header = self.index.modules.get(module)
        return self._load_file(header.path) if header is not None else None

    def file_facts(self, module: str, keep: bool = True) -> FileFacts | None:
        """The facts of `module`. `keep` False (a census that reads each file of a folder once):
        facts kept already serve, but facts built here are not kept, nor their trees, so that each
        is gone when its caller is done with it (vLLM 0.34.0's `deepseek_v41` family census held
        eleven parsed files at once: 6 MiB, a worker's peak)."""
        if module in self._by_module:
            return self._by_module[module]
        if module in self._pending:
            tree, module, path, is_pkg, imports = self._pending.pop(module)
            facts = build_file_facts(tree, module, path, is_pkg, self.index, imports)
            self.add(facts)
            return facts
        header = self.index.modules.get(module)
        if header is None or self._load_file is None:
            return None

        def build() -> FileFacts | None:
            text = self._load_file(header.path)
            if text is None:
                return None
            # Each class parsed from its own text when its facts are first asked for, in every
            # run: a file read for its class facts is most often read for one or two classes, and
            # with every rule on (no reduced parse) parsing such files whole was a sixth of a run.
            class_regions = regions.class_regions(text)
            if class_regions is not None:
                reduce = self.reduce
                return build_class_file_facts(text, class_regions, header.module, header.path, header.is_package,
                                              self.index, header.imports,
                                              (lambda: trees.parse_reduced(header.path, text)) if reduce
                                              else (lambda: trees.parse(header.path, text)), reduce)
            try:
                tree = trees.parse_reduced(header.path, text, keep=keep) if self.reduce \
                    else trees.parse(header.path, text, keep)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                return None
            return build_file_facts(tree, header.module, header.path, header.is_package, self.index, header.imports)

        key = ("reduced", header.path) if self.reduce else header.path
        if not keep:
            kept = self.index.kept_facts(key)
            # (reads made building them go to the frames open now, as a kept build's are replayed)
            return kept if kept is not None else build()
        facts = self.index.cached_facts(key, build)
        if facts is None:
            return None
        self.add(facts)
        return facts

    def may_hold(self, qualname: str, words: "re.Pattern[str]") -> bool:
        """Could the class's own text hold a match of `words`? False only when that
        text, not parsed yet, does not: its facts need not be built to learn that it defines no
        method or class-level value of that name. A model's bases are read for a storage method
        or a restricting value few of them define: on vLLM 0.34.0 this spared 205 of 588 class
        parses, 2% of a cold check's instructions, and testing for a storage method's `def`
        rather than its name 39 of the 264 left (1.7%)."""
        loc = self.index.class_location(qualname)
        if loc is None:
            return True
        facts = self.file_facts(loc[0].module)
        held = facts.classes.text_holds(qualname, words) \
            if facts is not None and isinstance(facts.classes, LazyClasses) else None
        return held is not False

    def class_facts(self, qualname: str) -> ClassFacts | None:
        loc = self.index.class_location(qualname)
        if loc is None:
            return None
        facts = self.file_facts(loc[0].module)
        return facts.classes.get(qualname) if facts else None

    def attr_origins(self, class_qualname: str, attr: str) -> tuple[str, list[AttrOrigin]] | None:
        """(the class in the MRO that assigns it, its origins), nearest first."""
        for ancestor in self.index.mro(class_qualname):
            class_facts = self.class_facts(ancestor)
            if class_facts and attr in class_facts.attrs:
                return ancestor, class_facts.attrs[attr]
        return None

    def getter(self, class_qualname: str, name: str) -> tuple[str, ast.expr] | None:
        for ancestor in self.index.mro(class_qualname):
            class_facts = self.class_facts(ancestor)
            if class_facts and name in class_facts.getters:
                return ancestor, class_facts.getters[name]
            if class_facts and name in class_facts.attrs:
                return None
        return None

    def init_of(self, class_qualname: str) -> tuple[str, Signature] | None:
        """The nearest `__init__` in the MRO that is not a bare `(*args, **kwargs)` pass-through."""
        for ancestor in self.index.mro(class_qualname):
            class_facts = self.class_facts(ancestor)
            if class_facts and class_facts.init is not None and (
                    class_facts.init.positional or class_facts.init.kwonly):
                return ancestor, class_facts.init
        return None

    def function(self, module: str, name: str) -> tuple[FileFacts, ast.FunctionDef | ast.AsyncFunctionDef] | None:
        known = self._by_module.get(module)
        if (known is None and module not in self._registered) or (isinstance(known, ClassesFirst) and not known.loaded):
            found = self._function_from_text(module, name)
            if found is not regions.UNTOLD:
                return found
        facts = self.file_facts(module)
        if facts is None or name not in facts.functions:
            return None
        return facts, facts.functions[name]

    def _function_from_text(self, module: str, name: str):
        """`function(module, name)` read from the function's own lines in its file's text, not
        from the module's facts (trees.parse_function): a call followed into another module
        wants one function, and parsing the module (reduced) for it was 8% of the characters a
        cold check of vLLM 0.34.0 parses. regions.UNTOLD when the text cannot tell. The file's
        answers are kept in the index's recently-used list of facts, as its facts would be."""
        header = self.index.modules.get(module)
        if header is None or self._load_file is None:
            return None

        def build() -> TextFunctions | None:
            text = self._load_file(header.path)
            return TextFunctions(FileFacts(header.module, header.path, header.imports, {}), text, self.index) \
                if text is not None else None

        functions = self.index.cached_facts(("functions", header.path), build)
        return functions.get(name) if functions is not None else None


class FunctionScope:
    """One function's parameters and local assignments, for alias and type resolution."""

    def __init__(self, fn: ast.FunctionDef | ast.AsyncFunctionDef | None, class_qualname: str | None,
                 nodes: list[ast.AST] | None = None):
        """`nodes`: walk_function(fn) already listed (a candidate's, shared by every rule)."""
        self.fn = fn
        self.class_qualname = class_qualname
        self.params: dict[str, ast.expr | None] = {}
        self.self_name: str | None = None
        self.assigns: dict[str, list[ast.expr | None]] = {}  # None: bound by a loop, `with` or `+=`
        # `proj: RowParallelLinear = ...` or a bare `proj: RowParallelLinear` before `for proj in`:
        # the declared type holds whatever the local is (re)bound to.
        self.annotations: dict[str, ast.expr] = {}
        # (first position, last position, parameters, locals) of each nested `def` or lambda the
        # walk enters (own_nodes): what it binds itself is another value under the same name there.
        self.shadows: list[tuple[tuple[int, int], tuple[int, int], frozenset[str], frozenset[str]]] = []
        if fn is None:
            return
        args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
        is_static = any(dotted(d) == "staticmethod" for d in fn.decorator_list)
        if class_qualname and args and not is_static:
            self.self_name = args[0].arg
            args = args[1:]
        for arg in args:
            self.params[arg.arg] = arg.annotation
        nested: list[ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda] = []
        for node in walk_function(fn) if nodes is None else nodes:
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.assigns.setdefault(target.id, []).append(node.value)
            elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and isinstance(node.target, ast.Name):
                if isinstance(node, ast.AnnAssign):
                    self.annotations.setdefault(node.target.id, node.annotation)
                if node.value is not None:
                    self.assigns.setdefault(node.target.id, []).append(node.value)
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.With, ast.AugAssign)):
                for bound_name in _store_names(node):
                    self.assigns.setdefault(bound_name, []).append(None)  # unknown value
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and node is not fn:
                nested.append(node)
        if nested:
            self.shadows = [_own_bindings(d) for d in nested]

    def values_at(self, name: ast.Name) -> list[ast.expr | None]:
        """The values `name` may hold where it is read: this function's assignments of it, but
        inside a nested `def` that binds the name itself, that def's own: none for a parameter
        (`def align(t, target)` beside `target = L.weight.dtype`), its own assignments for a local
        of it (whose values may still read this function's `self`)."""
        values = self.assigns.get(name.id, [])
        at = (name.lineno, name.col_offset)
        for first, last, params, own in self.shadows:
            if first <= at <= last:
                if name.id in params:
                    return []
                if name.id in own:
                    values = [v for v in values if v is not None and first <= (v.lineno, v.col_offset) <= last]
        return values


_END = 1 << 30  # a column past the end of any line


def _own_bindings(d: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) \
        -> tuple[tuple[int, int], tuple[int, int], frozenset[str], frozenset[str]]:
    """(first position, last position, parameters, locals) of a nested `def` (its body's lines) or
    lambda (its body expression): the names stored in a `def`'s body that it declares neither
    `global` nor `nonlocal` are its locals; a lambda has none (`:=` in it binds the enclosing
    function's name)."""
    params = parameter_names(d)
    if isinstance(d, ast.Lambda):
        body = d.body
        return ((body.lineno, body.col_offset), (body.end_lineno or body.lineno, body.end_col_offset or _END),
                params, frozenset())
    stored: set[str] = set()
    declared: set[str] = set()
    for n in ast.walk(d):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            stored.add(n.id)
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            declared.update(n.names)
    return ((d.body[0].lineno, 0), (d.end_lineno or d.lineno, _END), params,
            frozenset(stored - params - declared))


def _store_names(node) -> list[str]:
    targets = []
    if isinstance(node, (ast.For, ast.AsyncFor)):
        targets = [node.target]
    elif isinstance(node, ast.With):
        targets = [i.optional_vars for i in node.items if i.optional_vars is not None]
    elif isinstance(node, ast.AugAssign):
        targets = [node.target]
    out: list[str] = []
    for target in targets:
        out.extend(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return out


def walk_function(fn):
    """ast.walk over a function body and the closures it defines (nested functions at any depth,
    lambdas), not into classes other than those that are statements of its body or of its blocks,
    nor into a closure taking one of the function's parameter names (statements popped from the
    end; function_walk.own_nodes lists them, in this order)."""
    from dtype_lint.analysis.function_walk import own_nodes  # imports only `ast`; kept local

    yield from own_nodes(fn)
