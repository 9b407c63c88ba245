"""Small tree-sitter walks the analyses share: every node under one, the statement around an expression,
whether a literal is an operand of arithmetic, the names a launch passes to the kernel; and comment
stripping for the text-level checks."""

from __future__ import annotations

import re

from tree_sitter import Node

from agent_core.model import LaunchSite
from agent_core.source.cuda_parse import walk
from agent_core.templating.structural.source import File


def strip_comments(text: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", " ", text, flags=re.S)


def in_arithmetic(f: File, x: Node) -> bool:
    """``x`` is an operand of arithmetic or an argument of a (non-dim3) call such as ``cdiv(n, 256)``."""
    par = x.parent
    if par is None:
        return False
    if par.type == "binary_expression":
        return True
    if par.type == "argument_list" and par.parent is not None and par.parent.type == "call_expression":
        fn = par.parent.child_by_field_name("function")
        return fn is not None and f.t(fn) != "dim3"
    return False


def statement_of(x: Node) -> Node | None:
    """The statement (or loop header, or declaration) around an expression node."""
    n = x
    while n.parent is not None:
        par = n.parent
        if par.type == "for_statement":
            return n if n.type != "compound_statement" else None  # the initializer / condition / update
        if n.type in ("expression_statement", "declaration", "return_statement", "condition_clause"):
            return n
        if par.type in ("if_statement", "while_statement") and n.type == "parenthesized_expression":
            return n
        n = par
    return None


def launch_arg_names(f: File, site: LaunchSite) -> list[str]:
    """The identifiers a launch passes to the kernel as (parts of) its arguments."""
    out = []
    for a in site.args:
        n = f.node(a.span)
        if n is not None:
            out += [f.t(x) for x in walk(n) if x.type == "identifier"]
    return out
