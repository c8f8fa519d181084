"""What PyTorch and CUDA raise on the host when a kernel fails, and which cause family each text points at.

Each entry names the PyTorch source that produces it (the host-side checks of the same bad inputs are in
``host_texts``). Two kinds matter for the diagnosis: a text that names its cause (``Target 5 is out of bounds``,
the host-side twin of a device assertion, or ``an illegal memory access``), and a *secondary symptom*
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


def known_text(
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
CUDA_TEXTS: tuple[ErrorText, ...] = (
    known_text(
        "device_side_assert",
        r"device-side assert(ion)? triggered|\bCUDA_ERROR_ASSERT\b|\bcudaErrorAssert\b",
        "other",
        True,
        "A CUDA kernel checked its input and stopped (cudaErrorAssert, 710). The context is poisoned: every later "
        "CUDA call fails with the same error.",
        "c10/cuda/CUDAException.cpp; cudaGetErrorString(cudaErrorAssert); CUDA_ERROR_ASSERT in the driver log",
        fix="Find the printed `Assertion ... failed.` line; " + LAUNCH_BLOCKING,
    ),
    known_text(
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
    known_text(
        "misaligned_address",
        r"misaligned address|\bCUDA_ERROR_MISALIGNED_ADDRESS\b",
        "illegal_memory_access",
        True,
        "A kernel accessed memory at a misaligned address (cudaErrorMisalignedAddress, 716).",
        "cudaGetErrorString(cudaErrorMisalignedAddress)",
        fix="Check custom kernels and non-contiguous or sliced tensors passed to them.",
    ),
    known_text(
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
    known_text(
        "illegal_instruction",
        r"an illegal instruction was encountered",
        "illegal_memory_access",
        True,
        "A kernel executed an illegal instruction (cudaErrorIllegalInstruction, 715).",
        "cudaGetErrorString(cudaErrorIllegalInstruction)",
        fix="Check custom kernels and that the wheel was built for this GPU.",
    ),
    known_text(
        "hardware_stack_error",
        r"hardware stack error",
        "illegal_memory_access",
        True,
        "A kernel overflowed its stack (cudaErrorHardwareStackError, 714).",
        "cudaGetErrorString(cudaErrorHardwareStackError)",
        fix="Check recursion or large local arrays in custom kernels.",
    ),
    known_text(
        "invalid_program_counter",
        r"invalid program counter",
        "illegal_memory_access",
        True,
        "A kernel jumped to an invalid address (cudaErrorInvalidPc, 718).",
        "cudaGetErrorString(cudaErrorInvalidPc)",
        fix="Check custom kernels.",
    ),
    known_text(
        "launch_timeout",
        r"the launch timed out and was terminated",
        "other",
        True,
        "A kernel ran past the display watchdog (cudaErrorLaunchTimeout, 702).",
        "cudaGetErrorString(cudaErrorLaunchTimeout)",
        fix="Run on a GPU without a display attached, or split the work.",
    ),
    known_text(
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
    known_text(
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
    known_text(
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
    known_text(
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
    known_text(
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
    known_text(
        "hip_error",
        r"HIP error: (device-side assert|an illegal memory access|unspecified launch failure)",
        "other",
        True,
        "The ROCm equivalent of a sticky CUDA error.",
        "c10/cuda/CUDAMiscFunctions.cpp (USE_ROCM branch)",
        fix="Re-run with AMD_SERIALIZE_KERNEL=3, or the %%cudacheck magic.",
    ),
    known_text(
        "out_of_memory",
        r"(CUDA|HIP) out of memory|CUDA error: out of memory|OutOfMemoryError",
        "other",
        False,
        "The GPU ran out of memory. This is recoverable: the context is healthy, nothing needs a restart.",
        "c10/cuda/CUDACachingAllocator.cpp",
        fix="Free tensors you no longer need (del x; gc.collect(); torch.cuda.empty_cache()), lower the batch size, "
        "or use mixed precision.",
    ),
    known_text(
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
    known_text(
        "ecc_uncorrectable",
        r"uncorrectable ECC error encountered",
        "other",
        None,
        "The GPU's memory reported an uncorrectable error (cudaErrorECCUncorrectable, 214): hardware, not code.",
        "cudaGetErrorString(cudaErrorECCUncorrectable)",
        fix="Restart the process; if it recurs, report the GPU to whoever runs the machine (nvidia-smi -q -d ECC).",
    ),
    known_text(
        "stream_capture",
        r"operation not permitted when stream is capturing|operation failed due to a previous error during capture",
        "other",
        False,
        "A call that synchronises or allocates ran inside CUDA graph capture (torch.cuda.graph, cudagraphs).",
        "cudaGetErrorString(cudaErrorStreamCaptureUnsupported, cudaErrorStreamCaptureInvalidated)",
        fix="Move .item(), .cpu(), printing and new allocations out of the captured region.",
    ),
    known_text(
        "no_kernel_image",
        r"no kernel image is available for execution on the device",
        "other",
        False,
        "This PyTorch build has no kernels for this GPU architecture.",
        "cudaGetErrorString(cudaErrorNoKernelImageForDevice)",
        fix="Install a PyTorch build that supports this GPU.",
    ),
)
