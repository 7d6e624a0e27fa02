"""The cache's seal makes its HMAC-SHA256 over the interpreter's built-in SHA-256
(run/cache_seal.hmac_sha256): `hmac` would import OpenSSL for it, 3 ms and 3.6 MiB of every cached
run. It must be the standard's HMAC, byte for byte, so that every seal made before still opens."""

from __future__ import annotations

import hmac
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from dtype_lint.run.cache_seal import hmac_sha256


@settings(max_examples=300, deadline=None)
@given(key=st.binary(max_size=200), message=st.binary(max_size=3000))
def test_it_is_hmac_sha256(key: bytes, message: bytes):
    assert hmac_sha256(key, message) == hmac.digest(key, message, "sha256")


def test_rfc_4231_case_6_a_key_longer_than_the_block():
    key = b"\xaa" * 131
    message = b"Test Using Larger Than Block-Size Key - Hash Key First"
    assert hmac_sha256(key, message).hex() == "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"


def test_sealing_and_opening_import_no_openssl(tmp_path):
    code = ("import os, sys; os.environ['DTYPE_LINT_CACHE_KEY'] = 'ab' * 32\n"
            "from dtype_lint.run.cache_seal import seal, unseal\n"
            "assert unseal(seal(b'payload', 'ctx'), 'ctx') == b'payload'\n"
            "assert unseal(seal(b'payload', 'ctx'), 'other') is None\n"
            "print(sorted(m for m in ('hmac', 'hashlib', '_hashlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
