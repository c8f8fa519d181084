"""What CUDA does with a bad input, per op: a device assert (the context is poisoned) or a host-side error (it is not).

The simulated device runs every op on the CPU. When the CPU kernel rejects an input, the simulation must answer
what the CUDA build answers for the same input, never something kinder or harsher:

* where the CPU check sits in device-generic code (a structured kernel's ``meta`` function, ``TensorUtils``,
  ``ScatterGatherChecks.h``, ``TensorIndexing.h``), CUDA runs the same check on the host: the same error is raised
  and the context survives;
* where the CPU check sits in the CPU kernel and the CUDA kernel checks on the device instead, CUDA prints the
  assertion line and poisons the context.

Each row names the CPU error it recognises (a pattern on the text torch 2.13.0's CPU kernel raises), where that
error is raised (``cpu``: measured with ``TORCH_SHOW_CPP_STACKTRACES=1`` on the 2.13.0 CPU wheel), and what CUDA
does (``cuda``: the device assert's file and line as printed by the 2.14.1 CUDA wheel,
``shared/reference/torch_cuda_asserts.json``, or the host check that runs on every device). ``tests/test_sim_ops.py``
runs one bad input per row on the simulated device.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

PREFIX = "/__w/pytorch/pytorch/aten/src/ATen/native/cuda/"


@dataclass(frozen=True)
class Kernel:
    """A CUDA kernel's device assert, as the 2.14.1 wheel prints it."""

    file: str
    line: int
    kernel: str
    condition: str


@dataclass(frozen=True)
class Row:
    """One bad input to one op: what the CPU raises, and what CUDA does instead."""

    name: str
    ops: tuple[str, ...]  # aten overload packets that raise it
    cpu_error: str  # regular expression on the CPU error's text
    cpu: str  # where torch 2.13.0's CPU build raises it
    cuda: str  # where CUDA checks the same input
    assert_: Kernel | None  # the device assert CUDA prints; None: CUDA raises the same error on the host
    large: Kernel | None = None  # the kernel CUDA launches instead for more than SMALL_INDEX_MAX indices


NLL = Kernel("Loss.cu", 200, "nll_loss_forward_reduce_cuda_kernel_2d", "t >= 0 && t < n_classes")
NLL_NO_REDUCE = Kernel(
    "Loss.cu", 179, "nll_loss_forward_no_reduce_cuda_kernel", "cur_target >= 0 && cur_target < n_classes"
)
NLL2D = Kernel("NLLLoss2d.cu", 108, "nll_loss2d_forward_kernel", "t >= 0 && t < n_classes")
# Indexing.cu picks the kernel by the number of indices: index_select_out_cuda_impl and index_func_cuda_impl launch
# their SmallIndex kernel "if (numIndices <= 16)" and their LargeIndex kernel otherwise (pytorch/pytorch,
# aten/src/ATen/native/cuda/Indexing.cu, the same test in every release since THC's THCTensorIndex.cu). An
# embedding is index_select over its flattened ids (Embedding.cpp), so a batch of 256 ids asserts in LargeIndex.
SMALL_INDEX_MAX = 16
INDEX_SELECT = Kernel("Indexing.cu", 1558, "indexSelectSmallIndex", "srcIndex < srcSelectDimSize")
# The 2.14.1 binaries' decoded call sites list only the small-index assert; in 1.13.1, 2.2.2 and 2.7.1 the
# large-index one sits 53 lines below it (shared/reference/torch_cuda_asserts.json), so its line is inferred.
INDEX_SELECT_LARGE = Kernel("Indexing.cu", 1558 + 53, "indexSelectLargeIndex", "srcIndex < srcSelectDimSize")
INDEX_ADD = Kernel("Indexing.cu", 1035, "indexFuncSmallIndex", "dstIndex < dstAddDimSize")
INDEX_ADD_LARGE = Kernel("Indexing.cu", 1094, "indexFuncLargeIndex", "dstIndex < dstAddDimSize")
# Where each indexing op takes its indices, for the kernel's choice.
INDEX_ARGUMENT = {"embedding": 1, "index_select": 2, "index_add": 2, "index_add_": 2}
ADV_INDEX = Kernel(
    "IndexKernel.cu", 111, "operator()", '-sizes[i] <= index && index < sizes[i] && "index out of bounds"'
)
TAKE = Kernel(
    "IndexKernel.cu", 343, "operator()", 'idx < numel && idx >= -numel && "cuda_take_put_kernel() index out of bounds"'
)
GATHER = Kernel(
    "ScatterGatherKernel.cu",
    203,
    "operator()",
    'idx_dim >= 0 && idx_dim < index_size && "scatter gather kernel index out of bounds"',
)
SCATTER_FILL = Kernel(
    "ScatterGatherKernel.cu", 450, "operator()", 'idx_dim >= 0 && idx_dim < index_size && "index out of bounds"'
)
BCE_INPUT = Kernel("Loss.cu", 89, "operator()", "input_val >= zero && input_val <= one")
BCE_TARGET = Kernel("Loss.cu", 90, "operator()", "target_val >= zero && target_val <= one")
ASSERT_ASYNC_PROBS = Kernel(
    "TensorCompare.cu",
    121,
    "_assert_async_cuda_kernel",
    "probability tensor contains either `inf`, `nan` or element < 0",
)
ASSERT_ASYNC_SUM = Kernel(
    "TensorCompare.cu", 121, "_assert_async_cuda_kernel", "invalid multinomial distribution (sum of probabilities <= 0)"
)
RENORM_NEGATIVE = Kernel("MultinomialKernel.cu", 60, "renormRowsL1", "!(val < zero)")
CUMDIST_ZERO = Kernel(
    "MultinomialKernel.cu", 112, "binarySearchForMultinomial", "cumdist[size - 1] > static_cast<scalar_t>(0)"
)
EMBEDDING_BAG = Kernel(
    "EmbeddingBag.cu",
    148,
    "EmbeddingBag_updateOutputKernel_sum_mean",
    '!has_invalid_index && "Invalid input index in EmbeddingBag: index out of range [0, numRows)"',
)

