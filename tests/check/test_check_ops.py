"""Every op check, with real bad input on CPU (attributes of the CudaCheckError) and at its valid boundary
(the checked op runs and returns exactly what the unchecked op returns).

Each case builds its tensors in a small function that then calls the op, the way a notebook cell would: the check
must name the variable, the line, the offending values and positions, and the valid range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from nb_cudaguard import CudaCheckError  # noqa: E402
from nb_cudaguard.check.mode import Checker  # noqa: E402

aten = torch.ops.aten
nan, inf = math.nan, math.inf


@dataclass
class Case:
    bad: object  # callable raising under the checks
    good: object  # callable at the valid boundary
    op: str
    argument: str
    family: str
    values: list
    positions: list
    count: int
    valid_range: str
    variable: str | None = None
    line: str | None = None  # text expected in user_line
    range_source: str | None = None


# --- embeddings -------------------------------------------------------------------------------------------------


def bad_embedding():
    table = torch.nn.Embedding(10, 4)
    ids = torch.tensor([[1, 10], [-1, 3]])
    return table(ids)


def good_embedding():
    torch.manual_seed(0)
    table = torch.nn.Embedding(10, 4)
    ids = torch.tensor([[0, 9], [9, 0]])
    return table(ids)


class _Encoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.word_embeddings = torch.nn.Embedding(10, 4)
        self.position_embeddings = torch.nn.Embedding(8, 4)
        self.token_type_embeddings = torch.nn.Embedding(2, 4)


class _Tokenizer:
    """Shaped like a Hugging Face tokenizer to the checks: a length and convert_tokens_to_ids."""

    def __len__(self) -> int:
        return 12

    def convert_tokens_to_ids(self, tokens):
        return [0 for _ in tokens]


def bad_positions():
    model = _Encoder()
    position_ids = torch.arange(10)
    return model.position_embeddings(position_ids)


def good_positions():
    torch.manual_seed(0)
    model = _Encoder()
    position_ids = torch.arange(8)
    return model.position_embeddings(position_ids)


def bad_token_types():
    model = _Encoder()
    token_type_ids = torch.tensor([0, 1, 2])
    return model.token_type_embeddings(token_type_ids)


def good_token_types():
    torch.manual_seed(0)
    model = _Encoder()
    token_type_ids = torch.tensor([0, 1, 1])
    return model.token_type_embeddings(token_type_ids)


def bad_vocab():
    model = _Encoder()
    tokenizer = _Tokenizer()
    input_ids = torch.tensor([3, 11])
    assert len(tokenizer) == 12
    return model.word_embeddings(input_ids)


def good_vocab():
    torch.manual_seed(0)
    model = _Encoder()
    input_ids = torch.tensor([3, 9])
    return model.word_embeddings(input_ids)


def bad_embedding_backward():
    grad = torch.ones(3, 4)
    token_ids = torch.tensor([0, 12, 2])
    return aten.embedding_dense_backward(grad, token_ids, 10, -1, False)


def good_embedding_backward():
    grad = torch.ones(3, 4)
    token_ids = torch.tensor([0, 9, 2])
    return aten.embedding_dense_backward(grad, token_ids, 10, -1, False)


def bad_renorm():
    weight = torch.randn(10, 4)
    ids = torch.tensor([2, 10])
    return F.embedding(ids, weight, max_norm=1.0)


def good_renorm():
    weight = torch.arange(40.0).reshape(10, 4)
    ids = torch.tensor([2, 9])
    return F.embedding(ids, weight, max_norm=1.0)


def bad_bag():
    bag = torch.nn.EmbeddingBag(10, 3, mode="sum")
    ids = torch.tensor([1, 2, 10, 4])
    offsets = torch.tensor([0, 2])
    return bag(ids, offsets)


def good_bag():
    torch.manual_seed(0)
    bag = torch.nn.EmbeddingBag(10, 3, mode="sum")
    ids = torch.tensor([1, 2, 9, 0])
    offsets = torch.tensor([0, 2])
    return bag(ids, offsets)


def bad_bag_offsets():
    weight = torch.randn(10, 3)
    ids = torch.tensor([1, 2, 3])
    offsets = torch.tensor([0, 3, 2])
    return F.embedding_bag(ids, weight, offsets)


def good_bag_offsets():
    weight = torch.arange(30.0).reshape(10, 3)
    ids = torch.tensor([1, 2, 3])
    offsets = torch.tensor([0, 2, 3])  # the last bag is empty: allowed
    return F.embedding_bag(ids, weight, offsets)


def _bag_backward(ids):
    grad = torch.ones(2, 3)
    offset2bag = torch.tensor([0, 0, 1])
    bag_size = torch.tensor([2, 1])
    maximum_indices = torch.zeros(2, dtype=torch.long)
    return aten._embedding_bag_dense_backward(grad, ids, offset2bag, bag_size, maximum_indices, 10, False, 0, None)


def bad_bag_backward():
    bag_ids = torch.tensor([1, 10, 3])
    return _bag_backward(bag_ids)


def good_bag_backward():
    bag_ids = torch.tensor([1, 9, 3])
    return _bag_backward(bag_ids)


# --- indexing ---------------------------------------------------------------------------------------------------


def bad_index_select():
    x = torch.arange(10.0).reshape(5, 2)
    rows = torch.tensor([0, 5, -1])
    return x.index_select(0, rows)


def good_index_select():
    x = torch.arange(10.0).reshape(5, 2)
    rows = torch.tensor([0, 4])
    return x.index_select(0, rows)


def bad_getitem():
    x = torch.arange(5.0)
    idx = torch.tensor([1, 7, -6])
    return x[idx]


def good_getitem():
    x = torch.arange(5.0)
    idx = torch.tensor([-5, 4])
    return x[idx]


def bad_getitem_2d():
    grid = torch.zeros(4, 3)
    cols = torch.tensor([0, 3])
    return grid[:, cols]


def good_getitem_2d():
    grid = torch.arange(12.0).reshape(4, 3)
    cols = torch.tensor([0, 2, -3])
    return grid[:, cols]


def bad_setitem():
    x = torch.zeros(5)
    idx = torch.tensor([5])
    x[idx] = 1.0
    return x


def good_setitem():
    x = torch.zeros(5)
    idx = torch.tensor([4, -5])
    x[idx] = 1.0
    return x


def bad_take():
    x = torch.arange(10.0).reshape(2, 5)
    flat = torch.tensor([3, 10])
    return torch.take(x, flat)


def good_take():
    x = torch.arange(10.0).reshape(2, 5)
    flat = torch.tensor([9, -10])
    return torch.take(x, flat)


def bad_put():
    x = torch.zeros(2, 5)
    flat = torch.tensor([-11])
    return x.put_(flat, torch.ones(1))


def good_put():
    x = torch.zeros(2, 5)
    flat = torch.tensor([-10])
    return x.put_(flat, torch.ones(1))


def bad_gather():
    x = torch.arange(6.0).reshape(2, 3)
    idx = torch.tensor([[0, -1], [2, 3]])
    return torch.gather(x, 1, idx)


def good_gather():
    x = torch.arange(6.0).reshape(2, 3)
    idx = torch.tensor([[0, 2], [2, 0]])
    return torch.gather(x, 1, idx)


def bad_scatter():
    out = torch.zeros(3, 4)
    idx = torch.tensor([[4]])
    return out.scatter_(1, idx, 1.0)


def good_scatter():
    out = torch.zeros(3, 4)
    idx = torch.tensor([[3]])
    return out.scatter_(1, idx, 1.0)


def bad_scatter_add():
    out = torch.zeros(4)
    idx = torch.tensor([0, 4])
    return out.scatter_add(0, idx, torch.ones(2))


def good_scatter_add():
    out = torch.zeros(4)
    idx = torch.tensor([0, 3])
    return out.scatter_add(0, idx, torch.ones(2))


def bad_scatter_reduce():
    out = torch.zeros(4)
    idx = torch.tensor([-1, 1])
    return out.scatter_reduce(0, idx, torch.ones(2), reduce="amax")


def good_scatter_reduce():
    out = torch.zeros(4)
    idx = torch.tensor([3, 1])
    return out.scatter_reduce(0, idx, torch.ones(2), reduce="amax")


def bad_index_add():
    acc = torch.zeros(3, 2)
    idx = torch.tensor([0, 3])
    return acc.index_add_(0, idx, torch.ones(2, 2))


def good_index_add():
    acc = torch.zeros(3, 2)
    idx = torch.tensor([0, 2])
    return acc.index_add_(0, idx, torch.ones(2, 2))


def bad_index_copy():
    cache = torch.zeros(4, 2)
    cache_position = torch.tensor([4])
    return cache.index_copy_(0, cache_position, torch.ones(1, 2))


def good_index_copy():
    cache = torch.zeros(4, 2)
    cache_position = torch.tensor([3])
    return cache.index_copy_(0, cache_position, torch.ones(1, 2))


def bad_index_fill():
    x = torch.zeros(4)
    idx = torch.tensor([-5])
    return x.index_fill_(0, idx, 1.0)


def good_index_fill():
    x = torch.zeros(4)
    idx = torch.tensor([-4, 3])
    return x.index_fill_(0, idx, 1.0)


def bad_index_reduce():
    x = torch.ones(4)
    idx = torch.tensor([9])
    return x.index_reduce_(0, idx, torch.full((1,), 2.0), "prod")


def good_index_reduce():
    x = torch.ones(4)
    idx = torch.tensor([3])
    return x.index_reduce_(0, idx, torch.full((1,), 2.0), "prod")


def bad_unpool():
    pooled = torch.ones(1, 1, 2, 2)
    indices = torch.tensor([[[[0, 1], [2, 16]]]])
    return F.max_unpool2d(pooled, indices, 2)


def good_unpool():
    pooled = torch.ones(1, 1, 2, 2)
    indices = torch.tensor([[[[0, 1], [2, 15]]]])
    return F.max_unpool2d(pooled, indices, 2)


# --- losses ------------------------------------------------------------------------------------------------------


def bad_cross_entropy():
    logits = torch.randn(4, 5)
    labels = torch.tensor([0, 5, 4, 7])
    return F.cross_entropy(logits, labels)


def good_cross_entropy():
    logits = torch.arange(20.0).reshape(4, 5) / 7
    labels = torch.tensor([0, 4, -100, 4])
    return F.cross_entropy(logits, labels)


def bad_negative_label():
    logits = torch.randn(3, 5)
    labels = torch.tensor([-1, 2, -100])
    return F.cross_entropy(logits, labels)


def good_custom_ignore_index():
    logits = torch.arange(15.0).reshape(3, 5) / 7
    labels = torch.tensor([255, 2, 4])
    return F.cross_entropy(logits, labels, ignore_index=255)


def bad_weighted():
    logits = torch.randn(3, 5)
    class_weights = torch.ones(5)
    labels = torch.tensor([1, 5, 2])
    return F.cross_entropy(logits, labels, weight=class_weights)


def good_weighted():
    logits = torch.arange(15.0).reshape(3, 5) / 7
    class_weights = torch.tensor([1.0, 2.0, 0.5, 1.0, 3.0])
    labels = torch.tensor([1, 4, -100])
    return F.cross_entropy(logits, labels, weight=class_weights)


def bad_weight_size():
    logits = torch.randn(3, 5)
    class_weights = torch.ones(4)
    labels = torch.tensor([1, 2, 3])
    return F.cross_entropy(logits, labels, weight=class_weights)


def bad_segmentation():
    logits = torch.randn(1, 3, 2, 2)
    mask = torch.tensor([[[0, 255], [2, 1]]])
    return F.cross_entropy(logits, mask)


def good_segmentation():
    logits = torch.arange(12.0).reshape(1, 3, 2, 2) / 5
    mask = torch.tensor([[[0, 255], [2, 1]]])
    return F.cross_entropy(logits, mask, ignore_index=255)


def bad_nll_backward():
    log_probs = torch.randn(2, 3).log_softmax(-1)
    target = torch.tensor([0, 3])
    total = torch.tensor(2.0)
    return aten.nll_loss_backward(torch.tensor(1.0), log_probs, target, None, 1, -100, total)


def good_nll_backward():
    log_probs = torch.arange(6.0).reshape(2, 3).log_softmax(-1)
    target = torch.tensor([0, 2])
    total = torch.tensor(2.0)
    return aten.nll_loss_backward(torch.tensor(1.0), log_probs, target, None, 1, -100, total)


def bad_nll2d_backward():
    log_probs = torch.randn(1, 3, 2, 2).log_softmax(1)
    target = torch.tensor([[[0, 1], [3, 2]]])
    total = torch.tensor(4.0)
    return aten.nll_loss2d_backward(torch.tensor(1.0), log_probs, target, None, 1, -100, total)


def good_nll2d_backward():
    log_probs = torch.arange(12.0).reshape(1, 3, 2, 2).log_softmax(1)
    target = torch.tensor([[[0, 1], [2, 2]]])
    total = torch.tensor(4.0)
    return aten.nll_loss2d_backward(torch.tensor(1.0), log_probs, target, None, 1, -100, total)


def bad_multi_margin():
    scores = torch.randn(2, 4)
    targets = torch.tensor([3, 4])
    return F.multi_margin_loss(scores, targets)


def good_multi_margin():
    scores = torch.arange(8.0).reshape(2, 4) / 3
    targets = torch.tensor([3, 0])
    return F.multi_margin_loss(scores, targets)


def bad_bce_input():
    logits = torch.tensor([0.2, 1.5, -0.1])
    y = torch.tensor([0.0, 1.0, 1.0])
    return F.binary_cross_entropy(logits, y)


def good_bce():
    probs = torch.tensor([0.0, 1.0, 0.5])
    y = torch.tensor([0.0, 1.0, 1.0])
    return F.binary_cross_entropy(probs, y)


def bad_bce_nan():
    probs = torch.tensor([0.2, nan])
    y = torch.tensor([0.0, 1.0])
    return F.binary_cross_entropy(probs, y)


def bad_bce_target():
    probs = torch.tensor([0.2, 0.9])
    mask = torch.tensor([0.0, 255.0])
    return F.binary_cross_entropy(probs, mask)


def bad_bce_backward():
    probs = torch.tensor([0.2, 0.9])
    mask = torch.tensor([0.0, 2.0])
    return aten.binary_cross_entropy_backward(torch.tensor(1.0), probs, mask, None, 1)


def good_bce_backward():
    probs = torch.tensor([0.2, 0.9])
    mask = torch.tensor([0.0, 1.0])
    return aten.binary_cross_entropy_backward(torch.tensor(1.0), probs, mask, None, 1)


def _ctc_inputs():
    log_probs = torch.arange(60.0).reshape(6, 2, 5).div(17).log_softmax(2)
    return log_probs, torch.tensor([6, 6])


def bad_ctc_targets():
    log_probs, input_lengths = _ctc_inputs()
    targets = torch.tensor([[1, 5], [3, 2]])
    return F.ctc_loss(log_probs, targets, input_lengths, torch.tensor([2, 2]))


def good_ctc_targets():
    log_probs, input_lengths = _ctc_inputs()
    targets = torch.tensor([[1, 4], [3, 0]])  # the 0 (blank) is padding past target_lengths[1] = 1
    return F.ctc_loss(log_probs, targets, input_lengths, torch.tensor([2, 1]))


def bad_ctc_blank():
    log_probs, input_lengths = _ctc_inputs()
    targets = torch.tensor([[1, 0], [3, 2]])
    return F.ctc_loss(log_probs, targets, input_lengths, torch.tensor([2, 2]))


def bad_ctc_input_lengths():
    log_probs, _ = _ctc_inputs()
    frames = torch.tensor([6, 7])
    return F.ctc_loss(log_probs, torch.tensor([[1, 2], [3, 4]]), frames, torch.tensor([2, 2]))


def bad_ctc_target_lengths():
    log_probs, input_lengths = _ctc_inputs()
    target_lengths = torch.tensor([2, 3])
    return F.ctc_loss(log_probs, torch.tensor([[1, 2], [3, 4]]), input_lengths, target_lengths)


def bad_ctc_backward():
    log_probs, _ = _ctc_inputs()
    labels = torch.tensor([[1, 9], [3, 4]])
    return aten._ctc_loss_backward(
        torch.ones(2), log_probs, labels, [6, 6], [2, 2], torch.zeros(2), torch.zeros(2, 6, 5), 0, False
    )


def good_ctc_backward():
    log_probs, _ = _ctc_inputs()
    targets = torch.tensor([[1, 4], [3, 4]])
    nll, alpha = aten._ctc_loss(log_probs, targets, [6, 6], [2, 2], 0, False)
    return aten._ctc_loss_backward(torch.ones(2), log_probs, targets, [6, 6], [2, 2], nll, alpha, 0, False)


# --- sampling, counting, casting --------------------------------------------------------------------------------


def bad_multinomial_nan():
    probs = torch.tensor([[0.5, 0.5], [nan, 1.0]])
    return torch.multinomial(probs, 1)


def bad_multinomial_inf():
    probs = torch.tensor([0.5, inf])
    return torch.multinomial(probs, 1)


def bad_multinomial_negative():
    probs = torch.tensor([[0.5, -0.1, 0.6]])
    return torch.multinomial(probs, 2)


def bad_multinomial_zero_row():
    probs = torch.tensor([[0.2, 0.8], [0.0, 0.0]])
    return torch.multinomial(probs, 1, replacement=True)


def good_multinomial():
    torch.manual_seed(0)
    probs = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    return torch.multinomial(probs, 1)


def bad_one_hot():
    # F.one_hot as it runs on CUDA (Onehot.cpp skips its host checks there and relies on scatter's device assert).
    # On CPU, F.one_hot raises its own host error before any kernel; this is the form the checks must catch.
    labels = torch.tensor([0, 2, 3])
    return torch.zeros(3, 3, dtype=torch.long).scatter_(-1, labels.unsqueeze(-1), 1)


def good_one_hot():
    labels = torch.tensor([0, 2, 2])
    return F.one_hot(labels, num_classes=3)


def bad_one_hot_negative():
    labels = torch.tensor([1, -1])  # F.one_hot(labels) on CUDA: num_classes = labels.max() + 1 = 2
    return torch.zeros(2, 2, dtype=torch.long).scatter_(-1, labels.unsqueeze(-1), 1)


def good_one_hot_inferred():
    labels = torch.tensor([1, 0])
    return F.one_hot(labels)


def bad_bincount():
    votes = torch.tensor([0, 2, -3])
    return torch.bincount(votes)


def good_bincount():
    votes = torch.tensor([0, 2, 0])
    return torch.bincount(votes)


def bad_nan_cast():
    table = torch.arange(10.0)
    scores = torch.tensor([0.1, nan, 0.5])
    idx = (scores * 10).long()
    return table[idx]


def good_nan_cast():
    table = torch.arange(10.0)
    scores = torch.tensor([0.1, 0.95, 0.0])
    idx = (scores * 10).long()
    return table[idx]


def bad_inf_cast_view():
    emb = torch.nn.Embedding(10, 2)
    scores = torch.tensor([[0.1, inf]])
    ids = (scores * 3).to(torch.int64).view(-1)
    return emb(ids)


def bad_bernoulli():
    p = torch.tensor([0.5, 1.5])
    return torch.bernoulli(p)


def good_bernoulli():
    torch.manual_seed(0)
    p = torch.tensor([0.0, 1.0])
    return torch.bernoulli(p)


def bad_bernoulli_tensor_p():
    p = torch.tensor([nan, 0.5])
    return torch.empty(2).bernoulli_(p)


def bad_poisson():
    rates = torch.tensor([1.0, -0.5])
    return torch.poisson(rates)


def good_poisson():
    torch.manual_seed(0)
    rates = torch.tensor([0.0, 2.0])
    return torch.poisson(rates)


def bad_masked_scatter():
    x = torch.zeros(4)
    keep = torch.tensor([True, False, True, True])
    return x.masked_scatter(keep, torch.ones(2))


def good_masked_scatter():
    x = torch.zeros(4)
    keep = torch.tensor([True, False, True, False])
    return x.masked_scatter(keep, torch.ones(2))


def bad_repeat_interleave():
    repeats = torch.tensor([1, -2, 3])
    return torch.repeat_interleave(repeats)


def good_repeat_interleave():
    repeats = torch.tensor([1, 0, 3])
    return torch.repeat_interleave(repeats, output_size=4)


def bad_repeat_output_size():
    repeats = torch.tensor([1, 2])
    return torch.repeat_interleave(repeats, output_size=4)


def bad_segment_reduce():
    data = torch.arange(5.0)
    lengths = torch.tensor([6, -1])
    return torch.segment_reduce(data, "sum", lengths=lengths)


def good_segment_reduce():
    data = torch.arange(5.0)
    lengths = torch.tensor([5, 0])
    return torch.segment_reduce(data, "sum", lengths=lengths)


def bad_assert_async():
    ok = torch.tensor(False)
    return torch._assert_async(ok, "batch is not sorted")


def good_assert_async():
    ok = torch.tensor(True)
    return torch._assert_async(ok, "batch is not sorted")


def bad_grouped_mm():
    tokens = torch.randn(4, 8)
    experts = torch.randn(2, 8, 8)
    offs = torch.tensor([3, 2], dtype=torch.int32)
    return torch._grouped_mm(tokens, experts, offs=offs)


def good_grouped_mm():
    tokens = torch.arange(32.0).reshape(4, 8) / 10
    experts = torch.ones(2, 8, 8)
    offs = torch.tensor([2, 4], dtype=torch.int32)
    return torch._grouped_mm(tokens, experts, offs=offs)


CASES = {
    "embedding": Case(
        bad_embedding,
        good_embedding,
        "aten.embedding",
        "indices",
        "embedding_index_out_of_range",
        [10, -1],
        [(0, 1), (1, 0)],
        2,
        "[0, 10)",
        variable="ids",
        line="return table(ids)",
        range_source="table.num_embeddings = 10",
    ),
    "position_ids": Case(
        bad_positions,
        good_positions,
        "aten.embedding",
        "indices",
        "position_ids_too_long",
        [8, 9],
        [(8,), (9,)],
        2,
        "[0, 8)",
        variable="position_ids",
        range_source="model.position_embeddings.num_embeddings = 8",
    ),
    "token_type_ids": Case(
        bad_token_types,
        good_token_types,
        "aten.embedding",
        "indices",
        "token_type_ids_out_of_range",
        [2],
        [(2,)],
        1,
        "[0, 2)",
        variable="token_type_ids",
    ),
    "vocab_resize": Case(
        bad_vocab,
        good_vocab,
        "aten.embedding",
        "indices",
        "vocab_resize_missing",
        [11],
        [(1,)],
        1,
        "[0, 10)",
        variable="input_ids",
        range_source="len(tokenizer) = 12",
    ),
    "embedding_dense_backward": Case(
        bad_embedding_backward,
        good_embedding_backward,
        "aten.embedding_dense_backward",
        "indices",
        "embedding_index_out_of_range",
        [12],
        [(1,)],
        1,
        "[0, 10)",
        variable="token_ids",
    ),
    "embedding_renorm": Case(
        bad_renorm,
        good_renorm,
        "aten.embedding_renorm_",
        "indices",
        "embedding_index_out_of_range",
        [10],
        [(1,)],
        1,
        "[0, 10)",
        variable="ids",
    ),
    "embedding_bag": Case(
        bad_bag,
        good_bag,
        "aten._embedding_bag",
        "indices",
        "embedding_index_out_of_range",
        [10],
        [(2,)],
        1,
        "[0, 10)",
        variable="ids",
        range_source="bag.num_embeddings = 10",
    ),
    "embedding_bag_offsets": Case(
        bad_bag_offsets,
        good_bag_offsets,
        "aten._embedding_bag_forward_only",
        "offsets",
        "embedding_index_out_of_range",
        [2],
        [(2,)],
        1,
        "non-decreasing, within [0, 3]",
        variable="offsets",
    ),
    "embedding_bag_backward": Case(
        bad_bag_backward,
        good_bag_backward,
        "aten._embedding_bag_dense_backward",
        "indices",
        "embedding_index_out_of_range",
        [10],
        [(1,)],
        1,
        "[0, 10)",
    ),
    "index_select": Case(
        bad_index_select,
        good_index_select,
        "aten.index_select",
        "index",
        "advanced_index_out_of_bounds",
        [5, -1],
        [(1,), (2,)],
        2,
        "[0, 5)",
        variable="rows",
        line="x.index_select(0, rows)",
    ),
    "index_tensor": Case(
        bad_getitem,
        good_getitem,
        "aten.index.Tensor",
        "indices[0]",
        "advanced_index_out_of_bounds",
        [7, -6],
        [(1,), (2,)],
        2,
        "[-5, 5)",
        variable="idx",
        line="return x[idx]",
    ),
    "index_tensor_2d": Case(
        bad_getitem_2d,
        good_getitem_2d,
        "aten.index.Tensor",
        "indices[1]",
        "advanced_index_out_of_bounds",
        [3],
        [(1,)],
        1,
        "[-3, 3)",
        variable="cols",
        range_source="self.shape[1]",
    ),
    "index_put": Case(
        bad_setitem,
        good_setitem,
        "aten.index_put_",
        "indices[0]",
        "advanced_index_out_of_bounds",
        [5],
        [(0,)],
        1,
        "[-5, 5)",
        variable="idx",
        line="x[idx] = 1.0",
    ),
    "take": Case(
        bad_take,
        good_take,
        "aten.take",
        "index",
        "advanced_index_out_of_bounds",
        [10],
        [(1,)],
        1,
        "[-10, 10)",
        variable="flat",
    ),
    "put": Case(
        bad_put,
        good_put,
        "aten.put_",
        "index",
        "advanced_index_out_of_bounds",
        [-11],
        [(0,)],
        1,
        "[-10, 10)",
        variable="flat",
    ),
    "gather": Case(
        bad_gather,
        good_gather,
        "aten.gather",
        "index",
        "gather_scatter_index",
        [-1, 3],
        [(0, 1), (1, 1)],
        2,
        "[0, 3)",
        variable="idx",
    ),
    "scatter": Case(
        bad_scatter,
        good_scatter,
        "aten.scatter_.value",
        "index",
        "gather_scatter_index",
        [4],
        [(0, 0)],
        1,
        "[0, 4)",
        variable="idx",
    ),
    "scatter_add": Case(
        bad_scatter_add,
        good_scatter_add,
        "aten.scatter_add",
        "index",
        "gather_scatter_index",
        [4],
        [(1,)],
        1,
        "[0, 4)",
        variable="idx",
    ),
    "scatter_reduce": Case(
        bad_scatter_reduce,
        good_scatter_reduce,
        "aten.scatter_reduce.two",
        "index",
        "gather_scatter_index",
        [-1],
        [(0,)],
        1,
        "[0, 4)",
        variable="idx",
    ),
    "index_add": Case(
        bad_index_add,
        good_index_add,
        "aten.index_add_",
        "index",
        "advanced_index_out_of_bounds",
        [3],
        [(1,)],
        1,
        "[0, 3)",
        variable="idx",
    ),
    "index_copy": Case(
        bad_index_copy,
        good_index_copy,
        "aten.index_copy_",
        "index",
        "advanced_index_out_of_bounds",
        [4],
        [(0,)],
        1,
        "[0, 4)",
        variable="cache_position",
    ),
    "index_fill": Case(
        bad_index_fill,
        good_index_fill,
        "aten.index_fill_.int_Scalar",
        "index",
        "advanced_index_out_of_bounds",
        [-5],
        [(0,)],
        1,
        "[-4, 4)",
        variable="idx",
    ),
    "index_reduce": Case(
        bad_index_reduce,
        good_index_reduce,
        "aten.index_reduce_",
        "index",
        "advanced_index_out_of_bounds",
        [9],
        [(0,)],
        1,
        "[0, 4)",
        variable="idx",
    ),
    "max_unpool2d": Case(
        bad_unpool,
        good_unpool,
        "aten.max_unpool2d",
        "indices",
        "advanced_index_out_of_bounds",
        [16],
        [(0, 0, 1, 1)],
        1,
        "[0, 16)",
        variable="indices",
    ),
    "cross_entropy": Case(
        bad_cross_entropy,
        good_cross_entropy,
        "aten.nll_loss_forward",
        "target",
        "label_out_of_range",
        [5, 7],
        [(1,), (3,)],
        2,
        "[0, 5) or -100 (ignore_index)",
        variable="labels",
        line="F.cross_entropy(logits, labels)",
        range_source="input.shape[1] (classes)",
    ),
    "negative_label": Case(
        bad_negative_label,
        good_custom_ignore_index,
        "aten.nll_loss_forward",
        "target",
        "negative_label",
        [-1],
        [(0,)],
        1,
        "[0, 5) or -100 (ignore_index)",
        variable="labels",
    ),
    "class_weights": Case(
        bad_weighted,
        good_weighted,
        "aten.nll_loss_forward",
        "target",
        "label_out_of_range",
        [5],
        [(1,)],
        1,
        "[0, 5)",
        variable="labels",
    ),
    "class_weight_size": Case(
        bad_weight_size,
        good_weighted,
        "aten.nll_loss_forward",
        "weight",
        "num_classes_mismatch",
        [],
        [],
        0,
        "5 elements",
        variable="class_weights",
    ),
    "nll_loss2d": Case(
        bad_segmentation,
        good_segmentation,
        "aten.nll_loss2d_forward",
        "target",
        "label_out_of_range",
        [255],
        [(0, 0, 1)],
        1,
        "[0, 3)",
        variable="mask",
    ),
    "nll_loss_backward": Case(
        bad_nll_backward,
        good_nll_backward,
        "aten.nll_loss_backward",
        "target",
        "label_out_of_range",
        [3],
        [(1,)],
        1,
        "[0, 3)",
        variable="target",
    ),
    "nll_loss2d_backward": Case(
        bad_nll2d_backward,
        good_nll2d_backward,
        "aten.nll_loss2d_backward",
        "target",
        "label_out_of_range",
        [3],
        [(0, 1, 0)],
        1,
        "[0, 3)",
        variable="target",
    ),
    "multi_margin_loss": Case(
        bad_multi_margin,
        good_multi_margin,
        "aten.multi_margin_loss",
        "target",
        "label_out_of_range",
        [4],
        [(1,)],
        1,
        "[0, 4)",
        variable="targets",
    ),
    "bce_input": Case(
        bad_bce_input,
        good_bce,
        "aten.binary_cross_entropy",
        "input",
        "bce_input_range",
        [1.5, -0.1],
        [(1,), (2,)],
        2,
        "[0, 1]",
        variable="logits",
    ),
    "bce_input_nan": Case(
        bad_bce_nan, good_bce, "aten.binary_cross_entropy", "input", "bce_input_range", [nan], [(1,)], 1, "[0, 1]"
    ),
    "bce_target": Case(
        bad_bce_target,
        good_bce,
        "aten.binary_cross_entropy",
        "target",
        "bce_target_range",
        [255.0],
        [(1,)],
        1,
        "[0, 1]",
        variable="mask",
    ),
    "bce_backward": Case(
        bad_bce_backward,
        good_bce_backward,
        "aten.binary_cross_entropy_backward",
        "target",
        "bce_target_range",
        [2.0],
        [(1,)],
        1,
        "[0, 1]",
        variable="mask",
    ),
    "ctc_targets": Case(
        bad_ctc_targets,
        good_ctc_targets,
        "aten._ctc_loss.Tensor",
        "targets",
        "ctc_loss",
        [5],
        [(0, 1)],
        1,
        "[0, 5) except blank=0",
        variable="targets",
    ),
    "ctc_blank": Case(
        bad_ctc_blank,
        good_ctc_targets,
        "aten._ctc_loss.Tensor",
        "targets",
        "ctc_loss",
        [0],
        [(0, 1)],
        1,
        "[0, 5) except blank=0",
        variable="targets",
    ),
    "ctc_input_lengths": Case(
        bad_ctc_input_lengths,
        good_ctc_targets,
        "aten._ctc_loss.Tensor",
        "input_lengths",
        "ctc_loss",
        [7],
        [(1,)],
        1,
        "[0, 7)",
        variable="frames",
    ),
    "ctc_target_lengths": Case(
        bad_ctc_target_lengths,
        good_ctc_targets,
        "aten._ctc_loss.Tensor",
        "target_lengths",
        "ctc_loss",
        [3],
        [(1,)],
        1,
        "[0, 3)",
        variable="target_lengths",
    ),
    "ctc_backward": Case(
        bad_ctc_backward,
        good_ctc_backward,
        "aten._ctc_loss_backward",
        "targets",
        "ctc_loss",
        [9],
        [(0, 1)],
        1,
        "[0, 5) except blank=0",
        variable="labels",
    ),
    "multinomial_nan": Case(
        bad_multinomial_nan,
        good_multinomial,
        "aten.multinomial",
        "input",
        "multinomial_invalid_probs",
        [nan],
        [(1, 0)],
        1,
        "finite, >= 0",
        variable="probs",
    ),
    "multinomial_inf": Case(
        bad_multinomial_inf,
        good_multinomial,
        "aten.multinomial",
        "input",
        "multinomial_invalid_probs",
        [inf],
        [(1,)],
        1,
        "finite, >= 0",
        variable="probs",
    ),
    "multinomial_negative": Case(
        bad_multinomial_negative,
        good_multinomial,
        "aten.multinomial",
        "input",
        "multinomial_invalid_probs",
        [-0.1],
        [(0, 1)],
        1,
        "finite, >= 0",
        variable="probs",
    ),
    "multinomial_zero_row": Case(
        bad_multinomial_zero_row,
        good_multinomial,
        "aten.multinomial",
        "input",
        "multinomial_invalid_probs",
        [0.0, 0.0],
        [(1, 0), (1, 1)],
        2,
        "each row summing to > 0",
        variable="probs",
    ),
    "one_hot": Case(
        bad_one_hot,
        good_one_hot,
        "aten.scatter_.value",
        "input",
        "one_hot_num_classes",
        [3],
        [(2,)],
        1,
        "[0, 3)",
        variable="labels",
        range_source="num_classes = 3",
    ),
    "one_hot_negative": Case(
        bad_one_hot_negative,
        good_one_hot_inferred,
        "aten.scatter_.value",
        "input",
        "one_hot_num_classes",
        [-1],
        [(1,)],
        1,
        "[0, 2)",
        variable="labels",
    ),
    "bincount": Case(
        bad_bincount, good_bincount, "aten.bincount", "self", "other", [-3], [(2,)], 1, ">= 0", variable="votes"
    ),
    "nan_cast": Case(
        bad_nan_cast,
        good_nan_cast,
        "aten.index.Tensor",
        "indices[0]",
        "nan_or_inf",
        [nan],
        [(1,)],
        1,
        "finite values before the cast",
        variable="idx",
        line="return table[idx]",
    ),
    "inf_cast_view": Case(
        bad_inf_cast_view,
        good_embedding,
        "aten.embedding",
        "indices",
        "nan_or_inf",
        [inf],
        [(1,)],
        1,
        "finite values before the cast",
        variable="ids",
    ),
    "bernoulli": Case(
        bad_bernoulli, good_bernoulli, "aten.bernoulli", "p", "other", [1.5], [(1,)], 1, "[0, 1]", variable="p"
    ),
    "bernoulli_tensor_p": Case(
        bad_bernoulli_tensor_p,
        good_bernoulli,
        "aten.bernoulli_.Tensor",
        "p",
        "other",
        [nan],
        [(0,)],
        1,
        "[0, 1]",
        variable="p",
    ),
    "poisson": Case(
        bad_poisson, good_poisson, "aten.poisson", "rates", "other", [-0.5], [(1,)], 1, ">= 0", variable="rates"
    ),
    "masked_scatter": Case(
        bad_masked_scatter,
        good_masked_scatter,
        "aten.masked_scatter",
        "mask",
        "other",
        [True, True, True],
        [(0,), (2,), (3,)],
        3,
        "at most 2 True elements",
        variable="keep",
    ),
    "repeat_interleave": Case(
        bad_repeat_interleave,
        good_repeat_interleave,
        "aten.repeat_interleave.Tensor",
        "repeats",
        "other",
        [-2],
        [(1,)],
        1,
        ">= 0",
        variable="repeats",
    ),
    "repeat_interleave_output_size": Case(
        bad_repeat_output_size,
        good_repeat_interleave,
        "aten.repeat_interleave.Tensor",
        "output_size",
        "other",
        [1, 2],
        [(0,), (1,)],
        2,
        "repeats.sum()",
        variable="repeats",
    ),
    "segment_reduce": Case(
        bad_segment_reduce,
        good_segment_reduce,
        "aten.segment_reduce",
        "lengths",
        "other",
        [-1],
        [(1,)],
        1,
        ">= 0",
        variable="lengths",
    ),
    "assert_async": Case(
        bad_assert_async,
        good_assert_async,
        "aten._assert_async.msg",
        "self",
        "other",
        [False],
        [()],
        1,
        "non-zero",
        variable="ok",
    ),
    "grouped_mm": Case(
        bad_grouped_mm,
        good_grouped_mm,
        "aten._grouped_mm",
        "offs",
        "other",
        [2],
        [(1,)],
        1,
        "non-decreasing, within [0, 4]",
        variable="offs",
    ),
}


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def _values_equal(found: list, expected: list) -> bool:
    if len(found) != len(expected):
        return False
    for f, e in zip(found, expected, strict=True):
        if isinstance(e, float) and math.isnan(e):
            if not (isinstance(f, float) and math.isnan(f)):
                return False
        elif isinstance(e, float):
            if not math.isclose(f, e, rel_tol=1e-6):
                return False
        elif f != e:
            return False
    return True


@pytest.mark.parametrize("name", sorted(CASES))
def test_check_stops_bad_input(name: str) -> None:
    case = CASES[name]
    checker = Checker()
    with pytest.raises(CudaCheckError) as info, checker:
        case.bad()
    err = info.value
    assert isinstance(err, RuntimeError)
    assert (err.op, err.argument, err.family) == (case.op, case.argument, case.family)
    assert _values_equal(err.values, case.values), err.values
    assert [tuple(p) for p in err.positions] == case.positions
    assert err.count == case.count
    assert case.valid_range in err.valid_range
    if case.variable is not None:
        assert err.variable is not None and err.variable.split(" ")[0] == case.variable
    if case.range_source is not None:
        assert case.range_source in err.range_source
    assert err.user_line is not None and "test_check_ops.py" in err.user_line
    if case.line is not None:
        assert case.line in err.user_line
    assert err.fix
    assert err.op in str(err) and err.argument in str(err)
    all_shown = err.count == len(err.values)
    if all_shown and err.family != "nan_or_inf" and not any(isinstance(v, float) and math.isnan(v) for v in err.values):
        assert "NaN" not in err.problem  # a note never claims what was not read


@pytest.mark.parametrize("name", sorted(CASES))
def test_valid_boundary_passes_unchanged(name: str) -> None:
    case = CASES[name]
    plain = case.good()
    checker = Checker()
    with checker:
        checked = case.good()
    assert _same(plain, checked)
    assert sum(checker.mode.checked.values()) >= 1, "the boundary case must go through a check, not around it"
