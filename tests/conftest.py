"""Shared fixtures: a real IPython shell with the extension, and real ipykernel kernels through jupyter_client."""

from __future__ import annotations

import importlib.util

import pytest

from nb_cudaguard.cli.kernelsession import KernelSession


def _cuda_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


def pytest_configure(config):
    from IPython.testing.globalipapp import start_ipython

    start_ipython()  # IPython's own test shell, first, so that every shell in the run is this one


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def shell():
    """The process's real InteractiveShell, with nb_cudaguard loaded for one test and unloaded after it."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.testing.globalipapp import start_ipython

    from nb_cudaguard import testing

    start_ipython()  # IPython's own test shell, once per process; every shell fixture shares it
    ip = InteractiveShell.instance()
    ip.reset(new_session=False)  # also at the start: test modules with a shell fixture of their own may not reset it
    ip.run_line_magic("load_ext", "nb_cudaguard")
    yield ip
    ip.run_line_magic("unload_ext", "nb_cudaguard")
    ip.config.pop("CudaGuard", None)
    testing.reset()
    ip.reset(new_session=False)  # the next test starts from an empty namespace: the diagnosis scans it


@pytest.fixture
def kernel():
    """A real kernel with the extension loaded (ipykernel's fd capture on, as in JupyterLab)."""
    with KernelSession() as session:
        result = session.run("%load_ext nb_cudaguard")
        assert result.status == "ok", result.outputs
        yield session


@pytest.fixture
def kernel_fd_capture_off():
    """A kernel started with capture_fd_output off (Spyder-style), where nb_cudaguard taps the fds itself."""
    with KernelSession(extra_args=["--IPKernelApp.capture_fd_output=False"]) as session:
        result = session.run("%load_ext nb_cudaguard")
        assert result.status == "ok", result.outputs
        yield session
