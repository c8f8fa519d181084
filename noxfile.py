"""The test command (README, .ci/run): `python3 -m pip install nox && nox`.

Sessions: lint (ruff, mypy), tests (newest IPython/ipykernel), tests_oldest (the oldest pair we support, as on Colab),
tests_ipykernel6 (the last ipykernel 6 with IPython 8, as on Kaggle: the kernel and restart tests, whose code
paths differ between ipykernel 6 and 7), sessions (tests/sessions: whole notebooks with transformers, torchvision and
plain PyTorch, driven through restarts in real kernels; only there, where torchvision can be installed).
torch is installed first from a CPU build and never upgraded by our own install (it is not a dependency).
"""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "tests", "tests_oldest", "tests_ipykernel6", "sessions"]
nox.options.reuse_existing_virtualenvs = True

TORCH = "torch==2.13.0"  # served from the machine's local wheel store; any torch >= 1.13 works
MYPY = "mypy>=2.4,<2.5"  # a new minor release adds checks: move on deliberately
IPYKERNEL6 = ["ipython>=8,<9", "ipykernel>=6.29,<7", "jupyter_client>=8,<9"]
# torchvision's wheels in the local store pair with this torch (a CUDA build: on a CPU it runs as a CPU build)
SESSIONS_TORCH = ["torch==2.14.1", "torchvision==0.29.1"]
SESSIONS_ONLY = "--ignore=tests/sessions"  # the other sessions lack torchvision and the notebooks' libraries
# Tests of torch's side alone (the same torch in every session): the oldest IPython pair adds nothing to them, and
# they are four of its 24 minutes. The shell and kernel paths of the same checks run there in other tests.
TORCH_ONLY = [
    "--ignore=tests/check/test_check_fast_compile.py",
    "--ignore=tests/check/test_check_fast_compile_cases.py",
    "--ignore=tests/check/test_check_fast_device.py",
]
OLDEST = ["ipython==7.34.0", "ipykernel==6.17.1", "jupyter_client==7.4.9", "ipywidgets==7.7.1", "traitlets==5.3.0"]


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    # mypy reads the types of what the package imports: its dependencies (`-e .`), torch, and numpy (read lazily)
    session.install(TORCH)
    session.install("-e", ".", "numpy", MYPY)
    session.run("mypy")  # configured in pyproject.toml


@nox.session
def tests(session: nox.Session) -> None:
    session.install(TORCH)
    # playwright: the Python package only (Debian's Chromium); notebook: Notebook 7, the second browser frontend;
    # transformers: the optional real-tiny-model test
    session.install("-e", ".[test]", "jupyterlab>=4", "notebook>=7", "playwright", "transformers")
    session.run("pytest", SESSIONS_ONLY, *session.posargs)


@nox.session
def tests_oldest(session: nox.Session) -> None:
    session.install(TORCH)
    session.install("-e", ".[test]", *OLDEST)
    session.run("pytest", "-m", "not browser", SESSIONS_ONLY, *TORCH_ONLY, *session.posargs)


@nox.session
def tests_ipykernel6(session: nox.Session) -> None:
    session.install(TORCH)
    session.install("-e", ".[test]", *IPYKERNEL6)
    kernel_tests = [
        "tests/test_extension_kernel.py",
        "tests/relaunch/test_restart_kernel.py",
        "tests/relaunch/test_restart_faults.py",
        "tests/carry/test_carry_kernel.py",
    ]
    session.run("pytest", *kernel_tests, "tests/cli/test_runner.py", "tests/panel/test_panel.py", *session.posargs)


@nox.session
def sessions(session: nox.Session) -> None:
    """Whole sessions as tests: each notebook of tests/sessions/notebooks through every journey (fail, report,
    restart, --diagnose, check on, fix, continue) in a real kernel with the simulated GPU; and the simulated GPU's
    own tests on this torch, a CUDA build without a driver (the other sessions have a CPU-only build)."""
    session.install(*SESSIONS_TORCH)
    session.install("-e", ".[test]", "transformers", "accelerate", "tokenizers")
    session.run("pytest", "tests/sessions", "tests/testing", *session.posargs)
