"""Every entry of the catalog is exercised: each error text by a message that PyTorch really prints, each device
assertion by a line in the exact format the CUDA runtime prints."""

from __future__ import annotations

import pytest

from nb_cudaguard.families import FAMILIES
from nb_cudaguard.incident import catalog
from nb_cudaguard.record.assertions import AssertionCollector, parse_assertions

# A real message for each ErrorText (from shared/reference/torch_cuda_errors.md), with the expected verdicts.
SAMPLES = {
    "device_side_assert": ("CUDA error: device-side assert triggered\nCompile with `TORCH_USE_CUDA_DSA`", True),
    "illegal_memory_access": ("CUDA error: an illegal memory access was encountered", True),
    "misaligned_address": ("CUDA error: misaligned address", True),
    "unspecified_launch_failure": ("torch.AcceleratorError: CUDA error: unspecified launch failure", True),
    "illegal_instruction": ("CUDA error: an illegal instruction was encountered", True),
    "hardware_stack_error": ("CUDA error: hardware stack error", True),
    "invalid_program_counter": ("CUDA error: invalid program counter", True),
    "launch_timeout": ("CUDA error: the launch timed out and was terminated", True),
    "cublas_failure": (
        "CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, opa, opb, m, n, k)`",
        True,
    ),
    "cudnn_not_supported": ("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in", False),
    "cudnn_failure": ("cuDNN error: CUDNN_STATUS_EXECUTION_FAILED", True),
    "thrust_synchronize": ("RuntimeError: copy_if failed to synchronize: device-side assert triggered", True),
    "hip_error": ("torch.AcceleratorError: HIP error: device-side assert triggered", True),
    "out_of_memory": ("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.90 GiB total capacity)", False),
    "launch_refused": ("CUDA error: too many resources requested for launch", False),
    "ecc_uncorrectable": ("CUDA error: uncorrectable ECC error encountered", None),
    "stream_capture": ("CUDA error: operation not permitted when stream is capturing", False),
    "cpu_margin_target": ("RuntimeError: argument #2 'target' is out of range", None),
    "nccl_cuda_error": (
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1191, unhandled cuda error",
        True,
    ),
    "no_kernel_image": ("CUDA error: no kernel image is available for execution on the device", False),
    "cpu_nll_target": ("IndexError: Target 5 is out of bounds.", None),
    "cpu_bce_input": ("RuntimeError: all elements of input should be between 0 and 1", None),
    "cpu_bce_target": ("RuntimeError: all elements of target should be between 0 and 1", None),
    "cpu_index_out_of_range_in_self": ("IndexError: index out of range in self", None),
    "cpu_index_bounds": ("IndexError: index 15 is out of bounds for dimension 0 with size 10", None),
    "cpu_take_bounds": ("IndexError: out of range: tried to access index 10 on a tensor of 10 elements.", None),
    "cpu_index_select_th": (
        "RuntimeError: index out of range at /pytorch/aten/src/TH/generic/THTensorEvenMoreMath.cpp:191",
        None,
    ),
    "cpu_embedding_bag": (
        "RuntimeError: Index 0 of input takes value 10 which is not in the valid range [0, 10)",
        None,
    ),
    "cpu_multinomial": ("RuntimeError: probability tensor contains either `inf`, `nan` or element < 0", None),
    "cpu_one_hot": ("RuntimeError: Class values must be smaller than num_classes.", None),
    "cpu_dtype_mismatch": ("RuntimeError: expected scalar type Long but found Float", None),
    "cpu_ctc_lengths": (
        "RuntimeError: Expected input_lengths to have value at most 50, but got value 60 (while checking arguments "
        "for ctc_loss_allocate_outputs)",
        None,
    ),
    "cpu_nan_cast": ("ValueError: cannot convert float NaN to integer", None),
    "cpu_other_op_check": ("RuntimeError: bernoulli_ expects p to be in [0, 1], but got p=1.5", None),
}


def test_every_error_text_has_a_sample():
    assert {entry.name for entry in catalog.ERROR_TEXTS} == set(SAMPLES)


@pytest.mark.parametrize("entry", catalog.ERROR_TEXTS, ids=lambda e: e.name)
def test_error_text_matches_its_sample(entry):
    text, sticky = SAMPLES[entry.name]
    names = [e.name for e in catalog.match_error_texts(text)]
    assert entry.name in names
    assert catalog.sticky_verdict(text) is sticky
    assert entry.family in FAMILIES


def test_host_errors_are_not_cuda_errors():
    assert not catalog.is_cuda_text("IndexError: Target 5 is out of bounds.")
    assert catalog.is_cuda_text("RuntimeError: CUDA error: device-side assert triggered")


