"""The prior a bare CUDA error falls back on: thin counts back off to wider ones instead of deciding alone.

The tables are written here from a handful of rows, so each test says what one count may and may not do.
"""

from __future__ import annotations

from nb_cudaguard.diagnosis.evidence import prior
from nb_cudaguard.incident.logparse import incident_from_log


def _rows(*groups: tuple[int, str, tuple[str, ...], str]) -> list[tuple[str, tuple[str, ...], str]]:
    return [(symptom, domains, family) for n, symptom, domains, family in groups for _ in range(n)]


def test_one_log_of_a_symptom_does_not_decide_every_later_log_of_it():
    table = prior.tally(
        _rows(
            (5, "device_assert", (), "label_out_of_range"),
            (1, "cuda", (), "ctc_loss"),
            (10, "after:cublas_failure", ("text",), "embedding_index_out_of_range"),
        )
    )
    ranked = prior.prior_from("cuda", (), table).ranked()
    # a CUDA error that names nothing backs off to the other errors that name nothing, not to the one CTC log
    assert ranked[0][0] == "label_out_of_range"
    assert dict(ranked)["ctc_loss"] > prior.prior_from("device_assert", (), table).share("ctc_loss")


def test_a_symptom_seen_often_keeps_its_own_ranking():
    table = prior.tally(
        _rows(
            (8, "after:illegal_memory_access", (), "illegal_memory_access"),
            (12, "device_assert", (), "label_out_of_range"),
        )
    )
    assert prior.prior_from("after:illegal_memory_access", (), table).ranked()[0][0] == "illegal_memory_access"


def test_a_rare_family_is_not_lifted_by_a_domain_it_was_never_seen_with():
    table = prior.tally(
        _rows(
            (10, "device_assert", (), "label_out_of_range"),
            (2, "text:multinomial", ("generation",), "multinomial_invalid_probs"),
            (1, "device_assert", (), "negative_label"),
        )
    )
    # one log of negative_label, never generating: the domain must not raise it (add-one smoothing raised it 1.7x)
    assert prior._lift("negative_label", ("generation",), table) <= 1.0
    assert prior._lift("multinomial_invalid_probs", ("generation",), table) > 1.5
    generating = prior.prior_from("device_assert", ("generation",), table)
    assert generating.share("multinomial_invalid_probs") > prior.prior_from("device_assert", (), table).share(
        "multinomial_invalid_probs"
    )


def test_symptoms_back_off_by_what_they_name():
    assert prior.kind_of_symptom("assertion:embedding") == prior.kind_of_symptom("text:embedding") == "group:embedding"
    assert prior.kind_of_symptom("after:cublas_failure") == prior.kind_of_symptom("after:cudnn_failure") == "after"
    assert {prior.kind_of_symptom(s) for s in ("device_assert", "assertion:unknown", "cuda")} == {"unnamed"}


def test_libraries_named_in_paths_say_the_kind_of_model():
    log = (
        'File "/home/u/mmdetection/mmdet/models/dense_heads/anchor_free_head.py", line 300, in loss\n'
        "RuntimeError: CUDA error: device-side assert triggered\n"
    )
    assert "detection" in prior.domains_of(incident_from_log(log))
    speech = "espnet2/asr/espnet_model.py\nRuntimeError: CUDA error: device-side assert triggered\n"
    assert "speech" in prior.domains_of(incident_from_log(speech))
    llm = "model = AutoModelForCausalLM.from_pretrained(name)\nRuntimeError: CUDA error: device-side assert triggered\n"
    assert "text" in prior.domains_of(incident_from_log(llm))
    vision = "img = torchvision.io.read_image(p)\nRuntimeError: CUDA error: device-side assert triggered\n"
    assert prior.domains_of(incident_from_log(vision)) == ("vision",)
