"""Never empty for an error we know: every device assertion PyTorch compiles into its kernels (the catalog, read from
the shared reference's ``torch_cuda_asserts.json``), printed whole, without its file prefix, or cut short at its
start, every CUDA error string of the reference's table and the host-side texts of the same families get at least
their family, a family put forward by the prior says so, and an error that names what failed outside our families
(bernoulli's assertion, out of memory) is not given a label's cause by how often labels fail.
"""

from __future__ import annotations

import re

import pytest

from nb_cudaguard.diagnosis import diagnose
from nb_cudaguard.diagnosis.causes import Diagnosis
from nb_cudaguard.families import group_of
from nb_cudaguard.incident.catalog import CUT_MIN_CHARS, device_asserts
from nb_cudaguard.incident.logparse import incident_from_log

TRACEBACK = 'Traceback (most recent call last):\n  File "train.py", line 40, in <module>\n    loss.backward()\n'
ASSERTED = (
    "\nRuntimeError: CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously reported at "
    "some other API call, so the stacktrace below might be incorrect.\n"
)


def _explain(text: str) -> Diagnosis:
    return diagnose(incident_from_log(text))


def _prior_marked(diagnosis: Diagnosis) -> None:
    """Each cause says what stands behind it: a direct fact, an inferred one, or the prior, named as such."""
    for cause in diagnosis.causes:
        assert cause.evidence, cause.family
        if not any(e.direct or e.kind != "prior" for e in cause.evidence):
            assert all(e.text.startswith("prior, not evidence about this log") for e in cause.evidence)


def _printed(entry) -> str:
    kernel = entry.kernels[0] if entry.kernels else "operator()"
    return f"/pytorch/{entry.file}:120: {kernel}: block: [0,0,0], thread: [3,0,0] Assertion `{entry.condition}` failed."


def _families(diagnosis: Diagnosis) -> list[str]:
    return [c.family for c in diagnosis.causes]


def _leads_with(diagnosis: Diagnosis, family: str) -> None:
    """The family's group leads and the family is among the causes: within the embedding group an assertion says
    an id was out of its table, not which table (the prior ranks them, marked as a prior)."""
    families = _families(diagnosis)
    assert group_of(families[0]) == group_of(family) and family in families, (family, families)


@pytest.mark.parametrize("entry", device_asserts(), ids=lambda e: f"{e.file.rsplit('/', 1)[-1]}:{e.condition[:40]}")
def test_every_device_assertion_gets_its_family_whole_bare_or_cut_short(entry):
    line = _printed(entry)
    ways = {
        "whole": line,
        "without the file prefix": f"Assertion `{entry.condition}` failed.",
        "cut inside the kernel's name": line[line.index(": ") + 4 :],
    }
    for how, text in ways.items():
        diagnosis = _explain(text + ASSERTED)
        assert diagnosis.causes, how
        _leads_with(diagnosis, entry.family)
        _prior_marked(diagnosis)


def _tail_names_one_family(tail: str) -> str | None:
    wanted = re.sub(r"\s+", "", tail)
    ends = {d.family for d in device_asserts() if re.sub(r"\s+", "", d.condition).endswith(wanted)}
    return ends.pop() if len(ends) == 1 and len(wanted) >= CUT_MIN_CHARS else None


