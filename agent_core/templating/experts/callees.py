"""The ``__device__`` functions of the file that a kernel calls, read as part of its body.

Real kernels often keep their math and even all their memory accesses in helpers (``norm_row(y + off, x + off,
g, n, eps)``, ``blockReduceSum``, ``silu``, ``apply_rotary``): what the kernel computes is then in the callee. The
evidence reads the kernel's body followed by one block per call of such a helper (transitively, a few levels
deep), the helper's body with each parameter written as the call's argument in parentheses, so that
``y[i] = v`` in the helper reads as ``(y + off)[i] = v``: a write of the kernel's ``y``. Only the text is made
here; the evidence parses and reads it like any body. A call whose callee is not defined in the file (a library
function, a function pointer passed as a template argument) adds nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from tree_sitter import Node

from agent_core.source.cuda_parse import template_params_of
from agent_core.source.macros import device_head, function_head, qualifier_macros

MAX_DEPTH = 4  # helpers of helpers of ...: deeper calls are left as calls
MAX_CHARS = 60_000  # the inlined text of one kernel at most (a helper called in a loop of unrolled calls)


def _walk(n: Node):
    stack = [n]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(reversed(x.children))


def _declarator_name(n: Node | None) -> str | None:
    while n is not None and n.type not in ("identifier", "field_identifier", "qualified_identifier",
                                           "destructor_name", "operator_name"):
        if n.type == "reference_declarator":  # `const T& val`: the name is its one named child, no field
            n = next((c for c in n.named_children), None)
            continue
        n = n.child_by_field_name("declarator")
    if n is None or n.type != "identifier":
        return None
    return n.text.decode("utf-8", "replace")


def _function_declarator(fn: Node) -> Node | None:
    d = fn.child_by_field_name("declarator")
    while d is not None and d.type != "function_declarator":
        d = d.child_by_field_name("declarator")
    return d


def device_functions(root: Node, src: bytes | None = None) -> dict[str, list[tuple[list[str], Node]]]:
    """Name → (parameter names, body) of every ``__device__`` function defined in the file (in namespaces and
    templates too; not ``__global__`` ones, not class members). ``src``: the file's text, whose function-qualifier
    macros (``HOSTDEVICE`` for ``__host__ __device__``) declare device functions too."""
    out: dict[str, list[tuple[list[str], Node]]] = {}
    macros = qualifier_macros(src) if src is not None else {}
    for n in _walk(root):
        if n.type != "function_definition":
            continue
        body = n.child_by_field_name("body")
        fd = _function_declarator(n)
        if body is None or fd is None:
            continue
        head = function_head(src, n.start_byte, body.start_byte, macros) if src is not None \
            else n.text[:body.start_byte - n.start_byte]
        if not device_head(head, macros):
            continue
        name = _declarator_name(fd.child_by_field_name("declarator"))
        plist = fd.child_by_field_name("parameters")
        if name is None or plist is None:
            continue
        params = []
        for p in plist.named_children:
            if p.type in ("parameter_declaration", "optional_parameter_declaration"):
                params.append(_declarator_name(p.child_by_field_name("declarator")) or "")
        out.setdefault(name, []).append((params, body))
    return out


def forwarding(root: Node, src: bytes | None = None) -> dict[str, str]:
    """Name → the function it forwards to, of the file's ``__device__`` functions whose body only returns a call of a
    function the file does not define with their own parameters in order (``rsqrt(const float& x) { return
    rsqrtf(x); }``): a call of one is a call of that function. Of overloads, the first defined (the one
    ``inlined_blocks`` reads)."""
    fns = device_functions(root, src)
    out: dict[str, str] = {}
    for name, defs in fns.items():
        params, body = defs[0]
        stmts = [c for c in body.named_children if c.type != "comment"]
        if len(stmts) != 1 or stmts[0].type != "return_statement" or not stmts[0].named_children:
            continue
        call = stmts[0].named_children[0]
        if call.type != "call_expression":
            continue
        callee = _callee_name(call)
        args = call.child_by_field_name("arguments")
        given = [a.text.decode("utf-8", "replace").strip() for a in args.named_children if a.type != "comment"] \
            if args is not None else []
        if callee and callee not in fns and params and given == params:
            out[name] = callee
    return out


def _norm(text: str) -> str:
    return "".join(text.split())


def member_functions(root: Node, src: bytes | None = None) -> dict[tuple[str, str | None], dict[str, tuple[list[str], Node]]]:
    """(struct name, its specialization's template arguments without whitespace, None for the primary template)
    → member name → (parameter names, body) of the ``__device__`` member functions defined in a struct or class of
    the file: the activation functors passed as a type (``GeluActivation<half2>::apply``, FasterTransformer's
    ``template <typename> class Activation``); ``src`` as ``device_functions`` reads it."""
    out: dict[tuple[str, str | None], dict[str, tuple[list[str], Node]]] = {}
    macros = qualifier_macros(src) if src is not None else {}
    for n in _walk(root):
        if n.type not in ("struct_specifier", "class_specifier"):
            continue
        name, body = n.child_by_field_name("name"), n.child_by_field_name("body")
        if name is None or body is None:
            continue
        if name.type == "template_type":
            tname, targs = name.child_by_field_name("name"), name.child_by_field_name("arguments")
            if tname is None or targs is None:
                continue
            key = (tname.text.decode("utf-8", "replace"), _norm(targs.text.decode("utf-8", "replace"))[1:-1])
        else:
            key = (name.text.decode("utf-8", "replace"), None)
        for f in body.named_children:
            if f.type != "function_definition":
                continue
            fb, fd = f.child_by_field_name("body"), _function_declarator(f)
            if fb is None or fd is None or not device_head(
                    function_head(src, f.start_byte, fb.start_byte, macros) if src is not None
                    else f.text[:fb.start_byte - f.start_byte],
                    macros):
                continue
            d = fd.child_by_field_name("declarator")
            plist = fd.child_by_field_name("parameters")
            if d is None or d.type not in ("field_identifier", "identifier") or plist is None:
                continue
            params = [_declarator_name(p.child_by_field_name("declarator")) or "" for p in plist.named_children
                      if p.type in ("parameter_declaration", "optional_parameter_declaration")]
            out.setdefault(key, {})[d.text.decode("utf-8", "replace")] = (params, fb)
    return out


def _member(members: dict, types: dict[str, str], scope: str, name: str) -> list[tuple[list[str], Node]]:
    """The member function ``scope::name`` where ``scope`` is a struct (``GeluActivation<half2>``) or a type
    template parameter ``types`` gives one for (``Activation``): the specialization for those arguments, else the
    primary template's."""
    t = _norm(types.get(scope, scope))
    base, _, rest = t.partition("<")
    base = base.split("::")[-1]
    args = rest[:-1] if rest.endswith(">") else None
    if args is not None and types:  # `Ops<T>::exp` in a kernel instantiated with T = half: `Ops<half>::exp`
        args = re.sub(r"[A-Za-z_]\w*", lambda m: _norm(types.get(m.group(0), m.group(0))), args)
    for key in ((base, args), (base, None)):
        if key in members and name in members[key]:
            return [members[key][name]]
    return []


_UNARY_TOO = {"+", "-", "*", "&"}  # binary operators that are also unary: `(y) + off` parses as a cast of `+off`


def _left_of_ambiguous(x: Node) -> bool:
    """``x`` is the left operand of a binary ``+``, ``-``, ``*`` or ``&``: parenthesized alone there, a name would
    read as a cast (``(y) + off`` as ``(y)(+off)``)."""
    p = x.parent
    if p is None or p.type != "binary_expression" or p.child_by_field_name("left") != x:
        return False
    op = p.child_by_field_name("operator")
    return op is not None and op.text.decode("utf-8", "replace") in _UNARY_TOO


def _substituted(src: bytes, node: Node, names: dict[str, str], bare: dict[str, str] | None = None) -> str:
    """``node``'s text with every identifier named in ``names`` replaced by its text. A name the parser took for a
    type is one too (``const R g(gamma[i]);`` parses as a function declaration whose parameter's type is ``gamma``:
    inside the helper a parameter's name hides any type of that name). ``bare``: the parameters whose argument is
    a lone name, written without the parentheses where they would make a cast (the left operand of ``+``, ``-``,
    ``*``, ``&``)."""
    if not names:
        return src[node.start_byte:node.end_byte].decode("utf-8", "replace")
    bare = bare or {}
    parts, at = [], node.start_byte
    for x in _walk(node):
        if x.type in ("identifier", "type_identifier") and x.text.decode("utf-8", "replace") in names:
            name = x.text.decode("utf-8", "replace")
            parts.append(src[at:x.start_byte].decode("utf-8", "replace"))
            parts.append(bare[name] if name in bare and _left_of_ambiguous(x) else names[name])
            at = x.end_byte
    parts.append(src[at:node.end_byte].decode("utf-8", "replace"))
    return "".join(parts)


def constructors(root: Node) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Class or struct name → (its constructor's parameter names, member → the parameter its initializer list sets it
    from) for the file's accessor classes (ExLlama's ``MatrixView_half(const half* data, int height, int width) :
    data(data), height(height), width(width) {}``): what an object of it made from a kernel's buffer reads through."""
    out: dict[str, tuple[list[str], dict[str, str]]] = {}
    for n in _walk(root):
        if n.type not in ("struct_specifier", "class_specifier"):
            continue
        name, body = n.child_by_field_name("name"), n.child_by_field_name("body")
        if name is None or body is None or name.type != "type_identifier":
            continue
        cname = name.text.decode("utf-8", "replace")
        for f in body.named_children:
            fd = _function_declarator(f) if f.type == "function_definition" else None
            inits = next((c for c in f.named_children if c.type == "field_initializer_list"), None)
            d = fd.child_by_field_name("declarator") if fd is not None else None
            if d is None or inits is None or d.text.decode("utf-8", "replace") != cname:
                continue
            plist = fd.child_by_field_name("parameters")
            params = [_declarator_name(p.child_by_field_name("declarator")) or "" for p in plist.named_children
                      if p.type in ("parameter_declaration", "optional_parameter_declaration")] if plist else []
            members = {}
            for fi in inits.named_children:
                fld = next((c for c in fi.named_children if c.type == "field_identifier"), None)
                arg = next((c for c in fi.named_children if c.type == "argument_list"), None)
                if fld is not None and arg is not None and arg.named_child_count == 1 and \
                        arg.named_children[0].text.decode("utf-8", "replace") in params:
                    members[fld.text.decode("utf-8", "replace")] = arg.named_children[0].text.decode("utf-8", "replace")
            if members:
                out[cname] = (params, members)
    return out


