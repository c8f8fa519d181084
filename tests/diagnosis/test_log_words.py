"""A log's words (libraries' warnings, the model it names, the user's traceback lines) and ``--code``'s class heads
narrow a group to a family, and say which evidence did it.

The fragments here are written for these tests in the words PyTorch, transformers and MMDetection print (none is
from the corpus): each rule is checked to reach the ranked answer with its evidence, and to stay silent without it.
"""

from __future__ import annotations

import pytest

from nb_cudaguard.diagnosis import diagnose
from nb_cudaguard.diagnosis.evidence import logwords
from nb_cudaguard.incident.logparse import incident_from_log

GENERIC = "RuntimeError: CUDA error: device-side assert triggered\n"
CLASS_ASSERT = (
    "/pytorch/aten/src/ATen/native/cuda/Loss.cu:242: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], "
    "thread: [3,0,0] Assertion `t >= 0 && t < n_classes` failed.\n" + GENERIC
)
EMBEDDING_ASSERT = (
    "../aten/src/ATen/native/cuda/Indexing.cu:1146: indexSelectLargeIndex: block: [3,0,0], thread: [7,0,0] "
    "Assertion `srcIndex < srcSelectDimSize` failed.\n" + GENERIC
)
SCATTER_ASSERT = (
    "../aten/src/ATen/native/cuda/ScatterGatherKernel.cu:365: operator(): block: [0,0,0], thread: [5,0,0] "
    'Assertion `idx_dim >= 0 && idx_dim < index_size && "index out of bounds"` failed.\n'
)
INDEX_ASSERT = (
    "../aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [0,0,0], thread: [5,0,0] "
    'Assertion `-sizes[i] <= index && index < sizes[i] && "index out of bounds"` failed.\n' + GENERIC
)
USER_EMBEDDING = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 9, in <module>\n'
    "    out = net(batch)\n"
    '  File "/usr/lib/python3/site-packages/torch/nn/functional.py", line 2210, in embedding\n'
    "    return torch.embedding(weight, input, padding_idx, scale_grad_by_freq, sparse)\n"
)


def _top(text: str, code: str | None = None):
    top = diagnose(incident_from_log(text), code=code).top
    assert top is not None
    return top


@pytest.mark.parametrize(
    ("before", "family", "words"),
    [
        (
            "Some weights of BertForSequenceClassification were not initialized from the model checkpoint at "
            "bert-base-uncased and are newly initialized: ['classifier.bias', 'classifier.weight']\n",
            "num_classes_mismatch",
            "fresh",
        ),
        (
            "AssertionError: The `num_classes` (3) in Shared2FCBBoxHead of MMDataParallel does not matches the "
            "length of `CLASSES` 5) in CocoDataset\n",
            "num_classes_mismatch",
            "class count",
        ),
        ("labels contain -1 for the unlabeled words\n", "negative_label", "-1"),
        ("ignore_label = 255\n", "label_out_of_range", "255"),
    ],
)
def test_words_before_a_class_index_assertion_narrow_the_labels_family(before, family, words):
    top = _top(before + CLASS_ASSERT)
    assert top.family == family
    assert any(e.kind == "log" and words in e.text for e in top.evidence)


def test_a_class_index_assertion_alone_is_not_narrowed_by_words():
    assert logwords.hints_for(incident_from_log(CLASS_ASSERT), frozenset({"class_index"})) == []


@pytest.mark.parametrize(
    ("before", "family"),
    [
        (
            "Special tokens have been added in the vocabulary, make sure the associated word embeddings are "
            "fine-tuned or trained.\n",
            "vocab_resize_missing",
        ),
        ("python finetune.py --base_model meta-llama/Llama-2-7b-hf --use_peft\n", "vocab_resize_missing"),
        ("model = MistralForCausalLM.from_pretrained(path)\n", "embedding_index_out_of_range"),
        (
            "This is a friendly reminder - the current text generation call will exceed the model's predefined "
            "maximum length (1024).\n",
            "position_ids_too_long",
        ),
        ("Namespace(model_name='bert-base-uncased', max_length=1024)\n", "position_ids_too_long"),
        (
            "checkpoint roberta-base\n    out = model(input_ids, token_type_ids=token_type_ids)\n",
            "token_type_ids_out_of_range",
        ),
        ("    output_ids = model.generate(input_ids, max_new_tokens=2000)\n", "position_ids_too_long"),
    ],
)
def test_words_around_an_embedding_assertion_name_the_table(before, family):
    top = _top(before + EMBEDDING_ASSERT)
    assert top.family == family
    assert any(e.kind == "log" for e in top.evidence)


