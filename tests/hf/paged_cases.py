"""The attention cases (`attention_cases`) laid out in a paged KV pool: each segment on pages
of its own, and one pass of the cases' runs over them."""

import torch

from spex.shared.hf.attention import Pass
from spex.shared.hf.paged import PAGE, PagedSegment
from tests.hf.attention_cases import RUNS, SEGMENTS


def paged_pass(pool, data, runs=RUNS):
    """The cases' segments in `pool` (each a few pages, scattered by the ones taken between
    them), and a pass of `runs` over them."""
    segments = {}
    for name, (keys, values) in data.items():
        spacer = PagedSegment(pool, PAGE)  # so no segment's pages follow another's
        s = PagedSegment(pool, keys.shape[1])
        at = torch.from_numpy(s.slots()[: keys.shape[1]])
        pool.keys[:, at], pool.values[:, at] = keys, values
        s.length = SEGMENTS[name][0]
        segments[name] = s
        spacer.release()
    batch = Pass()
    for names, start, n in runs:
        batch.add([segments[name] for name in names], start, list(range(n)))
    return batch, segments
