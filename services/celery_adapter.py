"""Optional Celery adapter for applications already on Celery.

`spex.answer` forwards a question to the SPEX ingress and returns the answer. Celery stays off
the hot path: the search itself runs on the services over Redis Streams (Celery's redelivery
by visibility timeout and its list-based queues are wrong for long GPU jobs). Run a worker with
`celery -A spex.services.celery_adapter worker --pool=solo`, with `SPEX_REDIS_URL` set.
"""

from __future__ import annotations

import asyncio
from urllib.parse import quote

from celery import Celery

from spex.proto.names import Partitions
from spex.shared.runtime.client import IngressClient
from spex.shared.runtime.connect import redis_client
from spex.shared.runtime.settings import Settings

__all__ = ["app", "make_app"]


def make_app(settings: Settings) -> Celery:
    """A Celery app whose broker and result backend are the SPEX Redis (database 1)."""
    base = settings.redis_url.rsplit("/", 1)[0]
    password = settings.password()
    if password:  # in memory only: Celery takes the broker's password in its URL
        scheme, _, rest = base.partition("://")
        base = f"{scheme}://:{quote(password, safe='')}@{rest}"
    celery = Celery("spex", broker=f"{base}/1", backend=f"{base}/1")
    celery.conf.update(task_serializer="json", result_serializer="json", accept_content=["json"])

    @celery.task(name="spex.answer")
    def answer(
        question: str,
        algorithm: str = "rebase",
        target: int = 16,
        mode: str = "spex",
        client_key: str | None = None,
        timeout_s: float = 600.0,
    ) -> dict[str, object]:
        async def run() -> dict[str, object]:
            client = IngressClient(
                redis_client(settings), settings.backlog_limit, settings.limits,
                partitions=Partitions(settings.partitions),
            )  # fmt: skip
            try:
                qid = await client.submit(
                    question, client_key=client_key, algorithm=algorithm, target=target, mode=mode
                )
                result = await client.result(qid, timeout_s)
            finally:
                await client.r.aclose()
            if result is None:
                raise TimeoutError(f"question {qid} not answered within {timeout_s} s")
            return {"query_id": qid, "answer": result.answer, "nodes": result.nodes, "error": result.error}

        return asyncio.run(run())

    return celery


app = make_app(Settings.from_env())
