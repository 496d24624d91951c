"""A service's log is rotated by size while it runs: past the limit it is kept as
`<name>.log.1` (older ones shifted, the oldest dropped) and the live file starts again, the
service writing on into it. Service logs used to grow without bound (issue 40: 2.7 MB a minute
while Redis was out of memory). A real service process under the supervisor, a real Redis."""

import time

from spex.services.launcher import service_env
from spex.shared.runtime.settings import Settings
from spex.shared.runtime.supervisor import Supervisor

LIMIT = 4096


def test_a_log_past_its_size_is_rotated_and_the_service_writes_on(redis_url, tmp_path):
    supervisor = Supervisor(tmp_path, say=lambda _msg: None, max_log_bytes=LIMIT, logs_kept=2)
    supervisor.add("allocator", "alloc-0", service_env(Settings(redis_url=redis_url), "alloc-0"))
    live = supervisor.log_path("alloc-0")
    try:
        deadline = time.monotonic() + 30
        while b"service_started" not in live.read_bytes():
            assert time.monotonic() < deadline, live.read_text()
            time.sleep(0.05)
        for round_ in range(3):  # its chatter, as another writer of the same file would add it
            with live.open("a") as f:
                f.write(f"filler {round_} " * 500 + "\n")  # past the limit alone
            supervisor.poll()
            assert live.stat().st_size < LIMIT
    finally:
        supervisor.stop()  # the service's last lines go to the live file, at its (new) end
    rotated = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("alloc-0.log."))
    assert rotated == ["alloc-0.log.1", "alloc-0.log.2"]  # two kept: the first rotation dropped
    assert "filler 2" in (tmp_path / "alloc-0.log.1").read_text()
    assert "filler 1" in (tmp_path / "alloc-0.log.2").read_text()
    text = live.read_bytes()
    assert b"service_stopped" in text and b"\0" not in text  # appended at the start, no hole
    assert len(text) < LIMIT
