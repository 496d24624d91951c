"""The hardware catalog and the roofline step model of a continuous-batching engine."""
