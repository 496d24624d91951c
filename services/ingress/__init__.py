"""HTTP ingress (`spex worker ingress`): `service` (the app, its routes and its start), `watch`
(answers, trees, live events, the overview and the web view in `web/`), `openai_api` and
`openai_params` (the OpenAI-compatible front), `openapi` and `openapi_schemas` (the OpenAPI
document), `http_body` (reading a request's body), `callers` (who calls: tokens and tenants),
`admission` (memory admission), `backpressure` (Retry-After), `long_lived` (the streams a client
holds open) and `readiness` (/ready)."""

from spex.services.ingress.service import IngressService, main

__all__ = ["IngressService", "main"]