_NLL_OPS = ("nll_loss_forward", "nll_loss_nd", "nll_loss")
_SCATTER_OPS = ("scatter", "scatter_", "scatter_add", "scatter_add_", "scatter_reduce", "scatter_reduce_")

ROWS: tuple[Row, ...] = (
    Row(
        "nll_target_out_of_range",
        _NLL_OPS,
        r"^Target -?\d+ is out of bounds",
        "aten/src/ATen/native/LossNLL.cpp:259 (nll_loss_out_frame)",
        "aten/src/ATen/native/cuda/Loss.cu:200 (nll_loss_forward_reduce_cuda_kernel_2d)",
        NLL,
    ),
    Row(
        "nll_target_out_of_range_no_reduce",
        _NLL_OPS,
        r"^Target -?\d+ is out of bounds",
        "aten/src/ATen/native/LossNLL.cpp:200 (nll_loss_out_frame, reduction='none')",
        "aten/src/ATen/native/cuda/Loss.cu:179 (nll_loss_forward_no_reduce_cuda_kernel)",
        NLL_NO_REDUCE,
    ),
    Row(
        "nll2d_target_out_of_range",
        ("nll_loss2d_forward", "nll_loss2d"),
        r"^Target -?\d+ is out of bounds",
        "aten/src/ATen/native/LossNLL2d.cpp:208 (nll_loss2d_forward_out_frame)",
        "aten/src/ATen/native/cuda/NLLLoss2d.cu:108 (nll_loss2d_forward_kernel)",
        NLL2D,
    ),
    Row(
        "nll_float_target",
        (*_NLL_OPS, "nll_loss2d_forward"),
        r"^expected target dtype to be Long or Byte",
        "aten/src/ATen/native/LossNLL.cpp:50 (TORCH_META_FUNC(nll_loss_forward))",
        "aten/src/ATen/native/LossNLL.cpp:50: the structured kernel's meta function runs on the host for every device",
        None,
    ),
    Row(
        "embedding_index_out_of_range",
        ("embedding", "index_select"),
        r"^index out of range in self",
        "aten/src/ATen/native/TensorAdvancedIndexing.cpp:1767 (embedding) / :1850 (index_select)",
        "aten/src/ATen/native/cuda/Indexing.cu:1558 (indexSelectSmallIndex; indexSelectLargeIndex above 16 ids)",
        INDEX_SELECT,
        INDEX_SELECT_LARGE,
    ),
    Row(
        "embedding_float_ids",
        ("embedding",),
        r"^Expected tensor for argument #1 'indices' to have one of the following scalar types",
        "aten/src/ATen/TensorUtils.cpp:200 (checkScalarTypes, called by Embedding.cpp)",
        "aten/src/ATen/TensorUtils.cpp:200: Embedding.cpp checks the ids' dtype on the host for every device",
        None,
    ),
    Row(
        "index_add_out_of_range",
        ("index_add", "index_add_"),
        r"^index out of range in self",
        "aten/src/ATen/native/TensorAdvancedIndexing.cpp:1308 (index_add_cpu_)",
        "aten/src/ATen/native/cuda/Indexing.cu:1035 (indexFuncSmallIndex; :1094 indexFuncLargeIndex above 16)",
        INDEX_ADD,
        INDEX_ADD_LARGE,
    ),
    Row(
        "advanced_index_out_of_bounds",
        ("index", "index_put", "index_put_", "_index_put_impl_"),
        r"^index -?\d+ is out of bounds for dimension \d+ with size \d+",
        "aten/src/ATen/native/cpu/IndexKernelUtils.h:41",
        "aten/src/ATen/native/cuda/IndexKernel.cu:111 (index_kernel's operator())",
        ADV_INDEX,
    ),
    Row(
        "integer_index_out_of_bounds",
        ("select",),
        r"^index -?\d+ is out of bounds for dimension \d+ with size \d+",
        "aten/src/ATen/TensorIndexing.h:257 (applySelect)",
        "aten/src/ATen/TensorIndexing.h:257: x[15] is checked against the size on the host for every device",
        None,
    ),
    Row(
        "take_out_of_range",
        ("take", "put_", "put"),
        r"^out of range: tried to access index",
        "aten/src/ATen/native/cpu/IndexKernel.cpp:94 (take/put)",
        "aten/src/ATen/native/cuda/IndexKernel.cu:343 (cuda_take_put_kernel)",
        TAKE,
    ),
    Row(
        "gather_scatter_out_of_bounds",
        ("gather", "scatter", "scatter_add", "scatter_add_", "scatter_reduce", "scatter_reduce_"),
        r"^index -?\d+ is out of bounds for dimension \d+ with size \d+",
        "aten/src/ATen/native/cpu/ScatterGatherKernel.cpp:116",
        "aten/src/ATen/native/cuda/ScatterGatherKernel.cu:203 (_scatter_gather_elementwise_kernel)",
        GATHER,
    ),
    Row(
        "scatter_value_out_of_bounds",
        ("scatter", "scatter_"),
        r"^index -?\d+ is out of bounds for dimension \d+ with size \d+",
        "aten/src/ATen/native/cpu/ScatterGatherKernel.cpp:143 (scatter_fill)",
        "aten/src/ATen/native/cuda/ScatterGatherKernel.cu:450 (_scatter_fill_internal_kernel)",
        SCATTER_FILL,
    ),
    Row(
        "gather_scatter_shape",
        ("gather", *_SCATTER_OPS),
        r"^Index tensor must have the same number of dimensions",
        "aten/src/ATen/native/ScatterGatherChecks.h:45 (gather_shape_check)",
        "aten/src/ATen/native/ScatterGatherChecks.h:45: shapes are checked on the host for every device",
        None,
    ),
    Row(
        "one_hot_class_out_of_range",
        ("one_hot",),
        r"^Class values must be (smaller than num_classes|non-negative)",
        "aten/src/ATen/native/Onehot.cpp:55/:60 (checked only when self.device().is_cpu())",
        "aten/src/ATen/native/Onehot.cpp skips the check off the CPU ('for cuda, rely on device assert thrown by "
        "scatter'): ScatterGatherKernel.cu:450 (_scatter_fill_internal_kernel)",
        SCATTER_FILL,
    ),
    Row(
        "bce_input_range",
        ("binary_cross_entropy",),
        r"^all elements of input should be between 0 and 1",
        "aten/src/ATen/native/Loss.cpp:279 (binary_cross_entropy_out_cpu)",
        "aten/src/ATen/native/cuda/Loss.cu:89 (binary_cross_entropy_out_cuda's operator())",
        BCE_INPUT,
    ),
    Row(
        "bce_target_range",
        ("binary_cross_entropy",),
        r"^all elements of target should be between 0 and 1",
        "aten/src/ATen/native/Loss.cpp:282 (binary_cross_entropy_out_cpu)",
        "aten/src/ATen/native/cuda/Loss.cu:90 (binary_cross_entropy_out_cuda's operator())",
        BCE_TARGET,
    ),
    Row(
        "multinomial_invalid_probs",
        ("_assert_async", "multinomial"),
        r"^probability tensor contains either `inf`, `nan` or element < 0",
        "aten/src/ATen/native/TensorCompare.cpp:496 (_assert_async_msg_cpu, from multinomial's fast path)",
        "aten/src/ATen/native/cuda/TensorCompare.cu:121 (_assert_async_cuda_kernel)",
        ASSERT_ASYNC_PROBS,
    ),
    Row(
        "multinomial_zero_sum",
        ("_assert_async", "multinomial"),
        r"^invalid multinomial distribution \(sum of probabilities <= 0\)",
        "aten/src/ATen/native/TensorCompare.cpp:496 (_assert_async_msg_cpu, from multinomial's fast path)",
        "aten/src/ATen/native/cuda/TensorCompare.cu:121 (_assert_async_cuda_kernel)",
        ASSERT_ASYNC_SUM,
    ),
    Row(
        "multinomial_replacement_negative",
        ("multinomial",),
        r"^invalid multinomial distribution \(encountering probability entry < 0\)",
        "aten/src/ATen/native/cpu/MultinomialKernel.cpp:56 (multinomial_with_replacement_apply)",
        "aten/src/ATen/native/cuda/MultinomialKernel.cu:60 (renormRowsL1)",
        RENORM_NEGATIVE,
    ),
    Row(
        "multinomial_replacement_zero_sum",
        ("multinomial",),
        r"^invalid multinomial distribution \(sum of probabilities <= 0\)",
        "aten/src/ATen/native/cpu/MultinomialKernel.cpp:75 (multinomial_with_replacement_apply)",
        "aten/src/ATen/native/cuda/MultinomialKernel.cu:112 (binarySearchForMultinomial)",
        CUMDIST_ZERO,
    ),
    Row(
        "ctc_input_lengths",
        ("_ctc_loss", "ctc_loss"),
        r"^Expected input_lengths to have value at most",
        "aten/src/ATen/native/LossCTC.cpp:114 (ctc_loss_allocate_outputs)",
        "aten/src/ATen/native/cuda/LossCTC.cu: the lengths are host arrays, checked on the host (no device assert "
        "in LossCTC.cu, shared/reference/torch_cuda_errors.md)",
        None,
    ),
    Row(
        "embedding_bag_index",
        ("_embedding_bag", "_embedding_bag_forward_only", "embedding_bag"),
        r"^Index \d+ of input takes value -?\d+ which is not in the valid range",
        "aten/src/ATen/native/EmbeddingBag.cpp:171 (fbgemm_spmdm_report_error_)",
        "aten/src/ATen/native/cuda/EmbeddingBag.cu:148 (EmbeddingBag_updateOutputKernel_sum_mean)",
        EMBEDDING_BAG,
    ),
)

