"""The hf engine on torch's path (the GPU's) keeps its KV pool whole: a sequence's pages are
taken when it is admitted, the cache makes room in pages as well as tokens (a piece's last
page is partly empty), and every page comes back — through finishes, aborts of running and
waiting sequences, a primary pausing speculation, a failed step's drop and `close` — so a
busy engine never has to grow the pool it was given."""

import pytest

from spex.proto.messages import PRIMARY, SPECULATIVE
from spex.shared.hf.engine import HFConfig, HFEngine
from tests.hf.engine_requests import drain, request


@pytest.fixture
def engine(tiny_model, monkeypatch):
    monkeypatch.setenv("SPEX_KERNELS", "torch")
    engine = HFEngine.from_dir(tiny_model, HFConfig(max_running=4, kv_capacity_tokens=600))
    assert engine.runner.paged
    return engine


def whole(engine):
    pool = engine.runner.pool
    return pool.free_pages == pool.pages - 1  # all but the null page


def test_every_page_comes_back_and_the_pool_never_grows(engine):
    pool = engine.runner.pool
    pages = pool.pages
    steps = [f"Step {k}: add {k}." for k in range(6)]
    for i in range(12):  # six short pieces each, some shared: many part-empty last pages
        path = steps[: i % 3] + [f"Then {j} of {i}." for j in range(6 - i % 3)]
        priority = PRIMARY if i % 5 == 0 else SPECULATIVE
        engine.submit(request(engine, f"r{i}", seed=i, steps=path, priority=priority, max_new=12), 0.0)
    for _ in range(3):
        engine.step()
    assert engine.abort("r1", engine.clock_s) == []  # running: it leaves at the next step
    (waiting,) = engine.abort("r11", engine.clock_s)  # still waiting: it leaves now
    engine.submit(request(engine, "late", seed=50, steps=steps, priority=PRIMARY, max_new=12), engine.clock_s)
    done = [waiting, *drain(engine)]
    assert len(done) == 13 and {c.reason for c in done} == {"finished", "abort"}
    assert pool.pages == pages and pool.version == 0  # never grown
    assert engine.held_tokens == 0 and engine.cache.total_tokens > 0  # prompts stay cached
    engine.close()
    assert whole(engine) and engine.cache.total_tokens == 0 and engine.cache.evictable_tokens == 0


def test_a_failed_step_s_drop_gives_every_page_back(engine):
    for i in range(6):
        engine.submit(request(engine, f"r{i}", seed=i, steps=[f"Step {i}."], max_new=20), 0.0)
    engine.step()  # admitted, some pieces pending
    assert not whole(engine)
    assert sorted(engine.drop_all()) == sorted(f"r{i}" for i in range(6))
    assert engine.cache.total_tokens >= 0 and engine.cache.evictable_tokens >= 0
    engine.close()
    assert whole(engine) and engine.cache.total_tokens == 0


def test_an_aborted_request_s_pending_pieces_are_dropped_once(engine):
    # Two uncached pieces of one request, the second a child of the first: dropping the
    # parent takes the child with it, and the child's own drop then finds it gone.
    engine.submit(request(engine, "a", seed=1, steps=["One piece.", "Another piece."], max_new=8), 0.0)
    engine._admit()
    engine.abort("a", engine.clock_s)
    drain(engine)
    assert engine.cache.total_tokens >= 0 and engine.cache.evictable_tokens == engine.cache.total_tokens
    engine.close()
    assert whole(engine) and engine.cache.total_tokens == 0
