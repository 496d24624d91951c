"""A generator in front of a serving engine waits SPEX_ENGINE_WAIT_S for its server to answer (a
server loads its model for minutes), not the request timeout, then gives up naming how long it
waited."""

import asyncio
import time

import pytest

from spex.services.generator.engines import live_engine
from spex.shared.runtime.redis_server import free_port
from spex.shared.runtime.settings import Settings
from spex.shared.serving import EngineUnavailable


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_generators_server_is_waited_for_engine_wait_seconds(engine):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens
    settings = Settings(engine=engine, engine_url=url, engine_wait_s=1.0, engine_timeout_s=600.0)
    served = live_engine(settings)
    assert served.wait_s == 1.0

    async def main():
        start = time.monotonic()
        with pytest.raises(EngineUnavailable, match=rf"{engine} at {url}: not reachable within 1 s"):
            await served.start()
        assert time.monotonic() - start < 6.0  # the wait, not the 600 s request timeout
        await served.close()

    asyncio.run(main())
