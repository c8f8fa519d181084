"""The panel: its fallback bundle in a plain shell, its widgets and actions, the OOM panel, and a real kernel where a
click on "Restart & replay" (a comm message, as a browser sends it) restarts in place and the new process reports
the replay in the same panel."""

from __future__ import annotations

import ast
import html
import json
import os
import queue
import time

import pytest
from IPython.utils.capture import capture_output

from nb_cudaguard import get_guard
from nb_cudaguard.cli.kernelsession import KernelSession
from nb_cudaguard.panel.follower import reattach_after_restart
from nb_cudaguard.panel.handover import ENV, BoxState, ButtonState, HandoverError, PanelHandover
from nb_cudaguard.panel.widget import Panel, gather

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
SETUP = [
    "import torch\nfrom torch import nn",
    "%cudaguard simulate on",
    "model = nn.Linear(8, 195).to('cuda')\nx = torch.randn(4, 8, device='cuda')",
    "labels = torch.tensor([0, 195, 17, 100], device='cuda')",
    "unrelated = 1",
]
FAILING = "loss = nn.functional.cross_entropy(model(x), labels)"


def _fail(shell) -> list[dict]:
    for cell in SETUP:
        assert shell.run_cell(cell).success, cell
    with capture_output() as captured:
        result = shell.run_cell(FAILING)
    assert not result.success
    return [output.data for output in captured.outputs]


def test_without_a_widget_frontend_the_same_report_comes_as_text_markdown_and_html(shell):
    displayed = _fail(shell)
    assert len(displayed) == 1
    bundle = displayed[0]
    assert WIDGET_VIEW not in bundle  # a plain shell has no kernel, so no widget manager to render one
    assert set(bundle) == {"text/plain", "text/markdown", "text/html"}
    for text in bundle.values():
        assert "label_out_of_range" in text or "num_classes_mismatch" in text
    assert "labels: [4] int64 cuda:0 (values not read" in bundle["text/plain"]  # the context is poisoned
    assert "Restart needed" in bundle["text/html"] and "var(--jp-error-color1" in bundle["text/html"]
    assert "loss = nn.functional.cross_entropy(model(x), labels)" in bundle["text/html"]


def test_panel_widgets_show_the_plan_and_copy_the_report(shell):
    _fail(shell)
    guard = get_guard(shell)
    panel = Panel(gather(guard.last_report), guard)
    boxes = {box.description.split("  ")[2]: box for box, _, _ in panel.boxes}
    assert boxes["model = nn.Linear(8, 195).to('cuda')"].value
    assert boxes["labels = torch.tensor([0, 195, 17, 100], device='cuda')"].value
    assert not boxes["unrelated = 1"].value  # not read by the failing cell: off by default, can be ticked
    assert panel.chosen_cells() is None  # untouched: the restart computes the minimal plan itself
    boxes["unrelated = 1"].value = True
    chosen = panel.chosen_cells()
    assert chosen is not None and len(chosen) == sum(minimal for _, _, minimal in panel.boxes) + 1
    assert set(panel.buttons) == {"replay", "diagnose", "copy"}
    assert panel.bundle()[WIDGET_VIEW]["model_id"] == panel.widget.model_id
    # one line of plan, in words, and the causes titled as a person would name them
    head = panel.plan_head.value
    assert head.startswith("<b>Replay plan</b> for [") and head.count(".") == 2, head
    assert "<b>A class label is negative or not smaller than the number of classes</b>" in panel.body.value

    panel.buttons["copy"].click()
    assert panel.copy_area.layout.display == "" and panel.copy_area.value == panel.markdown
    assert "| rank | family |" in panel.copy_area.value and "**Tensors involved**" in panel.copy_area.value
    assert panel.status.value == ""  # one message: the browser's answer, in the output line, and nothing else


