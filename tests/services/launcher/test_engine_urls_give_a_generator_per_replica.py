"""`spex up --engine-url`: several URLs (replicas) start a generator each, and an explicit
`--generators` must match them; one URL (a server, or a Service balancing requests over
replicas) serves any number of generators. Anything else is one line naming the flag."""

import pytest

from spex.services.launcher import engine_urls

A, B, C = "http://a:8000", "http://b:8000", "http://c:8000"


@pytest.mark.parametrize(
    ("raw", "generators", "each"),
    [
        (f"{A},{B},{C}", None, [A, B, C]),  # a generator per replica
        (f"{A}, {B},", 2, [A, B]),  # as many as the URLs, blanks dropped
        (A, None, [A]),
        (A, 3, [A, A, A]),  # one Service in front of the replicas: it balances
    ],
)
def test_each_generator_gets_a_url(raw, generators, each):
    assert engine_urls(raw, generators) == each


@pytest.mark.parametrize("generators", [1, 4])
def test_generators_other_than_the_replicas_are_refused_in_one_line(generators):
    with pytest.raises(ValueError) as refused:
        engine_urls(f"{A},{B}", generators)
    assert str(refused.value) == (
        f"--generators: {generators} for 2 engine URLs; leave it out (a generator per URL), "
        "or give one URL (a Service in front of the replicas)"
    )
