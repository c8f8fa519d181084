"""Real error logs users posted in public threads, split once into dev and held_out by a hash of their source.

The figures asserted are floors at the level measured (docs/diagnosis.md; the issue's target, held-out top-1 80 %
and group 92 %, is not reached): a change that loses ground fails. The held-out half is only ever scored in
aggregate, never listed case by case.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nb_cudaguard.diagnosis import diagnose
from nb_cudaguard.diagnosis.evidence import textual
from nb_cudaguard.families import FAMILIES, group_of
from nb_cudaguard.incident.logparse import incident_from_log

CORPUS = Path(__file__).resolve().parent.parent / "corpus"
ENTRIES = json.loads((CORPUS / "corpus.json").read_text())
DEV = [e for e in ENTRIES if e["split"] == "dev"]
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import corpus_score  # noqa: E402
from corpus_add import split_of  # noqa: E402

# (top-1 family, top-1 in the right group), as measured by tools/corpus_score.py: floors, not targets.
FLOORS = {"held_out": (42, 70), "dev": (83, 107)}


def _explain(entry: dict):
    code = (CORPUS / entry["code"]).read_text() if "code" in entry else None
    return diagnose(incident_from_log((CORPUS / entry["log"]).read_text()), code=code)


def test_corpus_has_at_least_25_sourced_logs_with_known_families():
    assert len(ENTRIES) >= 25
    for entry in ENTRIES:
        assert entry["url"].startswith("https://github.com/")
        assert entry["family"] in FAMILIES and entry["cause"]
        assert (CORPUS / entry["log"]).read_text().strip()


def test_both_halves_hold_their_measured_floors():
    scored = corpus_score.scored_corpus()
    for split, (top1, group) in FLOORS.items():
        rows = [s for s in scored if s.entry["split"] == split]
        got = (sum(s.top1 for s in rows), sum(s.group_top1 for s in rows))
        assert got[0] >= top1 and got[1] >= group, (split, len(rows), got)  # aggregates only
    assert {s.entry["split"] for s in scored} == {"dev", "held_out"}


def test_the_split_is_fixed_by_the_source_and_the_halves_are_sizeable():
    halves = {split: [e for e in ENTRIES if e["split"] == split] for split in ("dev", "held_out")}
    assert len(ENTRIES) >= 150 and len(halves["held_out"]) >= 50 and len(halves["dev"]) >= 50
    assert len({e["url"] for e in ENTRIES}) == len(ENTRIES)
    for entry in ENTRIES:
        first_written_on = "before the split" in entry.get("note", "")
        assert entry["split"] == ("dev" if first_written_on else split_of(entry["url"])), entry["id"]


def test_logs_that_say_the_same_thing_cap_what_any_diagnosis_can_score():
    """Two bare messages (one with the hint lines every CUDA error carries, which say nothing of the cause) are one
    log to any diagnosis: of two causes at most one can be ranked first, while two logs that differ are two."""
    by_id = {e["id"]: e for e in DEV}
    bare, hinted, asserted = by_id["dvg_6"], by_id["widedeep_186"], by_id["transformers_10449"]
    assert bare["family"] != hinted["family"]
    assert corpus_score.what_a_log_says(bare) == corpus_score.what_a_log_says(hinted)
    assert corpus_score.ceiling([bare, hinted]) == (1, 2)  # both in the class-index group
    assert corpus_score.ceiling([bare, asserted]) == (2, 2)


def test_logs_of_only_the_error_say_which_error_and_no_more():
    """The user's words typed after the message are not evidence: two bare messages are one log to any reader."""
    by_id = {e["id"]: e for e in DEV}
    exclaimed, plain = by_id["trocr_chinese_43"], by_id["transformers_11943"]
    assert (CORPUS / exclaimed["log"]).read_text() != (CORPUS / plain["log"]).read_text()
    assert corpus_score.says_only_the_error(exclaimed) and corpus_score.says_only_the_error(plain)
    assert corpus_score.what_a_log_says(exclaimed) == corpus_score.what_a_log_says(plain)
    assert group_of(exclaimed["family"]) == group_of(plain["family"]) and exclaimed["family"] != plain["family"]
    assert corpus_score.ceiling([exclaimed, plain]) == (1, 2)  # new tokens vs positions: one of two families first
    assert corpus_score.what_a_log_says(plain) != corpus_score.what_a_log_says(by_id["skywork_38"])  # cuBLAS


