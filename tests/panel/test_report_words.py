"""Every report text of the scenario table and of the session notebooks reads in the user's words (issue 30).

Each scenario runs on the simulated GPU as tools/scenario_table.py runs it, and each session notebook's setup,
training and planted-bug cells run the same way; the report is rendered as the panel renders it, tensors included
(text, Markdown, HTML). A cause family's identifier is for tools and issues: it may appear only inside its tag, never
as a heading or in a sentence. Our own words for the machinery (exec, PID, probe, fault_injection, dispatch) never
reach the user. Every count agrees with what it heads: the GPU's "printed Nx" with the lines it printed, a fold's
"(N)" with its items, "N tensor(s)" with the tensors listed, "N value(s) outside" with the values quoted.
"""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path

import pytest

from nb_cudaguard import families

torch = pytest.importorskip("torch")
TESTS = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(TESTS / "scenarios"))
sys.path.insert(0, str(TESTS / "sessions"))
import runner  # noqa: E402
import session_notebooks  # noqa: E402

OURS = re.compile(r"\b(exec|PID|probe|fault_injection|dispatch)\b")
# Where a family identifier may stand, per format: the grey tag at the end of a cause's line.
TAGS = {
    "text/plain": re.compile(r"\(\d+% · [a-z0-9_]+\)"),
    "text/markdown": re.compile(r"<sub>\d+% · [a-z0-9_]+</sub>"),
    "text/html": re.compile(r'<span class="nbcg-dim" title="cause family[^"]*">\(\d+% · [a-z0-9_]+\)</span>'),
}
# The identifiers that are not also English words ("other" is both); one followed by "(" or after a "." is code
# (``F.ctc_loss(``), not our identifier, and so is one in backticks that is also PyTorch's op (`ctc_loss`).
IDS = [family for family in families.FAMILIES if "_" in family]
OPS = {family for family in IDS if hasattr(torch.nn.functional, family)}
ASSERTED = re.compile(r"^.*?(\S+:\d+): (\w+): block: .* Assertion `(.+)` failed\.$", re.MULTILINE)
PRINTED = re.compile(r"([\w./-]+:\d+) in (\w+): `(.+)` failed \(printed (\d+)x\)")
FOLDED = re.compile(r"<summary>([^<]*?)\((\d+)\)</summary><(ul|ol)[^>]*>(.*?)</\3>", re.S)
OUTSIDE = re.compile(r"(\d+) value\(s\) outside [^:]+: (.+?)(?: and (\d+) more)?(?: \(in a sample\))?(?:;|$)", re.M)


def _ours(text: str, message: str) -> list[str]:
    """Our words in a text, leaving out the exception's own message, which the report quotes as it was raised."""
    return OURS.findall(text.replace(message, ""))


def _quoted(shown: str) -> int:
    """How many values an OutOfRange description quotes: ``yb[42]=195, yb[7]=196`` or ``255, 255``."""
    return shown.count("]=") or len(shown.split(", "))


def _listed_tensors(text: str) -> int:
    """The lines under the text's "Tensors involved:" (one per tensor, indented)."""
    if "Tensors involved:\n" not in text:
        return 0
    block = text.split("Tensors involved:\n", 1)[1].splitlines()
    return next((i for i, line in enumerate(block) if not line.startswith("  ")), len(block))


def problems(texts: dict[str, str], message: str, stderr: str) -> list[str]:
    """Everything in one report's texts that breaks the rules above (empty when it reads well)."""
    found = []
    printed = {}
    for line in ASSERTED.findall(stderr):
        printed[line] = printed.get(line, 0) + 1
    for kind, shown in texts.items():
        text = html.unescape(shown) if kind == "text/html" else shown
        found += [f"{kind}: our word {word!r}" for word in _ours(text, message)]
        untagged = TAGS[kind].sub("", text.replace(message, ""))
        found += [
            f"{kind}: family {f!r} outside its tag"
            for f in IDS
            if re.search(rf"(?<![\w.{'`' if f in OPS else ''}]){re.escape(f)}(?![\w(])", untagged)
        ]
        for where, kernel, condition, times in PRINTED.findall(text):
            seen = sum(n for (w, k, c), n in printed.items() if w.endswith(where) and (k, c) == (kernel, condition))
            if seen != int(times):
                found.append(f"{kind}: 'printed {times}x' over {seen} printed line(s)")
        for head, count, _, items in FOLDED.findall(text):
            if items.count("<li>") != int(count):
                found.append(f"{kind}: {head.strip()!r} says {count} over {items.count('<li>')} item(s)")
        listed = _listed_tensors(text)
        for count in re.findall(r"\b(\d+) tensor\(s\)", text):
            if kind == "text/plain" and int(count) != listed:
                found.append(f"{kind}: '{count} tensor(s)' over {listed} tensor(s) listed")
        for count, shown, more in OUTSIDE.findall(text):
            if int(count) != _quoted(shown) + int(more or 0):
                found.append(f"{kind}: '{count} value(s) outside' over {_quoted(shown)} quoted and {more or 0} more")
    return found


def _check(outcome, stderr: str) -> None:
    assert outcome.report is not None and outcome.panel is not None
    assert not problems(outcome.panel, outcome.report.content().message, stderr)
    headline = outcome.report.content().headline
    assert headline is not None and outcome.panel["text/plain"].startswith(f"nb_cudaguard: {headline.problem}\n")


@pytest.mark.parametrize("scenario", runner.all_scenarios() + runner.gpu_style_scenarios(), ids=lambda s: s.name)
def test_report_reads_in_the_users_words(scenario, capfd):
    outcome = runner.run(scenario, "cuda", panel=True)
    _check(outcome, capfd.readouterr().err)


@pytest.mark.parametrize("notebook", session_notebooks.NOTEBOOKS, ids=lambda n: n.name)
def test_session_notebook_reports_read_in_the_users_words(notebook, capfd, tmp_path, monkeypatch):
    for library in notebook.needs:
        pytest.importorskip(library)
    monkeypatch.chdir(tmp_path)  # the training cell writes its log here
    cells = [*notebook.setup, notebook.train, notebook.bug]
    outcome = runner.run(runner.Scenario(Path(notebook.name), "", "", "", cells), "cuda", panel=True)
    _check(outcome, capfd.readouterr().err)


def test_the_rules_catch_what_issue_30_found():
    """Each rule fails on the text the issue quotes (a report that breaks none of them proves nothing)."""
    stderr = "\n".join(
        f"/x/aten/src/ATen/native/cuda/Loss.cu:200: nll: block: [0,0,0], thread: [{i},0,0] Assertion `t < n` failed."
        for i in range(4)
    )
    bad = {
        "text/plain": "aten/src/ATen/native/cuda/Loss.cu:200 in nll: `t < n` failed (printed 8x)\n"
        "Tensors involved:\n  a: [3] int64 cpu\n  b: [3] int64 cpu\n  c: [3] int64 cpu\n"
        "Note: 1 tensor(s) were not read\nrestarted (exec, same PID)\n"
        "- yb: 2 value(s) outside [0, 3) (x): yb[1]=5\n",
        "text/markdown": "### num_classes_mismatch\nprobe (fault_injection)",
        "text/html": "<details><summary>Tensors involved (1)</summary><ul><li>a</li><li>b</li></ul></details>",
    }
    found = problems(bad, "", stderr)
    for said in (
        "printed 8x",
        "1 tensor(s)",
        "'exec'",
        "'PID'",
        "'probe'",
        "'fault_injection'",
        "num_classes_mismatch",
        "says 1 over 2",
        "2 value(s) outside",
    ):
        assert any(said in problem for problem in found), (said, found)
