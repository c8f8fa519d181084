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
from nb_cudaguard.panel.render_text import split_step
from nb_cudaguard.panel.static import GREYED, STATIC_HEAD, STATIC_NOTE
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
    assert panel.copy_area.value == panel.markdown
    # the box shows only when the browser refuses the copy (its script reveals it then)
    assert panel.copy_area.layout.display == "none" and "nbcg-copy-area" in panel.copy_area._dom_classes
    # first what is wrong, in the user's variable, against what bounds it; then why, the tensors, ...
    copied = panel.copy_area.value
    assert copied.startswith("### nb_cudaguard: `labels` holds 195, outside [0, 195): `model` has 195 outputs."), copied
    assert "**Why:**" in copied and "**Tensors involved**" in copied
    assert panel.status.value == ""  # one message: the browser's answer, in the output line, and nothing else


def test_the_static_twin_is_the_whole_report_with_how_to_get_the_buttons_back(shell):
    _fail(shell)
    guard = get_guard(shell)
    panel = Panel(gather(guard.last_report), guard)
    twin = panel.twin
    assert panel.bundle() == {WIDGET_VIEW: {"version_major": 2, "version_minor": 0, "model_id": panel.widget.model_id},
                              "text/plain": ""}  # fmt: skip  # the report is in the twin, once
    live = panel.body.value
    assert live.startswith(twin.live_style()) and f"#{twin.static_id}{{display:none!important}}" in live
    bundle = twin.bundle(live)
    assert bundle["text/plain"] == panel.texts["text/plain"] and bundle["text/markdown"] == panel.markdown
    html_ = bundle["text/html"]
    copy = f'<div class="nbcg-static-copy" style="{GREYED}">{panel.texts["text/html"]}</div>'
    assert f'<div id="{twin.static_id}" class="nbcg-static">{STATIC_HEAD}{copy}{STATIC_NOTE}</div>' in html_
    assert twin.live_style() not in html_  # the rule that hides the twin stays with the live panel
    hides_the_widget_unless_live = f":has(#{twin.static_id}) + .jp-OutputArea-child:not(:has(.nb-cudaguard-panel))"
    assert hides_the_widget_unless_live in html_
    assert html_.count("From the kernel before the restart") == 1 and html_.count("What works now") == 1
    assert "From the kernel before the restart" not in live and "What works now" not in live
    assert twin.widget_id == "nbcg-panel-" + twin.token and twin.static_id == "nbcg-static-" + twin.token


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
        assert all(part in text for part in split_step(verdict.next_steps[0]))  # the one step: its code, its words
        assert all(step in text for step in verdict.next_steps[1:])
        assert content.headline is not None and content.headline.problem in text.replace("<code>", "`").replace(
            "</code>", "`"
        )
        assert content.causes[0].fix in text and content.user_line in text


