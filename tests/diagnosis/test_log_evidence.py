"""Numbers printed in a log and the user's code read statically narrow a group to a family, and say how.

The logs here are written for these tests in the words PyTorch and transformers print (none is from the corpus):
each rule is checked to fire on its evidence, to stay silent without it, and to reach the ranked answer.
"""

from __future__ import annotations

import pytest

from nb_cudaguard.diagnosis import diagnose
from nb_cudaguard.diagnosis.evidence import codehints, lognumbers
from nb_cudaguard.diagnosis.evidence.static import read_sources
from nb_cudaguard.incident.logparse import incident_from_log

GENERIC = "RuntimeError: CUDA error: device-side assert triggered\n"
EMBEDDING_ASSERT = (
    "../aten/src/ATen/native/cuda/Indexing.cu:1146: {kernel}: block: [3,0,0], thread: [7,0,0] "
    "Assertion `srcIndex < srcSelectDimSize` failed.\n" + GENERIC
)


def _families(text: str) -> list[str]:
    return [h.family for h in lognumbers.hints_for(incident_from_log(text))]


def _top(text: str, code: str | None = None) -> str:
    top = diagnose(incident_from_log(text), code=code).top
    assert top is not None
    return top.family


@pytest.mark.parametrize(
    ("message", "family"),
    [
        ("IndexError: index 50265 is out of bounds for dimension 0 with size 50265", "vocab_resize_missing"),
        ("IndexError: index 50300 is out of bounds for dimension 0 with size 50265", "embedding_index_out_of_range"),
        (
            "    outputs = model(input_ids, token_type_ids=token_type_ids)\n"
            "IndexError: index 2 is out of bounds for dimension 0 with size 2",
            "token_type_ids_out_of_range",
        ),
        (
            "RuntimeError: index out of range: Tried to access index -1 out of table with 32000 rows",
            "embedding_index_out_of_range",
        ),
    ],
)
def test_an_id_printed_against_its_table_size_names_the_family(message, family):
    assert _families(message) == [family]


@pytest.mark.parametrize(
    "message",
    [
        # a 2-row tensor indexed by x[idx]: nothing says it is a token-type table
        "IndexError: index 2 is out of bounds for dimension 0 with size 2",
        # a table's rows are dimension 0: an index past dimension 1 is no table's id
        "IndexError: index 50265 is out of bounds for dimension 1 with size 50265",
    ],
)
def test_an_index_against_a_size_that_is_no_tables_says_nothing(message):
    assert _families(message) == []
    assert _top(message) == "advanced_index_out_of_bounds"


def test_an_id_against_a_vocabulary_sized_table_outranks_the_indexing_text_it_comes_with():
    """The x[idx] message names the index group; the numbers it prints say which table, as an embedding
    assertion's would."""
    assert _top("IndexError: index 50265 is out of bounds for dimension 0 with size 50265") == "vocab_resize_missing"
    assert _top("IndexError: index 40000 is out of bounds for dimension 0 with size 32000") == (
        "embedding_index_out_of_range"
    )


def test_a_printed_position_table_turns_an_id_against_its_size_into_a_long_sequence():
    log = (
        "  (position_embeddings): Embedding(512, 768)\n"
        "IndexError: index 512 is out of bounds for dimension 0 with size 512\n"
    )
    hints = lognumbers.hints_for(incident_from_log(log))
    assert [h.family for h in hints] == ["position_ids_too_long"]
    assert "512" in hints[0].text


def test_printed_input_ids_against_a_printed_vocabulary():
    config = '"vocab_size": 30522,\n'
    assert _families(config + "input_ids: tensor([[101, 30522, 102]])\n" + GENERIC) == ["vocab_resize_missing"]
    assert _families(config + "input_ids: tensor([[101, 40000, 102]])\n" + GENERIC) == ["embedding_index_out_of_range"]
    assert _families(config + "input_ids: tensor([[101, 2000, 102]])\n" + GENERIC) == []


@pytest.mark.parametrize(
    ("printed", "family"),
    [
        ("(classifier): Linear(in_features=768, out_features=3)\nlabels: tensor([1, 2, 3])", "label_out_of_range"),
        ("(classifier): Linear(in_features=768, out_features=3)\nlabels: tensor([0, 4, 5])", "num_classes_mismatch"),
        ("num_labels = 3\nlabels: tensor([0, 255, 1])", "label_out_of_range"),
        ("labels: tensor([0, -1, 2])", "negative_label"),
    ],
)
def test_a_printed_batch_of_labels_against_the_class_count(printed, family):
    assert _families(printed + "\n" + GENERIC) == [family]
    assert _top(printed + "\n" + GENERIC) == family


