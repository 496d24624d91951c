"""Library code shared by the SPEX services and drivers, in layers.

- `core`: the pure search core — node ids, the tree, the query state machine and its
  commands, the speculative cache, the search algorithms and the T2/T3 policies. No I/O.
- `roofline`: the hardware catalog and the roofline step model, which budget speculation
  in the real runtime and time the simulator alike.
- `sim`: the simulated GPU engine, its radix cache, the synthetic workload.
- `runtime`: Redis Streams bus, service loop, settings, metrics, embedded Redis, client.

A layer imports only the ones listed before it (`sim` and `runtime` never each other);
`make lint` checks this with import-linter (`[tool.importlinter]` in pyproject.toml).
"""