def test_the_panel_hand_over_crosses_the_environment_once():
    handover = PanelHandover(
        root="r1", body="b0", actions="a1", plan="p1", plan_head="h1", status="s1", output="o1", copy_area="c1",
        buttons={"copy": ButtonState("b1", "Copy report", "", "clipboard")},
        boxes=(BoxState("x1", "[3]  0.10 s  import torch", True, True, 3),),
        html="<div>report</div>", plan_html="<b>Replay plan</b>", markdown="# r", asked=True, twin="t1",
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


def _drain_until(kc, done, into: list[dict], seconds: float = 120) -> None:
    """iopub messages until ``done(into)`` (or the time is up: the test then fails on what it read)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end and not done(into):
        try:
            into.append(kc.get_iopub_msg(timeout=0.2))
        except queue.Empty:
            pass


def _states(messages: list[dict], comm_id: str, key: str) -> list:
    """The values of ``key`` a comm was sent, in order."""
    return [m["content"]["data"]["state"][key] for m in messages
            if m["msg_type"] == "comm_msg" and m["content"].get("comm_id") == comm_id
            and key in m["content"]["data"].get("state", {})]  # fmt: skip


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

        # read until the status line says the replay ended and the button is on again: execute_interactive (below)
        # drops every iopub message that is not its own cell's, so the replay's updates must be in before it
        def replayed(messages: list[dict]) -> bool:
            said = _states(messages, status, "value")
            return bool(said) and "Recovered" in said[-1] and _states(messages, button, "disabled")[-1:] == [False]

        _drain_until(kc, replayed, after)
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

    texts = _states(after, status, "value")
    assert any("Restarting the kernel" in t for t in texts)
    assert "Recovered: 3 cell(s) replayed" in texts[-1], texts  # sent by the new process, in words
    disabled = _states(after, button, "disabled")
    assert disabled[0] is True and disabled[-1] is False  # off while it restarts, on again once replayed
    values = [
        m["content"]["data"]["state"].get("value", "")
        for m in copied
        if m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == area
    ]
    assert any("**Why:**" in v for v in values), values  # the report reached the copy box
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
    # an in-place restart keeps the panel live: neither its widget's output nor its static twin is touched
    assert not set(_panel_displays(seen)[-1]) & set(_updates(after))


def _panel_displays(messages: list[dict]) -> list[tuple[str, str]]:
    """(the widget's display id, its static twin's) for each panel shown: the twin comes first."""
    shown = [(m["content"]["transient"]["display_id"], m["content"]["data"]) for m in messages
             if m["msg_type"] == "display_data" and "display_id" in m["content"].get("transient", {})]  # fmt: skip
    pairs = [(shown[i][0], shown[i - 1][0]) for i, (_, data) in enumerate(shown) if WIDGET_VIEW in data and i]
    for _, twin_id in pairs:
        twin = dict(shown)[twin_id]
        assert WIDGET_VIEW not in twin and "From the kernel before the restart" in twin["text/html"], twin
    return pairs


def _updates(messages: list[dict]) -> dict[str, dict]:
    """The last update_display_data's bundle, by display id."""
    return {m["content"]["transient"]["display_id"]: m["content"]["data"]
            for m in messages if m["msg_type"] == "update_display_data"}  # fmt: skip


def _assert_static(updates: dict[str, dict], widget_id: str, twin_id: str) -> None:
    assert updates[widget_id] == {"text/plain": ""}  # no widget view left: nothing can say "model not found"
    html_ = updates[twin_id]["text/html"]
    assert f'id="{twin_id}"' in html_ and "context POISONED" in html_
    assert (
        html_.count("From the kernel before the restart") == 1 and "display:none!important" not in html_
    )  # shown, not hidden


@pytest.mark.kernel
def test_unload_and_a_frontend_restart_turn_each_panel_into_its_static_twin_before_the_kernel_goes():
    """%unload_ext, and a shutdown_request with restart=True (a frontend's Restart: the process ends for good) make
    every panel still shown static: the widget's output emptied, the twin holding the report, each panel once; for
    the shutdown, on iopub before ipykernel's own shutdown_reply and before the process exits."""
    env = {"PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}
    with KernelSession(extra_env=env) as session:
        kc, seen = session.kc, []
        for cell in ["%load_ext nb_cudaguard", *SETUP]:
            assert _run(kc, cell, seen)["content"]["status"] == "ok", cell
        assert _run(kc, FAILING, seen)["content"]["status"] == "error"
        [first] = _panel_displays(seen)
        unloaded: list[dict] = []
        assert _run(kc, "%unload_ext nb_cudaguard", unloaded)["content"]["status"] == "ok"
        assert set(_updates(unloaded)) == set(first)
        _assert_static(_updates(unloaded), *first)

        again: list[dict] = []
        for cell in ["%load_ext nb_cudaguard", "%cudaguard simulate on"]:
            assert _run(kc, cell, again)["content"]["status"] == "ok", cell
        assert _run(kc, FAILING, again)["content"]["status"] == "error"
        [second] = _panel_displays(again)
        kc.shutdown(restart=True)
        going: list[dict] = []
        deadline = time.monotonic() + 30
        while not any(m["msg_type"] == "shutdown_reply" for m in going):
            assert time.monotonic() < deadline, [m["msg_type"] for m in going]
            _drain(kc, 0.2, going)
        kinds = [m["msg_type"] for m in going]
        assert kinds.index("update_display_data") < kinds.index("shutdown_reply"), kinds
        assert set(_updates(going)) == set(second)  # the unloaded panel is static already: not sent again
        _assert_static(_updates(going), *second)
        deadline = time.monotonic() + 20
        while session.km is not None and session.km.is_alive():
            assert time.monotonic() < deadline, "the kernel did not exit after its shutdown_reply"
            time.sleep(0.1)


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
