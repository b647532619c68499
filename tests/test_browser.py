"""Notebook 01's advantage explorer in a real browser: JupyterLab + Debian's Chromium + Playwright.

The test starts JupyterLab on 127.0.0.1 (free port, random token, throwaway config, runtime and
data folders, a copy of the notebook), opens notebook 01 in headless Chromium, runs all cells,
moves a reward slider with the keyboard and checks that the rendered advantages change, then
move back. A screenshot goes to the test's tmp_path.

Needs ``/usr/bin/chromium`` (Debian: ``apt-get install chromium``) and the ``playwright`` Python
package; no browser download (``playwright install``) is used. Skipped only when Chromium is absent.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "01_group_relative_advantage.ipynb"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# generous: a cold kernel imports torch, and CI machines are shared (milliseconds)
SERVER_START, KERNEL_READY, WIDGET_RENDERED, UPDATE = 90, 120_000, 120_000, 60_000

ALL_CELLS_RAN = """() => {
    const panel = window.jupyterapp.shell.currentWidget;
    const cells = panel.content.widgets.filter((cell) => cell.model.type === "code");
    return panel.sessionContext.session?.kernel?.status === "idle"
        && cells.every((cell) => cell.model.executionCount !== null);
}"""

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="needs Debian's Chromium at /usr/bin/chromium (apt-get install chromium)",
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _user_settings(config_dir: Path) -> None:
    """Lab settings for a quiet, deterministic page: every cell in the DOM, no news pop-up."""
    settings = {
        "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
        "@jupyterlab/apputils-extension/notification": {
            "fetchNews": "false",
            "checkForUpdates": False,
        },
    }
    for name, values in settings.items():
        path = config_dir / "lab" / "user-settings" / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


def _wait_for_server(process: subprocess.Popen, url: str, log: Path) -> None:
    deadline = time.monotonic() + SERVER_START
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"jupyter lab exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"jupyter lab did not answer within {SERVER_START} s:\n{log.read_text()[-3000:]}")


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM lets the server shut its kernels down; SIGKILL the whole group if it hangs."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


@pytest.fixture
def lab(tmp_path):
    """A private JupyterLab serving a copy of notebook 01; yields (base_url, token)."""
    from playwright.sync_api import sync_playwright  # noqa: F401  (fail early if missing)

    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(NOTEBOOK, root / NOTEBOOK.name)  # the repository file is never touched
    config = tmp_path / "config"
    _user_settings(config)
    port, token = _free_port(), secrets.token_hex(24)
    env = dict(
        os.environ,
        JUPYTER_CONFIG_DIR=str(config),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        JUPYTER_DATA_DIR=str(tmp_path / "data"),
        IPYTHONDIR=str(tmp_path / "ipython"),
        JUPYTER_PLATFORM_DIRS="1",
        GRPO_QUICK="1",  # the notebook's quick mode: small Monte-Carlo budgets
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    command = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--LabApp.expose_app_in_browser=True",  # window.jupyterapp: run cells by command
        "--allow-root",
    ]
    log = tmp_path / "jupyterlab.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            command, env=env, cwd=root, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_for_server(process, f"{base}/api/status?token={token}", log)
        yield base, token
    finally:
        _stop(process)


def _wait_until(page, condition: str, arg, describe, timeout: int = UPDATE) -> None:
    """page.wait_for_function, failing with what the page shows now instead of a bare timeout."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(condition, arg=arg, timeout=timeout)
    except PlaywrightTimeout:
        pytest.fail(f"timed out after {timeout / 1000:.0f} s waiting until {describe()}")


def _advantages_text(rewards: list[float]) -> str:
    """The readout line the explorer should show, from the core function itself."""
    import torch

    from grpo_minimal import group_advantages

    values = group_advantages(torch.tensor(rewards), len(rewards)).tolist()
    return "A = [" + ", ".join(f"{v:+.3f}" for v in values) + "]"


def test_advantage_explorer_responds_to_the_keyboard_in_chromium(lab, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    base, token = lab
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{base}/lab/tree/{NOTEBOOK.name}?token={token}")
            page.wait_for_function(
                "() => window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel"
                "?.status === 'idle'",
                timeout=KERNEL_READY,
            )
            page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
            # wait until every code cell has run: while "run all" advances, JupyterLab moves the
            # focus from cell to cell and would take it away from the slider
            page.wait_for_function(ALL_CELLS_RAN, timeout=WIDGET_RENDERED)

            # the advantage explorer: the explorer box that holds the advantages readout
            explorer = page.locator(".grpo-explorer").filter(has=page.locator(".grpo-advantages"))
            readout = explorer.locator(".grpo-advantages")
            readout.wait_for(state="visible", timeout=WIDGET_RENDERED)
            image = explorer.locator("img")
            image.wait_for(state="visible", timeout=WIDGET_RENDERED)
            original_text, original_src = readout.inner_text(), image.get_attribute("src")
            assert original_text.startswith("A = [")

            # r1 starts at 1.0, the top of its range: move it down, then back up
            handle = (
                explorer.locator(".widget-vslider").filter(has_text="r1").locator(".noUi-handle")
            )

            def state():
                return (
                    f"slider r1 at {handle.get_attribute('aria-valuenow')}, readout "
                    f"{explorer.locator('.widget-html').first.inner_text()!r} "
                    f"{readout.inner_text()!r}"
                )

            handle.focus()
            expect(handle).to_be_focused()
            for _ in range(2):  # two steps of 0.25: r1 = 0.5
                page.keyboard.press("ArrowDown")
            expect(handle).to_have_attribute("aria-valuenow", "0.5")
            expected = _advantages_text([0.5, 1.0, 0.0, 1.0])  # what the core computes
            _wait_until(  # the kernel has answered the last move
                page,
                "([el, text]) => el.querySelector('.grpo-advantages')?.innerText === text",
                [explorer.element_handle(), expected],
                lambda: f"the advantages read {expected!r} after r1 = 0.5; now {state()}",
            )
            assert expected != original_text
            assert "mean(r) = 0.625" in explorer.inner_text()
            # the figure is re-rendered: a new PNG arrives just after the readout
            expect(image).not_to_have_attribute("src", original_src, timeout=UPDATE)
            page.screenshot(path=str(tmp_path / "advantage_explorer_moved.png"), full_page=True)
            explorer.screenshot(path=str(tmp_path / "advantage_explorer_widget.png"))

            handle.focus()
            expect(handle).to_be_focused()
            for _ in range(2):
                page.keyboard.press("ArrowUp")
            expect(handle).to_have_attribute("aria-valuenow", "1.0")
            _wait_until(
                page,
                # the readout's HTML is replaced on every update: look it up inside the explorer
                "([el, before]) => el.querySelector('.grpo-advantages')?.innerText === before",
                [explorer.element_handle(), original_text],
                lambda: f"the advantages read {original_text!r} again; now {state()}",
            )
            assert page.locator(".grpo-error").count() == 0
            assert "Error displaying widget" not in page.locator(".jp-Notebook").inner_text()
        finally:
            browser.close()
    print(f"screenshots in {tmp_path}")
