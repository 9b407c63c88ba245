"""Fast-math intrinsics as a parameter: ``expf``, ``logf``, ``sinf``, ``cosf``, ``powf``, ``tanhf`` and
``1.0f / sqrtf(x)`` in the kernel call helpers ``kt_expf<KT_FAST_MATH>(x)``, ... that use the precise function
at 0 (the original) and the intrinsic (``__expf``, ``rsqrtf``, the ``tanh.approx`` instruction) at 1. The search
may turn it on; verification at the spec's tolerance decides whether a variant with it stays."""

from __future__ import annotations

import re

from agent_core.model import Param, macro_name
from agent_core.templating.rewrites.base import Rewrite, RewriteContext, apply_edits
from agent_core.templating.rewrites.syntax import squash, walk

FAST_MATH = "FAST_MATH"
FUNCS = {"expf": "kt_expf", "__expf": None, "logf": "kt_logf", "sinf": "kt_sinf", "cosf": "kt_cosf",
         "powf": "kt_powf", "tanhf": "kt_tanhf"}
_RECIP_SQRT = re.compile(r"1(?:\.0*)?f?/(?:sqrtf)\((.*)\)")


def _sites(ctx: RewriteContext):
    v = ctx.view()
    out = []
    for n in walk(v.body):
        if n.type == "call_expression":
            fn = n.child_by_field_name("function")
            if fn is not None and FUNCS.get(v.t(fn)):
                out.append((fn.start_byte, fn.end_byte, f"{FUNCS[v.t(fn)]}<{macro_name(FAST_MATH)}>", v.t(fn)))
        elif n.type == "binary_expression" and v.t(n.child_by_field_name("operator")) == "/":
            lt, rt = n.child_by_field_name("left"), n.child_by_field_name("right")
            if squash(v.t(lt)) in ("1.0f", "1.f", "1.0F") and rt.type == "call_expression" and \
                    v.t(rt.child_by_field_name("function")) == "sqrtf":
                args = rt.child_by_field_name("arguments")
                out.append((n.start_byte, n.end_byte, f"kt_rsqrtf<{macro_name(FAST_MATH)}>{v.t(args)}",
                            "1.0f / sqrtf"))
    # a call inside a rewritten 1/sqrtf is rewritten with it
    outer = [(a, b) for a, b, _, w in out if w == "1.0f / sqrtf"]
    return v, [s for s in out if not any(a <= s[0] and s[1] <= b and (a, b) != (s[0], s[1]) for a, b in outer)]


class FastMath(Rewrite):
    name = "fast_math"
    summary = "expf/logf/sinf/cosf/powf/tanhf and 1/sqrtf as intrinsics when FAST_MATH=1 (verification decides)"

    def why_not(self, ctx: RewriteContext) -> str | None:
        _, sites = _sites(ctx)
        return None if sites else "no expf, logf, sinf, cosf, powf, tanhf or 1.0f / sqrtf in the kernel"

    def params(self, ctx: RewriteContext) -> list[Param]:
        return [Param(FAST_MATH, [0, 1], 0, "fast_math",
                      "1: __expf, __logf, __sinf, __cosf, __powf, tanh.approx and rsqrtf instead of the precise "
                      "functions (kept only where verification at the spec's tolerance passes)", closed=True)]

    def rewrite(self, ctx: RewriteContext) -> RewriteContext:
        _, sites = _sites(ctx)
        ctx = self._add_space(ctx)
        what = ", ".join(sorted({w for *_, w in sites}))
        return ctx.with_text(apply_edits(ctx.text, [(a, b, new) for a, b, new, _ in sites]),
                             f"fast_math: {what} call the fast intrinsic when FAST_MATH=1", {"fast_math"})