def test_a_kernels_signature_and_its_bare_name_are_one_kernel():
    old = "void cunn_ClassNLLCriterion_updateOutput_kernel(T *, T *, T *, long *, T *, int, int, int, int, long)"
    assert corpus_score.kernel_name(old) == "cunn_ClassNLLCriterion_updateOutput_kernel"
    assert corpus_score.kernel_name("Acctype bce_functor<Dtype, Acctype>::operator()(Tuple)") == "bce_functor"
    assert (
        corpus_score.kernel_name("nll_loss_forward_reduce_cuda_kernel_2d") == "nll_loss_forward_reduce_cuda_kernel_2d"
    )


def _names_or_doubts(entry: dict) -> bool:
    """A miss must still name the confirmed family, or say how unsure it is."""
    diagnosis = _explain(entry)
    families = [c.family for c in diagnosis.causes]
    return families[:1] == [entry["family"]] or entry["family"] in families or bool(diagnosis.notes)


@pytest.mark.parametrize("entry", DEV, ids=[e["id"] for e in DEV])
def test_confirmed_family_is_among_the_causes(entry):
    assert _names_or_doubts(entry)


def test_confirmed_family_is_among_the_causes_held_out_in_aggregate():
    held_out = [e for e in ENTRIES if e["split"] == "held_out"]
    silent = sum(not _names_or_doubts(e) for e in held_out)
    assert silent == 0, f"{silent} of {len(held_out)} held-out logs neither name the family nor doubt"  # no ids


def test_explain_code_option_adds_static_evidence(tmp_path):
    entry = next(e for e in ENTRIES if e["id"] == "xlmr_token_type_2445")
    log = str(CORPUS / entry["log"])
    command = [sys.executable, "-m", "nb_cudaguard", "explain", log, "--json"]
    without = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
    with_code = json.loads(
        subprocess.run(
            [*command, "--code", str(CORPUS / entry["code"])], capture_output=True, text=True, check=True
        ).stdout
    )
    # without the code only the embedding group is known: token types are one of its families, ranked by the prior
    typed = [c for c in without["causes"] if c["family"] == "token_type_ids_out_of_range"]
    assert without["causes"][0]["family"] != "token_type_ids_out_of_range"
    assert all(e["kind"] in ("prior", "error_text", "assertion") for c in typed for e in c["evidence"])
    top = with_code["causes"][0]
    assert top["family"] == "token_type_ids_out_of_range" and top["variable"] == "token_type_ids"
    assert any(e["kind"] == "source" and "xlm-roberta-base" in e["text"] for e in top["evidence"])


def test_innocent_last_line_still_ranks_the_asserted_family():
    entry = next(e for e in ENTRIES if e["id"] == "ms_swift_3267")
    diagnosis = _explain(entry)
    assert diagnosis.top.family == "label_out_of_range"


def _explain_json(tmp_path: Path, data: bytes) -> dict:
    log = tmp_path / "log.txt"
    log.write_bytes(data)
    command = [sys.executable, "-m", "nb_cudaguard", "explain", str(log), "--json"]
    return json.loads(subprocess.run(command, capture_output=True, check=True).stdout)


@pytest.mark.parametrize(
    "data",
    [b"", bytes(range(256)) * 64, b"\xff\xfe\x00garbage\x1b[31m", "Tr\u00e4ceback \u2603\n".encode() * 1000],
    ids=["empty", "binary", "invalid-utf8-and-ansi", "unicode"],
)
def test_explain_prints_valid_json_on_any_input(tmp_path, data):
    report = _explain_json(tmp_path, data)
    assert {"causes", "notes", "incident"} <= set(report)


