"""Index analysis for the context features: affine terms of an index, the range of values of a
non-affine part (``//``, ``%`` of fused loops) while some loops run, and how much it moves per
step of a loop."""
from __future__ import annotations

from .. import loopast as A

def linear_form(e) -> tuple[dict, list, tuple]:
    """Split an index into affine terms {LoopVar: coeff} and opaque (scale, subexpression)
    parts; the third item is a structural key (equal for equal expressions)."""
    terms: dict[A.LoopVar, int] = {}
    opaque: list[tuple[int, object]] = []
    _collect(e, 1, terms, opaque)
    key = (tuple(terms.items()), tuple((c, _expr_key(x)) for c, x in opaque) if opaque else ())
    return terms, opaque, key


def _collect(e, scale: int, terms: dict, opaque: list) -> None:
    if isinstance(e, A.LoopVar):
        terms[e] = terms.get(e, 0) + scale
    elif isinstance(e, (A.IntImm, A.ThreadIdx)):
        return  # constants; a ThreadIdx is fixed within one work-item
    elif isinstance(e, A.BinOp) and e.op in ("+", "-"):
        _collect(e.a, scale, terms, opaque)
        _collect(e.b, -scale if e.op == "-" else scale, terms, opaque)
    elif isinstance(e, A.BinOp) and e.op == "*" and isinstance(e.b, A.IntImm):
        _collect(e.a, scale * e.b.value, terms, opaque)
    elif isinstance(e, A.BinOp) and e.op == "*" and isinstance(e.a, A.IntImm):
        _collect(e.b, scale * e.a.value, terms, opaque)
    elif scale:
        opaque.append((scale, e))


def loop_vars(e) -> frozenset:
    return frozenset(n for n in A.walk(e) if isinstance(n, A.LoopVar))


def _expr_key(e) -> tuple:
    """A hashable structural key of an index expression (loop variables by identity)."""
    if isinstance(e, A.BinOp):
        return (e.op, _expr_key(e.a), _expr_key(e.b))
    if isinstance(e, A.Select):
        return ("select", _expr_key(e.cond), _expr_key(e.true_value), _expr_key(e.false_value))
    if isinstance(e, A.Load):
        return ("load", e.buffer, tuple(_expr_key(i) for i in e.indices))
    if isinstance(e, (A.IntImm, A.FloatImm)):
        return ("imm", e.value)
    if isinstance(e, A.ThreadIdx):
        return ("thread", e.tag)
    return ("var", e)


def value_range(e, active: dict) -> tuple[int, int]:
    """(span, distinct values) of an integer expression while the ``active`` loops run."""
    if isinstance(e, A.LoopVar):
        n = active.get(e, 1)
        return n, n
    if isinstance(e, A.BinOp):
        sa, ca = value_range(e.a, active)
        sb, cb = value_range(e.b, active)
        op = e.op
        if op in ("+", "-"):
            span, cnt = sa + sb - 1, ca * cb
        elif op == "*":
            if isinstance(e.b, A.IntImm) or isinstance(e.a, A.IntImm):
                k = abs(e.b.value if isinstance(e.b, A.IntImm) else e.a.value)
                s = sa if isinstance(e.b, A.IntImm) else sb
                c = ca if isinstance(e.b, A.IntImm) else cb
                span, cnt = ((s - 1) * k + 1, c) if k else (1, 1)
            else:
                span, cnt = sa * sb, ca * cb
        elif op == "//" and isinstance(e.b, A.IntImm) and e.b.value > 0:
            span = (sa - 1) // e.b.value + 1
            cnt = span
        elif op == "%" and isinstance(e.b, A.IntImm) and e.b.value > 0:
            span = min(sa, e.b.value)
            cnt = min(ca, span)
        elif op in ("min", "max"):
            span, cnt = max(sa, sb), ca * cb
        elif op in ("<", "<=", ">=", ">", "==", "&&"):
            span, cnt = 2, 2
        else:
            span, cnt = sa, ca
        return span, min(cnt, span)
    if isinstance(e, A.Select):
        st, ct = value_range(e.true_value, active)
        sf, cf = value_range(e.false_value, active)
        return max(st, sf), min(ct + cf, max(st, sf))
    return 1, 1


def dominant_coeff(e, var: A.LoopVar) -> int:
    """How much ``e`` moves per step of ``var`` most of the time (``(f // 4) % 8`` moves 0 per
    step of ``f``, ``f % 8`` moves 1); affine expressions get their exact coefficient."""
    if isinstance(e, A.LoopVar):
        return 1 if e is var else 0
    if isinstance(e, A.BinOp):
        a = dominant_coeff(e.a, var)
        b = dominant_coeff(e.b, var)
        if e.op == "+":
            return a + b
        if e.op == "-":
            return a - b
        if e.op == "*":
            if isinstance(e.b, A.IntImm):
                return a * e.b.value
            if isinstance(e.a, A.IntImm):
                return b * e.a.value
            return 0
        if e.op == "//" and isinstance(e.b, A.IntImm) and e.b.value > 0:
            return int(a / e.b.value)
        if e.op == "%" and isinstance(e.b, A.IntImm) and e.b.value > 0:
            return a % e.b.value if a >= 0 else -((-a) % e.b.value)
    return 0
