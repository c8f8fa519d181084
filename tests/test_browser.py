"""The panel in a real JupyterLab 4, driven through Debian's Chromium with Playwright.

Open an example notebook, run its cells up to the failing one, see the panel, click "Restart & replay", watch
the panel follow the replay in the restarted process, run the fixed cell (it uses the state the replay rebuilt),
and check its output. Screenshots (light and dark theme) go to docs/img/, where the README shows them.

Needs /usr/bin/chromium (`apt-get install -y chromium`), jupyterlab and playwright (the Python package only;
Playwright's own browsers are never downloaded). Skipped, with the reason, when one of them is missing.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
NOTEBOOK = "01_image_classifier_196_classes.ipynb"
SCREENSHOTS = ROOT / "docs" / "img"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _missing() -> str | None:
    if not os.path.exists(CHROMIUM):
        return f"{CHROMIUM} is missing (apt-get install -y chromium)"
    for package in ("jupyterlab", "playwright"):
        if importlib.util.find_spec(package) is None:
            return f"{package} is not installed"
    return None


# CI installs all three and sets NB_CUDAGUARD_REQUIRE_BROWSER=1: there a missing piece fails instead of skipping.
_REQUIRED = os.environ.get("NB_CUDAGUARD_REQUIRE_BROWSER") == "1"
pytestmark = [
    pytest.mark.browser,
    pytest.mark.kernel,
    pytest.mark.timeout(420),
    pytest.mark.skipif(not _REQUIRED and _missing() is not None, reason=str(_missing())),
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_server(url: str, process: subprocess.Popen, log: Path, limit: float = 90) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"JupyterLab exited ({process.returncode}):\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    pytest.fail(f"JupyterLab did not answer within {limit} s:\n{log.read_text()[-3000:]}")


@pytest.fixture
def lab(tmp_path):
    """JupyterLab 4 on 127.0.0.1, a random port, token auth, a temporary root holding the example notebook."""
    notebooks = tmp_path / "root"
    notebooks.mkdir()
    shutil.copy(ROOT / "example_notebooks" / NOTEBOOK, notebooks / NOTEBOOK)
    port, token = _free_port(), uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    for name in (
        "JUPYTER_CONFIG_DIR",
        "JUPYTER_RUNTIME_DIR",
        "JUPYTERLAB_SETTINGS_DIR",
        "JUPYTERLAB_WORKSPACES_DIR",
        "IPYTHONDIR",
    ):
        env[name] = str(tmp_path / name.lower())
    tracker = tmp_path / "jupyterlab_settings_dir" / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True)
    (tracker / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')  # every cell in the DOM
    notices = tmp_path / "jupyterlab_settings_dir" / "@jupyterlab" / "apputils-extension"
    notices.mkdir(parents=True)
    (notices / "notification.jupyterlab-settings").write_text('{"fetchNews": "false", "checkForUpdates": false}')
    log = tmp_path / "lab.log"
    command = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={notebooks}",
        "--LabApp.expose_app_in_browser=True",
        "--LabApp.news_url=",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]
    if os.geteuid() == 0:  # CI containers run as root
        command.append("--allow-root")
    with log.open("w") as sink:
        process = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT, cwd=notebooks)
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_for_server(f"{base}/api/status?token={token}", process, log)
        yield base, token, tmp_path
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


def _sources(page) -> list[str]:
    return page.evaluate(
        "() => window.jupyterapp.shell.currentWidget.content.widgets.map(c => c.model.sharedModel.getSource())"
    )


def _cell_index(page, starts_with: str) -> int:
    sources = _sources(page)
    for index, source in enumerate(sources):
        if source.startswith(starts_with):
            return index
    raise AssertionError(f"no cell starts with {starts_with!r}: {[s[:40] for s in sources]}")


def _run_cell(page, index: int) -> None:
    """Make cell ``index`` the active one and run it with JupyterLab's own command, as Ctrl+Enter does."""
    page.evaluate(
        """async (index) => {
            const notebook = window.jupyterapp.shell.currentWidget.content;
            notebook.activeCellIndex = index;
            notebook.mode = 'command';
            await window.jupyterapp.commands.execute('notebook:run-cell');
        }""",
        index,
    )


def _cell(page, index: int):
    return page.locator(".jp-Notebook .jp-Cell").nth(index)


def test_panel_restart_and_replay_in_jupyterlab(lab):
    from playwright.sync_api import expect, sync_playwright

    base, token, tmp_path = lab
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 1400},
        )
        try:
            page = context.new_page()
            page.goto(f"{base}/lab/tree/{NOTEBOOK}?token={token}&reset")
            page.wait_for_function(
                f"() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
                f" && window.jupyterapp.shell.currentWidget.context"
                f" && window.jupyterapp.shell.currentWidget.context.path === {NOTEBOOK!r}",
                timeout=60_000,
            )
            page.evaluate(
                """async () => {
                    const panel = window.jupyterapp.shell.currentWidget;
                    await panel.context.ready;
                    await panel.sessionContext.ready;
                }"""
            )

            sources = _sources(page)
            failing = _cell_index(page, "for xb, yb in loader:")
            for index in range(1, failing + 1):  # cell 0 is the notebook's title
                _run_cell(page, index)
            assert len(sources) == page.locator(".jp-Notebook .jp-Cell").count()

            panel = _cell(page, failing).locator(".nb-cudaguard-panel")
            expect(panel).to_be_visible(timeout=30_000)
            expect(panel).to_contain_text("context POISONED")
            expect(panel).to_contain_text("num_classes_mismatch")
            expect(panel).to_contain_text("195")
            expect(panel.locator(".widget-checkbox")).not_to_have_count(0)
            panel.screenshot(path=str(SCREENSHOTS / "panel-light.png"))

            page.evaluate("window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'})")
            expect(page.locator("body[data-jp-theme-light='false']")).to_have_count(1, timeout=20_000)
            panel.screenshot(path=str(SCREENSHOTS / "panel-dark.png"))
            page.evaluate("window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Light'})")

            panel.get_by_role("button", name="Restart & replay").click()
            status = panel.locator(".nbcg-status")
            expect(status).to_contain_text("Restart", timeout=20_000)
            expect(panel.get_by_role("button", name="Restart & replay")).to_be_disabled()
            # The restarted process reattaches to this panel and reports the replay's outcome in it.
            expect(status).to_contain_text(re.compile(r"replayed \d+/\d+ cell\(s\).*0 failure"), timeout=120_000)
            expect(panel.get_by_role("button", name="Copy report")).to_be_enabled(timeout=20_000)

            fixed = _cell_index(page, "model = CarNet(num_classes=NUM_CLASSES)")
            _run_cell(page, fixed)
            output = _cell(page, fixed).locator(".jp-OutputArea")
            expect(output).to_contain_text("trained one epoch on 392 images, 196 classes", timeout=60_000)
            _cell(page, failing).screenshot(path=str(SCREENSHOTS / "after-replay.png"))
        finally:
            context.close()
