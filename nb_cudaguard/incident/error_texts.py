"""What PyTorch and CUDA raise on the host when a kernel fails, and which cause family each text points at.

Each entry names the PyTorch source that produces it. Two kinds matter for the diagnosis: a text that names its
cause (``Target 5 is out of bounds``, the host-side twin of a device assertion), and a *secondary symptom*
(``secondary``): a CUDA error that follows an earlier failure in another kernel - cuBLAS or cuDNN refusing to start
on a poisoned context, thrust's ``copy_if failed to synchronize``, an illegal memory access reported at the next
synchronisation. A secondary symptom says that something failed, not what: the diagnosis ranks its usual causes
(``diagnosis.evidence.prior``) and asks for the step that decides.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nb_cudaguard.families import fix_of


@dataclass(frozen=True)
class ErrorText:
    """A message PyTorch raises, what it says about the CUDA context, and the family it points at."""

    name: str
    pattern: re.Pattern[str]
    family: str
    sticky: bool | None  # True: the context is poisoned; False: recoverable; None: not a CUDA error
    meaning: str
    fix: str
    source: str
    device: str = "cuda"  # "cuda" for texts only a GPU produces, "cpu" for the host-side equivalents
    secondary: bool = False  # a CUDA error that follows an earlier failure: it does not name the op

    def to_dict(self) -> dict[str, object]:
        names = ("name", "family", "sticky", "meaning", "fix", "source", "device", "secondary")
        return {name: getattr(self, name) for name in names}


def _t(
    name: str,
    pattern: str,
    family: str,
    sticky: bool | None,
    meaning: str,
    source: str,
    *,
    fix: str | None = None,
    device: str = "cuda",
    secondary: bool = False,
) -> ErrorText:
    """One entry; without ``fix``, the family's usual fix (``families``), so the two cannot drift apart."""
    fix = fix if fix is not None else fix_of(family)
    compiled = re.compile(pattern, re.IGNORECASE)
    return ErrorText(name, compiled, family, sticky, meaning, fix, source, device, secondary)


LAUNCH_BLOCKING = "Re-run the failing cell with the %%cudacheck magic (or CUDA_LAUNCH_BLOCKING=1) to find the op."

