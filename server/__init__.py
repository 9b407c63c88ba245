"""The kerntune language server (pygls): `kerntune lsp`, `python -m server`."""

__version__ = "0.1.0"
