"""Every case of the exact mode (tests/check/test_check_ops.py), compiled with ``torch.compile`` under the fast checks:
at the valid boundary the compiled result equals the plain eager one and the checks add no reason for a graph
break; the bad
input fed to the compiled code fires the board, or is one of the forms docs/guard.md lists as unchecked in compiled
code (Dynamo puts ``Tensor`` methods, ``x[i]`` and ``torch._C._nn`` functions in the graph without calling Python,
so no wrapper runs), which are strict xfails: the day one of them is checked, the test says so.
"""

from __future__ import annotations

import functools

import pytest

torch = pytest.importorskip("torch")

from test_check_fast_ops import DIRECT_BACKWARD, HOST_RAISED  # noqa: E402
from test_check_ops import CASES, _same  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

from nb_cudaguard import CudaCheckError  # noqa: E402
from nb_cudaguard.check.fast.mode import FastChecker  # noqa: E402

# In compiled code the op is reached without Python: a Tensor method, x[i], or a torch._C._nn function.
UNCHECKED_COMPILED = {
    "bernoulli_tensor_p": "Tensor.bernoulli_",
    "index_add": "Tensor.index_add_",
    "index_copy": "Tensor.index_copy_",
    "index_fill": "Tensor.index_fill_",
    "index_put": "Tensor.index_put_",
    "index_reduce": "Tensor.index_reduce_",
    "index_select": "Tensor.index_select",
    "index_tensor": "x[i]",
    "index_tensor_2d": "x[i]",
    "masked_scatter": "Tensor.masked_scatter_",
    "max_unpool2d": "torch._C._nn.max_unpool2d",
    "nan_cast": "x[i]",
    "one_hot": "Tensor.scatter_",
    "one_hot_negative": "Tensor.scatter_",
    "put": "Tensor.put_",
    "scatter": "Tensor.scatter_",
    "scatter_add": "Tensor.scatter_add",
    "scatter_reduce": "Tensor.scatter_reduce",
}
# Compiled code reports the op's own family: the table owner that refines it and the cast's provenance are eager.
COMPILED_FAMILY = {
    "position_ids": "embedding_index_out_of_range",
    "token_type_ids": "embedding_index_out_of_range",
    "vocab_resize": "embedding_index_out_of_range",
    "inf_cast_view": "embedding_index_out_of_range",
}
# torch checks these on the host itself (no device assert, nothing poisons); in compiled code its error comes first,
# before the graph writes the board back.
TORCH_RAISES_COMPILED = {"segment_reduce": "lengths contains negative value"}
NAMES = sorted(set(CASES) - DIRECT_BACKWARD - HOST_RAISED)


@functools.cache
def _compiles_without_checks(name: str) -> bool:
    """Whether Dynamo compiles the case's valid form at all (``_grouped_mm`` has no CPU meta kernel for float32)."""
    try:
        _compiled(CASES[name].good)()
    except Exception:  # whatever Dynamo cannot compile without the checks is not ours to test
        return False
    return True


def _compiled(fn):
    torch._dynamo.reset()
    counters.clear()
    return torch.compile(fn, backend="aot_eager")


def _breaks() -> set[str]:
    """Why Dynamo broke the graph. Compared as reasons, not counts: a break inside an op's wrapper (an op whose
    output shape depends on its data, such as bincount) is counted once in the caller's frame and once again when
    Dynamo traces the wrapper's own frame, but it is the op's break, not one the checks add."""
    return set(counters["graph_break"])


@pytest.mark.parametrize("name", NAMES)
def test_valid_boundary_compiled_equals_plain_and_adds_no_graph_break(name: str) -> None:
    case = CASES[name]
    plain = case.good()
    if not _compiles_without_checks(name):
        pytest.skip("does not compile without the checks either")
    _compiled(case.good)()
    plain_breaks = _breaks()
    compiled = _compiled(case.good)
    with FastChecker():
        checked = compiled()
    assert _breaks() <= plain_breaks, _breaks() - plain_breaks
    assert _same(plain, checked)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=f"unchecked in compiled code: {why}"))
        if (why := UNCHECKED_COMPILED.get(n))
        else n
        for n in NAMES
    ],
)
def test_bad_input_fires_from_compiled_code(name: str) -> None:
    case = CASES[name]
    if not _compiles_without_checks(name):
        pytest.skip("does not compile without the checks either")
    compiled = _compiled(case.bad)
    if name in TORCH_RAISES_COMPILED:
        with pytest.raises(RuntimeError, match=TORCH_RAISES_COMPILED[name]), FastChecker():
            compiled()
        return
    with pytest.raises(CudaCheckError) as info, FastChecker():
        compiled()
    assert info.value.family == COMPILED_FAMILY.get(name, case.family)
    assert info.value.argument == case.argument
