"""OpenTelemetry spans: one per query (the coordinator's, from adoption to answer) and one per
job (the generator's and the scorer's, from taken to done), all in the trace whose id every
message of the query carries (`trace_id`, set at submission).

No process shares a span with another over the bus, so the ids are derived, not sent: a
query's span has the span id `query_span_id(query_id, epoch)` (the epoch of the lease its
owner holds: a query taken over gets a span of its own), and each job's span names the span of
the epoch that issued it as its parent. Exported over OTLP/HTTP when `SPEX_OTLP_ENDPOINT` is set (`http://collector:4318`);
unset, no tracer provider is installed and every span is OpenTelemetry's no-op. Tests install
a provider of their own (`install`), e.g. with the SDK's in-memory exporter.
"""

from __future__ import annotations

import contextvars
import hashlib

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, TraceFlags

__all__ = [
    "configure", "flush", "install", "job_span", "query_span", "query_span_id", "trace_id_of", "tracer",
]  # fmt: skip

# (trace id, span id) the next span takes: how a query's span gets the ids its jobs derive.
_NEXT_IDS: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar("spex_ids", default=None)


class _Ids(RandomIdGenerator):
    """Random ids, except where `_NEXT_IDS` names the ones the next span must have."""

    def generate_span_id(self) -> int:
        ids = _NEXT_IDS.get()
        return ids[1] if ids else super().generate_span_id()

    def generate_trace_id(self) -> int:
        ids = _NEXT_IDS.get()
        return ids[0] if ids else super().generate_trace_id()


def _hash(text: str, bits: int) -> int:
    value = int.from_bytes(hashlib.sha256(text.encode()).digest()[: bits // 8], "big")
    return value or 1  # 0 is OpenTelemetry's invalid id


def query_span_id(query_id: str, epoch: int) -> int:
    return _hash(f"span/{query_id}/{epoch}", 64)


def trace_id_of(trace_id: str, query_id: str) -> int:
    """The message's 32-hex-digit trace id as an int; derived from the query id if it has none."""
    try:
        value = int(trace_id, 16)
    except ValueError:
        value = 0
    return value if 0 < value < 1 << 128 else _hash(f"trace/{query_id}", 128)


def install(provider: TracerProvider) -> None:
    """Use `provider` for SPEX's spans (its id generator is replaced by the one that keeps a
    query's ids)."""
    provider.id_generator = _Ids()
    trace.set_tracer_provider(provider)


def configure(service: str, endpoint: str) -> None:
    """Export this process's spans to the OTLP/HTTP collector at `endpoint` ("" = off)."""
    if not endpoint:
        return
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    provider = TracerProvider(resource=Resource.create({"service.name": f"spex-{service}"}))
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint.rstrip('/')}/v1/traces"))
    )
    install(provider)


def flush() -> None:
    """Send the spans still buffered (a service stopping)."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        provider.force_flush(5_000)


def tracer() -> trace.Tracer:
    return trace.get_tracer("spex")


def query_span(trace_id: str, query_id: str, epoch: int, attributes: dict[str, str | int]) -> Span:
    """Start a query's span (the caller ends it), with the ids its jobs will derive."""
    token = _NEXT_IDS.set((trace_id_of(trace_id, query_id), query_span_id(query_id, epoch)))
    try:
        return tracer().start_span("spex.query", context=trace.set_span_in_context(trace.INVALID_SPAN),
                                   attributes=attributes)  # fmt: skip
    finally:
        _NEXT_IDS.reset(token)


def job_span(name: str, trace_id: str, query_id: str, epoch: int, attributes: dict[str, str | int]) -> Span:
    """Start a job's span (the caller ends it), a child of the span of the query's owner that
    issued it (`epoch`)."""
    parent = SpanContext(
        trace_id_of(trace_id, query_id), query_span_id(query_id, epoch), is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )  # fmt: skip
    context = trace.set_span_in_context(NonRecordingSpan(parent))
    return tracer().start_span(name, context=context, attributes=attributes)