@pytest.mark.parametrize("entry", device_asserts(), ids=lambda e: f"{e.file.rsplit('/', 1)[-1]}:{e.condition[:40]}")
def test_an_assertion_cut_short_inside_its_condition_gets_its_family_where_the_rest_names_one(entry):
    # a paste that starts mid-line: what is left of the condition opens the log
    tail = entry.condition[len(entry.condition) // 3 :].lstrip(" >.")
    diagnosis = _explain(f"{tail}` failed.{ASSERTED}")
    assert diagnosis.causes  # a device-side assert is never without a cause
    _prior_marked(diagnosis)
    family = _tail_names_one_family(tail)
    if family is not None and family != "other":
        _leads_with(diagnosis, family)


# cudaGetErrorString's texts (the reference's table of CUDA error strings) and what each names: a family of ours, or
# what failed outside them (None: the usual causes of a failed kernel, ranked by the prior and marked so).
CUDA_ERRORS = {
    "device-side assert triggered": None,
    "an illegal memory access was encountered": "illegal_memory_access",
    "misaligned address": "illegal_memory_access",
    "unspecified launch failure": "illegal_memory_access",
    "an illegal instruction was encountered": "illegal_memory_access",
    "hardware stack error": "illegal_memory_access",
    "invalid program counter": "illegal_memory_access",
    "the launch timed out and was terminated": "other",
    "out of memory": "other",
    "too many resources requested for launch": "other",
    "no kernel image is available for execution on the device": "other",
    "invalid argument": "other",
    "invalid device function": "other",
    "uncorrectable ECC error encountered": "other",
    "operation not permitted when stream is capturing": "other",
    "CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, opa, opb, m, n, k)`": None,
}


# The driver's own names, as CUDA >= 12.9 builds log them under the error ("Returning 719 (CUDA_ERROR_LAUNCH_FAILED)
# from cuCtxSynchronize_v2", the reference's section b), and the runtime's names thrust puts before the text.
DRIVER_LOG = {
    "Returning 710 (CUDA_ERROR_ASSERT) from cuCtxSynchronize_v2": None,
    "Returning 700 (CUDA_ERROR_ILLEGAL_ADDRESS) from cuCtxSynchronize_v2": "illegal_memory_access",
    "Returning 716 (CUDA_ERROR_MISALIGNED_ADDRESS) from cuCtxSynchronize_v2": "illegal_memory_access",
    "Returning 719 (CUDA_ERROR_LAUNCH_FAILED) from cuCtxSynchronize_v2": "illegal_memory_access",
}


# A CUDA failure worded by what carried it: the C++ exception a process dies of with its message cut, ROCm's form,
# NCCL's report of a CUDA call failing under a collective.
CARRIED = (
    "terminate called after throwing an instance of 'c10::CUDAError'",
    "RuntimeError: HIP error: hipErrorIllegalAddress",
    "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1191, unhandled cuda error, "
    "NCCL version 2.10.3",
)


@pytest.mark.parametrize("text", CARRIED)
def test_a_cuda_failure_carried_by_another_layer_gets_the_usual_causes_marked_as_a_prior(text):
    diagnosis = _explain(f"{TRACEBACK}{text}\n")
    assert diagnosis.causes and any(e.kind == "prior" for e in diagnosis.causes[0].evidence)
    _prior_marked(diagnosis)


@pytest.mark.parametrize("line", DRIVER_LOG)
def test_the_driver_logs_names_alone_get_a_cause(line):
    diagnosis = _explain(f"The CUDA driver logged these messages, which may provide useful details:\n{line}\n")
    assert diagnosis.causes
    _prior_marked(diagnosis)
    if DRIVER_LOG[line] is not None:
        assert _families(diagnosis)[0] == DRIVER_LOG[line]


@pytest.mark.parametrize("text", CUDA_ERRORS)
def test_every_cuda_error_string_gets_a_cause(text):
    diagnosis = _explain(f"{TRACEBACK}RuntimeError: CUDA error: {text}\n")
    assert diagnosis.causes
    _prior_marked(diagnosis)
    family = CUDA_ERRORS[text]
    if family is None:
        assert any(e.kind == "prior" for e in diagnosis.causes[0].evidence)
    else:
        assert _families(diagnosis)[0] == family
    if family == "other":  # it says what failed: no label or index cause put forward by how often they fail
        assert _families(diagnosis) == ["other"]


# The host-side texts of our families (the reference's CPU equivalents, and the dtype checks of 1.x and 2.x).
HOST_TEXTS = {
    "IndexError: Target 5 is out of bounds.": "label_out_of_range",
    "RuntimeError: target out of range": "label_out_of_range",
    "RuntimeError: argument #2 'target' is out of range": "label_out_of_range",
    "RuntimeError: all elements of input should be between 0 and 1": "bce_input_range",
    "RuntimeError: all elements of target should be between 0 and 1": "bce_target_range",
    "IndexError: index out of range in self": "embedding_index_out_of_range",
    "RuntimeError: Index 0 of input takes value 10 which is not in the valid range [0, 10)": "embedding_index_out_of_range",
    "IndexError: index 10 is out of bounds for dimension 0 with size 10": "advanced_index_out_of_bounds",
    "IndexError: out of range: tried to access index 10 on a tensor of 10 elements.": "advanced_index_out_of_bounds",
    "RuntimeError: probability tensor contains either `inf`, `nan` or element < 0": "multinomial_invalid_probs",
    "RuntimeError: invalid multinomial distribution (sum of probabilities <= 0)": "multinomial_invalid_probs",
    "RuntimeError: Class values must be smaller than num_classes.": "one_hot_num_classes",
    "RuntimeError: expected scalar type Long but found Float": "dtype_mismatch",
    "RuntimeError: expected target dtype to be Long, but got Float": "dtype_mismatch",
    "IndexError: tensors used as indices must be long, int, byte or bool tensors": "dtype_mismatch",
    "RuntimeError: \"nll_loss_forward_reduce_cuda_kernel_2d_index\" not implemented for 'Float'": "dtype_mismatch",
    "RuntimeError: Expected input_lengths to have value at most 50, but got value 60": "ctc_loss",
    "ValueError: cannot convert float NaN to integer": "nan_or_inf",
    "RuntimeError: index out of range: Tried to access index 5 out of table with 4 rows. at "
    "../aten/src/TH/generic/THTensorEvenMoreMath.cpp:418": "embedding_index_out_of_range",
    "IndexError: tensors used as indices must be long, byte or bool tensors": "dtype_mismatch",
    "RuntimeError: gather(): Expected dtype int64 for index": "dtype_mismatch",
    "RuntimeError: index_select(): Expected dtype int32 or int64 for index": "dtype_mismatch",
    "RuntimeError: one_hot is only applicable to index tensor.": "dtype_mismatch",
    "RuntimeError: expected scalar type Long but found Int": "dtype_mismatch",
    "RuntimeError: Expected object of scalar type Long but got scalar type Int for argument #2 'target'": "dtype_mismatch",
    "RuntimeError: target_lengths must be of size batch_size": "ctc_loss",
    "RuntimeError: Expected tensor to have size at least 62 at dimension 1, but got size 40 for argument #2 'targets' "
    "(while checking arguments for ctc_loss_gpu)": "ctc_loss",
}


@pytest.mark.parametrize("text", HOST_TEXTS)
def test_every_host_side_text_of_our_families_gets_its_family(text):
    diagnosis = _explain(f"{TRACEBACK}{text}\n")
    _leads_with(diagnosis, HOST_TEXTS[text])
    _prior_marked(diagnosis)


def _started_names_one_family(head: str) -> str | None:
    wanted = re.sub(r"\s+", "", head)
    starts = {d.family for d in device_asserts() if re.sub(r"\s+", "", d.condition).startswith(wanted)}
    return starts.pop() if len(starts) == 1 and len(wanted) >= CUT_MIN_CHARS else None


@pytest.mark.parametrize("entry", device_asserts(), ids=lambda e: f"{e.file.rsplit('/', 1)[-1]}:{e.condition[:40]}")
def test_an_assertion_cut_short_at_its_end_gets_its_family_where_its_start_names_one(entry):
    # a clipped column or a paste that stops mid-line: no closing backtick, no "failed", the error's lines after it
    line = _printed(entry)
    head = entry.condition[: max(CUT_MIN_CHARS, 2 * len(entry.condition) // 3)]
    cut = line[: line.index("Assertion `") + len("Assertion `") + len(head)]
    for text in (cut + ASSERTED, cut + "\n", f"Assertion `{head}{ASSERTED}"):
        diagnosis = _explain(text)
        assert diagnosis.causes, text
        _prior_marked(diagnosis)
        family = _started_names_one_family(head)
        if family is not None and family != "other":
            _leads_with(diagnosis, family)


def test_an_assertion_cut_in_its_failed_word_or_printed_with_a_message_is_read():
    index = "../aten/src/ATen/native/cuda/Indexing.cu:1290: indexSelectLargeIndex: block: [254,0,0], thread: [64,0,0] "
    _leads_with(
        _explain(f"{index}Assertion `srcIndex < srcSelectDimSize` fai{ASSERTED}"), "embedding_index_out_of_range"
    )
    # CUDA_KERNEL_ASSERT_PRINTF's first line (Repeat.cu, torch_cuda_errors.md section a): an op outside our families
    printf = (
        "[CUDA_KERNEL_ASSERT] /pytorch/aten/src/ATen/native/cuda/Repeat.cu:20: compute_cuda_kernel: block: [0,0,0], "
        "thread: [0,0,0]: Assertion failed: `result_size == cumsum_ptr[size - 1]`: Invalid input!"
    )
    assert _families(_explain(printf + "\n")) == ["other"]


# The lines PyTorch adds under every CUDA error (c10/cuda/CUDADeviceAssertionHost.cpp), all that is left of a log
# whose error line was cut: a CUDA error, not a host-side one.
@pytest.mark.parametrize(
    "line",
    (
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
        "Device-side assertion tracking was not enabled by user.",
    ),
)
def test_what_pytorch_adds_under_a_cuda_error_gets_the_usual_causes_marked_as_a_prior(line):
    diagnosis = _explain(f"{TRACEBACK}{line}\n")
    assert diagnosis.causes and any(e.kind == "prior" for e in diagnosis.causes[0].evidence)
    _prior_marked(diagnosis)


def _raised(op) -> str:
    try:
        op()
    except Exception as exc:  # the text PyTorch raises is what the user pastes
        return f"{type(exc).__name__}: {exc}"
    raise AssertionError("the op ran")


# Host-side checks of our families' inputs, raised by this torch's own ops (the texts are not typed here): index and
# label dtypes of every indexing op and loss, and multinomial's probabilities.
def _torch_raised() -> dict[str, tuple[object, str]]:
    import torch
    import torch.nn.functional as F

    x, floats = torch.zeros(4, 3), torch.tensor([0.0])
    return {
        "cross_entropy int32 target": (lambda: F.cross_entropy(x, torch.zeros(4).int()), "dtype_mismatch"),
        "cross_entropy float target": (lambda: F.cross_entropy(x, torch.zeros(4)), "dtype_mismatch"),
        "embedding float ids": (lambda: F.embedding(floats, x), "dtype_mismatch"),
        "embedding_bag float ids": (lambda: F.embedding_bag(floats, x, torch.tensor([0])), "dtype_mismatch"),
        "x[float]": (lambda: x[floats], "dtype_mismatch"),
        "gather": (lambda: x.gather(1, torch.zeros(4, 1)), "dtype_mismatch"),
        "scatter_": (lambda: x.scatter_(1, torch.zeros(4, 1), 1.0), "dtype_mismatch"),
        "index_add_": (lambda: x.index_add_(0, floats, torch.ones(1, 3)), "dtype_mismatch"),
        "index_fill_": (lambda: x.index_fill_(0, floats, 1.0), "dtype_mismatch"),
        "index_copy_": (lambda: x.index_copy_(0, floats, torch.ones(1, 3)), "dtype_mismatch"),
        "index_select": (lambda: x.index_select(0, floats), "dtype_mismatch"),
        "take": (lambda: x.take(floats), "dtype_mismatch"),
        "put_": (lambda: x.put_(floats, torch.tensor([1.0])), "dtype_mismatch"),
        "one_hot float": (lambda: F.one_hot(floats, 3), "dtype_mismatch"),
        "multinomial nan": (
            lambda: torch.multinomial(torch.tensor([0.5, float("nan")]), 1),
            "multinomial_invalid_probs",
        ),
        "multinomial zero": (lambda: torch.multinomial(torch.zeros(3), 1), "multinomial_invalid_probs"),
        "cross_entropy target 3": (lambda: F.cross_entropy(x, torch.tensor([0, 1, 2, 3])), "label_out_of_range"),
        "multi_margin target": (lambda: F.multi_margin_loss(x, torch.tensor([0, 1, 2, 3])), "label_out_of_range"),
        "embedding id 4": (lambda: F.embedding(torch.tensor([4]), torch.zeros(4, 2)), "embedding_index_out_of_range"),
        "x[10]": (lambda: x[torch.tensor([10])], "advanced_index_out_of_bounds"),
        "one_hot 3 of 3": (lambda: F.one_hot(torch.tensor([3]), 3), "one_hot_num_classes"),
        "bce input": (lambda: F.binary_cross_entropy(torch.tensor([1.5]), torch.tensor([1.0])), "bce_input_range"),
        # ops outside our families: said as what failed, no label's cause by how often labels fail
        "bernoulli p": (lambda: torch.bernoulli(torch.tensor([1.5])), "other"),
        "bernoulli_ p": (lambda: torch.zeros(2).bernoulli_(1.5), "other"),
        "repeat_interleave": (lambda: torch.repeat_interleave(torch.tensor([-1])), "other"),
        "bincount": (lambda: torch.bincount(torch.tensor([-1])), "other"),
        "max_unpool": (
            lambda: F.max_unpool2d(torch.ones(1, 1, 2, 2), torch.full((1, 1, 2, 2), 100), 2),
            "other",
        ),
    }


@pytest.mark.parametrize("name", list(_torch_raised()))
def test_every_host_side_check_torch_raises_for_our_families_gets_its_family(name):
    op, family = _torch_raised()[name]
    text = _raised(op)
    for log in (f"{TRACEBACK}{text}\n", f"{text}\n", f"{TRACEBACK}{text.replace('`', '')}\n"):
        diagnosis = _explain(log)
        assert diagnosis.causes, log
        _prior_marked(diagnosis)
        if family == "other":
            assert _families(diagnosis) == ["other"], log
        else:
            _leads_with(diagnosis, family)
