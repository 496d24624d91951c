"""Rows of every kind for the attention tests, in a neutral form both KV layouts are filled
from, and an independent reference: each row's softmax attention in float64 over exactly the
keys it sees (its segments in full, then its own segment up to and including itself)."""

import torch

# (filled positions, extra room) of each segment; then the runs: (segments, start, rows).
SEGMENTS = {
    "head": (37, 0),
    "step": (5, 0),
    "own": (3, 30),
    "fresh": (0, 20),
    "piece": (11, 0),
    "after": (4, 0),
}
RUNS = [
    (["head", "step", "own"], 3, 1),  # a decode row over two shared pieces
    (["head", "fresh"], 0, 1),  # a first decode row
    (["head", "piece"], 0, 7),  # a piece's first rows...
    (["head", "piece"], 7, 4),  # ...and the rest of it, in the same pass
    (["head", "piece", "after"], 0, 4),  # the piece after it, in the same pass too
]


def kv_data(layers, kv_heads, head_dim, dtype, seed=1):
    """Each segment's keys and values [layers, capacity, kv_heads, head_dim], random."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, (length, room) in SEGMENTS.items():
        size = (layers, length + room, kv_heads, head_dim)
        out[name] = tuple(torch.randn(size, generator=gen).to(dtype) for _ in range(2))
    return out


def rows_data(heads, kv_heads, head_dim, dtype, seed=2, runs=RUNS):
    rows = sum(n for _, _, n in runs)
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(rows, heads, head_dim, generator=gen).to(dtype)
    k, v = (torch.randn(rows, kv_heads, head_dim, generator=gen).to(dtype) for _ in range(2))
    return q, k, v


def reference(layer, data, q, k, v, runs=RUNS):
    """Every row's attention output [rows, heads × head_dim], float64, with the rows' own keys
    and values written where they go first (a piece's rows see each other)."""
    data = {name: (keys.clone().double(), values.clone().double()) for name, (keys, values) in data.items()}
    row = 0
    for names, start, n in runs:
        keys, values = data[names[-1]]
        keys[layer, start : start + n] = k[row : row + n].double()
        values[layer, start : start + n] = v[row : row + n].double()
        row += n
    out, row = [], 0
    group = q.shape[1] // k.shape[1]
    for names, start, n in runs:
        spans = [SEGMENTS[name][0] for name in names[:-1]] + [start + n]
        keys = torch.cat([data[name][0][layer, :m] for name, m in zip(names, spans)])  # [total, kv, d]
        values = torch.cat([data[name][1][layer, :m] for name, m in zip(names, spans)])
        total = keys.shape[0]
        for i in range(n):
            seen = total - n + i + 1
            query = q[row + i].double()  # [heads, d]
            kk = keys[:seen].repeat_interleave(group, dim=1)  # [seen, heads, d]
            vv = values[:seen].repeat_interleave(group, dim=1)
            weights = torch.softmax((kk * query).sum(-1) / q.shape[-1] ** 0.5, dim=0)  # [seen, heads]
            out.append((weights[:, :, None] * vv).sum(0).reshape(-1))
        row += n
    return torch.stack(out)
