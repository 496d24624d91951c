"""`spex up` gives each service process its own Prometheus metrics port."""

import socket

from spex.shared.runtime.redis_server import free_port


def free_ports(n):
    """A first port with the `n - 1` after it free too (each service takes base + i): a free
    first port alone let another process's port collide with a later one."""
    while True:
        base = free_port()
        try:
            for port in range(base, base + n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue


def test_spex_up_gives_each_service_its_own_metrics_port():
    from spex.services.launcher import up
    from spex.shared.runtime.settings import Settings
    from tests.services.helpers import scrape

    base = free_ports(5)
    settings = Settings(metrics_port=base, http_port=free_port(), time_scale=0.002)
    with up(settings) as live:
        assert live.redis_password_file and not live.redis_password
        # coordinator, generator, scorer, ...; five processes starting at once on a loaded
        # machine have taken more than 10 s to bind their ports
        scraped = [scrape(base + i, timeout_s=45) for i in range(5)]
    assert [status for status, _ in scraped] == [200] * 5
    assert all("spex_jobs_total" in body for _, body in scraped)