# Ordered: the first match that names a specific cause wins over the generic CUDA texts at the end.
ERROR_TEXTS: tuple[ErrorText, ...] = (
    _t(
        "device_side_assert",
        r"device-side assert(ion)? triggered|\bCUDA_ERROR_ASSERT\b|\bcudaErrorAssert\b",
        "other",
        True,
        "A CUDA kernel checked its input and stopped (cudaErrorAssert, 710). The context is poisoned: every later "
        "CUDA call fails with the same error.",
        "c10/cuda/CUDAException.cpp; cudaGetErrorString(cudaErrorAssert); CUDA_ERROR_ASSERT in the driver log",
        fix="Find the printed `Assertion ... failed.` line; " + LAUNCH_BLOCKING,
    ),
    _t(
        "illegal_memory_access",
        r"illegal memory acc?ess?|\bCUDA_ERROR_ILLEGAL_ADDRESS\b|\bcudaErrorIllegalAddress\b",
        "illegal_memory_access",
        True,
        "A kernel read or wrote memory it does not own (cudaErrorIllegalAddress, 700). CUDA reports it at the next "
        "synchronisation, so it often follows an out-of-range index in an op without a device assert (a "
        "per-pixel loss with reduction='none', a custom or third-party kernel).",
        "cudaGetErrorString(cudaErrorIllegalAddress)",
        secondary=True,
    ),
    _t(
        "misaligned_address",
        r"misaligned address|\bCUDA_ERROR_MISALIGNED_ADDRESS\b",
        "illegal_memory_access",
        True,
        "A kernel accessed memory at a misaligned address (cudaErrorMisalignedAddress, 716).",
        "cudaGetErrorString(cudaErrorMisalignedAddress)",
        fix="Check custom kernels and non-contiguous or sliced tensors passed to them.",
    ),
    _t(
        "unspecified_launch_failure",
        r"unspecified launch failure|\bCUDA_ERROR_LAUNCH_FAILED\b|\bcudaErrorLaunchFailure\b",
        "illegal_memory_access",
        True,
        "A kernel crashed (cudaErrorLaunchFailure, 719), e.g. an invalid device pointer; it is reported at the next "
        "synchronisation, often after an earlier kernel failed.",
        "cudaGetErrorString(cudaErrorLaunchFailure)",
        fix=LAUNCH_BLOCKING,
        secondary=True,
    ),
    _t(
        "illegal_instruction",
        r"an illegal instruction was encountered",
        "illegal_memory_access",
        True,
        "A kernel executed an illegal instruction (cudaErrorIllegalInstruction, 715).",
        "cudaGetErrorString(cudaErrorIllegalInstruction)",
        fix="Check custom kernels and that the wheel was built for this GPU.",
    ),
    _t(
        "hardware_stack_error",
        r"hardware stack error",
        "illegal_memory_access",
        True,
        "A kernel overflowed its stack (cudaErrorHardwareStackError, 714).",
        "cudaGetErrorString(cudaErrorHardwareStackError)",
        fix="Check recursion or large local arrays in custom kernels.",
    ),
    _t(
        "invalid_program_counter",
        r"invalid program counter",
        "illegal_memory_access",
        True,
        "A kernel jumped to an invalid address (cudaErrorInvalidPc, 718).",
        "cudaGetErrorString(cudaErrorInvalidPc)",
        fix="Check custom kernels.",
    ),
    _t(
        "launch_timeout",
        r"the launch timed out and was terminated",
        "other",
        True,
        "A kernel ran past the display watchdog (cudaErrorLaunchTimeout, 702).",
        "cudaGetErrorString(cudaErrorLaunchTimeout)",
        fix="Run on a GPU without a display attached, or split the work.",
    ),
    _t(
        "cublas_failure",
        r"CUBLAS_STATUS_\w+|cublas runtime error|cuBLAS error|library not initialized"
        r"|resource allocation failed|cublasCreate\(handle\)",
        "other",
        True,
        "cuBLAS failed to start or to run (not initialised, allocation failed, execution failed). On a context an "
        "earlier kernel failed in, this is the first call that notices: most often an out-of-range embedding or "
        "label index just before the matrix multiply.",
        "aten/src/ATen/cuda/CUDABlas.cpp (TORCH_CUDABLAS_CHECK); THC/THCGeneral.cpp (THCublasCheck, 0.4-1.x)",
        fix="Look for an earlier device assertion; " + LAUNCH_BLOCKING,
        secondary=True,
    ),
    _t(
        "cudnn_not_supported",
        r"CUDNN_STATUS_NOT_SUPPORTED",
        "other",
        False,
        "cuDNN does not support this configuration (a non-contiguous input, a CTC target of 256 or more labels, "
        "an unusual shape).",
        "aten/src/ATen/cudnn/Exceptions.h",
        fix="Make the inputs contiguous, or disable cuDNN for the op (torch.backends.cudnn.enabled = False) to use "
        "PyTorch's own kernel.",
    ),
    _t(
        "cudnn_failure",
        r"CUDNN_STATUS_(?!NOT_SUPPORTED)\w+|cuDNN error: (?!CUDNN_STATUS_NOT_SUPPORTED)",
        "other",
        True,
        "cuDNN failed (not initialised, internal error, execution failed, mapping error); on a context an earlier "
        "kernel failed in, this is the first call that notices.",
        "aten/src/ATen/cudnn/Exceptions.h",
        fix="Look for an earlier device assertion; " + LAUNCH_BLOCKING,
        secondary=True,
    ),
    _t(
        "thrust_synchronize",
        r"\b\w+ failed to synchronize",
        "other",
        True,
        "A thrust algorithm (copy_if behind nonzero/masked_select, reduce, sort) found the device failed while it "
        "waited: an earlier kernel failed, usually a label or index assertion just before.",
        "thrust/system/cuda/detail (copy_if, reduce: 'failed to synchronize'), torch 0.4-1.x",
        fix="Look for an earlier device assertion; " + LAUNCH_BLOCKING,
        secondary=True,
    ),
    _t(
        "nccl_cuda_error",
        r"unhandled cuda error",
        "other",
        True,
        "NCCL found a CUDA call failing under it (ncclUnhandledCudaError): in training code, most often a kernel "
        "that failed before the collective, on this rank or another.",
        "nccl src/misc/argcheck, ncclGetErrorString(ncclUnhandledCudaError)",
        fix="Look for an earlier device assertion in every rank's output; " + LAUNCH_BLOCKING,
        secondary=True,
    ),
    _t(
        "hip_error",
        r"HIP error: (device-side assert|an illegal memory access|unspecified launch failure)",
        "other",
        True,
        "The ROCm equivalent of a sticky CUDA error.",
        "c10/cuda/CUDAMiscFunctions.cpp (USE_ROCM branch)",
        fix="Re-run with AMD_SERIALIZE_KERNEL=3, or the %%cudacheck magic.",
    ),
    _t(
        "out_of_memory",
        r"(CUDA|HIP) out of memory|CUDA error: out of memory|OutOfMemoryError",
        "other",
        False,
        "The GPU ran out of memory. This is recoverable: the context is healthy, nothing needs a restart.",
        "c10/cuda/CUDACachingAllocator.cpp",
        fix="Free tensors you no longer need (del x; gc.collect(); torch.cuda.empty_cache()), lower the batch size, "
        "or use mixed precision.",
    ),
    _t(
        "launch_refused",
        r"too many resources requested for launch|CUDA error: invalid (argument|device function|device ordinal)",
        "other",
        False,
        "CUDA refused a call or a launch (out of resources 701, invalid value 1, invalid device function 98, invalid "
        "device 101): the launch, the device index or an extension built for another GPU, not the data.",
        "cudaGetErrorString(cudaErrorLaunchOutOfResources, InvalidValue, InvalidDeviceFunction, InvalidDevice)",
        fix="Check the device index (torch.cuda.device_count()), custom kernels' block sizes, and that extensions "
        "were built for this GPU.",
    ),
    _t(
        "ecc_uncorrectable",
        r"uncorrectable ECC error encountered",
        "other",
        None,
        "The GPU's memory reported an uncorrectable error (cudaErrorECCUncorrectable, 214): hardware, not code.",
        "cudaGetErrorString(cudaErrorECCUncorrectable)",
        fix="Restart the process; if it recurs, report the GPU to whoever runs the machine (nvidia-smi -q -d ECC).",
    ),
    _t(
        "stream_capture",
        r"operation not permitted when stream is capturing|operation failed due to a previous error during capture",
        "other",
        False,
        "A call that synchronises or allocates ran inside CUDA graph capture (torch.cuda.graph, cudagraphs).",
        "cudaGetErrorString(cudaErrorStreamCaptureUnsupported, cudaErrorStreamCaptureInvalidated)",
        fix="Move .item(), .cpu(), printing and new allocations out of the captured region.",
    ),
    _t(
        "no_kernel_image",
        r"no kernel image is available for execution on the device",
        "other",
        False,
        "This PyTorch build has no kernels for this GPU architecture.",
        "cudaGetErrorString(cudaErrorNoKernelImageForDevice)",
        fix="Install a PyTorch build that supports this GPU.",
    ),
    # Host-side (CPU) texts for the same bad inputs: torch_cuda_errors.md section (e), torch 2.13.0+cpu.
    _t(
        "cpu_nll_target",
        r"Target (-?\d+) is out of bounds",
        "label_out_of_range",
        None,
        "A class-index target is negative or >= the number of classes.",
        "aten/src/ATen/native/LossNLL.cpp, LossNLL2d.cpp",
        device="cpu",
    ),
    _t(
        "cpu_margin_target",
        r"\btarget out of range\b|argument #2 'target' is out of range",
        "label_out_of_range",
        None,
        "multi_margin_loss or multilabel_margin_loss got a class target outside [0, C).",
        "aten/src/ATen/native/LossMultiMargin.cpp, LossMultiLabelMargin.cpp",
        device="cpu",
    ),
    _t(
        "cpu_bce_input",
        r"all elements of input should be between 0 and 1",
        "bce_input_range",
        None,
        "binary_cross_entropy got inputs outside [0, 1]: usually raw logits.",
        "aten/src/ATen/native/Loss.cpp",
        device="cpu",
    ),
    _t(
        "cpu_bce_target",
        r"all elements of target should be between 0 and 1",
        "bce_target_range",
        None,
        "binary_cross_entropy got targets outside [0, 1].",
        "aten/src/ATen/native/Loss.cpp",
        device="cpu",
    ),
    _t(
        "cpu_index_out_of_range_in_self",
        r"index out of range in self",
        "embedding_index_out_of_range",
        None,
        "An embedding or index_select index is negative or >= the table size.",
        "aten/src/ATen/native/TensorAdvancedIndexing.cpp",
        device="cpu",
    ),
    _t(
        "cpu_index_bounds",
        r"index (-?\d+) is out of bounds for dimension (\d+) with size (\d+)",
        "advanced_index_out_of_bounds",
        None,
        "An index is outside the tensor's dimension.",
        "aten/src/ATen/native/cpu/IndexKernelUtils.h; cpu/ScatterGatherKernel.cpp",
        device="cpu",
    ),
    _t(
        "cpu_take_bounds",
        r"out of range: tried to access index (-?\d+) on a tensor of (\d+) elements",
        "advanced_index_out_of_bounds",
        None,
        "take/put got a flat index outside the tensor.",
        "aten/src/ATen/native/cpu/IndexKernel.cpp",
        fix="Keep flat indices in [-numel, numel).",
        device="cpu",
    ),
    _t(
        "cpu_index_select_th",
        r"index out of range at \S*TH(Tensor(EvenMore)?Math|TensorMath)"
        # 1.2-1.4 (THTensorEvenMoreMath.cpp, index_select): "index out of range: Tried to access index 5 out of
        # table with 4 rows. at ../aten/src/TH/generic/THTensorEvenMoreMath.cpp:418"
        r"|index out of range: Tried to access index -?\d+ out of table with \d+ rows",
        "embedding_index_out_of_range",
        None,
        "index_select (behind nn.Embedding in 0.4-1.1) got an index outside the table.",
        "aten/src/TH/generic/THTensorEvenMoreMath.cpp (THArgCheck 'index out of range'), torch 0.4-1.1",
        device="cpu",
    ),
    _t(
        "cpu_embedding_bag",
        r"Index (\d+) of input takes value (-?\d+) which is not in the valid range",
        "embedding_index_out_of_range",
        None,
        "An EmbeddingBag index is outside the table.",
        "aten/src/ATen/native/EmbeddingBag.cpp",
        device="cpu",
    ),
    _t(
        "cpu_multinomial",
        r"probability tensor contains either `inf`, `nan` or element < 0"
        r"|invalid multinomial distribution",
        "multinomial_invalid_probs",
        None,
        "torch.multinomial got NaN, inf, negative or all-zero probabilities (often from NaN logits or a "
        "temperature of 0).",
        "aten/src/ATen/native/TensorCompare.cpp (_assert_async_msg)",
        device="cpu",
    ),
    _t(
        "cpu_one_hot",
        r"Class values must be (smaller than num_classes|non-negative)",
        "one_hot_num_classes",
        None,
        "F.one_hot got a value outside [0, num_classes).",
        "aten/src/ATen/native/Onehot.cpp",
        device="cpu",
    ),
    _t(
        "cpu_dtype_mismatch",
        r"expected scalar type (Long|Int) but found (Float|Double|Half|BFloat16)"
        r"|Expected tensor for argument #\d+ 'indices' to have one of the following scalar types"
        r"|tensors used as indices must be long, (?:int, )?byte or bool tensors"
        # gather/scatter/index_select's own index check (2.x) and one_hot's (Onehot.cpp)
        r"|\b\w+\(\): Expected dtype int(?:32 or int)?64 for index|one_hot is only applicable to index tensor"
        # 1.0 to 1.5: checkScalarType and the legacy bindings' argument check
        r"|Expected tensor for argument #\d+ '\w+' to have scalar type (?:Long|Int); but got \S*(?:Float|Double|Half)"
        r"|Expected object of scalar type Long but got scalar type (?:Float|Double|Half|Int|Short|Byte|Char)"
        r"|expected scalar type Long but found (?:Int|Short|Byte|Char)"
        # 2.x cross_entropy/nll_loss on class indices of a float dtype (LossNLL.cpp's target check)
        r"|expected target dtype to be Long(?: or \w+)?, but got (?:Float|Double|Half|BFloat16)"
        # 1.x-2.x nll_loss dispatched on a float target: the kernel's name is the dispatch's, e.g.
        # "nll_loss_forward_reduce_cuda_kernel_2d_index" not implemented for 'Float'
        r"|\"\w*nll_loss\w*\" not implemented for '(?:Float|Double|Half|BFloat16)'",
        "dtype_mismatch",
        None,
        "An index or label tensor has a floating dtype.",
        "aten/src/ATen/native/*; 1.x aten/src/ATen/TensorUtils.cpp (checkScalarType)",
        device="cpu",
    ),
    _t(
        "cpu_ctc_lengths",
        r"Expected (?:input|target)_lengths to have value at most \d+, but got value \d+"
        # LossCTC's other host checks: lengths per batch, and the padded targets' size
        r"|(?:input|target)_lengths must be of size batch_size"
        r"|for argument #\d+ 'targets' \(while checking arguments for ctc_loss",
        "ctc_loss",
        None,
        "A CTC length is longer than the time steps (or the targets) it describes; checked on the host, also on CUDA.",
        "aten/src/ATen/native/LossCTC.cpp and cuda/LossCTC.cu (host-side checks)",
        device="cpu",
    ),
    _t(
        "cpu_nan_cast",
        r"cannot convert float NaN to integer",
        "nan_or_inf",
        None,
        "A NaN was converted to an integer index.",
        "Python float -> int conversion",
        device="cpu",
    ),
)
