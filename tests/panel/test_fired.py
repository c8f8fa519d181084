"""The buttons under a fired fast check's error: built on a real shell and clicked, then in a real kernel, shown after
the failing cell and clicked through their comm channel as a browser does."""

from __future__ import annotations

import queue
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("ipywidgets")

from IPython.utils.capture import capture_output  # noqa: E402
from kernel_helpers import state  # noqa: E402

from nb_cudaguard import CudaCheckError, get_guard  # noqa: E402
from nb_cudaguard.check.fast.error import FastCheckError  # noqa: E402
from nb_cudaguard.panel.fired import EXACT, FiredChoices, show_choices  # noqa: E402
from nb_cudaguard.panel.rerun import rerun_exact  # noqa: E402

SETUP = [
    "import torch\nimport torch.nn.functional as F\ntorch.manual_seed(0)",
    "logits = torch.randn(4, 5)",
    "labels = torch.tensor([0, 5, 2, 1])",
    "total = torch.zeros(())",
    "seen = []",
    "%cudaguard check on",
]
# cross_entropy with a label >= num_classes, on the CPU: the fast check fires when the cell ends
FAILING = "total = total + F.cross_entropy(logits, labels)\nseen.append('failing')"
FIX = "labels = torch.tensor([0, 4, 2, 1])"
REBUILD = "Re-run the cells that build seen, total"


def test_the_buttons_rerun_exact_and_rebuild_in_a_shell(shell) -> None:
    for cell in SETUP:
        assert shell.run_cell(cell, store_history=True).success, cell
    with capture_output():
        error = shell.run_cell(FAILING, store_history=True).error_in_exec
    assert isinstance(error, FastCheckError) and error.changed_names == ["seen", "total"]
    guard = get_guard(shell)
    assert guard.last_fired is not None and guard.last_fired.error is error
    assert show_choices(guard, guard.last_fired) is None  # a plain shell: no widget manager, the error's text says it
    choices = FiredChoices(guard, guard.last_fired)
    assert [b.description for b in choices.buttons.values()] == [EXACT, REBUILD]
    assert "no restart is needed" in choices.head.value

    with capture_output() as shown:
        choices.buttons["exact"].click()
    assert "CudaCheckError" in shown.stdout and "(labels)" in shown.stdout  # the shell showed the exact error
    status = choices.status.value
    assert "The exact checks stopped" in status and "aten.nll_loss_forward" in status, status
    assert shell.user_ns["seen"] == ["failing"]  # stopped before the append: the op never ran
    with capture_output():
        exact = rerun_exact(guard, guard.last_fired)  # what the button ran, for the error itself
    assert isinstance(exact, CudaCheckError) and not isinstance(exact, FastCheckError)
    assert (exact.family, exact.variable) == (error.family, error.variable) == ("label_out_of_range", "labels")

    shell.run_cell(FIX, store_history=True)
    with capture_output():
        choices.buttons["rebuild"].click()
    assert shell.user_ns["seen"] == [] and float(shell.user_ns["total"]) == 0.0  # rebuilt; the failing cell not run
    assert "Re-ran [" in choices.status.value and not any(b.disabled for b in choices.buttons.values())
    shell.run_line_magic("cudaguard", "check off")


# --- a real kernel, clicked through its comm channel as a browser does


def _click(kc, comm_id: str) -> str:
    message = kc.session.msg(
        "comm_msg", {"comm_id": comm_id, "data": {"method": "custom", "content": {"event": "click"}}}
    )
    kc.shell_channel.send(message)
    return message["header"]["msg_id"]


def _until(kc, status: str, done, seconds: float = 60) -> list[dict]:
    """iopub messages until the status line's value passes ``done`` (the click's work is over)."""
    seen: list[dict] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            message = kc.get_iopub_msg(timeout=0.5)
        except queue.Empty:
            continue
        seen.append(message)
        content = message["content"]
        is_status = message["msg_type"] == "comm_msg" and content.get("comm_id") == status
        if is_status and done(content["data"]["state"].get("value", "")):
            return seen
    raise AssertionError(f"the status line never said it was done: {seen[-5:]}")