def test_labels_within_the_class_count_and_ignore_index_say_nothing():
    text = "(fc): Linear(in_features=512, out_features=3)\nlabels: tensor([0, 2, -100])\n" + GENERIC
    assert _families(text) == []


def test_the_small_index_kernel_is_a_per_sample_id_or_one_decoding_step():
    small = EMBEDDING_ASSERT.format(kernel="indexSelectSmallIndex")
    assert _families(small) == ["embedding_index_out_of_range"]
    generating = '  File "x/generation/utils.py", line 9, in generate\n' + small
    assert _families(generating) == ["position_ids_too_long"]
    assert _families(EMBEDDING_ASSERT.format(kernel="indexSelectLargeIndex")) == []
    assert _top(small) == "embedding_index_out_of_range"


def _code_hints(code: str) -> list[tuple[str, str]]:
    return [(h.family, h.text) for h in codehints.hints_for([code], read_sources([code]))]


def test_code_random_ids_past_a_known_checkpoints_vocabulary():
    code = (
        "model = AutoModel.from_pretrained('gpt2')\n"
        "input_ids = torch.randint(0, 60000, (4, 128))\n"
        "enc = tokenizer(texts, max_length=2048, truncation=True)\n"
    )
    hints = dict(_code_hints(code))
    assert "50257" in hints["embedding_index_out_of_range"]
    assert "1024" in hints["position_ids_too_long"]
    within = "model = AutoModel.from_pretrained('gpt2')\ninput_ids = torch.randint(0, 50000, (4, 128))\n"
    assert _code_hints(within) == []


def test_code_a_label_constant_past_the_class_count_unless_it_is_ignored():
    code = "    classes = 3\n    ignore_index = 255\n    labels[5, 200, 200] = 254\n    labels[1, 2, 3] = 255\n"
    hints = _code_hints(code)  # an indented snippet, as pasted from a function body
    assert [f for f, _ in hints] == ["label_out_of_range"] and "254" in hints[0][1]
    assert _code_hints("classes = 3\nlabels[0] = 2\n") == []
    illegal = "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    assert _top(illegal, code=code) == "label_out_of_range"


def test_code_shifted_labels_a_short_class_count_and_a_new_pad_token():
    assert [f for f, _ in _code_hints("labels = labels + 1\n")] == ["label_out_of_range"]
    assert [f for f, _ in _code_hints("y = y - 1\n")] == ["negative_label"]
    assert [f for f, _ in _code_hints("num_classes = len(os.listdir(root)) - 1\n")] == ["num_classes_mismatch"]
    pad = "tokenizer.pad_token = '[PAD]'\n"
    assert [f for f, _ in _code_hints(pad)] == ["vocab_resize_missing"]
    assert _code_hints(pad + "model.resize_token_embeddings(len(tokenizer))\n") == []
    assert _code_hints("tokenizer.pad_token = tokenizer.eos_token\n") == []


def test_code_a_class_count_argument_below_the_declared_constant_in_a_notebook_with_magics():
    notebook = (
        "%load_ext nb_cudaguard\nNUM_CLASSES = 196\nif not cuda:\n    %cudaguard simulate on\n"
        "model = CarNet(num_classes=195)\n"
    )
    hints = _code_hints(notebook)  # an indented magic must not hide the cell from the parser
    assert [f for f, _ in hints] == ["num_classes_mismatch"] and "num_classes=195" in hints[0][1]
    assert _code_hints("NUM_CLASSES = 196\nmodel = CarNet(num_classes=196)\n") == []
    one_short = _code_hints("NUM_CLASSES = 196\nmodel = CarNet(num_classes=NUM_CLASSES - 1)\n")
    assert [f for f, _ in one_short] == ["num_classes_mismatch"]
    assert _code_hints("NUM_CLASSES = 196\nmodel = CarNet(num_classes=n_out)\n") == []  # a value the code hides


def test_a_code_hint_that_narrows_the_group_is_named_in_the_notes():
    log = EMBEDDING_ASSERT.format(kernel="indexSelectLargeIndex")
    code = "tok.pad_token = '[PAD]'\nmodel = AutoModelForCausalLM.from_pretrained(path)\n"
    diagnosis = diagnose(incident_from_log(log), code=code)
    assert diagnosis.top is not None and diagnosis.top.family == "vocab_resize_missing"
    assert any("pad_token" in note for note in diagnosis.notes)


def test_code_ops_name_their_group_only():
    hints = codehints.hints_for(["x = F.one_hot(y, num_classes=3)\n"], read_sources(["x = F.one_hot(y, 3)\n"]))
    assert [(h.family, h.group_only) for h in hints] == [("one_hot_num_classes", True)]
    assert (
        _top("RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED.\n", code="F.ctc_loss(a, b, c, d)\n") == "ctc_loss"
    )
