"""The `spex` command, one module per command group: `main` (the parser and the dispatch
table), `bench` (`spex bench`, `spex profile`), `runtime` (`up`, `demo`, `worker`; `up_checks`
what `up` checks before it starts), `client` (`submit`, `result`, `cancel`, `tree`, through
`transport`: the HTTP ingress or Redis), `top`, `chaos` (`spex chaos`), `model` (`spex model
init`, `spex model import`). Nothing imports this package; each command imports the services or
drivers it runs only when it runs."""
