"""Templated kernels: which instantiation the spec tunes, and which one each launch makes.

A kernel template (``template <typename scalar_t> __global__ void k(...)``) is tuned for one instantiation: the
spec's ``template_args``, or else the one its launches name, or else the one the spec's buffer types imply. An
expert's or an LLM's kernel is written back as an explicit specialization of that instantiation
(``template <> __global__ void k<__half>(...)``) and the template stays for every other one. Each launch then
either makes that instantiation (``k<__half><<<...>>>``: it gets the tuned launch), another one
(``k<float><<<...>>>``: it keeps its launch), or one that depends on the enclosing function's own template
parameters (``k<T><<<...>>>`` inside ``template <typename T> void launch(...)``): an ``if`` on
``std::is_same<T, __half>::value`` picks the launch for each instantiation of the launcher.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agent_core import expr
from agent_core.model import CudaFile, Kernel, KerntuneError, LaunchSite, TuningSpec
from agent_core.source.spec import base_type

# spellings of one type in CUDA's headers (typedefs): compared as one
_ALIASES = {"half": "__half", "nv_bfloat16": "__nv_bfloat16", "__bfloat16": "__nv_bfloat16",
            "signed": "int", "signedint": "int", "unsigned": "unsignedint", "std::int8_t": "int8_t",
            "std::uint8_t": "uint8_t", "std::int32_t": "int32_t", "std::uint32_t": "uint32_t",
            "std::int64_t": "int64_t", "std::uint64_t": "uint64_t", "std::size_t": "size_t"}
# types whose identity is known without compiling: two different ones are two instantiations
_KNOWN_TYPES = {"float", "double", "__half", "__nv_bfloat16", "int", "unsignedint", "char", "signedchar",
                "unsignedchar", "short", "unsignedshort", "long", "unsignedlong", "longlong", "unsignedlonglong",
                "bool", "int8_t", "uint8_t", "int16_t", "uint16_t", "int32_t", "uint32_t", "int64_t", "uint64_t",
                "size_t", "__nv_fp8_e4m3", "__nv_fp8_e5m2", "__half2", "__nv_bfloat162", "float2", "float4"}
# the storage types a spec's dtype names unambiguously (u8 may be fp8 or uint8_t: not inferred)
_DTYPE_CTYPE = {"f32": "float", "f16": "__half", "bf16": "__nv_bfloat16", "f64": "double"}


@dataclass
class SiteInstance:
    """What one launch instantiates, against the instantiation the spec tunes."""
    kind: str  # "same": that instantiation; "other": another one; "depends": decided per launcher instantiation
    condition: str | None = None  # for "depends": the C++ condition that is true for the spec's instantiation (None:
    # none can be written, a template template argument differs)
    needs_type_traits: bool = False  # the condition uses std::is_same


def _macros(cf: CudaFile) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in cf.defines:
        try:
            out[d.name] = expr.evaluate_int(d.value, {})
        except Exception:
            continue
    return out


def _site_env(cf: CudaFile, site: LaunchSite) -> dict[str, int]:
    """The integer constants a launch's template arguments may name: the file's macros and the launching
    function's locals with a constant initializer (``constexpr int kThreads = 128;``)."""
    env = _macros(cf)
    for name, hv in site.host_vars.items():
        if hv.init is None:
            continue
        try:
            env[name] = expr.evaluate_int(hv.init.text, env)
        except Exception:
            continue
    return env


def _resolved(k: Kernel, args: list[str], env: dict[str, int]) -> list[str]:
    """``args`` with each value argument that is a constant of the launch's scope written as its value (the
    specialization is written where the launch's locals are not in scope)."""
    out = []
    for tp, a in zip(k.template_params, args):
        if tp.kind == "value" and re.search(r"[A-Za-z_]", a) and a.strip() not in ("true", "false"):
            c, known = canonical(a, env)
            out.append(c if known else a)
        else:
            out.append(a)
    return out + args[len(out):]


def canonical(arg: str, macros: dict[str, int] | None = None) -> tuple[str, bool]:
    """(a spelling of the template argument ``arg`` that two equal arguments share, whether it is known without
    compiling: an integer constant, true/false, or a type from CUDA's or C's headers)."""
    a = re.sub(r"\s+", "", arg)
    a = re.sub(r"^::", "", a)
    try:
        v = expr.evaluate_int({"true": "1", "false": "0"}.get(a, re.sub(r"(?<=\d)[uUlL]+\b", "", a)), macros or {})
        return str(v), True
    except Exception:
        pass
    a = _ALIASES.get(a, a)
    return a, a in _KNOWN_TYPES


