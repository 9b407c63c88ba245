"""What kind of text a template is: its params header, whether it is exactly the kernel's structural sites in
the original text (unedited), whether rendering it gives the user's whole file or the kernel alone, and so
whether a per-shape dispatch can hold its configurations. Read by the agent (planning the dispatch) and by
apply (writing it); nothing here writes code."""

from __future__ import annotations

import re

from agent_core.model import CudaFile, KernelTemplate, site_text

HEADER_BEGIN = "// kerntune:params-begin"
HEADER_END = "// kerntune:params-end"
_HEADER_RE = re.compile(r"^[ \t]*" + re.escape(HEADER_BEGIN) + r".*?^[ \t]*" + re.escape(HEADER_END) +
                        r"[^\n]*(?:\n|\Z)", re.S | re.M)


def strip_header(text: str) -> str:
    """``text`` without the params header (from the begin marker's line to the end marker's line)."""
    return _HEADER_RE.sub("", text, count=1)


def unedited(template: KernelTemplate) -> bool:
    """The template text is exactly its sites' macros in the original text (so sites can be rendered)."""
    if not template.sites:
        return False
    src = template.original_text.encode("utf-8")
    out, pos = [], 0
    for site in sorted(template.sites, key=lambda x: x.span.start):
        if site.span.start < pos:
            return False
        out += [src[pos:site.span.start], site_text(site.render, site.param).encode("utf-8")]
        pos = site.span.end
    out.append(src[pos:])
    return b"".join(out).decode("utf-8") == strip_header(template.text)


def is_whole_file(template: KernelTemplate, cf: CudaFile) -> bool:
    """Whether rendering ``template`` gives the user's whole file (structural templates, the user's own
    edited copies, an LLM template that kept the host code and the spec) rather than the kernel alone."""
    if template.origin == "structural" or template.sites:
        return True
    if (template.entry or template.kernel) != template.kernel:
        return False
    text = strip_header(template.text)
    k = cf.kernel(template.kernel)
    names = {s.host_function for s in k.launch_sites if s.host_function}
    names |= {o.name for o in cf.kernels if o.name != k.name}
    if any(not re.search(rf"\b{re.escape(n)}\s*\(", text) for n in names):
        return False
    spec_comment = re.compile(r"/\*\s*kerntune\s*:")
    if spec_comment.search(cf.text) and not spec_comment.search(text):
        return False
    return True


def can_dispatch(template: KernelTemplate, cf: CudaFile) -> bool:
    """Whether a per-shape dispatch can hold configurations of ``template`` (apply's ``rewrite_dispatch``): a
    template written in place (an expert's, an LLM's partial one), the kernel's own structural template as
    kerntune made it (its sites known, so each configuration's kernel can be written beside the others), or a
    rewrite template as kerntune made it (its rewritten kernel goes in alone, like an expert's). For a templated
    user kernel (``template <typename T> __global__ ...``) an expert's or an LLM's partial template, or a rewrite
    template: each of its configurations becomes a plain kernel of its own for the instantiation it launches,
    beside the template, which serves the original entry (``apply.templated_dispatch_refusal`` says where the
    launches do not allow it); not the structural template, whose configurations are instantiations of the
    template itself."""
    from agent_core.templating.rewrites.partial import is_rewrite
    if any(k.name == template.kernel and k.template_params for k in cf.kernels):
        return not is_whole_file(template, cf) or is_rewrite(template)
    return (not is_whole_file(template, cf) or (template.origin == "structural" and unedited(template))
            or is_rewrite(template))