@pytest.mark.parametrize("entry", catalog.device_asserts(), ids=lambda e: f"{e.file.rsplit('/', 1)[-1]}:{e.condition}")
def test_every_device_assert_is_recognised_from_its_printed_line(entry):
    kernel = entry.kernels[0] if entry.kernels[0] else "operator()"
    line = (
        f"/opt/conda/conda-bld/pytorch_1/work/{entry.file}:123: {kernel}: block: [7,0,0], thread: [64,0,0] "
        f"Assertion `{entry.condition}` failed."
    )
    [record] = parse_assertions(line)
    assert record.condition == entry.condition
    assert record.block == "7,0,0" and record.thread == "64,0,0"
    found = catalog.lookup_assertion(record)
    assert found is not None and found.family == entry.family
    assert found.family in FAMILIES


def test_assertion_lines_are_deduplicated_with_a_count():
    line = (
        "/pytorch/aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: "
        "block: [0,0,0], thread: [{t},0,0] Assertion `t >= 0 && t < n_classes` failed."
    )
    text = "\n".join(line.format(t=t % 32) for t in range(5000))
    [record] = parse_assertions(text)
    assert record.count == 5000
    assert record.short_file == "aten/src/ATen/native/cuda/Loss.cu"


def test_a_progress_bar_on_the_assertions_line_stays_out_of_its_file():
    """tqdm redraws with a carriage return, so a pasted log joins the bar and the device's line into one."""
    line = (
        "Epoch 1:  12%|#2        | 3/25 [00:16<01:59,  5.51s/it]../aten/src/ATen/native/cuda/Indexing.cu:1141: "
        "indexSelectSmallIndex: block: [0,0,0], thread: [{t},0,0] Assertion `srcIndex < srcSelectDimSize` failed."
    )
    [record] = parse_assertions(line.format(t=1) + "\n" + line.format(t=2).split("]", 1)[1])
    assert record.file == "../aten/src/ATen/native/cuda/Indexing.cu" and record.count == 2
    assert catalog.lookup_assertion(record).family == "embedding_index_out_of_range"


def test_hip_format_is_parsed():
    line = "Loss.hip:120: void nll_loss(float*): Device-side assertion `t >= 0 && t < n_classes' failed."
    [record] = parse_assertions(line)
    assert catalog.lookup_assertion(record).family == "label_out_of_range"


def test_multinomial_message_with_backticks_is_parsed_whole():
    line = (
        "/__w/pytorch/pytorch/aten/src/ATen/native/cuda/TensorCompare.cu:112: _assert_async_cuda_kernel: "
        "block: [0,0,0], thread: [0,0,0] Assertion `probability tensor contains either `inf`, `nan` or element < 0`"
        " failed."
    )
    [record] = parse_assertions(line)
    assert record.condition.endswith("element < 0")
    assert catalog.lookup_assertion(record).family == "multinomial_invalid_probs"


def test_distinct_assertions_are_bounded():
    collector = AssertionCollector(max_distinct=3)
    for n in range(10):
        collector.feed_line(f"a/Loss.cu:{n}: k: block: [0,0,0], thread: [0,0,0] Assertion `x` failed.")
    assert len(collector.records) == 3 and collector.dropped == 7


# Secondary symptoms in every wording PyTorch has printed (0.4 to 2.x): each is a CUDA error, sticky, and marked as
# following an earlier failure rather than naming an op.
SECONDARY_WORDINGS = {
    "cublas_failure": (
        "RuntimeError: cublas runtime error : library not initialized at /pytorch/aten/src/THC/THCGeneral.cpp:216",
        "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`",
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "RuntimeError: cublas runtime error : resource allocation failed at THCGeneral.cpp:250",
        "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle, opa, opb`",
        "RuntimeError: CUDA error: CUBLAS_STATUS_INTERNAL_ERROR when calling `cublasCreate(handle)`",
    ),
    "cudnn_failure": (
        "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED",
        "RuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR",
        "RuntimeError: cuDNN error: CUDNN_STATUS_MAPPING_ERROR",
    ),
    "illegal_memory_access": (
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "an illegal memory access was encountered",
        "RuntimeError: CUDA error: an illegal memory acess was encountered",
        "terminate called after throwing an instance of 'c10::CUDAError' what(): an illegal memory access",
    ),
    "thrust_synchronize": (
        "RuntimeError: copy_if failed to synchronize: device-side assert triggered",
        "RuntimeError: copy_if failed to synchronize: cudaErrorAssert: device-side assert triggered",
        "RuntimeError: reduce failed to synchronize: device-side assert triggered",
    ),
    "unspecified_launch_failure": ("RuntimeError: CUDA error: unspecified launch failure",),
}


@pytest.mark.parametrize(
    ("name", "text"), [(n, t) for n, texts in SECONDARY_WORDINGS.items() for t in texts], ids=lambda v: str(v)[:40]
)
def test_secondary_symptoms_are_cuda_errors_that_follow_an_earlier_failure(name, text):
    assert catalog.is_cuda_text(text)
    assert catalog.sticky_verdict(text) is True
    assert name in [e.name for e in catalog.secondary_symptoms(text)]
    assert [h.family for h in catalog.hits_for(text, []) if h.family != "other"] == []  # no op named by it


