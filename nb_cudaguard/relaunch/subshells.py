"""ipykernel 7's subshells across an in-place restart: which the old process had, and the same ids opened again
in the new one. A widget frontend opens a subshell (``create_subshell_request`` on the control channel) and sends
its comm messages there; after an exec the frontend still holds the id, and a process that does not know it
answers every such message with ``Unknown subshell_id``. Private ipykernel internals, like those of
``relaunch.kernel_internals``: ``shell_channel_thread.manager`` (``list_subshell``, ``_create_subshell``,
``_on_recv_callback``), ``kernel.shell_main``, and the ``uuid`` name inside ``ipykernel.subshell_manager``.
"""

from __future__ import annotations

import threading

CREATE_TIMEOUT = 3.0


def subshell_ids(kernel) -> tuple[str, ...]:
    """The subshells clients have opened in this process (ipykernel 7; none on 6). A widget frontend opens one
    and keeps sending its comm messages there."""
    manager = getattr(getattr(kernel, "shell_channel_thread", None), "manager", None)
    lister = getattr(manager, "list_subshell", None)
    return tuple(lister()) if lister is not None else ()


class _FixedUuid:
    """Stands in for the ``uuid`` module inside ``ipykernel.subshell_manager`` for one creation."""

    def __init__(self, value: str) -> None:
        import uuid

        self.value = uuid.UUID(value)

    def uuid4(self):
        return self.value


def recreate_subshells(kernel, ids: tuple[str, ...], timeout: float = CREATE_TIMEOUT) -> list[str]:
    """Open subshells with the ids the old process had, before any request is read: the frontend still holds
    those ids after an in-place restart and addresses its messages to them, which this process would otherwise
    refuse (``Unknown subshell_id``). Runs at the extension's load, on the shell channel thread (where ipykernel
    creates subshells), before ``Kernel.start`` wires the shell socket; the receive callback ``start`` sets is
    ``kernel.shell_main``, which is what a subshell created now gets too. ipykernel draws a new id from
    ``uuid.uuid4`` in ``SubshellManager._create_subshell``; that one name is pointed at the old id meanwhile.
    Returns the ids it could not recreate."""
    import uuid

    thread = getattr(kernel, "shell_channel_thread", None)
    manager = getattr(thread, "manager", None)
    if not ids or thread is None or manager is None or not hasattr(manager, "_create_subshell"):
        return list(ids)
    from ipykernel import subshell_manager

    failed: list[str] = []
    done = threading.Event()

    def create() -> None:
        try:
            if getattr(manager, "_on_recv_callback", None) is None:
                manager._on_recv_callback = kernel.shell_main
            real = subshell_manager.uuid
            for subshell_id in ids:
                try:
                    if str(uuid.UUID(subshell_id)) != subshell_id:
                        raise ValueError(subshell_id)
                    subshell_manager.uuid = _FixedUuid(subshell_id)  # type: ignore[assignment]
                    manager._create_subshell()
                except Exception:
                    failed.append(subshell_id)
                finally:
                    subshell_manager.uuid = real
        finally:
            done.set()

    thread.io_loop.add_callback(create)
    if not done.wait(timeout):
        return list(ids)
    return failed
