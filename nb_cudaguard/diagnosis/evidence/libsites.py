"""Which library's code the traceback runs through, and what an out-of-range index means there.

A traceback's library frames name the op's site even when its last line is an innocent synchronisation: a graph
library (PyG, its torch_scatter / torch_sparse kernels, DGL) gathers node features and scatters messages by
``edge_index``, so an index past the node count fails in a gather, scatter or index_select there, whatever
kernel asserted; a module file named for its embedding (``embedding.py``, ``positional_encoding.py``) is a table
looked up by ids, and one named for positions is the position table.

Only the files' paths are read (the library's own module layout, the same for every user of it); each rule says
which file it saw (``Hint.text``). All are inferred evidence, weaker than a value read.
"""

from __future__ import annotations

import re

from nb_cudaguard.diagnosis.evidence.textual import Hint
from nb_cudaguard.incident.incident import Incident

# (family, path pattern, weight, what it means, names only the group)
_SITES = (
    (
        "gather_scatter_index",
        r"(?:^|[/\\])(?:torch_geometric|torch_scatter|torch_sparse|torch_cluster|dgl)[/\\]",
        0.5,
        "a graph library gathers and scatters node features by edge_index: an edge index past the node count",
        False,
    ),
    (
        "position_ids_too_long",
        r"(?:^|[/\\])(?:\w+_)?(?:positional|position|pos)_?(?:encoding|embedding)s?\.py$",
        0.45,
        "a positional-encoding module looks up one row per position: a sequence longer than its table",
        False,
    ),
    (
        "embedding_index_out_of_range",
        r"(?:^|[/\\])(?:\w+_)?embeddings?\.py$",
        0.35,
        "an embedding module looks up its table by ids",
        True,
    ),
)
_SITE_PATTERNS = tuple((family, re.compile(p, re.IGNORECASE), w, m, g) for family, p, w, m, g in _SITES)


def hints_for(incident: Incident) -> list[Hint]:
    """One hint per family: the innermost frame whose file matches (the first matching rule wins per frame)."""
    hints: dict[str, Hint] = {}
    for frame in reversed(incident.frames):
        for family, pattern, weight, meaning, group_only in _SITE_PATTERNS:
            if pattern.search(frame.filename):
                if family not in hints:
                    where = frame.filename.replace("\\", "/").rsplit("/", 2)[-2:]
                    text = f"{meaning} (`{'/'.join(where)}` in the traceback)"
                    hints[family] = Hint(family, weight, text, group_only=group_only)
                break
    return list(hints.values())
