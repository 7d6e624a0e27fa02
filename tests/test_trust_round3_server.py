"""Trusted like a compiler, round three (#36): the editor protocol, and the server's writes.

The server runs in this process (pygls's objects, its workspace set up as `initialize` sets it
up); a small client model applies workspace edits as LSP says an editor does: resource
operations first-to-last, a versioned document edit rejected when the document has moved on,
every edit of one TextDocumentEdit against the original text, a range past the document's end
clamped to it (VS Code validates ranges, Neovim clamps). Each case failed on de0faa5 (the note
says how) unless its note says it guards behaviour that was already right.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_runner import dtl
from lsprotocol import types
from pygls.uris import from_fs_path, to_fs_path
from pygls.workspace import Workspace
from tiny_project import ATTN, FIXED_CALL, tree_bytes, write_tree

from dtype_lint.server import DtypeLintServer, build_server

PYPROJECT = '[tool.dtype-lint]\nhelper = "pkg.dtypes:get_layer_input_dtype"\n'
# A second file with the same site: its quick-fix also finds the helper missing.
FILES = {"pyproject.toml": PYPROJECT, "pkg/__init__.py": "", "pkg/attn.py": ATTN,
         "pkg/attn2.py": ATTN.replace("class Attn", "class Attn2")}


def start(workspace_root: Path | None) -> tuple[DtypeLintServer, list]:
    """A server whose workspace is `workspace_root` (None: no folder open), and the diagnostics
    it publishes."""
    server = build_server()
    folders = [types.WorkspaceFolder(uri=from_fs_path(str(workspace_root)), name="ws")] if workspace_root else []
    server.protocol._workspace = Workspace(from_fs_path(str(workspace_root)) if workspace_root else None,
                                           types.TextDocumentSyncKind.Full, folders)
    published: list = []
    server.text_document_publish_diagnostics = published.append
    return server, published


def open_document(server: DtypeLintServer, path: Path, version: int = 1, text: str | None = None) -> str:
    uri = from_fs_path(str(path))
    server.workspace.put_text_document(types.TextDocumentItem(
        uri=uri, language_id="python", version=version, text=path.read_text(encoding="utf-8") if text is None else text))
    return uri


def quick_fix(server: DtypeLintServer, uri: str) -> types.CodeAction | None:
    """The quick-fix offered for the document's one diagnostic (None: none offered)."""
    found, text = server.findings(uri)
    (finding,) = found
    diagnostic = server.diagnostic(finding, text.splitlines(keepends=True))
    actions = server.code_actions(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=diagnostic.range,
        context=types.CodeActionContext(diagnostics=[diagnostic], only=[types.CodeActionKind.QuickFix])))
    return actions[0] if actions else None


def apply_text_edits(text: str, edits: list[types.TextEdit]) -> str:
    """Edits in UTF-16 positions (our texts are ASCII) against the original text; a position past
    the last line is the document's end."""
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def offset(pos: types.Position) -> int:
        if pos.line >= len(lines):
            return len(text)
        return min(offsets[pos.line] + pos.character, offsets[pos.line + 1])

    for edit in sorted(edits, key=lambda e: offset(e.range.start), reverse=True):
        text = text[: offset(edit.range.start)] + edit.new_text + text[offset(edit.range.end):]
    return text


class Editor:
    """The documents an editor holds (uri -> (version, text)); files not open are read from disk."""

    def __init__(self) -> None:
        self.open: dict[str, tuple[int, str]] = {}

    def text(self, uri: str) -> str:
        if uri in self.open:
            return self.open[uri][1]
        return Path(to_fs_path(uri)).read_text(encoding="utf-8")

    def apply(self, edit: types.WorkspaceEdit) -> bool:
        """All or nothing, as `workspace/applyEdit`: False (nothing changed) when a versioned
        document edit names a version the document no longer has."""
        for change in edit.document_changes:
            if isinstance(change, types.TextDocumentEdit) and change.text_document.version is not None:
                held = self.open.get(change.text_document.uri)
                if held is None or held[0] != change.text_document.version:
                    return False
        for change in edit.document_changes:
            if isinstance(change, types.CreateFile):
                path = Path(to_fs_path(change.uri))
                if path.exists():
                    assert change.options and (change.options.ignore_if_exists or change.options.overwrite), \
                        "creating an existing file fails the whole edit"
                    if change.options.ignore_if_exists and not change.options.overwrite:
                        continue
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("", encoding="utf-8")
            else:
                uri = change.text_document.uri
                new_text = apply_text_edits(self.text(uri), change.edits)
                if uri in self.open:
                    self.open[uri] = (self.open[uri][0] + 1, new_text)
                else:
                    Path(to_fs_path(uri)).write_text(new_text, encoding="utf-8")
        return True


def document_edit(action: types.CodeAction, uri: str) -> types.TextDocumentEdit:
    (edit,) = [c for c in action.edit.document_changes
               if isinstance(c, types.TextDocumentEdit) and c.text_document.uri == uri]
    return edit


