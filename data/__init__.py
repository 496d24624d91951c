"""Data shipped with SPEX (see README.md here): `importlib.resources.files("spex.data")`."""
