"""nb_cudaguard: explain and recover from CUDA device-side asserts in Jupyter and IPython.

Load it with ``%load_ext nb_cudaguard`` (or ``c.InteractiveShellApp.extensions = ["nb_cudaguard"]``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from nb_cudaguard.errors import CudaCheckError, NbCudaguardError

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from nb_cudaguard.extension import CudaGuard
    from nb_cudaguard.replay.plan import ReplayPlan

__version__ = "0.1.0"
__all__ = [
    "CudaCheckError",
    "NbCudaguardError",
    "get_guard",
    "load_ipython_extension",
    "restart",
    "unload_ipython_extension",
]

_ATTRIBUTE = "_nb_cudaguard"


def load_ipython_extension(shell: InteractiveShell) -> None:
    """Register the hooks, the capture and the magics, once per shell however often it is called."""
    if getattr(shell, _ATTRIBUTE, None) is not None:
        return
    from nb_cudaguard.check.magics import CudaCheckMagics
    from nb_cudaguard.extension import CudaGuard
    from nb_cudaguard.magics import CudaGuardMagics

    guard = CudaGuard(shell)
    guard.register()
    guard.magics = [CudaGuardMagics(shell, guard), CudaCheckMagics(guard.every_cell)]
    for magics in guard.magics:
        shell.register_magics(magics)
    setattr(shell, _ATTRIBUTE, guard)
    from nb_cudaguard.relaunch.resume import resume_after_restart

    resume_after_restart(shell, guard)  # after an in-place restart: carry the journal over and replay
    from nb_cudaguard.panel.follower import reattach_after_restart

    reattach_after_restart(shell, guard)  # a panel that asked for the restart follows the replay


def unload_ipython_extension(shell: InteractiveShell) -> None:
    guard = get_guard(shell)
    if guard is None:
        return
    guard.close()
    ours = tuple(guard.magics)
    magics = shell.magics_manager.magics
    for kind in ("line", "cell"):
        for name, func in list(magics[kind].items()):
            if getattr(func, "__self__", None) in ours:
                del magics[kind][name]
    shell.magics_manager.registry.pop("CudaGuardMagics", None)
    shell.magics_manager.registry.pop("CudaCheckMagics", None)
    setattr(shell, _ATTRIBUTE, None)


def get_guard(shell: InteractiveShell | None = None) -> CudaGuard | None:
    """The loaded extension's session (journal, last report, last replay), or None if it is not loaded."""
    if shell is None:
        from IPython import get_ipython

        shell = get_ipython()
    guard: CudaGuard | None = getattr(shell, _ATTRIBUTE, None) if shell is not None else None
    return guard


def restart(
    replay: str = "minimal",
    diagnose: bool = False,
    cells: Iterable[int] | None = None,
    *,
    shell: InteractiveShell | None = None,
    **options: Any,
) -> ReplayPlan:
    """Restart the kernel in place (same PID and ports) and replay what the failing cell needs.

    See ``nb_cudaguard.relaunch.restart.restart`` for the options; the restart happens just after the calling cell
    ends. The extension is loaded first if it is not, so that the restart has a journal to replay from.
    """
    from nb_cudaguard.relaunch.restart import RestartError
    from nb_cudaguard.relaunch.restart import restart as _restart

    if shell is None:
        from IPython import get_ipython

        shell = get_ipython()
    if shell is None:
        raise RestartError("nb_cudaguard.restart() runs inside IPython or a Jupyter kernel.")
    load_ipython_extension(shell)
    guard = get_guard(shell)
    if guard is None:  # load_ipython_extension always leaves one
        raise RestartError("nb_cudaguard could not be loaded in this shell.")
    return _restart(guard, replay=replay, diagnose=diagnose, cells=cells, **options)
