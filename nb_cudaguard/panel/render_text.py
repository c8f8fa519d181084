"""A report's content as plain text (terminals, ``nb-cudaguard explain``) and as Markdown (``Copy report``, the
``text/markdown`` of the display bundle). Layout only: every sentence comes from ``panel.content``."""

from __future__ import annotations

from nb_cudaguard.panel.content import CauseLine, ReportContent
from nb_cudaguard.panel.memory import MemoryFacts, human


def to_text(content: ReportContent) -> str:
    verdict = content.verdict
    out = [f"nb_cudaguard: {verdict.headline}", f"  {verdict.detail}", f"  {content.error}"]
    if content.probe:
        out.append(f"  {content.probe}")
    if content.assertions:
        out.append("Device assertion (printed by the GPU on the process's stderr):")
        for assertion in content.assertions:
            out += [f"  {assertion.printed}", f"    = {assertion.meaning}"]
    if content.memory is not None:
        out += _memory_text(content.memory)
    elif content.causes:
        out.append("Likely cause:")
        for rank, cause in enumerate(content.causes, 1):
            out.append(f"  {rank}. {_sentence(cause)}  ({cause.tag})")
            out += [f"     - {row.line}" for row in cause.evidence]
            out.append(f"     fix: {cause.fix}")
    if content.user_line:
        out.append(f"Your line: {content.user_line}")
    if content.tensors:
        out += ["Tensors involved:", *(f"  {name}: {summary}" for name, summary in content.tensors)]
    out.extend(f"Note: {note}" for note in content.notes)
    if content.verdict.next_steps:
        out += ["Next:", *(f"  {step}" for step in content.verdict.next_steps)]
    return "\n".join(out)


def _sentence(cause: CauseLine) -> str:
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
    verdict = content.verdict
    out = [f"### nb_cudaguard: {verdict.kind}", "", verdict.headline, "", verdict.detail, ""]
    out += ["```", content.message, "```", ""]
    if content.assertions:
        out += ["**Device assertion**", ""]
        out += [f"- `{a.printed}`: {a.meaning}" for a in content.assertions]
        out.append("")
    if content.memory is not None:
        out += _memory_markdown(content.memory)
    elif content.causes:
        out += ["**Likely causes**", ""]
        for rank, cause in enumerate(content.causes, 1):
            out += [f"{rank}. {_sentence(cause)} <sub>{cause.tag}</sub>", f"   Fix: {cause.fix}"]
        out.append("")
        top = content.causes[0]
        if top.evidence:
            out += ["**Evidence**", "", *(f"- {row.line}" for row in top.evidence), ""]
    if content.user_line:
        out += [f"**Your line:** `{content.user_line}`", ""]
    if content.tensors:
        out += ["**Tensors involved**", "", *(f"- `{name}`: {summary}" for name, summary in content.tensors), ""]
    out += [f"> {note}" for note in content.notes]
    if verdict.next_steps:
        out += ["", "**Next**", "", "```", *verdict.next_steps, "```"]
    return "\n".join(out).rstrip() + "\n"


def _memory_markdown(memory: MemoryFacts) -> list[str]:
    out = ["**Memory**", "", *(f"- {line}" for line in memory.summary_lines()), ""]
    if memory.holders:
        out += ["| name | size | device | what |", "|---|---|---|---|"]
        out += [f"| `{h.name}` | {human(h.nbytes)} | {_cell(h.device)} | {_cell(h.what)} |" for h in memory.holders]
        out.append("")
    return [*out, "**How to free it**", "", "```python", *memory.how_to_free(), "```", ""]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
