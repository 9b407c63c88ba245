"""Render a configuration back into the user's file: the text, minimal edits, and a checked write."""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from . import expr
from .model import KernelTemplate, KerntuneError, Site, macro_name, sha256_text

HEADER_BEGIN = "// kerntune:params-begin"
HEADER_END = "// kerntune:params-end"
_HEADER_RE = re.compile(r"^[ \t]*" + re.escape(HEADER_BEGIN) + r".*?^[ \t]*" + re.escape(HEADER_END) +
                        r"[^\n]*(?:\n|\Z)", re.S | re.M)


def strip_header(text: str) -> str:
    """``text`` without the params header (from the begin marker's line to the end marker's line)."""
    return _HEADER_RE.sub("", text, count=1)


_DEFAULT_GUARD_RE = re.compile(
    r"^[ \t]*#[ \t]*ifndef[ \t]+(KT_\w+)[^\n]*\n"      # #ifndef KT_X
    r"[ \t]*#[ \t]*define[ \t]+\1\b[^\n]*\n"          # #define KT_X <default>
    r"[ \t]*#[ \t]*endif[^\n]*(?:\n|\Z)", re.M)          # #endif


def strip_default_guards(text: str) -> str:
    """``text`` without the ``#ifndef KT_X / #define KT_X default / #endif`` blocks a template may carry
    outside its header (an LLM's or an expert's): once the macros are replaced by values they mean nothing."""
    return _DEFAULT_GUARD_RE.sub("", text)


def _site_text(site: Site, value: int, original: int) -> str:
    """What a site reads for ``value``: its original text at the original value, else the site's
    expression (``{value} - 1``) folded to a number when it is one."""
    if value == original:
        return site.original_text
    text = site.render.format(value=value)
    try:
        v = expr.evaluate(text, {})
    except expr.ExprError:
        return text
    return str(v) if isinstance(v, int) and not isinstance(v, bool) else text


def _unedited(template: KernelTemplate) -> bool:
    """The template text is exactly its sites' macros in the original text (so sites can be rendered)."""
    if not template.sites:
        return False
    src = template.original_text.encode("utf-8")
    out, pos = [], 0
    for site in sorted(template.sites, key=lambda x: x.span.start):
        if site.span.start < pos:
            return False
        out += [src[pos:site.span.start], site.render.format(value=macro_name(site.param)).encode("utf-8")]
        pos = site.span.end
    out.append(src[pos:])
    return b"".join(out).decode("utf-8") == strip_header(template.text)


def render(template: KernelTemplate, cfg: dict[str, int]) -> str:
    """The file text for ``cfg``: the header removed and every ``KT_<PARAM>`` replaced by its value
    (parameters missing from ``cfg`` take their original value). An unedited structural template is
    rendered through its sites, so derived literals read as numbers (``KT_BLOCK / 2`` -> ``64``)."""
    originals = template.space.original_config()
    values = {**originals, **cfg}
    if _unedited(template) and all(s.param in values for s in template.sites):
        src = template.original_text.encode("utf-8")
        out, pos = [], 0
        for site in sorted(template.sites, key=lambda x: x.span.start):
            text = _site_text(site, values[site.param], originals.get(site.param, values[site.param]))
            out += [src[pos:site.span.start], text.encode("utf-8")]
            pos = site.span.end
        out.append(src[pos:])
        return b"".join(out).decode("utf-8")
    body = strip_default_guards(strip_header(template.text))
    if not values:
        return body

    def sub(m: re.Match) -> str:
        name = m.group(1)
        return str(values[name]) if name in values else m.group(0)

    return re.sub(r"\bKT_([A-Za-z_]\w*)\b", sub, body)


def text_edits(old: str, new: str) -> list[tuple[int, int, str]]:
    """Minimal replaced regions turning ``old`` into ``new``: (start, end, replacement) with UTF-8 byte
    offsets into ``old``, in order and not overlapping."""
    a, b = old.splitlines(True), new.splitlines(True)
    offs = [0]
    for ln in a:
        offs.append(offs[-1] + len(ln))  # character offsets
    edits = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        s, e = offs[i1], offs[i2]
        rep = "".join(b[j1:j2])
        seg = old[s:e]
        p = 0  # trim the common prefix / suffix of the replaced lines
        while p < len(seg) and p < len(rep) and seg[p] == rep[p]:
            p += 1
        q = 0
        while q < len(seg) - p and q < len(rep) - p and seg[-1 - q] == rep[-1 - q]:
            q += 1
        s2, e2 = s + p, e - q
        edits.append((s2, e2, rep[p:len(rep) - q]))
    # character offsets -> UTF-8 byte offsets
    if old.isascii():
        return edits
    return [(len(old[:s].encode("utf-8")), len(old[:e].encode("utf-8")), r) for s, e, r in edits]


def apply_edits(old: str, edits: list[tuple[int, int, str]]) -> str:
    """``old`` with ``text_edits`` applied (byte offsets)."""
    b = old.encode("utf-8")
    out, pos = [], 0
    for s, e, r in edits:
        out += [b[pos:s], r.encode("utf-8")]
        pos = e
    out.append(b[pos:])
    return b"".join(out).decode("utf-8")


def check_compiles(text: str, path: str | Path, arch: str = "sm_90", timeout: float = 300) -> None:
    """Compile ``text`` (as if it were ``path``) with ``nvcc -cubin``; raise KerntuneError with the
    compiler's message when it fails."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise KerntuneError("nvcc is not on PATH: cannot check that the rewritten file compiles", str(path))
    src_dir = Path(path).resolve().parent
    with tempfile.TemporaryDirectory(prefix="kerntune-apply-") as tmp:
        cu = Path(tmp) / Path(path).name
        if cu.suffix != ".cu":
            cu = cu.with_suffix(".cu")
        cu.write_text(text, encoding="utf-8")
        cmd = [nvcc, "-cubin", f"-arch={arch}", "-I", str(src_dir), "-o", str(Path(tmp) / "out.cubin"), str(cu)]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise KerntuneError(f"nvcc took longer than {timeout:.0f} s; the file was not changed", str(path))
        if r.returncode != 0:
            log = (r.stderr or r.stdout).replace(str(cu), str(path)).strip()
            raise KerntuneError(f"the rewritten file does not compile, so it was not changed:\n{log}", str(path))


def apply_to_file(path: str | Path, template: KernelTemplate, cfg: dict[str, int], check_compile: bool = True,
                  arch: str = "sm_90") -> str:
    """Rewrite ``path`` to ``cfg`` (after checking it compiles); refuse if the file changed since it was
    templatized. Returns the new text."""
    path = Path(path)
    current = path.read_text(encoding="utf-8")
    if sha256_text(current) != template.original_hash:
        raise KerntuneError(f"{path.name} changed since kernel '{template.kernel}' was templatized; "
                            "templatize (and tune) again before applying", str(path))
    new = render(template, cfg)
    if check_compile:
        check_compiles(new, path, arch)
    tmp = path.with_name(f".{path.name}.kerntune-tmp")
    tmp.write_text(new, encoding="utf-8")
    os.replace(tmp, path)
    return new