def test_the_bundle_s_html_is_the_whole_report_with_how_to_get_the_buttons_back(shell):
    _fail(shell)
    guard = get_guard(shell)
    panel = Panel(gather(guard.last_report), guard)
    bundle = panel.bundle()
    assert bundle["text/html"].startswith(panel.body.value)  # what a frontend without the widget's model shows
    assert "%cudaguard report</code> in a cell to get its buttons back" in bundle["text/html"]
    assert "get its buttons back" not in panel.body.value  # the live panel has them


def test_your_line_is_the_line_of_the_failing_cell_not_the_line_inside_the_model(shell):
    model = (
        "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.head = nn.Linear(8, 195)\n    def forward(self, x):\n        return self.head(x)\n"
        "net = Net().to('cuda')"
    )
    for cell in [*SETUP, model]:
        assert shell.run_cell(cell, store_history=True).success, cell
    with capture_output():
        result = shell.run_cell(
            "scores = net(x)\nloss = nn.functional.cross_entropy(scores, labels)", store_history=True
        )
    assert not result.success
    report = get_guard(shell).last_report
    line = gather(report).content().user_line
    count = report.incident.cell.execution_count
    assert line is not None and line.startswith(f"cell [{count}], line 2: loss = nn.functional.cross_entropy"), line


def test_your_line_after_a_poisoned_error_inside_an_earlier_cell_s_forward(shell):
    """The op fails in ``forward`` (an earlier cell's code): the line is the running cell's call, and forward's
    line is where it failed, as in a check's error (``usercode.users_line``)."""
    model = (
        "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.head = nn.Linear(8, 195)\n    def forward(self, x, y):\n"
        "        return nn.functional.cross_entropy(self.head(x), y)\n"
        "net = Net().to('cuda')"
    )
    for cell in [*SETUP[:4], model]:
        assert shell.run_cell(cell, store_history=True).success, cell
    model_count = shell.execution_count - 1
    with capture_output():
        result = shell.run_cell("unrelated = 2\nloss = net(x, labels)\nafter = 3", store_history=True)
    assert not result.success
    report = get_guard(shell).last_report
    assert report.incident.classification == "poisoned"
    count = report.incident.cell.execution_count
    line = gather(report).content().user_line
    assert line == (
        f"cell [{count}], line 2: loss = net(x, labels)  (via forward, cell [{model_count}], line 6: "
        "return nn.functional.cross_entropy(self.head(x), y))"
    )


def test_status_counts_only_cuda_incidents(shell):
    with capture_output():
        shell.run_cell("import torch\ntorch.zeros(3)[5]")  # a CPU index error: reported, but no CUDA incident
        shell.run_cell("undefined_name")
    _fail(shell)
    assert "CUDA incidents: 1" in get_guard(shell).status()


def test_a_restart_that_cannot_start_says_why_and_gives_the_buttons_back(shell):
    _fail(shell)
    guard = get_guard(shell)
    panel = Panel(gather(guard.last_report), guard)
    guard.restarting = True  # refused before anything happens to this process (the test shell would exec pytest)
    try:
        panel.buttons["replay"].click()
    finally:
        guard.restarting = False
    assert "a restart is already under way" in panel.status.value
    assert not any(button.disabled for button in panel.buttons.values())
    assert "NB_CUDAGUARD_PANEL" not in os.environ


def test_out_of_memory_gets_the_small_panel_with_holders_and_a_release(shell):
    assert shell.run_cell("import torch\nbig = torch.zeros(1024, 1024)\nsmall = torch.zeros(10)").success
    message = (
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.77 GiB of which "
        "1.07 GiB is free. Of the allocated memory 13.90 GiB is allocated by PyTorch"
    )
    with capture_output() as captured:
        # a CPU cannot run out of GPU memory: raise what the caching allocator raises, with its text
        result = shell.run_cell(f"def step(batch):\n    raise torch.OutOfMemoryError({message!r})\nstep(big)")
    assert not result.success
    guard = get_guard(shell)
    facts = gather(guard.last_report)
    assert facts.kind == "out_of_memory" and facts.memory is not None
    holders = {h.name: h for h in facts.memory.holders}
    assert holders["big"].nbytes == 1024 * 1024 * 4 and holders["big"].device == "cpu"
    assert list(holders).index("big") < list(holders).index("small")
    assert facts.memory.from_message == {"tried": "2.00 GiB", "total": "15.77 GiB", "free": "1.07 GiB",
                                         "by_torch": "13.90 GiB"}  # fmt: skip
    text = captured.outputs[0].data["text/plain"]
    assert "no restart needed" in text and "big: 4.00 MiB on cpu" in text and "release()" in text

    panel = Panel(facts, guard)
    assert set(panel.buttons) == {"release", "copy"} and not panel.boxes
    assert guard.incidents[-1].frames[-1].locals  # the failed frame keeps `batch` (= big) alive
    panel.buttons["release"].click()
    assert guard.incidents[-1].frames[-1].locals == {} and guard.incidents[-1].exception is None
    assert "Dropped the failed cell's traceback" in panel.status.value