# de0faa5: one TextEdit from (0, 0) to the document's end, holding the whole fixed file.
def test_a_quick_fix_replaces_only_the_lines_it_changes(tmp_path: Path):
    root = write_tree(tmp_path / "ws", FILES)
    server, _ = start(root)
    uri = open_document(server, root / "pkg/attn.py", version=7)
    action = quick_fix(server, uri)
    edit = document_edit(action, uri)
    assert edit.text_document.version == 7
    lines = ATTN.splitlines(keepends=True)
    touched: set[int] = set()
    for text_edit in edit.edits:
        touched |= set(range(text_edit.range.start.line, max(text_edit.range.end.line, text_edit.range.start.line + 1)))
    # The import goes in near the top and the cast line changes: the class body around them is
    # not rewritten.
    untouched = [i for i, line in enumerate(lines) if "def __init__" in line or "super().__init__()" in line
                 or "return self.kv_b_proj(x)" in line]
    assert untouched and not touched & set(untouched), [(e.range, e.new_text) for e in edit.edits]
    assert len(touched) < len(lines) / 2
    fixed = apply_text_edits(ATTN, edit.edits)
    assert FIXED_CALL in fixed and "from pkg.dtypes import get_layer_input_dtype\n" in fixed
    compile(fixed, "attn.py", "exec")
    # The same text the fixer computes for the whole file: minimal, not different.
    assert fixed == server.buffer(to_fs_path(uri)).fix(ATTN, only=None).text


def test_an_edit_at_the_end_of_a_file_without_a_final_newline(tmp_path: Path):
    """A last line without a newline ends mid-line: the range must end there, not on a next line
    the document does not have (de0faa5's whole-document edit ended on that line)."""
    source = ATTN.rstrip("\n")
    root = write_tree(tmp_path / "ws", {**FILES, "pkg/attn.py": source.replace(
        "        x = x.to(self.kv_b_proj.weight.dtype)\n        return self.kv_b_proj(x)",
        "        return self.kv_b_proj(x.to(self.kv_b_proj.weight.dtype))")})
    server, _ = start(root)
    uri = open_document(server, root / "pkg/attn.py")
    text = (root / "pkg/attn.py").read_text(encoding="utf-8")
    edit = document_edit(quick_fix(server, uri), uri)
    last = len(text.splitlines()) - 1
    assert all(e.range.end.line <= last for e in edit.edits), [e.range for e in edit.edits]
    fixed = apply_text_edits(text, edit.edits)
    assert fixed == server.buffer(to_fs_path(uri)).fix(text, only=None).text
    compile(fixed, "attn.py", "exec")


# Already right on de0faa5 (it named the version); guarded here beside the minimal edits.
def test_a_quick_fix_for_an_older_version_is_rejected_by_the_client(tmp_path: Path):
    root = write_tree(tmp_path / "ws", FILES)
    server, _ = start(root)
    uri = open_document(server, root / "pkg/attn.py", version=1)
    action = quick_fix(server, uri)
    editor = Editor()
    # The user types a line at the top before applying: version 2, every line moved down.
    editor.open[uri] = (2, "# a comment\n" + ATTN)
    assert not editor.apply(action.edit)
    assert editor.open[uri] == (2, "# a comment\n" + ATTN)
    assert not (root / "pkg/dtypes.py").exists(), "a rejected edit creates nothing"
    # Recomputed for version 2, it applies.
    open_document(server, root / "pkg/attn.py", version=2, text="# a comment\n" + ATTN)
    assert editor.apply(quick_fix(server, uri).edit)
    assert editor.open[uri][1].startswith("# a comment\n") and FIXED_CALL in editor.open[uri][1]


# de0faa5: each quick-fix inserted the helper module at (0, 0): applying both defined it twice,
# the module no longer compiled, and `dtype-lint check` exited 2.
def test_two_quick_fixes_computed_before_either_is_applied_define_the_helper_once(tmp_path: Path):
    root = write_tree(tmp_path / "ws", FILES)
    server, _ = start(root)
    first_uri = open_document(server, root / "pkg/attn.py")
    second_uri = open_document(server, root / "pkg/attn2.py")
    first, second = quick_fix(server, first_uri), quick_fix(server, second_uri)
    assert not (root / "pkg/dtypes.py").exists()
    creates = [c for c in second.edit.document_changes if isinstance(c, types.CreateFile)]
    assert creates and all(c.options.ignore_if_exists and not c.options.overwrite for c in creates)
    editor = Editor()
    editor.open = {first_uri: (1, ATTN), second_uri: (1, FILES["pkg/attn2.py"])}
    assert editor.apply(first.edit) and editor.apply(second.edit)
    helper = (root / "pkg/dtypes.py").read_text(encoding="utf-8")
    assert helper.count("def get_layer_input_dtype(") == 1, helper
    compile(helper, "dtypes.py", "exec")
    # Saved, the project checks clean (exit 0), as after `dtype-lint check --fix`.
    (root / "pkg/attn.py").write_text(editor.open[first_uri][1], encoding="utf-8")
    (root / "pkg/attn2.py").write_text(editor.open[second_uri][1], encoding="utf-8")
    proc = dtl(root, "check", ".", "--no-cache")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fixed = write_tree(tmp_path / "cli", FILES)
    assert dtl(fixed, "check", ".", "--fix", "--no-cache").returncode == 0
    assert helper == (fixed / "pkg/dtypes.py").read_text(encoding="utf-8")


