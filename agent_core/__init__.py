"""kerntune's engine: parsing, templates, specs, verification, runners, search, planning, store."""

__version__ = "0.1.0"
