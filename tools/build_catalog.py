"""Regenerate ``nb_cudaguard/data/device_asserts.json`` from the shared reference and PyTorch's older sources.

The reference (``../shared/reference/torch_cuda_asserts.json``) was read out of the device code of official
PyTorch wheels (1.8.1 to 2.14.1); it carries its own family tags. We keep only what the matcher needs, and translate
the tags into the project's one vocabulary (docs/architecture.md) so that nothing downstream sees two names for
one cause. The releases before those wheels (0.4 to 1.7: the THC/THCUNN kernels, whose ``assert()`` prints the
condition exactly as written) are in ``OLDER`` below, each with the file of pytorch/pytorch it was read from.

    python tools/build_catalog.py [PATH_TO_REFERENCE_JSON]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE = ROOT.parent / "shared" / "reference" / "torch_cuda_asserts.json"
TARGET = ROOT / "nb_cudaguard" / "data" / "device_asserts.json"

FAMILY = {
    "label_out_of_range": "label_out_of_range",
    "embedding_index": "embedding_index_out_of_range",
    "index_out_of_range": "advanced_index_out_of_bounds",
    "gather_scatter_index": "gather_scatter_index",
    "bce_input_range": "bce_input_range",
    "bce_target_range": "bce_target_range",
    "probability_invalid": "multinomial_invalid_probs",
}


_LABELS = ("F.cross_entropy", "nn.CrossEntropyLoss", "F.nll_loss", "nn.NLLLoss")
_LABEL_CAUSE = "A class-index target is negative or >= the number of classes, and not ignore_index."
_LABEL_FIX = "Make every target satisfy 0 <= t < C, or set ignore_index to the padding value."
_VECTORIZED_GATHER_OP = "nn.Embedding / F.embedding / index_select with more than 16 ids (via gather_out)"
_PROBS = ("torch.multinomial", "torch.distributions.Categorical.sample", "generate(do_sample=True)")
_PROBS_CAUSE = "multinomial got a probability that is NaN, inf or negative, or a row that sums to 0."
_PROBS_FIX = "Sample from finite, non-negative probabilities with a positive sum (softmax in float32, temperature > 0)."
# (file, kernels, conditions, family, ops, cause, fix, read from): the THC/THCUNN era, read from pytorch/pytorch at
# the commit named (``read_file``), each condition as its ``assert()`` prints it.
OLDER = (
    (
        "aten/src/THCUNN/ClassNLLCriterion.cu",
        "cunn_ClassNLLCriterion_updateOutput_kernel, cunn_ClassNLLCriterion_updateOutput_kernel1, "
        "cunn_ClassNLLCriterion_updateGradInput_kernel, cunn_ClassNLLCriterion_updateGradInput_kernel1, "
        "ClassNLLCriterion_updateOutput_no_reduce_kernel, ClassNLLCriterion_updateGradInput_no_reduce_kernel",
        ("t >= 0 && t < n_classes", "cur_target >= 0 && cur_target < n_classes"),
        "label_out_of_range",
        _LABELS,
        _LABEL_CAUSE,
        _LABEL_FIX,
        "aten/src/THCUNN/ClassNLLCriterion.cu @ 0a70bb809b356451a6d7264836a0659f9e20f4bd",
    ),
    (
        "aten/src/THCUNN/SpatialClassNLLCriterion.cu",
        "cunn_SpatialClassNLLCriterion_updateOutput_kernel, cunn_SpatialClassNLLCriterion_updateGradInput_kernel",
        ("t >= 0 && t < n_classes",),
        "label_out_of_range",
        (*_LABELS, "2-d targets (segmentation)"),
        _LABEL_CAUSE + " Per pixel: often 255 'void' pixels.",
        _LABEL_FIX,
        "aten/src/THCUNN/SpatialClassNLLCriterion.cu @ 0354b60c4e0ee0cb32307500f92bb03e8d0ed344",
    ),
    (
        "aten/src/THCUNN/BCECriterion.cu",
        "bce_functor, bce_functor_weights, bce_updateOutput_no_reduce_functor",
        ("input >= 0. && input <= 1.", "*input >= 0. && *input <= 1."),
        "bce_input_range",
        ("F.binary_cross_entropy", "nn.BCELoss"),
        "binary_cross_entropy got an input outside [0, 1]: raw logits, or NaN.",
        "Use BCEWithLogitsLoss on raw logits, or apply sigmoid first.",
        "aten/src/THCUNN/BCECriterion.cu @ 0710dfc1ca018f626b1e8db65cb9f4366e090910",
    ),
    (
        "aten/src/THC/THCTensorIndex.cu",
        "indexSelectLargeIndex, indexSelectSmallIndex",
        ("srcIndex < srcSelectDimSize",),
        "embedding_index_out_of_range",
        ("nn.Embedding", "F.embedding", "torch.index_select"),
        "An index passed to index_select (which nn.Embedding used) is >= the size of the indexed dimension.",
        "Keep ids in [0, num_embeddings).",
        "aten/src/THC/THCTensorIndex.cu @ 01132b1bed33394a12197a80cdce9e6d16299ba3",
    ),
    (
        "aten/src/THC/THCTensorIndex.cu",
        "indexAddLargeIndex, indexAddSmallIndex, indexCopyLargeIndex, indexCopySmallIndex, indexFillLargeIndex, "
        "indexFillSmallIndex",
        ("dstIndex < dstAddDimSize", "dstIndex < dstCopyDimSize", "dstIndex_ < dstFillDimSize"),
        "advanced_index_out_of_bounds",
        ("Tensor.index_add_", "Tensor.index_copy_", "Tensor.index_fill_"),
        "An index passed to index_add_/index_copy_/index_fill_ is >= the size of the indexed dimension.",
        "Keep indices in [0, size) of the indexed dimension.",
        "aten/src/THC/THCTensorIndex.cu @ 01132b1bed33394a12197a80cdce9e6d16299ba3",
    ),
    (
        "aten/src/THC/THCTensorScatterGather.cu",
        "THCudaTensor_gatherKernel, THCudaTensor_scatterKernel, THCudaTensor_scatterAddKernel, "
        "THCudaTensor_scatterFillKernel",
        ("indexValue >= 0 && indexValue < src.sizes[dim]", "indexValue >= 0 && indexValue < tensor.sizes[dim]"),
        "gather_scatter_index",
        ("torch.gather", "Tensor.scatter_", "Tensor.scatter_add_", "F.one_hot (via scatter)"),
        "A gather/scatter index is negative or >= the size of the indexed dimension.",
        "Keep every index in [0, size(dim)).",
        "aten/src/THC/THCTensorScatterGather.cu @ 051e2a50de9cd1384b365db11e4a9f2e825d7066",
    ),
    (
        "aten/src/THC/THCTensorRandom.cuh",
        "renormRowsL1, sampleMultinomialOnce",
        (
            "THCNumerics<T>::ge(val, zero)",
            "THCNumerics<T>::gt(sum, zero)",
            "!THCNumerics<T>::isinf(val)",
            "!THCNumerics<T>::isnan(val)",
            "!isinf(sum)",
            "THCNumerics<AccT>::gt(sum, accZero)",
        ),
        "multinomial_invalid_probs",
        _PROBS,
        _PROBS_CAUSE,
        _PROBS_FIX,
        "aten/src/THC/THCTensorRandom.cuh @ 07f30f1957b1ec5b5e2279c26e1f1d628704d01d",
    ),
    (
        "aten/src/ATen/native/cuda/MultinomialKernel.cu",
        "sampleMultinomialOnce",
        ("val >= zero",),
        "multinomial_invalid_probs",
        _PROBS,
        _PROBS_CAUSE,
        _PROBS_FIX,
        "aten/src/ATen/native/cuda/MultinomialKernel.cu @ 05871516ce71536f6d745e98d513ed9c6da7609b",
    ),
)


def older_entries() -> list[dict]:
    entries = []
    for file, kernels, conditions, family, ops, cause, fix, source in OLDER:
        for condition in conditions:
            entries.append(
                {
                    "file": file,
                    "kernels": [k.strip() for k in kernels.split(",")],
                    "condition": condition,
                    "family": family,
                    "reference_family": None,
                    "ops": list(ops),
                    "cause": cause,
                    "fix": fix,
                    "user_facing": True,
                    "source": f"pytorch/pytorch {source}",
                }
            )
    return entries


def translate(entry: dict) -> dict:
    family = FAMILY.get(entry["family"], "other")
    condition = entry["condition"]
    if entry["family"] == "async_assert":
        family = "other"
    if "Indexing.cu" in entry["file"] and "dstIndex" in condition:
        family = "advanced_index_out_of_bounds"
    ops = entry["python_ops"]
    if "vectorized gather kernel" in condition:
        # index_select with more than 16 ids (nn.Embedding's forward) runs gather_out on an index expanded with
        # stride 0, the only gather that ScatterGatherKernel.cu's fast_gather_kernel_eligible lets into this kernel;
        # x[ids] reaches it only for whole 16-byte-aligned rows: either way a table's rows looked up by ids
        family = "embedding_index_out_of_range"
        ops = [_VECTORIZED_GATHER_OP, *ops]
    return {
        "file": entry["file"],
        "kernels": [k.strip() for k in entry["kernel_or_function"].split(",")],
        "condition": condition,
        "family": family,
        "reference_family": entry["family"],
        "ops": ops,
        "cause": entry["cause"],
        "fix": entry["fix"],
        "user_facing": entry["user_facing"],
        "source": "shared reference torch_cuda_asserts.json (device code of official wheels)",
    }


def main(argv: list[str]) -> int:
    source = Path(argv[1]) if len(argv) > 1 else DEFAULT_SOURCE
    entries = [translate(e) for e in json.loads(source.read_text())] + older_entries()
    TARGET.write_text(json.dumps(entries, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(entries)} assertions to {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
