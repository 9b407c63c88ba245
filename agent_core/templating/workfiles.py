"""The template files a user can read and edit: ``STEM.KERNEL.kt.cu`` and ``STEM.KERNEL.space.toml`` in
``.kerntune/`` beside the source (written by ``kerntune templatize``, read back by every session)."""

from __future__ import annotations

import os
from pathlib import Path

from agent_core.source.cuda_parse import parse_cuda
from agent_core.source.spec import find_spec
from agent_core.templating.templatize import templatize
from agent_core.model import KernelTemplate, KerntuneError, sha256_text
from agent_core.templating.space import _line_of, space_from_toml, space_to_toml, template_file_names


def write_template_files(template: KernelTemplate, workdir: str | Path) -> tuple[Path, Path]:
    """Write ``STEM.KERNEL.kt.cu`` and ``STEM.KERNEL.space.toml`` into ``workdir``; return their paths."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    tname, sname = template_file_names(template.path, template.kernel)
    source = os.path.relpath(Path(template.path).resolve(), workdir.resolve().parent)
    tpath, spath = workdir / tname, workdir / sname
    tpath.write_text(template.text, encoding="utf-8")
    spath.write_text(space_to_toml(template, source=Path(source).as_posix()), encoding="utf-8")
    return tpath, spath


def _source_facts(source_path: str, kernel: str, source_text: str) -> tuple[set[str] | None, KernelTemplate | None]:
    """(size names of the kernel's spec, its structural template), each None when unavailable: the size
    names check constraints exactly; the structural template gives an unedited template file its sites."""
    try:
        cf = parse_cuda(source_text, str(source_path))
    except Exception:  # the source is reported where it is parsed for real
        return None, None
    names = structural = None
    try:
        s = find_spec(cf, kernel)
        if s is not None and s.sizes and isinstance(s.sizes[0], dict):
            names = set(s.sizes[0])
    except Exception:  # no spec yet or a broken one: reported where the spec is used
        pass
    try:
        structural = templatize(cf, kernel)
    except Exception:  # not structurally tunable: the files are all there is
        pass
    return names, structural


def read_template_files(workdir: str | Path, source_path: str | Path, kernel: str,
                        source_text: str) -> KernelTemplate | None:
    """The template and space written by ``write_template_files`` (possibly edited), or None when absent.
    Raises KerntuneError when the source changed since templatizing or the files are broken."""
    workdir = Path(workdir)
    tname, sname = template_file_names(source_path, kernel)
    spath = workdir / sname
    if not spath.is_file():
        return None
    stext = spath.read_text(encoding="utf-8")
    size_names, structural = _source_facts(str(source_path), kernel, source_text)
    space, meta = space_from_toml(stext, str(spath), size_names)
    if meta["kernel"] != kernel:
        raise KerntuneError(f"space file is for kernel '{meta['kernel']}', not '{kernel}'", str(spath),
                            _line_of(stext, None, "kernel"), field_name="kernel")
    if meta.get("original_hash") and meta["original_hash"] != sha256_text(source_text):
        raise KerntuneError(
            f"kernel '{kernel}' changed since it was templatized ({Path(source_path).name} differs from the "
            f"file the template was made from): re-run `kerntune templatize {source_path} -k {kernel} --force` "
            "(your edits to the space file will be replaced)", str(spath), _line_of(stext, None, "original_hash"),
            field_name="original_hash")
    tpath = workdir / (meta.get("template") or tname)
    if not tpath.is_file():
        raise KerntuneError(f"template file {tpath} is missing: re-run `kerntune templatize {source_path} "
                            f"-k {kernel} --force`", str(spath), _line_of(stext, None, "template"),
                            field_name="template")
    text = tpath.read_text(encoding="utf-8")
    sites = list(structural.sites) if structural is not None and structural.text == text else []
    return KernelTemplate(kernel=kernel, path=str(source_path), original_text=source_text, text=text,
                          space=space, sites=sites, origin=meta.get("origin") or "user", launch=meta["launch"],
                          entry=meta.get("entry"))