def objects(src: bytes, body: Node, ctors: dict) -> dict[str, tuple[str, list[str]]]:
    """The kernel's local objects of the accessor classes ``ctors`` (``MatrixView_half_rw x_(x, height, width);``,
    which the grammar reads as a function declaration, or ``T v{a, b}`` / ``T v = T(a, b)``): name → (class, the
    constructor's argument texts)."""
    out: dict[str, tuple[str, list[str]]] = {}
    if not ctors:
        return out
    for n in _walk(body):
        if n.type != "declaration":
            continue
        t = n.child_by_field_name("type")
        cname = t.text.decode("utf-8", "replace") if t is not None else ""
        if cname not in ctors:
            continue
        for d in n.named_children:
            if d.type == "function_declarator":  # `T x_(x, h, w)`: its "parameters" are the arguments
                name, plist = d.child_by_field_name("declarator"), d.child_by_field_name("parameters")
                args = [src[p.start_byte:p.end_byte].decode("utf-8", "replace") for p in plist.named_children] \
                    if plist is not None else []
            elif d.type == "init_declarator":
                name, value = d.child_by_field_name("declarator"), d.child_by_field_name("value")
                if value is None or value.type not in ("argument_list", "initializer_list"):
                    continue
                args = [src[a.start_byte:a.end_byte].decode("utf-8", "replace") for a in value.named_children
                        if a.type != "comment"]
            else:
                continue
            if name is not None and name.type == "identifier":
                out[name.text.decode("utf-8", "replace")] = (cname, args)
    return out


