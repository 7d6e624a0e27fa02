"""`dtype-lint server`, driven over stdio by pygls's own LanguageClient (a real LSP client in
another process's place): initialize, open a document, receive its diagnostic, ask for the code
actions at it, apply the quick-fix's workspace edit, and see the diagnostics of the fixed text
come back empty.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

# pygls is in the test extra: a missing one fails here, it is never skipped.
from lsprotocol import types
from pygls.lsp.client import LanguageClient
from pygls.uris import from_fs_path, to_fs_path
from tiny_project import ATTN

PYPROJECT = '[tool.dtype-lint]\nhelper = "pkg.dtypes:get_layer_input_dtype"\nexclude = ["vendored"]\n'


def make_project(root: Path) -> Path:
    for rel, text in {"pyproject.toml": PYPROJECT, "pkg/__init__.py": "", "pkg/attn.py": ATTN,
                      "vendored/__init__.py": "", "vendored/attn.py": ATTN}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def apply_text_edits(text: str, edits: list[types.TextEdit]) -> str:
    """Apply LSP edits (UTF-16 positions; our test text is ASCII) the way an editor does."""
    lines = text.splitlines(keepends=True) + [""]
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def offset(pos: types.Position) -> int:
        return offsets[min(pos.line, len(lines) - 1)] + pos.character

    for edit in sorted(edits, key=lambda e: offset(e.range.start), reverse=True):
        text = text[: offset(edit.range.start)] + edit.new_text + text[offset(edit.range.end):]
    return text


async def session(root: Path, command: tuple[str, ...] = (sys.executable, "-m", "dtype_lint", "server")) -> dict:
    client = LanguageClient("test-client", "1")
    published: dict[str, list] = {}
    arrived = asyncio.Event()

    @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def on_diagnostics(params: types.PublishDiagnosticsParams) -> None:
        published.setdefault(params.uri, []).append(params.diagnostics)
        arrived.set()

    async def next_diagnostics(uri: str, count: int) -> list:
        while len(published.get(uri, [])) < count:
            arrived.clear()
            await asyncio.wait_for(arrived.wait(), timeout=60)
        return published[uri][count - 1]

    await client.start_io(*command, cwd=str(root))
    out: dict = {}
    try:
        await client.initialize_async(types.InitializeParams(
            capabilities=types.ClientCapabilities(), root_uri=from_fs_path(str(root)),
            workspace_folders=[types.WorkspaceFolder(uri=from_fs_path(str(root)), name="p")]))
        client.initialized(types.InitializedParams())
        uri = from_fs_path(str(root / "pkg/attn.py"))
        text = (root / "pkg/attn.py").read_text(encoding="utf-8")
        client.text_document_did_open(types.DidOpenTextDocumentParams(
            types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
        (diagnostic,) = await next_diagnostics(uri, 1)
        out["diagnostic"] = diagnostic
        actions = await client.text_document_code_action_async(types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), range=diagnostic.range,
            context=types.CodeActionContext(diagnostics=[diagnostic])))
        out["actions"] = actions
        quick = next(a for a in actions if a.kind == types.CodeActionKind.QuickFix)
        # Apply the workspace edit as an editor would: create files, edit documents.
        fixed_text = text
        for change in quick.edit.document_changes:
            if isinstance(change, types.CreateFile):
                path = Path(to_fs_path(change.uri))
                path.parent.mkdir(parents=True, exist_ok=True)
                path.touch()
            elif change.text_document.uri == uri:
                fixed_text = apply_text_edits(fixed_text, change.edits)
            else:
                path = Path(to_fs_path(change.text_document.uri))
                path.write_text(apply_text_edits(path.read_text(encoding="utf-8"), change.edits), encoding="utf-8")
        out["fixed_text"] = fixed_text
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=fixed_text)]))
        out["after_change"] = await next_diagnostics(uri, 2)
        # Saved (the editor writes the text, then notifies): diagnostics again, from a fresh look.
        (root / "pkg/attn.py").write_text(fixed_text, encoding="utf-8")
        client.text_document_did_save(types.DidSaveTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri=uri)))
        out["after_save"] = await next_diagnostics(uri, 3)
        # An excluded file gets no diagnostics.
        vendored = from_fs_path(str(root / "vendored/attn.py"))
        client.text_document_did_open(types.DidOpenTextDocumentParams(
            types.TextDocumentItem(uri=vendored, language_id="python", version=1, text=ATTN)))
        out["excluded"] = await next_diagnostics(vendored, 1)
        await client.shutdown_async(None)
        client.exit(None)
    finally:
        await client.stop()
    return out


@pytest.mark.slow
def test_a_session_receives_a_diagnostic_and_applies_its_quick_fix(tmp_path: Path):
    root = make_project(tmp_path / "p")
    out = asyncio.run(session(root))
    diagnostic = out["diagnostic"]
    assert diagnostic.code == "DTL001" and diagnostic.source == "dtype-lint"
    assert diagnostic.severity == types.DiagnosticSeverity.Error
    # ATTN line 11: `        x = x.to(self.kv_b_proj.weight.dtype)`, the expression from column 13.
    assert (diagnostic.range.start.line, diagnostic.range.start.character) == (10, 12)
    assert "storage dtype" in diagnostic.message
    titles = [a.title for a in out["actions"]]
    assert any(t.startswith("dtype-lint: ") and t.endswith("(DTL001)") for t in titles), titles
    assert any(t.startswith("dtype-lint: fix all") for t in titles), titles
    fixed = out["fixed_text"]
    assert "from pkg.dtypes import get_layer_input_dtype\n" in fixed
    assert "get_layer_input_dtype(self.kv_b_proj, True)" in fixed
    compile(fixed, "attn.py", "exec")
    # The quick-fix created the helper it imports, and the fixed text has no finding left.
    assert "def get_layer_input_dtype" in (root / "pkg/dtypes.py").read_text(encoding="utf-8")
    assert list(out["after_change"]) == [] and list(out["after_save"]) == []
    assert list(out["excluded"]) == []