def test_every_format_words_the_verdict_the_next_steps_and_the_fix_the_same(shell):
    bundle = _fail(shell)[0]
    content = gather(get_guard(shell).last_report).content()
    verdict = content.verdict
    assert verdict.kind == "poisoned" and verdict.next_steps
    for text in (bundle["text/plain"], bundle["text/markdown"], html.unescape(bundle["text/html"])):
        assert verdict.headline in text and verdict.detail in text
        assert all(step in text for step in verdict.next_steps)
        assert content.causes[0].fix in text and content.user_line in text


def test_the_panel_hand_over_crosses_the_environment_once():
    handover = PanelHandover(
        root="r1", body="b0", actions="a1", plan="p1", plan_head="h1", status="s1", output="o1", copy_area="c1",
        buttons={"copy": ButtonState("b1", "Copy report", "", "clipboard")},
        boxes=(BoxState("x1", "[3]  0.10 s  import torch", True, True, 3),),
        html="<div>report</div>", plan_html="<b>Replay plan</b>", markdown="# r", asked=True,
    )  # fmt: skip
    handover.to_env()
    assert PanelHandover.from_env() == handover
    assert ENV not in os.environ and PanelHandover.from_env() is None  # read once


def test_a_hand_over_of_another_version_or_malformed_is_refused_with_a_message(shell, monkeypatch):
    refused = {
        json.dumps({"version": 99, "status": "s1"}): "panel hand-over version 99; this nb_cudaguard reads 2",
        "{not json": "not JSON",
        json.dumps({"version": 2, "status": "s1"}): "lacks a valid 'buttons'",
    }
    for raw, said in refused.items():
        monkeypatch.setenv(ENV, raw)
        with pytest.raises(HandoverError, match=said):
            PanelHandover.from_env()
    monkeypatch.setenv(ENV, json.dumps({"version": 99}))
    reattach_after_restart(shell, get_guard(shell))  # no traceback: said at the next cell
    assert ENV not in os.environ
    with capture_output() as captured:
        assert shell.run_cell("1").success
    assert "the panel cannot follow the replay: panel hand-over version 99" in captured.stdout


# --- a real kernel, clicked through its comm channel as a browser does


def _drain(kc, seconds: float, into: list[dict]) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            into.append(kc.get_iopub_msg(timeout=0.2))
        except queue.Empty:
            pass


def _run(kc, code: str, seen: list[dict]) -> dict:
    return kc.execute_interactive(code, timeout=120, output_hook=seen.append)


