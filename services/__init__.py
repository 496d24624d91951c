"""SPEX services: ingress client, tree coordinator, generator, reward scorer, budget allocator.

Each module is one service: a receive loop and a type→handler table around the pure core in
`shared/`. Services never import each other; they share `proto/` and `shared/`.
"""
