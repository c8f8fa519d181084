"""The one rule for "is this the user's code?": a live frame, a checked op's caller and a pasted log's frame.

The report points at the user's own line and the checks name the user's variable, so all three must agree on where
the user's code ends and a library's begins. A live path is a library's when it lies under the standard library,
site-packages, torch or this package; a path from a pasted log (another machine) when it names an installed-package
folder. Generated code in angle brackets is a library's, except the names IPython and ``exec`` give user source.
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
from functools import lru_cache

_USER_PSEUDO_FILES = ("<ipython-input-", "<string>", "<stdin>")
_INSTALLED_MARKERS = ("site-packages", "dist-packages", "/lib/python")
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    """Folders whose code is not the user's: the standard library, site-packages, torch, this package."""
    roots = {_PACKAGE_ROOT, os.path.realpath(_PACKAGE_ROOT)}
    paths = sysconfig.get_paths()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        if paths.get(key):
            roots.update((os.path.abspath(paths[key]), os.path.realpath(paths[key])))
    try:
        roots.update(os.path.abspath(p) for p in site.getsitepackages())
    except AttributeError:  # virtualenvs with an old site.py
        pass
    user_site = getattr(site, "USER_SITE", None)
    if user_site:
        roots.add(os.path.abspath(user_site))
    torch_file = getattr(sys.modules.get("torch"), "__file__", None)
    if torch_file:
        roots.add(os.path.dirname(os.path.abspath(torch_file)))
    return tuple(sorted(roots))


def is_user_file(filename: str) -> bool:
    """A file of this process: a notebook cell, a script or the user's own module, not a library's."""
    if filename.startswith("<"):
        return filename.startswith(_USER_PSEUDO_FILES)
    if any(marker in filename for marker in _INSTALLED_MARKERS):
        return False
    path = os.path.abspath(filename)
    return not any(path == root or path.startswith(root + os.sep) for root in _library_roots())


def is_user_file_in_log(filename: str) -> bool:
    """A file named in a log from another machine: only the installed-package folders are known to be libraries."""
    if filename.startswith("<"):
        return filename.startswith(_USER_PSEUDO_FILES)
    return not any(marker in filename for marker in _INSTALLED_MARKERS)
