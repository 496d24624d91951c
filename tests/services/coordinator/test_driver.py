"""The live inbox reader applies a read only to the very query object it was made for: one let
go and adopted again while the read blocked (a Redis failover, say) is replaying its inbox in
order, and entries applied out of order around that replay would be skipped as applied."""

import asyncio

import structlog

from spex.proto import SubmitQuestionRequest
from spex.services.coordinator.driver import Driver
from spex.services.coordinator.holdings import Holdings
from spex.services.coordinator.query import HeldQuery, new_machine
from spex.services.coordinator.recovery import Recovery
from spex.shared.runtime.settings import Settings

REQUEST = SubmitQuestionRequest(msg_id="m", query_id="q", question="2+2?", algorithm="rebase", target=4)


def test_a_read_made_for_a_query_adopted_again_meanwhile_is_not_applied():
    settings = Settings()
    log = structlog.get_logger()
    holdings = Holdings("coord-0", Recovery(None), log)  # type: ignore[arg-type]  (no Redis is touched)
    before, again = (HeldQuery(REQUEST, new_machine(REQUEST, settings), epoch) for epoch in (1, 2))
    holdings.hold(again)  # adopted again: its replay is under way
    driver = Driver(None, None, None, holdings, None, settings, log, keep_s={})  # type: ignore[arg-type]
    asyncio.run(driver.apply_read({"q": before}, [("q", [(b"5-0", {b"e": b"\x93"})])]))
    assert again.last_id == "0"  # untouched: the replay applies entries 1-0… in order
