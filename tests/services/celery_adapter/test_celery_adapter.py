"""The Celery adapter with a real Celery worker process on the same Redis."""

import asyncio
import os
import subprocess
import sys

import pytest

from spex.shared.runtime.settings import Settings
from tests.services.cluster import Cluster

celery = pytest.importorskip("celery")


def test_celery_task_forwards_to_the_ingress_and_returns_the_answer(redis_url, tmp_path):
    from spex.services.celery_adapter import make_app

    env = {**os.environ, "SPEX_REDIS_URL": redis_url}
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "spex.services.celery_adapter", "worker", "--pool=solo",
         "-c", "1", "--without-gossip", "--without-mingle", "--loglevel=warning"],
        env=env, stdout=log, stderr=log,
    )  # fmt: skip

    async def go():
        cluster = Cluster(redis_url, "processes")
        await cluster.start_all()
        try:
            app = make_app(Settings(redis_url=redis_url))
            first = await asyncio.to_thread(
                lambda: app.send_task(
                    "spex.answer", ["1+1?"], {"algorithm": "rstar", "target": 3, "client_key": "celery-1"}
                ).get(timeout=60)
            )
            again = await asyncio.to_thread(
                lambda: app.send_task(
                    "spex.answer", ["1+1?"], {"algorithm": "rstar", "target": 3, "client_key": "celery-1"}
                ).get(timeout=60)
            )
            return first, again
        finally:
            await cluster.stop()

    try:
        first, again = asyncio.run(go())
    finally:
        worker.terminate()
        worker.wait(timeout=20)
        log.close()
    assert first["answer"] is not None and first["nodes"] > 0, first
    assert again == first  # the same client key is one question, answered once