@pytest.mark.kernel
def test_click_restart_in_a_kernel_rebuilds_state_and_the_new_process_reports_in_the_panel():
    env = {"PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}
    with KernelSession(extra_env=env) as session:
        kc, seen = session.kc, []
        for cell in ["%load_ext nb_cudaguard", "import os\nPID = os.getpid()", *SETUP]:
            assert _run(kc, cell, seen)["content"]["status"] == "ok", cell
        assert _run(kc, FAILING, seen)["content"]["status"] == "error"
        states = {m["content"]["comm_id"]: m["content"]["data"]["state"] for m in seen if m["msg_type"] == "comm_open"}
        button = next(cid for cid, state in states.items() if state.get("description") == "Restart & replay")
        status = next(cid for cid, s in states.items() if s.get("_model_name") == "HTMLModel" and s.get("value") == "")

        click = kc.session.msg(
            "comm_msg", {"comm_id": button, "data": {"method": "custom", "content": {"event": "click"}}}
        )
        kc.shell_channel.send(click)
        after: list[dict] = []
        _drain(kc, 4, after)
        reply = _run(kc, "print(repr((labels.tolist(), os.getpid() == PID if 'PID' in dir() else None)))", after)
        assert reply["content"]["status"] == "ok"
        _drain(kc, 1, after)
        # the same panel's "Copy report", clicked after the restart, is answered by the new process
        copy = next(cid for cid, state in states.items() if state.get("description") == "Copy report")
        area = next(cid for cid, state in states.items() if state.get("_model_name") == "TextareaModel")
        kc.shell_channel.send(
            kc.session.msg("comm_msg", {"comm_id": copy, "data": {"method": "custom", "content": {"event": "click"}}})
        )
        copied: list[dict] = []
        _drain(kc, 3, copied)

    updates = [
        m["content"]["data"]["state"]
        for m in after
        if m["msg_type"] == "comm_msg"
        and m["content"]["comm_id"] == status
        and "value" in m["content"]["data"]["state"]
    ]
    texts = [u["value"] for u in updates]
    assert any("Restarting the kernel" in t for t in texts)
    assert "Recovered: 3 cell(s) replayed" in texts[-1], texts  # sent by the new process, in words
    disabled = [
        m["content"]["data"]["state"]["disabled"]
        for m in after
        if m["msg_type"] == "comm_msg"
        and m["content"]["comm_id"] == button
        and "disabled" in m["content"]["data"]["state"]
    ]
    assert disabled[0] is True and disabled[-1] is False  # off while it restarts, on again once replayed
    values = [
        m["content"]["data"]["state"].get("value", "")
        for m in copied
        if m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == area
    ]
    assert any("| rank | family |" in v for v in values), values  # the report reached the copy box
    bodies = [
        m["content"]["data"]["state"]["value"]
        for m in after
        if m["msg_type"] == "comm_msg" and "nbcg-head" in str(m["content"]["data"]["state"].get("value", ""))
    ]
    assert bodies and "nb_cudaguard: Recovered: 3 cell(s) replayed" in bodies[-1]  # the heading, at the top
    assert "POISONED" not in bodies[-1].split("<!--/nbcg-head-->")[0]
    printed = "".join(m["content"].get("text", "") for m in after if m["msg_type"] == "stream")
    labels, same_pid = ast.literal_eval(printed.strip().splitlines()[-1])
    assert labels == [0, 195, 17, 100] and same_pid is None  # rebuilt by the replay; PID's cell was not needed


def test_with_carry_on_each_row_of_the_plan_says_replay_or_skip_because_its_values_are_carried(shell):
    slow = "import time\ntime.sleep(0.3)\nclass_names = [f'class {i}' for i in range(195)]"
    for cell in [*SETUP, slow]:
        assert shell.run_cell(cell).success, cell
    with capture_output():
        assert not shell.run_cell(FAILING + " if class_names else None").success
    guard = get_guard(shell)
    panel = Panel(gather(guard.last_report), guard)
    rows = {box.description.split("  ")[2]: box.description for box, _, _ in panel.boxes}
    assert rows["import torch"].endswith("· replay")  # a module is imported again, never carried
    assert "· skip, carried: class_names (" in rows["import time"] and "s to carry)" in rows["import time"]
    assert "·" not in rows["unrelated = 1"]  # not in the plan
    head = panel.plan_head.value
    assert "1 value(s) carried instead of replayed" in head and "(about " in head

    guard.carry = False
    panel = Panel(gather(guard.last_report), guard)
    rows = {box.description.split("  ")[2]: box.description for box, _, _ in panel.boxes}
    assert not any("·" in row for row in rows.values())
