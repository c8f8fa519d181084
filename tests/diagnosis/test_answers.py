"""A report's answers: a family the evidence chose stands alone; a group only the prior ranks is one answer.

The logs here are written from PyTorch's kernels (the assertion texts of ``IndexKernel.cu`` and
``ScatterGatherKernel.cu``), not taken from the corpus the prior was counted on.
"""

from __future__ import annotations

from nb_cudaguard.diagnosis import diagnose
from nb_cudaguard.diagnosis.causes import Diagnosis
from nb_cudaguard.families import TABLE, group_of
from nb_cudaguard.incident.logparse import incident_from_log

ADVANCED_INDEX = (
    "../aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [0,0,0], thread: [7,0,0] Assertion "
    '`index >= -sizes[i] && index < sizes[i] && "index out of bounds"` failed.\n'
    "RuntimeError: CUDA error: device-side assert triggered\n"
)
SCATTER = (
    "../aten/src/ATen/native/cuda/ScatterGatherKernel.cu:144: operator(): block: [0,0,0], thread: [3,0,0] "
    'Assertion `idx_dim >= 0 && idx_dim < index_size && "index out of bounds"` failed.\n'
    "RuntimeError: CUDA error: device-side assert triggered\n"
)
BARE = "RuntimeError: CUDA error: device-side assert triggered\n"
LABELS = (
    "/pytorch/aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], "
    "thread: [3,0,0] Assertion `t >= 0 && t < n_classes` failed.\n"
    "RuntimeError: CUDA error: device-side assert triggered\n"
)


def _group_families(group: str) -> set[str]:
    return {row.name for row in TABLE if row.group == group}


def test_an_index_assertion_puts_labels_and_position_ids_used_as_the_index_among_the_first_three_answers():
    diagnosis = diagnose(incident_from_log(ADVANCED_INDEX))
    assert diagnosis.answers[0] == ["advanced_index_out_of_bounds"]
    later = diagnosis.answers[1:3]
    assert {group_of(answer[0]) for answer in later} == {"class_index", "embedding"}, later
    for answer in later:  # each group whole, as one answer
        assert len({group_of(f) for f in answer}) == 1 and len(answer) > 1, answer
    [line] = [n for n in diagnosis.notes if n.startswith("Next likeliest")]
    assert "labels out of range" in line and "a sequence longer than the positions" in line


def test_an_index_assertion_never_ranks_a_family_whose_op_does_not_run_that_kernel():
    families = {c.family for c in diagnose(incident_from_log(ADVANCED_INDEX)).causes}
    assert not families & {"gather_scatter_index", "one_hot_num_classes"}, families  # x[idx] is not gather
    families = {c.family for c in diagnose(incident_from_log(SCATTER)).causes}
    assert "one_hot_num_classes" in families  # one_hot on CUDA leaves its range check to scatter's assertion
    assert "advanced_index_out_of_bounds" not in families, families


def test_a_bare_device_side_assert_gives_three_groups_whole_as_its_first_three_answers():
    diagnosis = diagnose(incident_from_log(BARE))
    first = diagnosis.answers[:3]
    groups = [group_of(answer[0]) for answer in first]
    assert len(set(groups)) == 3, first
    for group, answer in zip(groups, first, strict=True):
        assert {group_of(f) for f in answer} == {group}
        # every family of the group the corpus has seen is said (the rarest may be missing from the prior)
        assert len(answer) >= min(2, len(_group_families(group))), answer
    assert diagnosis.alternatives == first[0]
    assert any(n.startswith("Next likeliest") for n in diagnosis.notes)


def test_a_printed_label_assertion_keeps_its_group_as_the_first_answer_and_adds_no_index_family():
    diagnosis = diagnose(incident_from_log(LABELS))
    assert set(diagnosis.answers[0]) == _group_families("class_index")
    assert {group_of(c.family) for c in diagnosis.causes} == {"class_index"}


def test_the_answers_cross_a_report_dict_and_an_older_report_reads_as_its_alternatives_then_each_cause():
    diagnosis = diagnose(incident_from_log(ADVANCED_INDEX))
    again = Diagnosis.from_dict(diagnosis.to_dict())
    assert again.answers == diagnosis.answers and again.alternatives == diagnosis.alternatives
    older = diagnose(incident_from_log(LABELS)).to_dict()
    del older["answers"]
    read = Diagnosis.from_dict(older)
    assert read.answers[0] == older["alternatives"]
    assert [a[0] for a in read.answers[1:]] == [
        c["family"] for c in older["causes"] if c["family"] not in older["alternatives"]
    ]