def _args_with_defaults(k: Kernel, args: list[str]) -> list[str] | None:
    """``args`` completed with the kernel's default template arguments; None when one is missing."""
    out = list(args)
    for tp in k.template_params[len(args):]:
        if tp.default is None:
            return None
        out.append(tp.default)
    return out


def spec_instantiation(cf: CudaFile, k: Kernel, spec: TuningSpec) -> list[str]:
    """The template arguments of the instantiation of ``k`` the spec tunes (as C++ text). KerntuneError where it
    cannot be told: the launches name several and the spec names none, or none is named and the buffer types
    do not give every type parameter."""
    if spec.template_args is not None:
        return list(spec.template_args)
    closed: dict[tuple[str, ...], list[str]] = {}
    for site in k.launch_sites:
        args = site_template_args(cf, k, site)
        if args is None or "decltype(" in "".join(args):
            continue
        env = _site_env(cf, site)
        if enclosing_template_params(cf.text, site) & {w for a in args for w in re.findall(r"[A-Za-z_]\w*", a)}:
            # launched from a templated launcher: the instantiations its callers name (launch<__half, Mul>(...))
            for got in _through_launcher(cf, site, args):
                closed.setdefault(tuple(canonical(a, env)[0] for a in got), _resolved(k, got, env))
            continue
        closed.setdefault(tuple(canonical(a, env)[0] for a in args), _resolved(k, args, env))
    if len(closed) == 1:
        return next(iter(closed.values()))
    if len(closed) > 1:
        made = "; ".join(f"{k.name}<{', '.join(v)}>" for v in closed.values())
        raise KerntuneError(f"'{k.name}' is launched in several instantiations ({made}): say which one the spec "
                            "tunes with template_args = [...] in its spec", cf.path, k.span.line)
    # no launch names it: the spec's buffer types give the type parameters (T* x with x: bf16[...] -> T = bf16)
    dtypes = {a.name: a.dtype for a in spec.args}
    out: list[str] = []
    for tp in k.template_params:
        if tp.kind == "type":
            seen = {_DTYPE_CTYPE.get(dtypes.get(p.name, "")) for p in k.params if base_type(p.type) == tp.name}
            if len(seen) == 1 and None not in seen:
                out.append(seen.pop())
                continue
        if tp.default is not None:
            out.append(tp.default)
            continue
        raise KerntuneError(f"cannot tell which instantiation of '{k.name}' the spec tunes (its launches do not name "
                            f"'{tp.name}' and the buffers' types do not give it): add template_args = [...] to its "
                            "spec", cf.path, k.span.line)
    return out


def _through_launcher(cf: CudaFile, site: LaunchSite, args: list[str]) -> list[list[str]]:
    """The kernel's template arguments at ``site`` (written over the template parameters of the function template
    around it: ``k<scalar_t, func_t><<<...>>>`` in ``template <typename scalar_t, typename func_t> void launch``)
    for each call of that function in the file that writes its template arguments out
    (``launch<__half, ops::MulFunctor>(...)``); [] where there is none, or the launcher is not a plain function
    template."""
    from agent_core.source.cuda_parse import parse_tree
    b = cf.text.encode("utf-8")
    root = parse_tree(b).root_node
    t = lambda n: b[n.start_byte:n.end_byte].decode("utf-8", "replace")  # noqa: E731
    node = root.descendant_for_byte_range(site.span.start, site.span.end)
    while node is not None and node.type != "function_definition":
        node = node.parent
    tmpl = node.parent if node is not None else None
    if tmpl is None or tmpl.type != "template_declaration" or tmpl.parent is None or \
            tmpl.parent.type == "template_declaration":
        return []
    names = []
    plist = tmpl.child_by_field_name("parameters")
    for c in (plist.named_children if plist is not None else []):
        d = c.child_by_field_name("declarator") or c.child_by_field_name("name") or \
            next((x for x in c.named_children if x.type in ("type_identifier", "identifier")), None)
        while d is not None and d.type not in ("identifier", "type_identifier"):
            d = d.child_by_field_name("declarator")
        if d is None:
            return []
        names.append(t(d))
    d = node.child_by_field_name("declarator")
    while d is not None and d.type != "function_declarator":
        d = d.child_by_field_name("declarator")
    fn = d.child_by_field_name("declarator") if d is not None else None
    if fn is None or fn.type != "identifier":
        return []
    out = []
    stack = [root]
    while stack:
        n = stack.pop()
        stack.extend(n.named_children)
        if n.type != "call_expression":
            continue
        f = n.child_by_field_name("function")
        if f is None or f.type != "template_function" or t(f.child_by_field_name("name")) != t(fn):
            continue
        targs = [t(x).strip() for x in f.child_by_field_name("arguments").named_children if x.type != "comment"]
        if len(targs) != len(names):
            continue
        env = dict(zip(names, targs))
        out.append([re.sub(r"[A-Za-z_]\w*", lambda m: env.get(m.group(0), m.group(0)), a) for a in args])
    return out


