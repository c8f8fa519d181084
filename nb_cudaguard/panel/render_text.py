"""A report's content as plain text (terminals, ``nb-cudaguard explain``) and as Markdown (``Copy report``, the
``text/markdown`` of the display bundle). Layout only: every sentence comes from ``panel.content``.

The order is the panel's: what is wrong and the fix, then what it means for the session and the one step to take,
then the rest (why, the other causes, the assertion, the tensors, the notes, the other steps), each a short list.
"""

from __future__ import annotations

from nb_cudaguard.panel.content import ReportContent, Verdict
from nb_cudaguard.panel.headline import CauseLine
from nb_cudaguard.panel.memory import MemoryFacts, human


def split_step(step: str) -> tuple[str, str]:
    """A next step as (the code to type, what it does): they are written in two columns."""
    code, _, words = step.partition("  ")
    return code.strip(), words.strip()


def to_text(content: ReportContent) -> str:
    verdict = content.verdict
    out = _lead_text(content)
    if content.probe:
        out.append(f"  {content.probe}")
    if content.user_line:
        out.append(f"Your line: {content.user_line}")
    if content.memory is not None:
        out += _memory_text(content.memory)
    elif content.causes:
        top = content.causes[0]
        out.append(f"Why: {sentence(top)}  ({top.tag})")
        out += [f"  - {row.line}" for row in top.evidence]
        if content.headline is None:
            out.append(f"  fix: {top.fix}")
        if len(content.causes) > 1:
            out.append("Other possible causes:")
            for rank, cause in enumerate(content.causes[1:], 2):
                out += [f"  {rank}. {sentence(cause)}  ({cause.tag})", f"     fix: {cause.fix}"]
    if content.assertions:
        out.append("Device assertion (printed by the GPU on the process's stderr):")
        for assertion in content.assertions:
            out += [f"  {assertion.printed}", f"    = {assertion.meaning}"]
    if content.tensors:
        out += ["Tensors involved:", *(f"  {name}: {summary}" for name, summary in content.tensors)]
    if content.notes:
        out += ["Notes:", *(f"  - {note}" for note in content.notes)]
    if len(verdict.next_steps) > 1:
        out += ["Other steps:", *(f"  {step}" for step in verdict.next_steps[1:])]
    return "\n".join(out)


def _lead_text(content: ReportContent) -> list[str]:
    """The first lines: the problem and its fix, then the verdict and its one step."""
    verdict, headline = content.verdict, content.headline
    if headline is not None:
        out = [f"nb_cudaguard: {headline.problem}", f"  Fix: {headline.fix}", verdict.headline]
    else:
        out = [f"nb_cudaguard: {verdict.headline}"]
    out.append(f"  {verdict.detail}")
    if verdict.next_steps:
        code, words = split_step(verdict.next_steps[0])
        out.append(f"  Next: {code}" + (f"   ({words})" if words else ""))
    out.append(f"  {content.error}")
    return out


def sentence(cause: CauseLine) -> str:
    """A cause as the user reads it: its title, the variable it is in, and what the diagnosis found."""
    who = f" in {cause.variable}" if cause.variable else ""
    said = "" if cause.summary.lower() == cause.title.lower() else f": {cause.summary}"
    return f"{cause.title}{who}{said}"


def _memory_text(memory: MemoryFacts) -> list[str]:
    out = ["Memory:", *(f"  {line}" for line in memory.summary_lines())]
    out += ["Biggest holders in the namespace:", *(f"  {h.to_text()}" for h in memory.holders)]
    out += ["How to free it:", *(f"  {step}" for step in memory.how_to_free())]
    return out


def to_markdown(content: ReportContent) -> str:
    verdict, headline = content.verdict, content.headline
    if headline is not None:
        out = [f"### nb_cudaguard: {headline.problem}", "", f"**Fix:** {headline.fix}", ""]
        out += [f"**{verdict.headline}** {verdict.detail}", ""]
    else:
        out = [f"### nb_cudaguard: {verdict.headline}", "", verdict.detail, ""]
    out += _next_markdown(verdict)
    out += ["```", content.message, "```", ""]
    if content.user_line:
        out += ["**Your line**", "", "```", content.user_line, "```", ""]
    if content.memory is not None:
        out += _memory_markdown(content.memory)
    elif content.causes:
        top = content.causes[0]
        out += [f"**Why:** {sentence(top)} <sub>{top.tag}</sub>", ""]
        out += [*(f"- {row.line}" for row in top.evidence), ""] if top.evidence else []
        if len(content.causes) > 1:
            out += ["**Other possible causes**", ""]
            for rank, cause in enumerate(content.causes[1:], 2):
                out += [f"{rank}. {sentence(cause)} <sub>{cause.tag}</sub>", f"   Fix: {cause.fix}"]
            out.append("")
    if content.assertions:
        out += ["**Device assertion**", "", "```", *(a.printed for a in content.assertions), "```", ""]
        out += [*(f"- {a.meaning}" for a in content.assertions), ""]
    if content.tensors:
        out += ["**Tensors involved**", "", *(f"- `{name}`: {summary}" for name, summary in content.tensors), ""]
    out += ["**Notes**", "", *(f"- {note}" for note in content.notes), ""] if content.notes else []
    if len(verdict.next_steps) > 1:
        out += ["", "**Other steps**", "", "```", *verdict.next_steps[1:], "```"]
    return "\n".join(out).rstrip() + "\n"


def _next_markdown(verdict: Verdict) -> list[str]:
    if not verdict.next_steps:
        return []
    code, words = split_step(verdict.next_steps[0])
    return [f"**Next:** `{code}`" + (f" ({words})" if words else ""), ""]


def _memory_markdown(memory: MemoryFacts) -> list[str]:
    out = ["**Memory**", "", *(f"- {line}" for line in memory.summary_lines()), ""]
    if memory.holders:
        out += ["| name | size | device | what |", "|---|---|---|---|"]
        out += [f"| `{h.name}` | {human(h.nbytes)} | {_cell(h.device)} | {_cell(h.what)} |" for h in memory.holders]
        out.append("")
    return [*out, "**How to free it**", "", "```python", *memory.how_to_free(), "```", ""]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
