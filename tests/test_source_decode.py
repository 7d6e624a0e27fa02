"""`FileText.decode` decodes as Python does (PEP 263 cookie or BOM, default UTF-8), through a
shortcut for files with neither a BOM nor `coding` on their first two lines: it must answer what
`tokenize.detect_encoding` and the decode after it answer, errors included."""

from __future__ import annotations

import io
import tokenize

from hypothesis import given, settings
from hypothesis import strategies as st

from dtype_lint.core.source import FileText


def _reference(data: bytes) -> tuple:
    """What decode answered before the shortcut: (text, encoding, bom) or the error it raised."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        bom = encoding == "utf-8-sig"
        text = data.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError) as error:
        return type(error), str(error)
    if text.startswith("\ufeff"):
        text = text[1:]
    return text, "utf-8" if bom else encoding, bom


def _decoded(data: bytes) -> tuple:
    try:
        ft = FileText.decode(data)
    except (SyntaxError, UnicodeDecodeError, LookupError) as error:
        return type(error), str(error)
    return ft.text, ft.encoding, ft.bom


_HEADS = [b"", b"\xef\xbb\xbf", b"# -*- coding: latin-1 -*-\n", b"#!/usr/bin/env python\n# coding=utf-8\n",
          b"\n# vim: set fileencoding=cp1252 :\n", b"x = 1\n# coding: latin-1\n", b"# coding: nonesuch\n",
          b"\xef\xbb\xbf# coding: latin-1\n", b"# decoding things\n", b"\xff\xfe = 1\n", b"\r# coding: latin-1\r"]


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(_HEADS), st.binary(max_size=40), st.text(max_size=40))
def test_decode_answers_as_detect_encoding(head: bytes, raw: bytes, text: str) -> None:
    for body in (raw, text.encode("utf-8"), text.encode("utf-8") + raw):
        data = head + body
        assert _decoded(data) == _reference(data)


def test_the_shortcut_decodes_plain_utf8_and_leaves_cookies_to_python() -> None:
    assert FileText.decode("x = 'é'\n".encode()).text == "x = 'é'\n"
    latin = FileText.decode(b"# -*- coding: latin-1 -*-\nx = '\xe9'\n")
    assert (latin.text, latin.encoding) == ("# -*- coding: latin-1 -*-\nx = 'é'\n", "iso-8859-1")
    bom = FileText.decode(b"\xef\xbb\xbfx = 1\n")
    assert (bom.text, bom.encoding, bom.bom) == ("x = 1\n", "utf-8", True)