def enclosing_template_params(text: str, site: LaunchSite) -> set[str]:
    """The template parameter names of the functions and classes around ``site`` (``T`` in
    ``template <typename T> void launch(...) { k<T><<<...>>>(...); }``)."""
    from agent_core.source.cuda_parse import parse_tree
    b = text.encode("utf-8")
    node = parse_tree(b).root_node.descendant_for_byte_range(site.span.start, site.span.end)
    names: set[str] = set()
    while node is not None:
        if node.type == "template_declaration":
            plist = node.child_by_field_name("parameters")
            for c in (plist.named_children if plist is not None else []):
                for x in c.named_children:
                    if x.type in ("type_identifier", "identifier"):
                        names.add(b[x.start_byte:x.end_byte].decode("utf-8", "replace"))
                d = c.child_by_field_name("declarator") or c.child_by_field_name("name")
                while d is not None and d.type not in ("identifier", "type_identifier"):
                    d = d.child_by_field_name("declarator")
                if d is not None:
                    names.add(b[d.start_byte:d.end_byte].decode("utf-8", "replace"))
        node = node.parent
    return names


def _enclosing_params(text: str, site: LaunchSite) -> dict[str, str]:
    """The parameters of the function around ``site``: name -> type as written (without the name)."""
    from agent_core.source.cuda_parse import parse_tree
    b = text.encode("utf-8")
    node = parse_tree(b).root_node.descendant_for_byte_range(site.span.start, site.span.end)
    while node is not None and node.type != "function_definition":
        node = node.parent
    d = node.child_by_field_name("declarator") if node is not None else None
    while d is not None and d.type != "function_declarator":
        d = d.child_by_field_name("declarator")
    plist = d.child_by_field_name("parameters") if d is not None else None
    out: dict[str, str] = {}
    for c in (plist.named_children if plist is not None else []):
        typ, dec = c.child_by_field_name("type"), c.child_by_field_name("declarator")
        if typ is None or dec is None:
            continue
        ptr = ""
        while dec is not None and dec.type not in ("identifier",):
            ptr += "*" if dec.type == "pointer_declarator" else ""
            dec = dec.child_by_field_name("declarator")
        if dec is not None:
            out[b[dec.start_byte:dec.end_byte].decode("utf-8", "replace")] = \
                b[typ.start_byte:typ.end_byte].decode("utf-8", "replace") + ptr
    return out


def site_template_args(cf: CudaFile, k: Kernel, site: LaunchSite) -> list[str] | None:
    """The template arguments ``site`` gives, as C++ text valid there: written out (``k<T, 4><<<...>>>``; those
    not written after them as follows), or deduced from its arguments (``k<<<...>>>(x, ...)`` with the kernel's
    ``T* x``): the enclosing function's declared type of an argument that is one of its parameters, else the
    argument's decayed type. None where a template parameter is neither written nor deducible nor defaulted."""
    written = [a.text.strip() for a in site.template_args]
    if written and _args_with_defaults(k, written) is not None:
        return _args_with_defaults(k, written)
    outer = None
    out: list[str] = list(written)  # the leading ones written (MXNet's `k<OP, negate, AType, LType><<<...>>>`), the
    for tp in k.template_params[len(written):]:  # rest deduced from the arguments or defaulted
        i = next((j for j, p in enumerate(k.params) if tp.kind == "type" and base_type(p.type) == tp.name), None)
        if i is None or i >= len(site.args):
            if tp.default is None:
                return None
            out.append(tp.default)
            continue
        a = site.args[i].text.strip()
        if re.fullmatch(r"[A-Za-z_]\w*", a):
            outer = outer if outer is not None else _enclosing_params(cf.text, site)
            if a in outer:
                out.append(base_type(outer[a]))
                continue
        out.append(f"std::remove_cv_t<std::remove_pointer_t<std::decay_t<decltype({a})>>>")
    return out


