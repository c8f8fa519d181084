"""nb_cudaguard: explain and recover from CUDA device-side asserts in Jupyter and IPython.

Load it with ``%load_ext nb_cudaguard`` (or ``c.InteractiveShellApp.extensions = ["nb_cudaguard"]``).
"""

from __future__ import annotations

from nb_cudaguard.errors import CudaCheckError

__version__ = "0.1.0"
__all__ = ["CudaCheckError", "get_guard", "load_ipython_extension", "unload_ipython_extension"]

_ATTRIBUTE = "_nb_cudaguard"


def load_ipython_extension(shell) -> None:
    """Register the hooks, the capture and the magics, once per shell however often it is called."""
    if getattr(shell, _ATTRIBUTE, None) is not None:
        return
    from nb_cudaguard.check.magics import CudaCheckMagics
    from nb_cudaguard.extension import CudaGuard
    from nb_cudaguard.magics import CudaGuardMagics

    guard = CudaGuard(shell)
    guard.register()
    guard.magics = CudaGuardMagics(shell, guard)
    shell.register_magics(guard.magics)
    guard.check_magics = CudaCheckMagics(shell)
    shell.register_magics(guard.check_magics)
    setattr(shell, _ATTRIBUTE, guard)
    from nb_cudaguard.restart.resume import resume_after_restart

    resume_after_restart(shell, guard)  # after an in-place restart: carry the journal over and replay
    from nb_cudaguard.panel.follower import reattach_after_restart

    reattach_after_restart(shell, guard)  # a panel that asked for the restart follows the replay


def unload_ipython_extension(shell) -> None:
    guard = getattr(shell, _ATTRIBUTE, None)
    if guard is None:
        return
    guard.unregister()
    from nb_cudaguard.check.magics import set_every_cell

    set_every_cell(shell, False)
    ours = (guard.magics, getattr(guard, "check_magics", None))
    magics = shell.magics_manager.magics
    for kind in ("line", "cell"):
        for name, func in list(magics[kind].items()):
            if getattr(func, "__self__", None) in ours:
                del magics[kind][name]
    shell.magics_manager.registry.pop("CudaGuardMagics", None)
    shell.magics_manager.registry.pop("CudaCheckMagics", None)
    setattr(shell, _ATTRIBUTE, None)


def get_guard(shell=None):
    """The loaded extension's state (journal, last report), or None if it is not loaded."""
    if shell is None:
        from IPython import get_ipython

        shell = get_ipython()
    return getattr(shell, _ATTRIBUTE, None) if shell is not None else None


def restart(replay: str = "minimal", diagnose: bool = False, cells=None, **options):
    """Restart the kernel in place (same PID and ports) and replay what the failing cell needs.

    See ``nb_cudaguard.restart.restart`` for the options; the restart happens just after the calling cell ends.
    """
    from nb_cudaguard.restart.inplace import restart as _restart

    return _restart(replay=replay, diagnose=diagnose, cells=cells, **options)
