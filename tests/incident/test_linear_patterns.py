"""The patterns that read a cell's output scan it in linear time.

A pattern whose alternative starts with an unanchored repeat of a character class (``\\w+ failed``) restarts that
repeat at every position of a long run of such characters: quadratic in the run. A cell that printed one long line
(a progress bar redrawn with ``\\r``, a dumped array, 3 MB of ``z``) and then failed kept the kernel busy for a
minute while the report was built. This reads each pattern's parse tree, so it holds for every text, not for the
texts a test thought of; the regex engine's own steps cannot be counted from Python, and a timed test is no test.
"""

from __future__ import annotations

import importlib
import pkgutil
import re

import pytest

import nb_cudaguard.diagnosis
import nb_cudaguard.incident
import nb_cudaguard.record
from nb_cudaguard.incident.catalog import ERROR_TEXTS

try:  # Python 3.11 moved the parser
    from re import _constants as constants  # type: ignore[attr-defined]
    from re import _parser as parser  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as constants  # type: ignore[no-redef]
    import sre_parse as parser  # type: ignore[no-redef]

_REPEATS = {constants.MAX_REPEAT, constants.MIN_REPEAT}
_CLASSES = {constants.IN, constants.ANY, constants.NOT_LITERAL, constants.CATEGORY}


def _first_items(items) -> list:
    """The first element of each way the pattern can start (through groups and top-level alternatives)."""
    items = list(items)
    if not items:
        return []
    op, arg = items[0]
    if op == constants.BRANCH:
        return [first for alternative in arg[1] for first in _first_items(alternative)]
    if op == constants.SUBPATTERN:
        return _first_items(arg[-1])
    return [items[0]]


def _quadratic_starts(pattern: re.Pattern) -> list[str]:
    found = []
    for op, arg in _first_items(parser.parse(pattern.pattern, pattern.flags)):
        if op in _REPEATS and arg[1] == constants.MAXREPEAT and arg[2] and arg[2][0][0] in _CLASSES:
            found.append(f"{op} {arg[2][0]}")
    return found


def _module_patterns() -> dict[str, re.Pattern]:
    found = {}
    for package in (nb_cudaguard.incident, nb_cudaguard.diagnosis, nb_cudaguard.record):  # what reads output
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            module = importlib.import_module(info.name)
            for name, value in vars(module).items():
                if isinstance(value, re.Pattern):
                    found[f"{info.name}.{name}"] = value
    return found


PATTERNS = {f"ERROR_TEXTS {e.name}": e.pattern for e in ERROR_TEXTS} | _module_patterns()


@pytest.mark.parametrize("where", sorted(PATTERNS))
def test_no_pattern_starts_with_an_unanchored_repeat(where):
    assert _quadratic_starts(PATTERNS[where]) == [], PATTERNS[where].pattern


def test_the_reader_flags_the_form_that_made_a_failing_cell_take_a_minute():
    assert _quadratic_starts(re.compile(r"x|\w+ failed to synchronize"))
    assert not _quadratic_starts(re.compile(r"x|\b\w+ failed to synchronize"))
    assert not _quadratic_starts(re.compile(r"(?m)^\s*` failed"))
