"""What PyTorch raises on the host for the bad inputs a GPU asserts on, and the family each text points at.

The CPU twins of the device assertions (``torch_cuda_errors.md`` section (e), run on torch 2.13.0+cpu, and the
texts of older releases), the index and label dtype checks of 1.x and 2.x, and the host-side checks CUDA runs too
(CTC lengths, multinomial's probabilities). A host text says what failed as plainly as an assertion does, so a log
that holds one is never without its family. A host check of an op outside our families (bernoulli's ``p``,
``repeat_interleave``'s repeats) is ``other``, as its device assertion is: no label's cause is put forward for it.
"""

from __future__ import annotations

from nb_cudaguard.incident.error_texts import ErrorText, known_text

HOST_TEXTS: tuple[ErrorText, ...] = (
    known_text(
        "cpu_nll_target",
        r"Target (-?\d+) is out of bounds",
        "label_out_of_range",
        None,
        "A class-index target is negative or >= the number of classes.",
        "aten/src/ATen/native/LossNLL.cpp, LossNLL2d.cpp",
        device="cpu",
    ),
    known_text(
        "cpu_margin_target",
        r"\btarget out of range\b|argument #2 'target' is out of range",
        "label_out_of_range",
        None,
        "multi_margin_loss or multilabel_margin_loss got a class target outside [0, C).",
        "aten/src/ATen/native/LossMultiMargin.cpp, LossMultiLabelMargin.cpp",
        device="cpu",
    ),
    known_text(
        "cpu_bce_input",
        r"all elements of input should be between 0 and 1",
        "bce_input_range",
        None,
        "binary_cross_entropy got inputs outside [0, 1]: usually raw logits.",
        "aten/src/ATen/native/Loss.cpp",
        device="cpu",
    ),
    known_text(
        "cpu_bce_target",
        r"all elements of target should be between 0 and 1",
        "bce_target_range",
        None,
        "binary_cross_entropy got targets outside [0, 1].",
        "aten/src/ATen/native/Loss.cpp",
        device="cpu",
    ),
    known_text(
        "cpu_index_out_of_range_in_self",
        r"index out of range in self",
        "embedding_index_out_of_range",
        None,
        "An embedding or index_select index is negative or >= the table size.",
        "aten/src/ATen/native/TensorAdvancedIndexing.cpp",
        device="cpu",
    ),
    known_text(
        "cpu_index_bounds",
        r"index (-?\d+) is out of bounds for dimension (\d+) with size (\d+)",
        "advanced_index_out_of_bounds",
        None,
        "An index is outside the tensor's dimension.",
        "aten/src/ATen/native/cpu/IndexKernelUtils.h; cpu/ScatterGatherKernel.cpp",
        device="cpu",
    ),
    known_text(
        "cpu_take_bounds",
        r"out of range: tried to access index (-?\d+) on a tensor of (\d+) elements",
        "advanced_index_out_of_bounds",
        None,
        "take/put got a flat index outside the tensor.",
        "aten/src/ATen/native/cpu/IndexKernel.cpp",
        fix="Keep flat indices in [-numel, numel).",
        device="cpu",
    ),
    known_text(
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
    known_text(
        "cpu_embedding_bag",
        r"Index (\d+) of input takes value (-?\d+) which is not in the valid range",
        "embedding_index_out_of_range",
        None,
        "An EmbeddingBag index is outside the table.",
        "aten/src/ATen/native/EmbeddingBag.cpp",
        device="cpu",
    ),
    known_text(
        "cpu_multinomial",
        # the backticks are lost where a page rendered them as code
        r"probability tensor contains either `?inf`?, `?nan`? or element < 0"
        r"|invalid multinomial distribution",
        "multinomial_invalid_probs",
        None,
        "torch.multinomial got NaN, inf, negative or all-zero probabilities (often from NaN logits or a "
        "temperature of 0).",
        "aten/src/ATen/native/TensorCompare.cpp (_assert_async_msg)",
        device="cpu",
    ),
    known_text(
        "cpu_one_hot",
        r"Class values must be (smaller than num_classes|non-negative)",
        "one_hot_num_classes",
        None,
        "F.one_hot got a value outside [0, num_classes).",
        "aten/src/ATen/native/Onehot.cpp",
        device="cpu",
    ),
    known_text(
        "cpu_dtype_mismatch",
        r"expected scalar type (Long|Int) but found (Float|Double|Half|BFloat16)"
        r"|Expected tensor for argument #\d+ 'indices' to have one of the following scalar types"
        r"|tensors used as indices must be long, (?:int, )?byte or bool tensors"
        # gather/scatter/index_add_/index_fill_/index_select's own index check (2.x: "int32/int64", "int32 or
        # int64", "int64"), take/put_/index_copy_'s ("Expected a long tensor for index"), and one_hot's (Onehot.cpp)
        r"|\b\w+\(\): Expected dtype int(?:32(?: or |/)int)?64 for index|\b\w+\(\): Expected a long tensor for index"
        r"|one_hot is only applicable to index tensor"
        # 1.0 to 1.5: checkScalarType and the legacy bindings' argument check (embedding's ids of Int in 1.x)
        r"|Expected tensor for argument #\d+ '\w+' to have scalar type (?:Long|Int); but got \S*?"
        r"(?:Float|Double|Half|Int|Short|Byte|Char)Tensor"
        r"|Expected object of scalar type Long but got scalar type (?:Float|Double|Half|Int|Short|Byte|Char)"
        r"|expected scalar type Long but found (?:Int|Short|Byte|Char)"
        # 2.x cross_entropy/nll_loss on class indices of another dtype (LossNLL.cpp's target check: "Long or Byte,
        # but got Int" for an int32 target too)
        r"|expected target dtype to be Long(?: or \w+)?, but got (?:Float|Double|Half|BFloat16|Int|Short|Char)"
        # 1.x-2.x nll_loss dispatched on a target of another dtype: the kernel's name is the dispatch's, e.g.
        # "nll_loss_forward_reduce_cuda_kernel_2d_index" not implemented for 'Float' (or 'Int')
        r"|\"\w*nll_loss\w*\" not implemented for '(?:Float|Double|Half|BFloat16|Int|Short|Char)'",
        "dtype_mismatch",
        None,
        "An index or label tensor has the wrong dtype: a float, or int32 where int64 is required.",
        "aten/src/ATen/native/*; 1.x aten/src/ATen/TensorUtils.cpp (checkScalarType)",
        device="cpu",
    ),
    known_text(
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
    known_text(
        "cpu_nan_cast",
        r"cannot convert float NaN to integer",
        "nan_or_inf",
        None,
        "A NaN was converted to an integer index.",
        "Python float -> int conversion",
        device="cpu",
    ),
    known_text(
        "cpu_other_op_check",
        # bernoulli's p (DistributionsHelper.h, DistributionTemplates.h), max_unpool's index (MaxUnpoolKernel.cpp),
        # repeat_interleave's repeats (Repeat.h), segment_reduce's lengths, embedding_bag's offsets, bincount's
        # input (SummaryOps.cpp) and torch._assert_async (TensorCompare.cpp): each op's device assertion is
        # ``other`` in the catalog, and so is its host-side twin
        r"Expected p_in >= 0 && p_in <= 1 to be true|bernoulli_? expects p to be in \[0, 1\]"
        r"|Found an invalid max index|repeats can not be negative|segment_reduce\(\): Expected all rows of lengths"
        r"|offsets\[-1\] can not be greater than input's length|bincount only supports 1-d non-negative integral"
        r"|Expected Tensor with single nonzero value, but got zero",
        "other",
        None,
        "An op outside the label, index and sampling families checked its input on the host and refused it "
        "(bernoulli's probabilities, max_unpool's indices, repeat counts, segment lengths, embedding_bag's offsets, "
        "bincount's input, an explicit torch._assert_async).",
        "aten/src/ATen/core/DistributionsHelper.h, native/cpu/MaxUnpoolKernel.cpp, Repeat.h, SegmentReduce.cpp, "
        "EmbeddingBag.cpp, SummaryOps.cpp, TensorCompare.cpp",
        fix="The message names the op and the value it refused: fix that input where it is made.",
        device="cpu",
    ),
)