# Conditions and kernels of the THC/THCUNN era (0.4 to 1.x), as their assert() printed them.
OLDER_LINES = {
    "/pytorch/aten/src/THCUNN/ClassNLLCriterion.cu:108: void cunn_ClassNLLCriterion_updateOutput_kernel(Dtype *, "
    "Dtype *, Dtype *, long *, Dtype *, int, int, int, int, long) [with Dtype = float, Acctype = float]: "
    "block: [0,0,0], thread: [7,0,0] Assertion `t >= 0 && t < n_classes` failed.": "label_out_of_range",
    "/pytorch/aten/src/THC/THCTensorIndex.cu:361: void indexSelectLargeIndex(TensorInfo<T, IndexType>, "
    "TensorInfo<T, IndexType>, TensorInfo<long, IndexType>, int, int, IndexType, IndexType, long) [with T = float, "
    "IndexType = unsigned int, DstDim = 2, SrcDim = 2, IdxDim = -2, IndexIsMajor = true]: block: [22,0,0], "
    "thread: [27,0,0] Assertion `srcIndex < srcSelectDimSize` failed.": "embedding_index_out_of_range",
    "/pytorch/aten/src/THC/THCTensorRandom.cuh:185: void sampleMultinomialOnce(long *, long, int, T *, T *, int, "
    "int) [with T = float, AccT = float]: block: [0,0,0], thread: [0,0,0] Assertion "
    "`THCNumerics<T>::ge(val, zero)` failed.": "multinomial_invalid_probs",
    "/pytorch/aten/src/THCUNN/BCECriterion.cu:42: Acctype bce_functor<Dtype, Acctype>::operator()(Tuple) [with "
    "Tuple = thrust::tuple<float, float>, Dtype = float, Acctype = float]: block: [0,0,0], thread: [0,0,0] "
    "Assertion `input >= 0. && input <= 1.` failed.": "bce_input_range",
    "/pytorch/aten/src/THC/THCTensorScatterGather.cu:188: void THCudaTensor_scatterFillKernel(TensorInfo<Real, "
    "IndexType>, TensorInfo<long, IndexType>, Real, int, IndexType) [with IndexType = unsigned int, Real = float, "
    "Dims = 2]: block: [4,0,0], thread: [32,0,0] Assertion `indexValue >= 0 && indexValue < tensor.sizes[dim]` "
    "failed.": "gather_scatter_index",
}


@pytest.mark.parametrize(("line", "family"), OLDER_LINES.items(), ids=lambda v: str(v)[:50])
def test_older_assertion_lines_are_recognised(line, family):
    [record] = parse_assertions(line)
    assert catalog.lookup_assertion(record).family == family


def test_a_known_kernel_names_its_op_when_the_condition_is_unknown():
    line = (
        "/pytorch/aten/src/THCUNN/ClassNLLCriterion.cu:60: void cunn_ClassNLLCriterion_updateOutput_kernel1(Dtype *) "
        "[with Dtype = float]: block: [0,0,0], thread: [0,0,0] Assertion `t >= 0 && t < n_classes && t != x` failed."
    )
    [record] = parse_assertions(line)
    assert catalog.lookup_assertion(record).family == "label_out_of_range"
    generic = parse_assertions(line.replace("cunn_ClassNLLCriterion_updateOutput_kernel1(Dtype *)", "operator()"))
    assert catalog.lookup_assertion(generic[0]) is None


@pytest.mark.parametrize(
    ("text", "family"),
    [
        (
            "RuntimeError: cuda runtime error (710) : device-side assert triggered at "
            "/pytorch/aten/src/THCUNN/generic/ClassNLLCriterion.cu:115",
            "label_out_of_range",
        ),
        (
            "RuntimeError: cuda runtime error (59) : device-side assert triggered at "
            "/opt/conda/conda-bld/pytorch_1565272279342/work/aten/src/THC/generic/THCTensorScatterGather.cu:380",
            "gather_scatter_index",
        ),
        (
            "THCudaCheck FAIL file=/pytorch/aten/src/THC/generic/THCTensorScatterGather.cu line=380 error=59 : "
            "device-side assert triggered",
            "gather_scatter_index",
        ),
    ],
)
def test_an_old_error_names_the_kernel_file_it_was_noticed_in(text, family):
    assert [h.family for h in catalog.hits_for(text, []) if h.family != "other"] == [family]


def test_a_copy_or_storage_file_names_no_op():
    text = "cuda runtime error (59) : device-side assert triggered at /pytorch/torch/lib/THC/generic/THCTensorCopy.c:70"
    assert [h.family for h in catalog.hits_for(text, []) if h.family != "other"] == []


def test_an_assertion_quoted_without_its_kernel_line_is_recognised():
    wrapped = (
        "indexSelectLargeIndex: block: [120,0,0], thread: [24,0,0] Assertion `srcIndex < srcSelectDimSize\n` failed."
    )
    assert [r.condition for r in catalog.bare_assertions(wrapped)] == ["srcIndex < srcSelectDimSize"]
    thnn = "RuntimeError: Assertion `cur_target >= 0 && cur_target < n_classes' failed.  at THNN/ClassNLLCriterion.c:93"
    [hit] = catalog.hits_for(thnn, [])
    assert hit.family == "label_out_of_range"
