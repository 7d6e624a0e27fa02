"""What a cold check imports of the standard library: not the modules that only writing,
configuration files, OpenSSL hashing or a help text's width need. Each costs a check's peak RSS
for nothing (vLLM 0.34.0, cold `-j 1`: hashlib's OpenSSL 3.6 MiB; tempfile, tomllib and
configparser about 1 MiB; argparse's shutil, with zlib, bz2 and lzma, 0.7 MiB)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cli_runner import heavy_imports_of
from tiny_project import ATTN, write_tree

from dtype_lint import cli
from dtype_lint.core import digests

UNNEEDED = ("_hashlib", "hashlib", "tempfile", "shutil", "tomllib", "configparser", "bz2", "lzma")


def test_a_cold_check_without_configuration_files_imports_none_of_them(tmp_path: Path):
    root = write_tree(tmp_path / "p", {"proj/__init__.py": "", "proj/attn.py": ATTN})
    for args in (("check", "--no-cache", "--exit-zero", "-j", "1", "."),
                 ("check", "--no-cache", "--exit-zero", "--output-format", "json", "--select", "ALL", ".")):
        printed, imported = heavy_imports_of(root, *args, modules=UNNEEDED)
        assert "DTL001" in printed  # a finding, its fix planned: the helper chosen, the style read
        assert imported == "[]", (args, imported)


def test_the_digests_are_hashlibs():
    import hashlib

    data = "a\tb\nλ".encode("utf-8", "surrogatepass")
    assert digests.sha1(data).hexdigest() == hashlib.sha1(data).hexdigest()
    assert digests.sha256(data).hexdigest() == hashlib.sha256(data).hexdigest()
    assert digests.blake2b(data, digest_size=16).digest() == hashlib.blake2b(data, digest_size=16).digest()
    h = digests.sha1()
    h.update(b"a")
    h.update(b"b")
    assert h.hexdigest() == hashlib.sha1(b"ab").hexdigest()


@pytest.mark.parametrize("columns", [None, "200", "0", "-3", "wide", "35"])
def test_the_help_width_is_shutils(monkeypatch, columns):
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert cli._terminal_columns() == shutil.get_terminal_size().columns
    # and each command's help is argparse's own at that width
    import argparse

    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    for each in (parser, *commands.values()):
        assert each.formatter_class is cli._HelpFormatter
        ours = each.format_help()
        each.formatter_class = argparse.HelpFormatter
        assert ours == each.format_help()
