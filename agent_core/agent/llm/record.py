"""The record of model calls: each one (role, tokens, what it proposed, what happened to it) becomes a step
of the tuning session in the store. Calls made before the first session exists wait for it."""

from __future__ import annotations


class CallLog:
    def __init__(self, store=None):
        self.store = store
        self.session_id: int | None = None
        self.pending: list[tuple[str, dict]] = []
        self.entries: list[dict] = []  # everything, in order (also without a store)

    def at(self, session_id: int | None) -> None:
        """Steps go to this session from now on; the waiting ones are written to it."""
        if session_id is None:
            return
        self.session_id = session_id
        if self.store is not None:
            for text, data in self.pending:
                self.store.put_step(session_id, "llm", text, data)
        self.pending.clear()

    def add(self, text: str, data: dict) -> None:
        self.entries.append({"text": text, **data})
        if self.store is not None and self.session_id is not None:
            self.store.put_step(self.session_id, "llm", text, data)
        else:
            self.pending.append((text, data))