@pytest.mark.parametrize(
    "message",
    [
        "RuntimeError: CUDA error: device-side assert triggered",
        "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`",
        "RuntimeError: cublas runtime error : library not initialized at /pytorch/aten/src/THC/THCGeneral.cpp:216",
        "RuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR",
        "RuntimeError: copy_if failed to synchronize: device-side assert triggered",
        "an illegal memory access was encountered",
        "RuntimeError: CUDA error: unspecified launch failure",
        "torch.AcceleratorError: CUDA error: device-side assert triggered\nSearch for `cudaErrorAssert'",
    ],
)
def test_a_cuda_error_always_has_a_cause_and_says_how_sure_it_is(message):
    diagnosis = diagnose(incident_from_log(f"Traceback (most recent call last):\n{message}\n"))
    assert diagnosis.causes and diagnosis.causes[0].family in FAMILIES
    assert diagnosis.notes


def test_a_bare_cuda_error_is_ranked_by_a_prior_that_says_so():
    diagnosis = diagnose(incident_from_log("RuntimeError: CUDA error: device-side assert triggered\n"))
    top = diagnosis.top
    assert top.confidence < 0.5
    assert any(e.kind == "prior" and "prior" in e.text for e in top.evidence)
    assert any("prior" in note and "%%cudacheck" in note for note in diagnosis.notes)


def test_a_frame_narrows_the_asserted_group_and_the_report_says_which():
    log = (
        "../aten/src/ATen/native/cuda/Indexing.cu:1146: indexSelectLargeIndex: block: [4,0,0], thread: [9,0,0] "
        "Assertion `srcIndex < srcSelectDimSize` failed.\nTraceback (most recent call last):\n"
        '  File "/usr/lib/python3/site-packages/transformers/models/bert/modeling_bert.py", line 230, in forward\n'
        "    token_type_embeddings = self.token_type_embeddings(token_type_ids)\n"
        "RuntimeError: CUDA error: device-side assert triggered\n"
    )
    diagnosis = diagnose(incident_from_log(log))
    assert diagnosis.top.family == "token_type_ids_out_of_range"
    assert any(note.startswith('Narrowed to "token_type_ids hold a value') for note in diagnosis.notes) or any(
        e.kind == "traceback" for e in diagnosis.top.evidence
    )


def test_autograd_names_in_printed_tensors_are_not_nans_cast_to_an_index():
    log = (
        "tensor([nan, 0.5000], device='cuda:0', grad_fn=<IndexBackward0>)\n"
        "loss: tensor(nan, device='cuda:0', grad_fn=<NllLossBackward0>)\n"
        "RuntimeError: CUDA error: device-side assert triggered\n"
    )
    assert "nan_or_inf" not in [h.family for h in textual.hints_for(incident_from_log(log))]
    cast = "idx = tensor([-9223372036854775808, 3])\nRuntimeError: CUDA error: device-side assert triggered\n"
    assert "nan_or_inf" in [h.family for h in textual.hints_for(incident_from_log(cast))]


def test_a_26_mb_log_of_100000_assertion_lines_is_explained_in_under_2_seconds(tmp_path):
    """Measured once, end to end (interpreter start, reading, parsing, diagnosis, JSON), on the shared CPU."""
    line = (
        "/pytorch/aten/src/THC/THCTensorIndex.cu:361: void indexSelectLargeIndex(TensorInfo<T, IndexType>, "
        "TensorInfo<T, IndexType>, TensorInfo<long, IndexType>, int, int, IndexType, IndexType, long) [with T = "
        "float, IndexType = unsigned int]: block: [{b},0,0], thread: [{t},0,0] Assertion `srcIndex < "
        "srcSelectDimSize` failed.\n"
    )
    text = "".join(line.format(b=i // 128, t=i % 128) for i in range(100_000))
    text += "Traceback (most recent call last):\nRuntimeError: CUDA error: device-side assert triggered\n"
    assert len(text.encode()) >= 26_000_000
    log = tmp_path / "big.log"
    log.write_text(text)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "nb_cudaguard", "explain", str(log), "--json"], capture_output=True, check=True
    )
    elapsed = time.perf_counter() - started
    report = json.loads(done.stdout)
    assert report["assertions"][0]["count"] == 100_000
    assert report["causes"][0]["family"] in FAMILIES
    assert elapsed < 2.0, f"{elapsed:.2f} s"
