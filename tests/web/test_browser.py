"""The UI in a real headless Chromium (Debian's chromium and chromedriver, never a download),
against a real store of real runs, with screenshots written to ui-screenshots/ (not committed).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from trajforge.proxy.session import trajectory_id
from trajforge.store import Store

from .conftest import FORK_AT, WHO_AND_WHEN, UiStore, record_session
from .rl_rows import add_iteration, register

REPO = Path(__file__).resolve().parents[2]
SHOTS = Path(os.environ.get("TRAJFORGE_UI_SCREENSHOTS") or REPO / "ui-screenshots")
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.fail("Debian's chromium and chromium-driver are needed: make system-deps")
    options = Options()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    SHOTS.mkdir(exist_ok=True)
    yield driver
    driver.quit()


def _wait(driver: WebDriver, css: str, timeout: float = 10.0):
    return WebDriverWait(driver, timeout).until(lambda d: d.find_element(By.CSS_SELECTOR, css))


def _run_from(ui_store: UiStore, name: str) -> str:
    with Store(ui_store.db) as store:
        return next(r.id for r in store.rows() if (r.source_file or "").endswith(name))


def test_search_finds_a_known_phrase_in_a_known_run(
    browser: WebDriver, ui_url: str, ui_store: UiStore
) -> None:
    browser.get(ui_url + "/")
    box = _wait(browser, "#q")
    box.send_keys('"Twelve animals of the Chinese zodiac"')
    browser.find_element(By.CSS_SELECTOR, "#search-form button[type=submit]").click()
    WebDriverWait(browser, 10).until(lambda d: "q=" in d.current_url)
    expected = _run_from(ui_store, f"{WHO_AND_WHEN}/13.json")
    row = _wait(browser, f'#runs tr[data-id="{expected}"]')
    assert "captain-agent" in row.text
    marks = browser.find_elements(By.CSS_SELECTOR, "#runs .snippet mark")
    assert marks and all("chinese zodiac" in m.text.lower() for m in marks)
    shared = browser.current_url  # the URL alone brings the same results back
    browser.get(shared)
    assert _wait(browser, f'#runs tr[data-id="{expected}"]')
    browser.save_screenshot(str(SHOTS / "runs-search.png"))


def test_who_and_when_run_shows_its_human_label_at_the_right_message(
    browser: WebDriver, ui_url: str, ui_store: UiStore
) -> None:
    raw = json.loads((ui_store.data / WHO_AND_WHEN / "10.json").read_text())
    step = int(raw["mistake_step"])
    browser.get(f"{ui_url}/runs/{_run_from(ui_store, f'{WHO_AND_WHEN}/10.json')}?msg={step}")
    article = _wait(browser, f"article#m-{step}")
    label = article.find_element(By.CSS_SELECTOR, ".note.label")
    assert "human label" in label.text and raw["mistake_agent"] in label.text
    assert raw["history"][step]["content"][:60] in article.text
    assert "selected" in article.get_attribute("class")
    assert len(browser.find_elements(By.CSS_SELECTOR, ".note.label")) == 1
    assert _wait(browser, "#risk svg.risk-plot polyline")  # loaded after the page
    browser.save_screenshot(str(SHOTS / "run-view.png"))


def test_forked_tau_run_shows_its_parent_and_the_diff_marks_the_fork_point(
    browser: WebDriver, ui_url: str, ui_store: UiStore
) -> None:
    browser.get(f"{ui_url}/runs/{ui_store.fork_child}/tree")
    current = _wait(browser, ".node.current")
    assert current.get_attribute("data-id") == ui_store.fork_child
    root = browser.find_element(By.CSS_SELECTOR, "#fork-tree > li > .node")
    assert root.get_attribute("data-id") == ui_store.fork_parent
    nested = browser.find_element(By.CSS_SELECTOR, "#fork-tree > li > ul .node.current")
    assert f"forked at message {FORK_AT}" in nested.text
    nested.find_element(By.LINK_TEXT, "diff").click()
    first = _wait(browser, "#first-diff")
    assert [a.text for a in first.find_elements(By.CSS_SELECTOR, "header a")] == [
        f"#{FORK_AT}",
        f"#{FORK_AT}",
    ]
    rows = browser.find_elements(By.CSS_SELECTOR, "table.diff tbody tr")
    assert all("equal" in r.get_attribute("class") for r in rows[:FORK_AT])
    assert (
        "first difference: message 3 of A, message 3 of B"
        in browser.find_element(By.ID, "diff-summary").text
    )
    browser.execute_script("document.getElementById('first-diff').scrollIntoView({block:'center'})")
    browser.save_screenshot(str(SHOTS / "diff.png"))


def test_token_view_of_a_proxy_session_shows_its_logprobs(
    browser: WebDriver, ui_url: str, ui_store: UiStore
) -> None:
    with Store(ui_store.db) as store:
        calls = store.get(ui_store.session).llm_calls
    expected = [round(lp, 4) for call in calls for lp in call.logprobs]
    browser.get(f"{ui_url}/runs/{ui_store.session}/tokens")
    _wait(browser, ".tokens")
    cells = browser.find_elements(By.CSS_SELECTOR, ".tok.model[data-logprob]")
    assert [float(c.get_attribute("data-logprob")) for c in cells] == expected
    assert browser.find_elements(By.CSS_SELECTOR, ".tokens .tok.harness")  # the tool result
    assert "logprob" in cells[0].get_attribute("title")
    browser.save_screenshot(str(SHOTS / "tokens.png"))


def test_live_proxy_session_appears_on_the_runs_page_without_reload(
    browser: WebDriver, ui_url: str, ui_store: UiStore
) -> None:
    browser.get(ui_url + "/")
    _wait(browser, "#runs")
    WebDriverWait(browser, 10).until(lambda d: "live" in d.find_element(By.ID, "live-note").text)
    browser.execute_script("window.notReloaded = true")
    session_id = record_session(ui_store.db, "ui-live-session", turns=2)
    assert session_id == trajectory_id("ui-live-session")
    row = _wait(browser, f'#runs tr[data-id="{session_id}"]', timeout=15)
    assert browser.execute_script("return window.notReloaded === true")
    assert "trajforge-proxy" in row.text or "proxy" in row.text
    browser.save_screenshot(str(SHOTS / "runs-live.png"))


def test_rollout_batch_progress_updates_on_the_live_page_without_reload(
    browser: WebDriver, ui_url: str, ui_store: UiStore
) -> None:
    from trajforge.rollout.backends.local import run_local
    from trajforge.rollout.episode import Limits
    from trajforge.rollout.factory import make_env
    from trajforge.rollout.runner import RolloutConfig, run_batch
    from trajforge.rollout.tasks import select_tasks

    browser.get(ui_url + "/live")
    WebDriverWait(browser, 10).until(
        lambda d: "watching" in d.find_element(By.ID, "live-status").text
    )
    browser.execute_script("window.notReloaded = true")
    config = RolloutConfig(
        env="household",
        tasks=select_tasks(make_env("household"), "6"),
        policy="noisy-expert",
        faults=["transient:0.3"],
        limits=Limits(max_steps=30),
        run="ui-live-batch",
    )
    with Store(ui_store.db) as store:
        _, trajs = run_batch(config, store, run_local)
    faults = sum(len(t.faults) for t in trajs)
    successes = sum(bool(t.success) for t in trajs)

    def batch_row(driver: WebDriver) -> list[str] | None:
        rows = driver.execute_script(  # read at once: the block is replaced on every change
            "return [...document.querySelectorAll('#activity tr')]"
            ".map(r => [...r.cells].map(c => c.textContent))"
        )
        return next((r for r in rows if r[1:3] == ["ui-live-batch", "6"]), None)

    cells = WebDriverWait(browser, 15).until(batch_row)
    assert cells[3] == str(successes) and cells[6] == str(faults)
    assert browser.execute_script("return window.notReloaded === true")
    browser.save_screenshot(str(SHOTS / "live.png"))


def test_fork_from_here_runs_the_fork_and_opens_the_child(
    browser: WebDriver, ui_url: str, ui_store: UiStore
) -> None:
    browser.get(f"{ui_url}/runs/{ui_store.fork_parent}")
    _wait(browser, "article#m-5 .fork-link").click()
    command = _wait(browser, "#fork-command").text
    assert command.startswith(f"trajforge fork {ui_store.fork_parent} --at 5 --policy expert")
    browser.find_element(By.CSS_SELECTOR, "#fork-form button").click()
    WebDriverWait(browser, 30).until(lambda d: d.find_elements(By.ID, "run-id"))
    child_id = browser.find_element(By.ID, "run-id").text
    assert child_id != ui_store.fork_parent
    origin = browser.find_element(By.XPATH, "//p[starts-with(normalize-space(.), 'fork of')]")
    assert origin.text == f"fork of {ui_store.fork_parent[:12]} at message 5"
    with Store(ui_store.db) as store:
        child = store.get(child_id)
    assert child.parent.trajectory_id == ui_store.fork_parent and child.parent.message_index == 5


def test_training_page_shows_a_new_iteration_without_reload(
    browser: WebDriver, ui_url: str, ui_store: UiStore
) -> None:
    run = "runs/rl-outcome-seed0"
    register(ui_store.db, run)
    for iteration, reward in [(1, 0.06), (2, 0.41), (3, 0.28)]:
        add_iteration(ui_store.db, run, iteration, reward)
    browser.get(ui_url + "/training")
    section = f'section[data-run="{run}"]'
    _wait(browser, f'{section} tr[data-iteration="3"]')
    WebDriverWait(browser, 10).until(
        lambda d: "live" in d.find_element(By.ID, "training-status").text
    )
    browser.execute_script("window.notReloaded = true")
    add_iteration(ui_store.db, run, 4, 0.5)
    row = _wait(browser, f'{section} tr[data-iteration="4"].live', timeout=15)
    assert row.text.split()[:3] == ["4", "0.5", "0.5"] and "0.170 [0.125, 0.225]" in row.text
    assert browser.execute_script("return window.notReloaded === true")
    held_out = browser.find_elements(By.CSS_SELECTOR, f'{section} [data-plot="held-out"] .ci')
    assert len(held_out) == 3  # the start, iterations 2 and 4
    browser.save_screenshot(str(SHOTS / "training-live.png"))