def _callee_name(call: Node) -> str:
    f = call.child_by_field_name("function")
    text = f.text.decode("utf-8", "replace") if f is not None else ""
    return text.split("<")[0].split("::")[-1].strip()


def function_arguments(names: list[str], args: list[str]) -> dict[str, str]:
    """Template parameter → the function its instantiation passes (``ACT_FN`` → ``silu_kernel`` of
    ``act_and_mul_kernel<T, serving::silu_kernel<T>, true>``), for the arguments that name one."""
    out = {}
    for n, a in zip(names, args):
        f = a.strip().lstrip("&").strip().split("<")[0].split("::")[-1].strip()
        if f.isidentifier():
            out[n] = f
    return out


def call_template_arguments(call: Node) -> list[str]:
    """The explicit template arguments of a call (``f<kUseUE8M0, 4>(x)``: ["kUseUE8M0", "4"]); [] where none."""
    f = call.child_by_field_name("function")
    args = f.child_by_field_name("arguments") if f is not None and f.type == "template_function" else None
    return [a.text.decode("utf-8", "replace").strip() for a in args.named_children if a.type != "comment"] \
        if args is not None else []


def inlined_blocks(src: bytes, root: Node, body: Node, functions: dict[str, str] | None = None,
                   types: dict[str, str] | None = None,
                   accessors: tuple[dict, dict] | None = None,
                   instantiate: Callable | None = None) -> tuple[list[str], set[str]]:
    """The blocks to read after the kernel's ``body``: one per call of a ``__device__`` function of the file, in
    the order the calls appear (a helper's own calls after it), each the helper's body with its parameters
    written as the call's arguments; and the names of the functions inlined. ``functions``: template parameters
    that stand for a function (``function_arguments``): a call of one is a call of that function (a helper that
    passes the parameter on under its own name is followed too). ``types``: type template parameters → the type
    the instantiation gives them: a static member call of one (``Activation::apply(v)``) is a call of that struct's
    member (its specialization for those arguments, else the primary template's); so is one of a struct named
    in the call (``GeluActivation<half2>::apply(v)``). ``accessors``: (``constructors``, ``objects``) of the kernel,
    where the caller has them: a method call of such an object is a call of its class's member, the object's members
    written as what its constructor was given. ``instantiate(src, body, params, args, env)``: where a helper is a
    template called with explicit arguments (``calculate_fp8_scales<kUseUE8M0>(...)``), the text of its body with
    the ``if constexpr`` branches those arguments leave out blanked, as (text, body node, env of its value template
    parameters), ``env`` the values the caller's template parameters have (``evidence._helper_instance``); nothing
    is left out without it."""
    fns = device_functions(root, src)
    functions = functions or {}
    members = member_functions(root, src) if types is not None else {}
    ctors, objs = accessors if accessors is not None and members else ({}, {})
    if not fns and not members:
        return [], set()
    blocks: list[str] = []
    inlined: set[str] = set()
    size = 0

    def visit(node: Node, names: dict[str, str], stack: tuple[int, ...], src: bytes = src,
              env: dict | None = None) -> None:
        nonlocal size
        for x in _walk(node):
            if x.type != "call_expression" or x == node:
                continue
            name = _callee_name(x)
            defs = fns.get(functions.get(name, name))
            f = x.child_by_field_name("function")
            if members and f is not None and f.type == "qualified_identifier":
                scope, _, member = f.text.decode("utf-8", "replace").rpartition("::")
                defs = _member(members, types or {}, scope, member.split("<")[0].strip()) or defs
            held: dict[str, str] = {}  # an accessor object's members, as the arguments it was made from
            method = None  # the accessor's method called
            if objs and f is not None and f.type == "field_expression":
                obj, fld = f.child_by_field_name("argument"), f.child_by_field_name("field")
                made = objs.get(obj.text.decode("utf-8", "replace")) if obj is not None else None
                if made is not None and fld is not None:
                    cname, cargs = made
                    method = fld.text.decode("utf-8", "replace")
                    defs = _member(members, {}, cname, method) or defs
                    cparams, cmembers = ctors[cname]
                    given_ctor = dict(zip(cparams, cargs))
                    held = {m: f"({given_ctor[p].strip()})" for m, p in cmembers.items() if p in given_ctor}
            args = x.child_by_field_name("arguments")
            if not defs or args is None:
                continue
            given = [a for a in args.named_children if a.type != "comment"]
            fit = [d for d in defs if len(d[0]) == len(given)] or [d for d in defs if len(d[0]) > len(given)]
            if not fit:
                continue
            params, callee = fit[0]
            if callee.start_byte in stack or len(stack) >= MAX_DEPTH:
                continue
            args_text = {p: _substituted(src, a, names).strip() for p, a in zip(params, given) if p}
            inner = {**held, **{p: f"({t})" for p, t in args_text.items()}}
            bare = {p: t for p, t in args_text.items() if t.isidentifier()}
            csrc, cbody, cenv = src, callee, env
            targs = call_template_arguments(x)
            if instantiate is not None and targs and callee.parent is not None:
                tparams = template_params_of(callee.parent, lambda n: n.text.decode("utf-8", "replace"))
                if tparams:
                    csrc, cbody, cenv = instantiate(src, callee, tparams, targs, env or {})
            text = _substituted(csrc, cbody, inner, bare)
            if size + len(text) > MAX_CHARS:
                return
            size += len(text)
            blocks.append(text)
            # an accessor's method by its own name: the call stays `obj.method(...)`, read through the object
            inlined.add(method if held else name)
            visit(cbody, inner, stack + (callee.start_byte,), csrc, cenv)

    visit(body, {}, ())
    return blocks, inlined
