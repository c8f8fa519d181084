"""The one table ``mode`` reads: which check runs for which aten op.

Keyed by packet name, so every overload of the packet (in-place, ``.out``, keyword forms) is checked the same way;
``mode`` resolves the packets this torch has into OpOverloads once per mode.
"""

from __future__ import annotations

from nb_cudaguard.check.conditions import Check
from nb_cudaguard.check.ops_embedding import (
    check_embedding,
    check_embedding_backward,
    check_embedding_bag,
    check_embedding_bag_backward,
    check_embedding_renorm,
)
from nb_cudaguard.check.ops_index import (
    check_advanced_index,
    check_gather_scatter,
    check_index_dim,
    check_index_fill,
    check_index_select,
    check_masked_scatter,
    check_max_unpool,
    check_take,
)
from nb_cudaguard.check.ops_loss import (
    check_bce,
    check_ctc_loss,
    check_multi_margin_loss,
    check_nll_loss,
    check_nll_loss2d,
)
from nb_cudaguard.check.ops_misc import (
    check_assert_async,
    check_bincount,
    check_grouped_mm,
    check_repeat_interleave,
    check_segment_reduce,
)
from nb_cudaguard.check.ops_sampling import check_bernoulli, check_multinomial, check_poisson

CHECKS: dict[str, Check] = {
    "embedding": check_embedding,
    "embedding_renorm_": check_embedding_renorm,
    "embedding_dense_backward": check_embedding_backward,
    "embedding_backward": check_embedding_backward,
    "embedding_sparse_backward": check_embedding_backward,
    "_embedding_bag": check_embedding_bag,
    "_embedding_bag_forward_only": check_embedding_bag,
    "_embedding_bag_backward": check_embedding_bag_backward,
    "_embedding_bag_dense_backward": check_embedding_bag_backward,
    "_embedding_bag_sparse_backward": check_embedding_bag_backward,
    "_embedding_bag_per_sample_weights_backward": check_embedding_bag_backward,
    "index_select": check_index_select,
    "index": check_advanced_index,
    "_unsafe_index": check_advanced_index,
    "index_put": check_advanced_index,
    "index_put_": check_advanced_index,
    "_index_put_impl_": check_advanced_index,
    "_unsafe_index_put": check_advanced_index,
    "take": check_take,
    "put": check_take,
    "put_": check_take,
    "gather": check_gather_scatter,
    "scatter": check_gather_scatter,
    "scatter_": check_gather_scatter,
    "scatter_add": check_gather_scatter,
    "scatter_add_": check_gather_scatter,
    "scatter_reduce": check_gather_scatter,
    "scatter_reduce_": check_gather_scatter,
    "index_add": check_index_dim,
    "index_add_": check_index_dim,
    "index_reduce": check_index_dim,
    "index_reduce_": check_index_dim,
    "index_copy": check_index_dim,
    "index_copy_": check_index_dim,
    "index_fill": check_index_fill,
    "index_fill_": check_index_fill,
    "nll_loss_forward": check_nll_loss,
    "nll_loss_backward": check_nll_loss,
    "nll_loss2d_forward": check_nll_loss2d,
    "nll_loss2d_backward": check_nll_loss2d,
    "multi_margin_loss": check_multi_margin_loss,
    "multi_margin_loss_backward": check_multi_margin_loss,
    "binary_cross_entropy": check_bce,
    "binary_cross_entropy_backward": check_bce,
    "multinomial": check_multinomial,
    "_ctc_loss": check_ctc_loss,
    "_ctc_loss_backward": check_ctc_loss,
    "bincount": check_bincount,
    "bernoulli": check_bernoulli,
    "bernoulli_": check_bernoulli,
    "poisson": check_poisson,
    "masked_scatter": check_masked_scatter,
    "masked_scatter_": check_masked_scatter,
    "max_unpool2d": check_max_unpool,
    "max_unpool3d": check_max_unpool,
    "repeat_interleave": check_repeat_interleave,
    "segment_reduce": check_segment_reduce,
    "_assert_async": check_assert_async,
    "_grouped_mm": check_grouped_mm,
}