_BY_OP: dict[str, list[Row]] = {}
for _row in ROWS:
    for _op in _row.ops:
        _BY_OP.setdefault(_op, []).append(_row)


def row_for(op: str, message: str, prefer: frozenset[str] = frozenset()) -> Row | None:
    """The row for this op's CPU error; None when the table does not know it (then CUDA's answer is the same
    host-side error, the default for any check that is not a device assert).

    Some rows share an op and a message and differ only in the kernel CUDA runs (NLL with reduction='none', a
    scatter that fills a value, multinomial with replacement): ``prefer`` names the rows that fit the call.
    """
    first = message.splitlines()[0] if message else ""
    matching = [row for row in _BY_OP.get(op, []) if re.search(row.cpu_error, first)]
    if len(matching) > 1:
        matching = [row for row in matching if row.name in prefer] or [r for r in matching if r.name not in VARIANTS]
    return matching[0] if matching else None


def kernel_for(row: Row, op: str, args: Sequence[Any]) -> Kernel | None:
    """The kernel whose assert CUDA prints for this call: the large-index one where Indexing.cu launches it."""
    at = INDEX_ARGUMENT.get(op)
    if row.large is not None and at is not None and len(args) > at and args[at].numel() > SMALL_INDEX_MAX:
        return row.large
    return row.assert_


