"""Workspace edits the server proposes: the tuned rewrite (kernel + launch site, one undo) and the drafted spec.
Both come from the engine (``apply.render`` / ``spec.insert_spec``) and are turned into minimal TextEdits."""

from __future__ import annotations

import shutil
from pathlib import Path

from lsprotocol import types as lsp

from agent_core.source import spec as spec_mod
from agent_core.templating.draft_spec import insert_spec
from agent_core.apply import check_compiles, rewrite_result, text_edits
from agent_core.model import KerntuneError

from .documents import Doc


def workspace_edit(doc: Doc, new_text: str, encoding: str) -> lsp.WorkspaceEdit:
    """Minimal edits turning the document's text into ``new_text``, pinned to its version."""
    edits = [lsp.TextEdit(range=doc.index.offsets_range(s, e, encoding), new_text=r)
             for s, e, r in text_edits(doc.text, new_text)]
    return lsp.WorkspaceEdit(document_changes=[lsp.TextDocumentEdit(
        text_document=lsp.OptionalVersionedTextDocumentIdentifier(uri=doc.uri, version=doc.version),
        edits=edits)])


def spec_text(doc: Doc, kernel: str) -> str:
    """The document with the drafted spec inserted above ``kernel``."""
    if doc.cf is None:
        raise KerntuneError("the file could not be parsed", doc.path)
    existing = spec_mod.find_spec(doc.cf, kernel)
    if existing is not None:
        k = doc.cf.kernel(kernel)
        raise KerntuneError(f"kernel '{kernel}' already has a spec ({existing.origin}); edit it there",
                            doc.path, k.name_span.line)
    return insert_spec(doc.text, doc.cf, kernel)


def best_text(path: str, text: str, kernel: str, summary: dict | None,
              check_compile: bool = True) -> tuple[str, list[str]]:
    """The file rewritten to the stored best configuration, or to its per-shape dispatch where the result has
    one (runs off the event loop: it may call nvcc), and the warnings to show. A template that is not a whole
    file (an expert's) is written in place: kernel(s), spec launch, launch sites. Where the dispatch cannot be
    written (a launch the rewrite refuses), the single best configuration is (`kerntune apply --single`), and
    a warning says why; unless it is slower than the original on some size set, and where the original kernel is
    kept on every size set, nothing is applied (KerntuneError says why)."""
    if not summary or not summary.get("best_params"):
        raise KerntuneError(f"no tuned result for kernel '{kernel}': run 'Optimize kernel' first", path)
    if summary.get("applied"):
        raise KerntuneError(f"the best configuration of '{kernel}' is already applied: the file holds it", path)
    if summary.get("stale"):
        raise KerntuneError(f"the file changed since kernel '{kernel}' was tuned; optimize again before applying",
                            path)
    warnings = []
    rw, _ = rewrite_result(path, kernel, text, summary, fallback=True)  # the fallback's warning comes in rw.warnings
    warnings += rw.warnings
    if rw.text == text and rw.kept:
        raise KerntuneError(f"nothing to apply to '{kernel}': the original kernel is kept on every size set ("
                            + "; ".join(rw.kept) + ")", path)
    if rw.sidecar is not None:
        raise KerntuneError(f"the spec of '{kernel}' is in {Path(rw.sidecar[0]).name}, whose launch must change "
                            f"with the kernel and which this edit cannot include: apply from a terminal with "
                            f"`kerntune apply {Path(path).name} -k {kernel}`", path)
    new = rw.text
    if new == text:
        raise KerntuneError(f"the best configuration of '{kernel}' is the original one: nothing to change", path)
    if check_compile and shutil.which("nvcc"):
        check_compiles(new, path, (summary.get("best_resources") or {}).get("arch") or summary.get("arch") or "sm_90",
                       host=rw.in_place)
    return new, warnings
