"""SPEX services: HTTP ingress, tree coordinator, generator, reward scorer, budget allocator,
each run as its own process by `spex worker <name>` (or `python -m spex.services.<name>`);
plus the launcher that starts them all (`spex up`, `spex demo`) and an optional Celery adapter.

Each service is a receive loop and a type→handler table around the pure core in
`spex.shared.core`. Services never import each other (an import-linter contract holds it);
they share `spex.proto` and `spex.shared`.
"""