def test_a_known_checkpoint_within_its_positions_says_nothing():
    text = "Namespace(model_name='bert-base-uncased', max_length=256)\n" + EMBEDDING_ASSERT
    assert logwords.hints_for(incident_from_log(text), frozenset({"embedding"})) == []


def test_sampling_words_keep_generate_from_pointing_at_positions():
    text = "    model.generate(input_ids, do_sample=True, top_p=0.9)\n" + EMBEDDING_ASSERT
    hints = logwords.hints_for(incident_from_log(text), frozenset({"embedding"}))
    assert "position_ids_too_long" not in [h.family for h in hints]


def test_model_words_are_silent_when_the_log_names_another_group():
    text = "python finetune.py --base_model meta-llama/Llama-2-7b-hf --use_peft\n" + CLASS_ASSERT
    assert logwords.hints_for(incident_from_log(text), frozenset({"class_index"})) == []
    assert _top(text).family != "vocab_resize_missing"


def test_an_embedding_in_the_users_own_model_is_a_plain_table():
    top = _top(USER_EMBEDDING + "IndexError: index out of range in self\n")
    assert top.family == "embedding_index_out_of_range"
    assert any(e.kind == "traceback" and "user's own model" in e.text for e in top.evidence)
    pretrained = USER_EMBEDDING.replace("net(batch)", "bert(input_ids)") + "IndexError: index out of range in self\n"
    hints = logwords.hints_for(incident_from_log(pretrained), frozenset({"embedding"}))
    assert all("user's own model" not in h.text for h in hints)


def test_the_users_traceback_lines_are_read_as_code_is():
    text = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 9, in <module>\n'
        "    loss = criterion(out, labels - 1)\n" + GENERIC
    )
    hints = logwords.hints_for(incident_from_log(text), frozenset())
    assert [(h.family, h.kind) for h in hints] == [("negative_label", "traceback")]
    assert _top(text).family == "negative_label"


def test_a_colab_linked_frame_is_read_as_a_frame():
    text = (
        "[<ipython-input-3-0a1b2c3d4e5f>](https://localhost:8080/#) in <cell line: 2>()\n"
        "----> 2 out = net(batch)\n\n"
        "[/usr/local/lib/python3.10/dist-packages/torch/nn/functional.py](https://localhost:8080/#) in "
        "embedding(input, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse)\n"
        "-> 2551     return torch.embedding(weight, input, padding_idx, scale_grad_by_freq, sparse)\n\n"
        "IndexError: index out of range in self\n"
    )
    frames = incident_from_log(text).frames
    assert [f.function for f in frames] == ["<module>", "embedding"]
    assert frames[-1].filename.endswith("torch/nn/functional.py")


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (
            "from transformers import AutoModelForSequenceClassification\n"
            "model = AutoModelForSequenceClassification.from_pretrained('bert-base-uncased')\n",
            "without num_labels",
        ),
        ("import torch.nn as nn\nnum_classes = 10\nmodel.fc = nn.Linear(512, 5)\n", "declares 10 classes"),
    ],
)
def test_a_class_head_the_code_never_sized_is_a_class_count_mismatch(code, words):
    top = _top(CLASS_ASSERT, code=code)
    assert top.family == "num_classes_mismatch"
    assert any(e.kind == "source" and words in e.text for e in top.evidence)


def test_a_head_sized_by_the_code_is_not_a_mismatch():
    code = (
        "from transformers import AutoModelForSequenceClassification\n"
        "model = AutoModelForSequenceClassification.from_pretrained('bert-base-uncased', num_labels=5)\n"
        "num_classes = 5\nmodel.fc = nn.Linear(512, num_classes)\n"
    )
    evidence = [e.text for c in diagnose(incident_from_log(CLASS_ASSERT), code=code).causes for e in c.evidence]
    assert not any("without num_labels" in t or "declares" in t for t in evidence)


def test_an_index_assertion_names_its_op_over_the_prior():
    assert _top(INDEX_ASSERT).family == "advanced_index_out_of_bounds"
    assert _top(SCATTER_ASSERT + GENERIC).family == "gather_scatter_index"


def test_one_hots_own_message_beside_the_scatter_assertion_names_one_hot():
    text = "RuntimeError: Class values must be smaller than num_classes.\n" + SCATTER_ASSERT
    top = _top(text)
    assert top.family == "one_hot_num_classes"
    assert any(e.kind == "error_text" for e in top.evidence)
