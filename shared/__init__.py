"""Library code shared by the SPEX services and drivers (not the `../shared/` docs)."""
