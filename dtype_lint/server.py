"""`dtype-lint server`: a Language Server (LSP over stdio, built on pygls) for editors.

- Diagnostics are published for a Python document when it is opened, changed and saved: the
  findings of its current text (unsaved edits included), judged in its project exactly as
  `dtype-lint check FILE` judges the file on disk (configuration, excludes, per-file ignores,
  suppressions, the project's class index). A file the configuration excludes gets none.
- Each finding with a safe fix is offered as a quick-fix code action ("dtype-lint: <what the fix
  does>"), and "dtype-lint: fix all" (`source.fixAll.dtype-lint`) applies every safe fix of the
  document. A quick-fix edits the document as `--fix` would (the import of the shared helper
  included) and, when the helper module does not exist yet, creates it in the same workspace
  edit, so the fixed file imports something that exists.
- A quick-fix is minimal, versioned and idempotent (server_edits.py): its edits replace only the
  changed lines, name the document version they were computed for (a client rejects them once
  the document has changed), and the helper is created with `CreateFile(ignoreIfExists)` plus an
  edit that defines it only where it is not defined yet: two quick-fixes computed before either
  is applied (in two files that both need the helper) leave one definition.
- Ranges use the position encoding negotiated with the client (UTF-16 code units unless it
  prefers UTF-32 or UTF-8).
- Nothing is written outside the workspace folders: a file outside them (a go-to-definition
  into site-packages) is analysed without the cache (which would be created beside it), and
  gets no quick-fix (its edit would change an installed package, or create the helper there).

The project's class index is read once per file and kept until that file is saved (a save may
change what other files see only through that file; reopen a file to re-read the whole project).
Needs the `lsp` extra (`pip install -e '.[lsp]'` from a checkout): pygls.
"""

from __future__ import annotations

import logging
import os
import threading
from urllib.parse import unquote

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import from_fs_path, to_fs_path

from dtype_lint import __version__
from dtype_lint.core.findings import Finding

SOURCE = "dtype-lint"
FIX_ALL = types.CodeActionKind.SourceFixAll + ".dtype-lint"

log = logging.getLogger(__name__)


class DtypeLintServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("dtype-lint", __version__, text_document_sync_kind=types.TextDocumentSyncKind.Full)
        self.buffers: dict[str, object] = {}  # fs path -> engine.buffer.Buffer
        self.lock = threading.Lock()

    # ---- analysis ----------------------------------------------------------------------------

    def workspace_roots(self) -> list[str]:
        """The workspace folders (and the root the client named), as real paths."""
        uris = [folder.uri for folder in self.workspace.folders.values()]
        if self.workspace.root_uri:
            uris.append(self.workspace.root_uri)
        roots = []
        for uri in uris:
            path = to_fs_path(uri)
            if path:
                roots.append(os.path.realpath(path))
        return roots

    def in_workspace(self, path: str) -> bool:
        """`path` lies in a workspace folder, symbolic links resolved (a link in the workspace
        to a file elsewhere is elsewhere)."""
        real = os.path.realpath(path)
        return any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in self.workspace_roots())

    def buffer(self, path: str, fresh: bool = False):
        from dtype_lint.core.config import load_for_run
        from dtype_lint.run.buffer import open_buffer

        with self.lock:
            if fresh or path not in self.buffers:
                config = load_for_run([path] if os.path.exists(path) else [os.path.dirname(path) or "."])
                # The cache lives in the file's project root: for a file outside the workspace
                # that is a folder the user never opened (an installed package), and a workspace
                # folder inside a project has its root above it. No cache is written there.
                cache = os.path.join(str(config.root), str(config.cache_dir))
                self.buffers[path] = open_buffer(path, config,
                                                 use_cache=self.in_workspace(path) and self.in_workspace(cache))
            return self.buffers[path]

    def findings(self, uri: str, fresh: bool = False) -> tuple[list[Finding], str]:
        document = self.workspace.get_text_document(uri)
        path = to_fs_path(uri)
        if path is None or not path.endswith((".py", ".pyi")):
            return [], document.source
        return self.buffer(path, fresh).findings(document.source), document.source

    def publish(self, uri: str, fresh: bool = False) -> None:
        from dtype_lint.core.config import ConfigError
        from dtype_lint.run.pipeline import UserError

        try:
            found, text = self.findings(uri, fresh)
        except (ConfigError, UserError) as error:
            self.window_show_message(types.ShowMessageParams(types.MessageType.Error, f"dtype-lint: {error}"))
            return
        lines = text.splitlines(keepends=True)
        diagnostics = [self.diagnostic(f, lines) for f in found]
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics))

    def diagnostic(self, f: Finding, lines: list[str]) -> types.Diagnostic:
        severity = (types.DiagnosticSeverity.Warning if f.severity == "warning" or f.confidence == "low"
                    else types.DiagnosticSeverity.Error)
        return types.Diagnostic(
            range=self.range(f, lines), message=f.message, severity=severity, code=f.code, source=SOURCE,
            data={"code": f.code, "scope": f.scope, "expression": f.expression, "line": f.span.line,
                  "fix": f.fix.description if f.fix is not None and f.fix.safe else None},
        )

    def range(self, f: Finding, lines: list[str]) -> types.Range:
        return types.Range(start=self.position(lines, f.span.line, f.span.col),
                           end=self.position(lines, f.span.end_line, f.span.end_col))

    def position(self, lines: list[str], line: int, col: int) -> types.Position:
        """A 1-based line and 1-based character column as an LSP position in the agreed encoding."""
        text = lines[line - 1] if 0 < line <= len(lines) else ""
        prefix = text[: max(col - 1, 0)]
        encoding = self.workspace.position_encoding  # negotiated by pygls from the client's offer
        if encoding == types.PositionEncodingKind.Utf32:
            character = len(prefix)
        elif encoding == types.PositionEncodingKind.Utf8:
            character = len(prefix.encode("utf-8", "surrogatepass"))
        else:
            character = len(prefix.encode("utf-16-le", "surrogatepass")) // 2
        return types.Position(line=max(line - 1, 0), character=character)

    # ---- fixes -------------------------------------------------------------------------------

    def fix_edit(self, uri: str, wanted) -> tuple[types.WorkspaceEdit | None, list[Finding]]:
        """The workspace edit applying the safe fixes of the findings `wanted` selects (None: the
        fixer applied nothing, or the edit would write outside the workspace), and the findings
        it fixed. Minimal, versioned and idempotent: see server_edits.py."""
        from dtype_lint.server_edits import changed_line_edits, defines, helper_definition_edit

        document = self.workspace.get_text_document(uri)
        path = to_fs_path(uri)
        if path is None or not self.in_workspace(path):
            return None, []
        version = document.version  # read with the text the fix is computed from
        source = document.source
        buffer = self.buffer(path)
        outcome = buffer.fix(source, unsafe=False, only=wanted)
        if not outcome.changed:
            return None, []
        changes: list = []
        helper = buffer.helper_to_create(outcome.applied)
        if helper is not None:
            created = [*helper.package_markers, helper.path]
            if not all(self.in_workspace(str(p)) for p in created):
                return None, []
            for new_file in created:
                changes.append(types.CreateFile(uri=from_fs_path(str(new_file)),
                                                options=types.CreateFileOptions(ignore_if_exists=True)))
            helper_uri = from_fs_path(str(helper.path))
            # Open in the editor (unsaved, perhaps): its text and version are what the edit is for.
            open_helper = self.workspace.text_documents.get(unquote(helper_uri))  # pygls's keys
            current = open_helper.source if open_helper is not None else ""
            if not defines(current, helper.func):
                changes.append(types.TextDocumentEdit(
                    text_document=types.OptionalVersionedTextDocumentIdentifier(
                        uri=helper_uri, version=open_helper.version if open_helper is not None else None),
                    edits=[helper_definition_edit(helper.source, current, self.position)]))
        changes.append(types.TextDocumentEdit(
            text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version),
            edits=changed_line_edits(source, outcome.text, self.position)))
        return types.WorkspaceEdit(document_changes=changes), outcome.applied

    def code_actions(self, params: types.CodeActionParams) -> list[types.CodeAction]:
        uri = params.text_document.uri
        actions = []
        only = params.context.only
        if not only or any(k.startswith(types.CodeActionKind.QuickFix) for k in only):
            for diagnostic in params.context.diagnostics:
                data = diagnostic.data if isinstance(diagnostic.data, dict) else None
                if diagnostic.source != SOURCE or not data or not data.get("fix"):
                    continue
                key = (data["code"], data["scope"], data["expression"])
                edit, fixed = self.fix_edit(uri, lambda f, key=key: (f.code, f.scope, f.expression) == key)
                if edit is None:
                    continue
                actions.append(types.CodeAction(
                    title=f"dtype-lint: {data['fix']} ({data['code']})", kind=types.CodeActionKind.QuickFix,
                    diagnostics=[diagnostic], edit=edit, is_preferred=True))
        if not only or any(FIX_ALL.startswith(k) for k in only):
            edit, fixed = self.fix_edit(uri, None)
            if edit is not None:
                actions.append(types.CodeAction(title=f"dtype-lint: fix all ({len(fixed)} safe fixes)",
                                                kind=FIX_ALL, edit=edit))
        return actions


def build_server() -> DtypeLintServer:
    server = DtypeLintServer()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: DtypeLintServer, params: types.DidOpenTextDocumentParams) -> None:
        ls.publish(params.text_document.uri, fresh=True)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: DtypeLintServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.publish(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: DtypeLintServer, params: types.DidSaveTextDocumentParams) -> None:
        from dtype_lint.core.project_style import project_style

        project_style.cache_clear()  # a saved pyproject.toml may change the line length or sections
        ls.publish(params.text_document.uri, fresh=True)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: DtypeLintServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=params.text_document.uri,
                                                                            diagnostics=[]))

    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(
        code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL]))
    def code_action(ls: DtypeLintServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        return ls.code_actions(params)

    return server


def serve() -> int:
    build_server().start_io()
    return 0