# Rows that apply only to one form of a call; the dispatch mode says which form it saw.
VARIANTS = frozenset(
    {"nll_target_out_of_range_no_reduce", "scatter_value_out_of_bounds", "multinomial_replacement_zero_sum"}
)


FAMILY_KERNELS: dict[str, Kernel] = {
    "label_out_of_range": NLL,
    "negative_label": NLL,
    "num_classes_mismatch": NLL,
    "embedding_index_out_of_range": INDEX_SELECT,
    "vocab_resize_missing": INDEX_SELECT,
    "position_ids_too_long": INDEX_SELECT,
    "token_type_ids_out_of_range": INDEX_SELECT,
    "advanced_index_out_of_bounds": ADV_INDEX,
    "gather_scatter_index": GATHER,
    "one_hot_num_classes": SCATTER_FILL,
    "bce_input_range": BCE_INPUT,
    "bce_target_range": BCE_TARGET,
    "multinomial_invalid_probs": ASSERT_ASYNC_PROBS,
}


def assertion_line(kernel: Kernel, thread: int = 0) -> str:
    return (
        f"{PREFIX}{kernel.file}:{kernel.line}: {kernel.kernel}: block: [0,0,0], thread: [{thread},0,0] "
        f"Assertion `{kernel.condition}` failed."
    )
