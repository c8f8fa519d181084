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
    "cublas_execution_failed": (
        "CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, opa, opb, m, n, k)`",
        True,
    ),
    "cudnn_execution_failed": ("cuDNN error: CUDNN_STATUS_EXECUTION_FAILED", True),
    "hip_error": ("torch.AcceleratorError: HIP error: device-side assert triggered", True),
    "out_of_memory": ("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.90 GiB total capacity)", False),
    "no_kernel_image": ("CUDA error: no kernel image is available for execution on the device", False),
    "cpu_nll_target": ("IndexError: Target 5 is out of bounds.", None),
    "cpu_bce_input": ("RuntimeError: all elements of input should be between 0 and 1", None),
    "cpu_bce_target": ("RuntimeError: all elements of target should be between 0 and 1", None),
    "cpu_index_out_of_range_in_self": ("IndexError: index out of range in self", None),
    "cpu_index_bounds": ("IndexError: index 15 is out of bounds for dimension 0 with size 10", None),
    "cpu_take_bounds": ("IndexError: out of range: tried to access index 10 on a tensor of 10 elements.", None),
    "cpu_embedding_bag": (
        "RuntimeError: Index 0 of input takes value 10 which is not in the valid range [0, 10)",
        None,
    ),
    "cpu_multinomial": ("RuntimeError: probability tensor contains either `inf`, `nan` or element < 0", None),
    "cpu_one_hot": ("RuntimeError: Class values must be smaller than num_classes.", None),
    "cpu_dtype_mismatch": ("RuntimeError: expected scalar type Long but found Float", None),
    "cpu_nan_cast": ("ValueError: cannot convert float NaN to integer", None),
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