@pytest.mark.kernel
def test_the_buttons_come_after_the_failing_cell_and_work_in_a_kernel(kernel) -> None:
    kc = kernel.kc
    counts = []
    for cell in SETUP:
        result = kernel.run(cell)
        assert result.status == "ok", cell
        counts.append(result.execution_count)
    pid = state(kernel, "__import__('os').getpid()")
    opened: list[dict] = []
    reply = kc.execute_interactive(FAILING, timeout=120, output_hook=opened.append)
    assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "FastCheckError"
    states = {m["content"]["comm_id"]: m["content"]["data"]["state"] for m in opened if m["msg_type"] == "comm_open"}
    buttons = {s["description"]: cid for cid, s in states.items() if s.get("_model_name") == "ButtonModel"}
    assert set(buttons) == {EXACT, REBUILD}
    status = next(cid for cid, s in states.items() if s.get("_model_name") == "HTMLModel" and s.get("value") == "")
    views = [m for m in opened if m["msg_type"] == "display_data"]
    assert views and "application/vnd.jupyter.widget-view+json" in views[-1]["content"]["data"]

    click = _click(kc, buttons[EXACT])
    seen = _until(kc, status, lambda v: "stopped" in v or "without a failure" in v)
    errors = [m["content"] for m in seen if m["msg_type"] == "error" and m["parent_header"].get("msg_id") == click]
    assert [e["ename"] for e in errors] == ["CudaCheckError"]
    assert errors[0]["evalue"].startswith("aten.nll_loss_forward: argument target (labels) has 1 value(s) outside")
    assert f"at: cell [{counts[-1] + 1}], line" in errors[0]["evalue"]  # numbered as the failing cell
    final = [m["content"]["data"]["state"]["value"] for m in seen if m["content"].get("comm_id") == status][-1]
    assert "The exact checks stopped" in final and "(labels)" in final
    assert state(kernel, "seen") == ["failing"]

    assert kernel.run(FIX).status == "ok"
    _click(kc, buttons[REBUILD])
    seen = _until(kc, status, lambda v: "Re-ran" in v or "failed" in v or "did not work" in v)
    final = [m["content"]["data"]["state"]["value"] for m in seen if m["content"].get("comm_id") == status][-1]
    assert f"Re-ran [{counts[3]}], [{counts[4]}] (" in final and "no restart" in final, final  # total, seen
    assert state(kernel, "(seen, float(total))") == ([], 0.0)  # rebuilt, and the failing cell did not run again
    assert state(kernel, "__import__('os').getpid()") == pid


@pytest.mark.kernel
def test_a_check_that_fired_before_the_cell_raised_its_own_error_gets_the_buttons_too(kernel) -> None:
    for cell in SETUP:
        assert kernel.run(cell).status == "ok", cell
    opened: list[dict] = []
    reply = kernel.kc.execute_interactive(
        FAILING + "\nraise ValueError('later')", timeout=120, output_hook=opened.append
    )
    assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "ValueError"  # the cell's own
    said = "".join(m["content"].get("text", "") for m in opened if m["msg_type"] == "stream")
    assert "before this cell failed, a fast check had fired" in said and "(labels)" in said
    states = [m["content"]["data"]["state"] for m in opened if m["msg_type"] == "comm_open"]
    assert {s["description"] for s in states if s.get("_model_name") == "ButtonModel"} == {EXACT, REBUILD}
    views = [m for m in opened if m["msg_type"] == "display_data"]
    assert views and "application/vnd.jupyter.widget-view+json" in views[-1]["content"]["data"]
    assert kernel.run("%cudaguard rerun --rebuild --dry-run").status == "ok"  # the command knows the cell too


@pytest.mark.kernel
def test_the_buttons_have_a_static_twin_that_takes_their_place_when_the_extension_unloads(kernel) -> None:
    """As the report's panel: an output before the widget's holds the choices as HTML with the commands that do what
    the buttons did (shown wherever the widget's model is gone), and %unload_ext empties the widget's output."""
    for cell in SETUP:
        assert kernel.run(cell).status == "ok", cell
    opened: list[dict] = []
    kernel.kc.execute_interactive(FAILING, timeout=120, output_hook=opened.append)
    shown = [m["content"] for m in opened if m["msg_type"] == "display_data"]
    twin, widget = shown[-2], shown[-1]
    assert "application/vnd.jupyter.widget-view+json" in widget["data"] and widget["data"]["text/plain"] == ""
    html = twin["data"]["text/html"]
    assert "%cudaguard rerun --exact</code>" in html and "no restart is needed" in html
    assert f'id="{twin["transient"]["display_id"]}"' in html and "nb-cudaguard-fired" in html  # shown till drawn
    assert "%cudaguard rerun --exact" in twin["data"]["text/plain"]
    unloaded: list[dict] = []
    kernel.kc.execute_interactive("%unload_ext nb_cudaguard", timeout=60, output_hook=unloaded.append)
    updates = {m["content"]["transient"]["display_id"]: m["content"]["data"]
               for m in unloaded if m["msg_type"] == "update_display_data"}  # fmt: skip
    assert updates[widget["transient"]["display_id"]] == {"text/plain": ""}
    assert "%cudaguard rerun --exact</code>" in updates[twin["transient"]["display_id"]]["text/html"]
