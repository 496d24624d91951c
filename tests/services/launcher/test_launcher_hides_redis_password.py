"""`spex up`'s embedded Redis requires a password, which is in no output, command line or URL."""

from pathlib import Path

import pytest

from spex.shared.runtime.redis_server import free_port


def test_spex_up_never_shows_the_redis_password(tmp_path):
    """The embedded Redis requires a password; it is in no output, no command line, no URL."""
    import io

    import redis
    from rich.console import Console

    from spex.services.launcher import up
    from spex.shared.runtime.settings import Settings

    out = io.StringIO()
    with up(Settings(http_port=free_port()), console=Console(file=out, width=200), data_dir=tmp_path) as live:
        password = Path(live.redis_password_file).read_text().strip()
        with pytest.raises(redis.exceptions.AuthenticationError):
            redis.Redis.from_url(live.redis_url).ping()
        assert redis.Redis.from_url(live.redis_url, password=password).ping()
        cmdlines = [p.read_bytes() for p in Path("/proc").glob("[0-9]*/cmdline") if _readable(p)]
    assert len(password) >= 32
    assert password not in out.getvalue() and password not in live.redis_url
    assert not any(password.encode() in c for c in cmdlines)
    assert "password in" in out.getvalue()  # it says where the password is, not what


def _readable(path):
    try:
        path.read_bytes()
        return True
    except OSError:
        return False
