"""Measuring: compile, hardware limits, the backends (GPU worker processes, replay)."""
