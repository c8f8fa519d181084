"""Every report text of the scenario table reads in the user's words (issue 30).

Each scenario runs on the simulated GPU as tools/scenario_table.py runs it, and its report is rendered as the panel
renders it (text, Markdown, HTML). A cause family's identifier is for tools and issues: it may appear only inside
its tag, never as a heading or in a sentence. Our own words for the machinery (exec, PID, probe, fault_injection,
dispatch) never reach the user.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from nb_cudaguard import families
from nb_cudaguard.panel.report import text_bundle

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scenarios"))
import runner  # noqa: E402

OURS = re.compile(r"\b(exec|PID|probe|fault_injection|dispatch)\b")
# Where a family identifier may stand, per format: the grey tag at the end of a cause's line.
TAGS = {
    "text/plain": re.compile(r"\(\d+% · [a-z0-9_]+\)"),
    "text/markdown": re.compile(r"<sub>\d+% · [a-z0-9_]+</sub>"),
    "text/html": re.compile(r'<span class="nbcg-dim" title="cause family[^"]*">\(\d+% · [a-z0-9_]+\)</span>'),
}


# The identifiers that are not also English words ("other" is both); one in backticks or followed by "(" is code (ctc_loss).
IDS = [family for family in families.FAMILIES if "_" in family]


def _ours(text: str, message: str) -> list[str]:
    """Our words in a text, leaving out the exception's own message, which the report quotes as it was raised."""
    return OURS.findall(text.replace(message, ""))


@pytest.mark.parametrize("scenario", runner.all_scenarios(), ids=lambda s: s.name)
def test_report_reads_in_the_users_words(scenario):
    outcome = runner.run(scenario, "cuda")
    assert outcome.report is not None
    content = outcome.report.content()
    for kind, text in text_bundle(content).items():
        assert not _ours(text, content.message), (kind, _ours(text, content.message))
        untagged = TAGS[kind].sub("", text)
        named = [f for f in IDS if re.search(rf"(?<![\w.`]){re.escape(f)}(?![\w(])", untagged)]
        assert not named, (kind, named)
