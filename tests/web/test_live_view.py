"""The live web view in a real headless browser (Debian's chromium, driven through its
chromedriver by selenium): during a live search the page draws the tree's nodes as their
events arrive, speculative ones apart, and the answer once it is written."""

import asyncio
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import Cluster
from tests.services.helpers import http, wait_http

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
pytestmark = pytest.mark.skipif(
    not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)),
    reason="Debian's chromium and chromium-driver are not installed (`make test` installs them as root)",
)


def browser(profile: str):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile}", "--window-size=1400,900",
    ):  # fmt: skip
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def test_the_page_draws_a_live_search_as_it_grows(redis_url):
    port = free_port()
    base = f"http://127.0.0.1:{port}"

    async def go():
        # Slow enough (a simulated second is 0.2 s) that the search takes seconds to grow.
        cluster = Cluster(redis_url, "processes", http_port=port, time_scale=0.2)
        await cluster.start("ingress", "ingress-0")
        await cluster.start_all()
        await asyncio.to_thread(wait_http, f"{base}/health")
        try:
            return await asyncio.to_thread(watch, base)
        finally:
            await cluster.stop()

    samples, final, states, tree, shot, demo = asyncio.run(go())
    growing = [n for n, status in samples if "searching" in status]
    assert len(set(growing)) >= 3, samples  # nodes appeared while the search ran
    assert growing == sorted(growing), samples  # ... and only ever more of them
    assert final[1].startswith("answered"), final
    assert final[0] == len(tree["nodes"]), (final, len(tree["nodes"]))  # the whole tree drawn
    assert {"root", "primary"} <= states and states & {"adopted", "speculative", "unused", "cancelled"}
    assert shot.stat().st_size > 10_000
    # The simulated GPU's synthetic content is labelled a demonstration, on the page and the answer.
    assert demo.startswith("This is a demonstration: synthetic content on a simulated GPU"), demo
    assert "(a demonstration: synthetic content" in final[1], final


def watch(base: str):
    from selenium.webdriver.common.by import By

    with tempfile.TemporaryDirectory() as profile:
        driver = browser(profile)
        try:
            status, reply = http(
                "POST",
                f"{base}/v1/questions",
                {"question": "What is 6 * 7?", "algorithm": "rebase", "target": 16},
            )
            assert status == 202, reply
            qid = reply["query_id"]
            driver.get(f"{base}/#q={qid}")
            samples = []
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                count = len(driver.find_elements(By.CSS_SELECTOR, "#tree g.node"))
                text = driver.find_element(By.ID, "status").text
                samples.append((count, text))
                if text.startswith("answered"):
                    break
                time.sleep(0.15)
            time.sleep(0.5)  # the last frame drawn
            nodes = driver.find_elements(By.CSS_SELECTOR, "#tree g.node")
            states = {n.get_attribute("data-state") for n in nodes}
            final = (len(nodes), driver.find_element(By.ID, "status").text)
            banner = driver.find_element(By.ID, "demo")
            demo = banner.text if banner.is_displayed() else ""
            out = Path(os.environ.get("SPEX_SCREENSHOT_DIR") or tempfile.mkdtemp()) / "live-view.png"
            driver.save_screenshot(str(out))
        finally:
            driver.quit()
    _, tree = http("GET", f"{base}/v1/questions/{qid}/tree")
    return samples, final, states, tree, out, demo
