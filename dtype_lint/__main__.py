import os
import sys

# `python -m dtype_lint` puts the current folder first on sys.path. Run from a project's root,
# that would import the project's own `json.py` or `re.py` in place of the standard library's:
# the linter must never run the code it checks. Drop it before anything else is imported.
_cwd: str | None
try:
    _cwd = os.getcwd()
except OSError:  # the current folder was deleted: cli.main says so
    _cwd = None
if sys.path and _cwd is not None and os.path.abspath(sys.path[0] or os.curdir) == os.path.abspath(_cwd):
    del sys.path[0]
elif sys.path and _cwd is None and sys.path[0] in ("", os.curdir):
    del sys.path[0]

# The pre-commit fast path first; it imports the command line only when it cannot answer.
from dtype_lint.entry import main  # noqa: E402

sys.exit(main())
