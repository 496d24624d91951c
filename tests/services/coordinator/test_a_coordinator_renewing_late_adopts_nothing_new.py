"""A coordinator whose leases come up for renewal late (its loop too busy with what it holds)
adopts no new question until they come back in time: it sheds new work before it would lose
the queries it holds, and the question waits on the ingress stream for another coordinator,
or for this one once it has caught up."""

import asyncio
import time

from spex.proto.names import COORDINATOR_GROUP, INGRESS, SINGLE
from spex.services.coordinator import Coordinator
from spex.shared.runtime.client import IngressClient
from spex.shared.runtime.connect import redis_client
from spex.shared.runtime.settings import Settings


def test_a_late_renewal_pauses_intake_until_renewals_are_on_time_again(redis_url):
    async def go():
        settings = Settings(redis_url=redis_url, consumer="coord-0")
        coord = Coordinator(redis_client(settings), settings)
        await coord.bus.ensure_group(INGRESS, COORDINATOR_GROUP)
        ingress = IngressClient(redis_client(settings), partitions=SINGLE)
        first = await ingress.submit("1 + 1?", target=4)
        await coord.intake_round()
        await coord.lease_round()  # on time

        async def busy():
            time.sleep(0.8 * settings.lease_s)  # the loop held: the next renewal comes late

        await asyncio.gather(coord.lease_round(), busy())
        second = await ingress.submit("2 + 2?", target=4)
        await coord.intake_round()
        held_while_late = set(coord.queries)
        await coord.lease_round()  # on time again
        await coord.intake_round()
        held_after = set(coord.queries)
        await ingress.aclose()
        await coord.store.r.aclose()
        return first, second, held_while_late, held_after

    first, second, held_while_late, held_after = asyncio.run(go())
    assert held_while_late == {first}  # the new question waits on the ingress stream
    assert held_after == {first, second}
