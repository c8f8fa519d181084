"""The library a traceback runs through names the op's site, and the assertion of a table's row lookup names the
embedding group in every release's wording.

The fragments here are written for these tests in the format Python and the CUDA runtime print (none is from the
corpus): each rule is checked to reach the ranked answer with its evidence, and to stay silent without it.
"""

from __future__ import annotations

from nb_cudaguard.diagnosis import diagnose
from nb_cudaguard.diagnosis.evidence import libsites
from nb_cudaguard.families import group_of
from nb_cudaguard.incident.logparse import incident_from_log

GENERIC = "RuntimeError: CUDA error: device-side assert triggered\n"
EMBEDDING_ASSERT = (
    "../aten/src/ATen/native/cuda/Indexing.cu:1146: indexSelectLargeIndex: block: [3,0,0], thread: [7,0,0] "
    "Assertion `srcIndex < srcSelectDimSize` failed.\n"
)
VECTORIZED_GATHER = (
    "/pytorch/aten/src/ATen/native/cuda/IndexKernelUtils.cu:16: vectorized_gather_kernel: block: [9,0,0], "
    'thread: [3,0,0] Assertion `ind >=0 && ind < ind_dim_size && "vectorized gather kernel index out of bounds"` '
    "failed.\n"
)


def _traceback(*frames: tuple[str, str, str]) -> str:
    lines = ["Traceback (most recent call last):"]
    for path, function, line in frames:
        lines += [f'  File "{path}", line 10, in {function}', f"    {line}"]
    return "\n".join(lines) + "\n"


PYG = _traceback(
    ("train.py", "<module>", "out = model(data.x, data.edge_index)"),
    ("/opt/conda/lib/python3.10/site-packages/torch_geometric/nn/conv/gcn_conv.py", "forward", "out = self.propagate("),
    (
        "/opt/conda/lib/python3.10/site-packages/torch_geometric/nn/conv/message_passing.py",
        "_lift",
        "return src.index_select(self.node_dim, index)",
    ),
)


def _diagnosis(text: str):
    return diagnose(incident_from_log(text))


def test_a_graph_librarys_frames_turn_a_row_lookup_into_a_gather_by_edge_index():
    diagnosis = _diagnosis(EMBEDDING_ASSERT + PYG + GENERIC)
    top = diagnosis.top
    assert top is not None and top.family == "gather_scatter_index"
    assert any("torch_geometric" in e.text or "message_passing.py" in e.text for e in top.evidence)
    # the same assertion without the graph library stays in the embedding group
    plain = _diagnosis(EMBEDDING_ASSERT + GENERIC).top
    assert plain is not None and group_of(plain.family) == "embedding"


def test_a_position_encoding_module_names_the_position_table():
    log = _traceback(
        ("train.py", "<module>", "y = model(src)"),
        ("/home/u/.local/lib/python3.9/site-packages/fairseq/modules/learned_positional_embedding.py", "forward", "x"),
    )
    hints = libsites.hints_for(incident_from_log(log + GENERIC))
    assert [h.family for h in hints] == ["position_ids_too_long"]
    assert "learned_positional_embedding.py" in hints[0].text


def test_files_that_name_no_site_say_nothing():
    log = _traceback(
        ("train.py", "<module>", "y = model(src)"),
        ("/usr/lib/python3/site-packages/torch/nn/modules/module.py", "_call_impl", "return forward_call(*a)"),
        ("/home/u/project/embedding_utils_test.py", "run", "x = table[ids]"),
    )
    assert libsites.hints_for(incident_from_log(log + GENERIC)) == []


def test_the_vectorized_gather_assertion_is_a_tables_row_lookup():
    """index_select with more than 16 ids (nn.Embedding's forward) asserts in vectorized_gather_kernel in recent
    releases, where older ones asserted in indexSelectLargeIndex."""
    top = _diagnosis(VECTORIZED_GATHER + "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED\n").top
    assert top is not None and group_of(top.family) == "embedding"
    graph = _diagnosis(VECTORIZED_GATHER + PYG + GENERIC).top
    assert graph is not None and graph.family == "gather_scatter_index"


def test_an_old_floating_index_message_names_its_one_family_without_a_prior():
    for message in (
        "RuntimeError: Expected tensor for argument #1 'indices' to have scalar type Long; but got "
        "torch.cuda.FloatTensor instead (while checking arguments for embedding)",
        "RuntimeError: Expected object of scalar type Long but got scalar type Float for argument #2 'target' in "
        "call to _thnn_nll_loss_forward",
    ):
        top = _diagnosis(message).top
        assert top is not None and top.family == "dtype_mismatch"
        assert top.confidence >= 0.5
        assert not any(e.kind == "prior" for e in top.evidence)  # the group has one family: no prior decides it