def site_instance(cf: CudaFile, k: Kernel, site: LaunchSite, args: list[str]) -> SiteInstance:
    """What ``site`` instantiates against ``args`` (the spec's instantiation, ``spec_instantiation``).
    KerntuneError for a launch whose template arguments cannot be told (neither written nor deducible)."""
    mine = site_template_args(cf, k, site)
    if mine is None:
        raise KerntuneError(f"cannot tell which instantiation of '{k.name}' this launch makes: write its template "
                            f"arguments out ({k.name}<...><<<...>>>)", cf.path, site.span.line, site.span.col)
    want = _args_with_defaults(k, args) or args
    if len(mine) != len(want):
        raise KerntuneError(f"this launch of '{k.name}' gives {len(site.template_args)} template arguments; the "
                            f"kernel takes {len(k.template_params)}", cf.path, site.span.line, site.span.col)
    macros = _site_env(cf, site)
    outer = enclosing_template_params(cf.text, site)
    parts, same, known, testable = [], True, True, True
    for tp, m, w in zip(k.template_params, mine, want):
        cm, km = canonical(m, macros)
        cw, kw = canonical(w, macros)
        if cm == cw:
            continue
        same = False
        depends = bool(set(re.findall(r"[A-Za-z_]\w*", m)) & outer) or "decltype(" in m
        known = known and km and kw and not depends
        if tp.kind == "template":  # a class template argument: no expression tells two of them apart
            testable = False
            continue
        parts.append(f"std::is_same<{m}, {w}>::value" if tp.kind == "type" else f"({m}) == ({w})")
    if same:
        return SiteInstance("same")
    if known:
        return SiteInstance("other")
    return SiteInstance("depends", " && ".join(parts) if testable and parts else None,
                        any(p.startswith("std::is_same") for p in parts))


def specialization_name(k: Kernel, args: list[str]) -> str:
    return f"{k.name}<{', '.join(args)}>"


def substitute_template_params(text: str, k: Kernel, args: list[str]) -> str:
    """``text`` (the kernel's parameter list) with each template parameter's name replaced by its argument."""
    full = _args_with_defaults(k, args) or args
    subst = {tp.name: a for tp, a in zip(k.template_params, full) if tp.name}
    if not subst:
        return text
    return re.sub(r"\b(" + "|".join(map(re.escape, subst)) + r")\b", lambda m: subst[m.group(1)], text)


def explicit_specializations(cf: CudaFile, name: str) -> list[tuple[list[str], int]]:
    """The explicit specializations of the kernel template ``name`` in the file: (their template arguments as
    written, the line of each)."""
    from agent_core.source.cuda_parse import is_explicit_specialization, parse_tree
    b = cf.text.encode("utf-8")
    out = []
    stack = [parse_tree(b).root_node]
    while stack:
        n = stack.pop()
        if n.type == "function_definition":
            d = n.child_by_field_name("declarator")
            while d is not None and d.type != "function_declarator":
                d = d.child_by_field_name("declarator")
            nn = d.child_by_field_name("declarator") if d is not None else None
            if nn is not None and is_explicit_specialization(nn):
                tf = nn
                while tf.type == "qualified_identifier":
                    tf = tf.child_by_field_name("name")
                fname = tf.child_by_field_name("name")
                targs = tf.child_by_field_name("arguments")
                if fname is not None and b[fname.start_byte:fname.end_byte].decode("utf-8", "replace") == name:
                    args = [b[c.start_byte:c.end_byte].decode("utf-8", "replace").strip()
                            for c in (targs.named_children if targs is not None else []) if c.type != "comment"]
                    out.append((args, n.start_point.row))
            continue
        stack.extend(n.children)
    return sorted(out, key=lambda x: x[1])


def specialized_at(cf: CudaFile, k: Kernel, args: list[str]) -> int | None:
    """The line of the explicit specialization of ``k`` for ``args`` in the file, or None."""
    want = [canonical(a)[0] for a in args]
    return next((line for have, line in explicit_specializations(cf, k.name)
                 if [canonical(a)[0] for a in have] == want), None)
