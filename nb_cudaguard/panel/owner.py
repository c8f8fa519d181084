"""The notebook's own name for the values a report is about: ``labels``, not the loop's ``yb`` or the path
``loader.dataset.tensors[1]`` that reaches them.

The diagnosis names a cause's variable as the failing line spells it; a user fixes the tensor they built in an
earlier cell. That tensor is found from what the runtime holds, never from the source text: the variable's own
object when a namespace name holds it and it is no copy; else the host tensor it was copied from (``record.copies``)
when a name holds that; else, for class labels a loop took batch by batch from a dataset and copied to the device,
the dataset's label tensor when a namespace name holds it and it holds the very values the cause quotes (read on the
host only, as ``diagnosis.tensors`` reads); the loop's own name last.
Read once, while the failing process and its namespace are alive; the report keeps the name across a restart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nb_cudaguard import families
from nb_cudaguard.diagnosis.evidence.workspace import Workspace, build_workspace
from nb_cudaguard.diagnosis.tensors import is_array_like, readable
from nb_cudaguard.incident.probe import internal_use
from nb_cudaguard.record.copies import COPIES

if TYPE_CHECKING:
    from nb_cudaguard.diagnosis.causes import Cause
    from nb_cudaguard.incident.incident import Incident

_LABEL_GROUPS = frozenset({"class_index"})  # families whose values a dataset's label tensor holds
_QUOTED = 3  # offending values looked up in a dataset's label tensor


def owner_of(incident: Incident, top: Cause | None) -> str | None:
    namespace = incident.namespace
    if top is None or not top.variable or not namespace:
        return None
    workspace = build_workspace(incident)
    obj = workspace.resolve(top.variable)
    if obj is None:
        return None
    names = {id(v): k for k, v in list(namespace.items()) if _users_name(k) and is_array_like(v)}
    source = COPIES.source_of(obj)
    if source is not None and id(source) in names:
        return names[id(source)]
    if id(obj) in names and source is None:  # built on the device under the user's own name
        return names[id(obj)]
    return _dataset_labels(workspace, names, top, incident.health.state) or names.get(id(obj))


def _dataset_labels(workspace: Workspace, names: dict[int, str], top: Cause, health: str) -> str | None:
    """The namespace name of a dataset's label tensor that holds the labels the cause quotes: a batch a loop
    copied to the device (``yb``) is a slice of it, and the name is what the user built."""
    if families.group_of(top.family) not in _LABEL_GROUPS:
        return None
    quoted = next((e.values for e in top.evidence if e.values and e.valid_range), None)
    for source in workspace.label_sources:
        name = names.get(id(source.obj))
        if name is not None and quoted and _holds(source.obj, quoted[:_QUOTED], health):
            return name
    return None


def _users_name(name: object) -> bool:
    return isinstance(name, str) and name.isidentifier() and not name.startswith("_")


def _holds(obj: Any, values: list, health: str) -> bool:
    """Every one of ``values`` occurs in ``obj``, read only where reading is safe (a host tensor, an array)."""
    if not readable(obj, health)[0]:
        return False
    try:
        with internal_use():
            return all(bool((obj == value).any()) for value in values)
    except Exception:  # a dtype that cannot be compared: no claim
        return False
