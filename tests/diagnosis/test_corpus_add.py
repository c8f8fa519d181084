"""tools/corpus_add.py: a gathered log lands only with a sourced, labelled entry in the half its source's hash gives."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import corpus_add

URL = "https://github.com/example/repo/issues/7"
LOG = "../aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward: Assertion `t >= 0 && t < n_classes` failed.\n"


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    (tmp_path / "corpus.json").write_text(json.dumps([{"id": "old_1", "url": "https://github.com/a/b/issues/1"}]))
    (tmp_path / "repo_7.log").write_text(LOG)
    monkeypatch.setattr(corpus_add, "CORPUS", tmp_path)
    return tmp_path


def _entry(**changes):
    entry = {
        "id": "repo_7",
        "url": URL,
        "family": "label_out_of_range",
        "cause": "labels numbered from 1",
        "confirmed_by": "fix_worked",
        "log": "repo_7.log",
        "split": corpus_add.split_of(URL),
    }
    return {**entry, **changes}


def _add(corpus: Path, entries: list[dict], *flags: str) -> int:
    pending = corpus / "pending.json"
    pending.write_text(json.dumps(entries))
    return corpus_add.main([*flags, str(pending)])


def test_a_sound_entry_lands_and_a_check_writes_nothing(corpus):
    assert _add(corpus, [_entry()], "--check") == 0
    assert len(json.loads((corpus / "corpus.json").read_text())) == 1
    assert _add(corpus, [_entry()]) == 0
    assert [e["id"] for e in json.loads((corpus / "corpus.json").read_text())] == ["old_1", "repo_7"]


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"split": "dev" if corpus_add.split_of(URL) == "held_out" else "held_out"}, "it follows from the source"),
        ({"family": "labels"}, "is not one of"),
        ({"url": "https://github.com/a/b/issues/1"}, "source already in the corpus"),
        ({"id": "old_1"}, "id already in the corpus"),
        ({"confirmed_by": "guess"}, "confirmed_by must be one of"),
        ({"cause": ""}, "missing cause"),
        ({"log": "absent.log"}, "no log at"),
        ({"code": "absent.code.txt"}, "no code at"),
    ],
)
def test_a_flawed_entry_is_refused_and_nothing_lands(corpus, capsys, changes, said):
    before = (corpus / "corpus.json").read_text()
    sound = _entry(id="repo_8", url=(url := "https://github.com/example/repo/issues/8"), split=corpus_add.split_of(url))
    assert _add(corpus, [sound, _entry(**changes)]) == 1
    out = capsys.readouterr().out
    assert said in out and "1 entries pass" in out  # the sound one passes, yet does not land alone
    assert (corpus / "corpus.json").read_text() == before


def test_a_log_with_no_cuda_error_is_refused(corpus, capsys):
    (corpus / "repo_7.log").write_text("ValueError: could not convert string to float\n")
    assert _add(corpus, [_entry()]) == 1
    assert "carries no CUDA error" in capsys.readouterr().out
