"""Fault injection: a TCP proxy that cuts connections, and `spex chaos`."""
