"""The fast mode on device tensors, as a notebook meets it: ``%cudaguard simulate on``, ``%cudaguard check on``, and
every case of the exact mode's table (tests/check/test_check_ops.py) run in a cell with ``cuda`` as torch's default
device, so that every tensor and parameter the case makes lives on the simulated GPU.

A bad input must stop with a ``FastCheckError`` naming the exact mode's family, argument, variable and first value,
without a device assert (the context stays healthy and the next cell runs); a valid input must give what the same
cell gives with the checks off. The fast checks fold their verdicts on the device and read them once, so this is
where the questions they ask ``torch.cuda`` (is a graph being captured, which devices are in use) must be answered
as a GPU answers them.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from test_check_fast_ops import DIRECT_BACKWARD, HOST_RAISED  # noqa: E402
from test_check_ops import CASES, _same, _values_equal  # noqa: E402

import nb_cudaguard  # noqa: E402
from nb_cudaguard import CudaCheckError, testing  # noqa: E402
from nb_cudaguard.check.fast.error import FastCheckError  # noqa: E402

NAMES = sorted(set(CASES) - DIRECT_BACKWARD)


def _on_device(shell, case, checks: bool):
    """Run ``case`` in a cell on the simulated GPU; return (its result, the cell's error or the check that fired
    before it: where torch checks an input on the host itself, the cell fails with torch's error and the session
    keeps the fired check for the rerun, ``CudaGuard.last_fired``)."""
    guard = nb_cudaguard.get_guard(shell)
    shell.run_cell("%cudaguard simulate on", store_history=True)
    shell.run_line_magic("cudaguard", "check on" if checks else "check off")
    shell.user_ns["_case"] = case
    guard.last_fired = None
    result = shell.run_cell("torch.set_default_device('cuda')\n_result = _case()", store_history=True)
    shell.run_cell("torch.set_default_device(None)", store_history=True)
    shell.run_line_magic("cudaguard", "check off")
    error = result.error_in_exec
    if error is not None and not isinstance(error, CudaCheckError) and guard.last_fired is not None:
        error = guard.last_fired.error
    return shell.user_ns.get("_result"), error


def _host(value):
    if isinstance(value, (tuple, list)):
        return type(value)(_host(v) for v in value)
    return value.cpu() if isinstance(value, torch.Tensor) else value


def _next_cell_runs(shell) -> None:
    assert not testing.is_poisoned(), "the fast checks must stop the op before its kernel asserts"
    after = shell.run_cell("_after = torch.ones(3, device='cuda').sum().item()", store_history=True)
    assert after.error_in_exec is None and shell.user_ns["_after"] == 3.0


@pytest.fixture
def notebook(shell):
    shell.run_cell("import torch", store_history=True)
    yield shell
    torch.set_default_device(None)


@pytest.mark.parametrize("name", NAMES)
def test_fast_fires_on_device_tensors_like_exact(notebook, name: str) -> None:
    case = CASES[name]
    _, err = _on_device(notebook, case.bad, checks=True)
    assert isinstance(err, CudaCheckError), f"the fast checks must stop the bad input on the device, got {err!r}"
    assert (err.family, err.argument) == (case.family, case.argument)
    if case.variable is not None:
        assert err.variable is not None and err.variable.split(" ")[0] == case.variable
    if name not in HOST_RAISED:
        assert isinstance(err, FastCheckError)
        assert err.count == case.count
        assert _values_equal(err.values[:1], case.values[:1]), err.values
        assert [tuple(p) for p in err.positions[:1]] == case.positions[:1]
        assert case.valid_range in err.valid_range
    _next_cell_runs(notebook)


@pytest.mark.parametrize("name", NAMES)
def test_fast_valid_boundary_on_device_is_identical(notebook, name: str) -> None:
    case = CASES[name]
    plain, plain_err = _on_device(notebook, case.good, checks=False)
    assert plain_err is None, repr(plain_err)
    checked, err = _on_device(notebook, case.good, checks=True)
    assert err is None, repr(err)
    assert _same(_host(plain), _host(checked))
    _next_cell_runs(notebook)
