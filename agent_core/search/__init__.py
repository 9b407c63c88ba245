"""Searching a template's space: strategies and the tuning session."""