def test_a_helper_module_open_in_the_editor_is_edited_under_its_version(tmp_path: Path):
    """The helper's module open (new, unsaved, empty): the edit is for that buffer's version; once
    it defines the helper, a later quick-fix does not define it again."""
    root = write_tree(tmp_path / "ws", FILES)
    server, _ = start(root)
    first_uri = open_document(server, root / "pkg/attn.py")
    helper_uri = from_fs_path(str(root / "pkg/dtypes.py"))
    server.workspace.put_text_document(types.TextDocumentItem(uri=helper_uri, language_id="python", version=3,
                                                              text=""))
    edit = document_edit(quick_fix(server, first_uri), helper_uri)
    assert edit.text_document.version == 3
    defined = apply_text_edits("", edit.edits)
    assert defined.count("def get_layer_input_dtype(") == 1
    server.workspace.put_text_document(types.TextDocumentItem(uri=helper_uri, language_id="python", version=4,
                                                              text=defined))
    second_uri = open_document(server, root / "pkg/attn2.py")
    second = quick_fix(server, second_uri)
    assert not [c for c in second.edit.document_changes
                if isinstance(c, types.TextDocumentEdit) and c.text_document.uri == helper_uri]


# de0faa5: diagnostics of a file outside the workspace created `.dtype_lint_cache/` beside it
# (in site-packages), and its quick-fix edited the installed package and created the helper there.
@pytest.mark.parametrize("workspace", ["folder", "none"])
def test_a_file_outside_the_workspace_is_analysed_without_writing_there(tmp_path: Path, workspace: str):
    site = write_tree(tmp_path / "site-packages", {"pkg/__init__.py": "", "pkg/attn.py": ATTN})
    root = write_tree(tmp_path / "ws", FILES)
    before = tree_bytes(site, cache=True)
    server, published = start(root if workspace == "folder" else None)
    uri = open_document(server, site / "pkg/attn.py")
    server.publish(uri, fresh=True)
    (params,) = published
    assert [d.code for d in params.diagnostics] == ["DTL001"], "still analysed"
    assert tree_bytes(site, cache=True) == before
    assert not list(site.rglob(".dtype_lint_cache")) and not list(tmp_path.glob(".dtype_lint_cache"))
    assert quick_fix(server, uri) is None, "no edit of an installed package"
    assert tree_bytes(site, cache=True) == before


# de0faa5: the quick-fix of a file reached through a link in the workspace edited the installed
# package the link leads to.
def test_a_file_reached_through_a_link_in_the_workspace_is_outside_it(tmp_path: Path):
    site = write_tree(tmp_path / "site-packages", {"pkg/__init__.py": "", "pkg/attn.py": ATTN})
    root = write_tree(tmp_path / "ws", FILES)
    os.symlink(site / "pkg", root / "linked")
    before = tree_bytes(site, cache=True)
    server, published = start(root)
    uri = open_document(server, root / "linked/attn.py")
    server.publish(uri, fresh=True)
    assert [d.code for d in published[0].diagnostics] == ["DTL001"]
    assert quick_fix(server, uri) is None
    assert tree_bytes(site, cache=True) == before
    assert quick_fix(server, open_document(server, root / "pkg/attn.py")) is not None


def test_a_file_in_the_workspace_still_uses_the_cache(tmp_path: Path):
    """The cache is kept where it belongs (the workspace's project root): only outside is it off."""
    root = write_tree(tmp_path / "ws", FILES)
    server, published = start(root)
    uri = open_document(server, root / "pkg/attn.py")
    server.publish(uri, fresh=True)
    assert [d.code for d in published[0].diagnostics] == ["DTL001"]
    assert (root / ".dtype_lint_cache").is_dir()


def test_a_workspace_folder_inside_a_project_gets_no_cache_above_it(tmp_path: Path):
    """The project's root (its pyproject.toml) is above the opened folder: the cache would be
    created there, outside the workspace; the file is analysed without it. (de0faa5 created
    `.dtype_lint_cache/` in the project root.)"""
    root = write_tree(tmp_path / "proj", FILES)
    before = tree_bytes(root, cache=True)
    server, published = start(root / "pkg")
    uri = open_document(server, root / "pkg/attn.py")
    server.publish(uri, fresh=True)
    assert [d.code for d in published[0].diagnostics] == ["DTL001"]
    assert tree_bytes(root, cache=True) == before
    # Its quick-fix edits the file and creates the helper in the workspace folder: offered.
    assert quick_fix(server, uri) is not None
    assert tree_bytes(root, cache=True) == before
