"""A rewrite template (the user's whole file with the kernel rewritten) as a partial template: its helpers and the
rewritten kernel alone. That is what a per-shape dispatch writes beside the user's other kernels
(``agent_core.apply.rewrite_dispatch``), as it does an expert's kernel: the rewritten kernel under a name of its
own, launched over the template's own launch formula. The host code the rewrite edited (its launches) is not
needed: the dispatch writes every launch itself."""

from __future__ import annotations

import re
from dataclasses import replace

from agent_core.model import KernelTemplate, KerntuneError
from agent_core.source.cuda_parse import parse_cuda
from agent_core.templating.text_kind import HEADER_BEGIN, HEADER_END, strip_header

_DEFINE_RE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)(\()?((?:[^\n]*\\\n)*[^\n]*)", re.M)
_PARAM_RE = re.compile(r"\bKT_\w+\b")


def is_rewrite(template: KernelTemplate) -> bool:
    """A template the rewrites composed (origin ``rewrite:...``), as kerntune made it: the whole file."""
    return template.origin.startswith("rewrite:") and not template.sites and template.entry is None


def kernel_only(template: KernelTemplate) -> KernelTemplate:
    """``template`` (a rewrite template) reduced to its header, the helper blocks the rewrites added and the
    rewritten kernel. A macro of the file that reads a parameter (``#define THREADS KT_THREADS``, the structural
    template's site at a ``#define``) is expanded in the kernel, so each configuration's kernel reads its own
    value wherever it is written; KerntuneError where that cannot be done (a function-like macro that reads a
    parameter)."""
    from agent_core.templating.rewrites.compose import HELPERS
    guards = {guard for guard, _ in HELPERS.values()}
    text = template.text
    header = text[:text.find("\n", text.find(HEADER_END)) + 1] if HEADER_BEGIN in text else ""
    body = strip_header(text)
    cf = parse_cuda(body, template.path)
    k = cf.kernel(template.kernel)
    raw = body.encode("utf-8")
    kernel_text = raw[k.span.start:k.span.end].decode("utf-8")
    outside = raw[:k.span.start].decode("utf-8") + "\n" + raw[k.span.end:].decode("utf-8")
    macros: dict[str, str] = {}
    function_like: set[str] = set()
    for m in _DEFINE_RE.finditer(re.sub(r"/\*.*?\*/", " ", outside, flags=re.S)):
        name, value = m.group(1), re.sub(r"//[^\n]*", "", m.group(3)).replace("\\\n", " ").strip()
        if name.startswith("KT_") or name in guards:
            continue
        macros[name] = value
        if m.group(2):
            function_like.add(name)
    reads = {n for n, v in macros.items() if _PARAM_RE.search(v)}
    changed = True
    while changed:  # a macro that reads one that reads a parameter reads it too
        changed = False
        for n, v in macros.items():
            if n not in reads and any(re.search(rf"\b{re.escape(r)}\b", v) for r in reads):
                reads.add(n)
                changed = True
    for _ in range(8):  # expand until no such macro is left (a chain of aliases takes a step per link)
        used = sorted(n for n in reads if re.search(rf"\b{re.escape(n)}\b", kernel_text))
        if not used:
            break
        for n in used:
            if n in function_like:
                raise KerntuneError(f"the rewritten kernel '{template.kernel}' reads the function-like macro {n}, "
                                    "which reads a tuned parameter: a per-shape dispatch cannot give each of its "
                                    "kernels its own value", template.path, k.span.line)
            kernel_text = re.sub(rf"\b{re.escape(n)}\b", f"({macros[n]})", kernel_text)
    else:
        raise KerntuneError(f"the macros the rewritten kernel '{template.kernel}' reads expand without end",
                            template.path, k.span.line)
    helpers = "".join(f"#ifndef {guard}\n#define {guard}\n{code}\n#endif  // {guard}\n\n"
                      for guard, code in HELPERS.values() if re.search(rf"#[ \t]*ifndef[ \t]+{guard}\b", body))
    return replace(template, text=header + helpers + kernel_text + "\n")


def instantiated(template: KernelTemplate, args: list[str]) -> KernelTemplate:
    """``template`` (``kernel_only`` of a rewrite template whose kernel is a C++ template) with its kernel written as
    the plain kernel of one instantiation: the ``template <...>`` clause dropped and each template parameter's name
    replaced by its argument in ``args`` (C++ text; the parameters' defaults fill what ``args`` leaves out), as the
    compiler instantiates it. A per-shape dispatch of a templated kernel holds each of its configurations so, beside
    the template, which keeps serving its other instantiations."""
    from agent_core.source.instantiation import substitute_template_params
    text = template.text
    header = text[:text.find("\n", text.find(HEADER_END)) + 1] if HEADER_BEGIN in text else ""  # as kernel_only writes it
    body = text[len(header):]
    cf = parse_cuda(body, template.path)
    k = cf.kernel(template.kernel)
    if k is None or not k.template_params:
        return template
    raw = body.encode("utf-8")
    ktext = raw[k.span.start:k.span.end].decode("utf-8")
    m = re.match(r"\s*template\s*<", ktext)
    if m is None:
        raise KerntuneError(f"the rewritten kernel '{template.kernel}' is a template but its `template <...>` clause "
                            "cannot be read", template.path, k.span.line)
    depth, i = 1, m.end()
    while i < len(ktext) and depth:  # the clause's closing '>' (brackets inside parentheses are expressions)
        c = ktext[i]
        if c == "(":
            close, nest = i, 0
            for j in range(i, len(ktext)):
                nest += {"(": 1, ")": -1}.get(ktext[j], 0)
                if nest == 0:
                    close = j
                    break
            i = close
        elif c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        i += 1
    plain = substitute_template_params(ktext[i:].lstrip("\n"), k, args)
    new_body = raw[:k.span.start].decode("utf-8") + plain + raw[k.span.end:].decode("utf-8")
    return replace(template, text=header + new_body)
