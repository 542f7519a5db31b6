"""The function being approximated, evaluable in two arithmetics: mpmath (Remez, sup-norm search) and
python-flint ball arithmetic (certified bounds).

A target is given either as a string expression in ``x`` (like Sollya: ``"2^x"``, ``"exp(x)"``,
``"log1p(x)"``) or as a Python callable. A string is evaluated in a namespace whose names map to mpmath
functions or to flint ball methods, so the same text serves both arithmetics and the bound is always
rigorous. A callable is called with mpmath numbers for the fit and with ``flint.arb_series`` for the
certificate; if it cannot take a ball series (it calls ``math.exp``, say) the fit still works and the
certificate is reported as unavailable.

numpy, mpmath and flint are imported where a target is first evaluated, not with this module: ``fa4num fit``
names its target (and finds its result in the user cache) without them.
"""
from __future__ import annotations

import ast
import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import flint

_UNARY = ("exp", "log", "sqrt", "sin", "cos", "tan", "atan", "asin", "acos", "erf", "erfc", "log1p", "expm1",
          "tanh", "sinh", "cosh")


_CONSTANTS = ("pi", "e", "ln2", "exp2", "log2", "abs")   # the other names an expression may use


def _ball_fn(name):
    import flint

    def fn(v):
        if isinstance(v, (flint.arb, flint.arb_series)):
            if name == "log1p":
                return (v + 1).log()
            if name == "expm1":
                return v.exp() - 1
            # ball series have no hyperbolic functions: through exp (exact identities)
            if name == "tanh":
                return 1 - 2 / ((2 * v).exp() + 1)
            if name == "sinh":
                return (v.exp() - (-v).exp()) / 2
            if name == "cosh":
                return (v.exp() + (-v).exp()) / 2
            return getattr(v, name)()
        return getattr(flint.arb(v), name)()
    return fn


def _mp_namespace():
    import mpmath
    ns = {name: getattr(mpmath, name) for name in _UNARY}
    ns.update(pi=mpmath.pi, e=mpmath.e, ln2=mpmath.ln2, exp2=lambda v: mpmath.mpf(2) ** v,
              log2=lambda v: mpmath.log(v, 2), abs=abs)
    return ns


def _np_fn(name):
    import numpy as np
    if name in ("erf", "erfc"):
        def fn(v):
            import scipy.special   # imported on first use: most targets need no special function
            return getattr(scipy.special, name)(v)
        return fn
    return getattr(np, {"atan": "arctan", "asin": "arcsin", "acos": "arccos"}.get(name, name))


def _np_namespace():
    import numpy as np
    ns = {name: _np_fn(name) for name in _UNARY}
    ns.update(pi=np.pi, e=np.e, ln2=np.log(2.0), exp2=np.exp2, log2=np.log2, abs=np.abs)
    return ns


def _ball_namespace():
    import flint
    ns = {name: _ball_fn(name) for name in _UNARY}
    # the constants are functions, called where the expression names them (_ball_text): a ball made once
    # would keep the precision of the first call (53 bits, say) in every later one
    ns.update(pi=flint.arb.pi, e=lambda: flint.arb(1).exp(), ln2=flint.arb.const_log2,
              exp2=lambda v: (v * flint.arb.const_log2()).exp(),
              log2=lambda v: _ball_fn("log")(v) / flint.arb.const_log2(), abs=abs)
    return ns


@dataclass(frozen=True)
class Target:
    """A function f(x) with its two evaluators. ``name`` is how results and the registry show it."""
    name: str
    mp: Callable          # mpf -> mpf
    ball: Callable         # flint.arb_series -> flint.arb_series (may fail for a callable: takes_balls)
    np: Callable | None = None   # float64 array -> float64 array (expressions only): fast scans, never a result


_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Call, ast.Name, ast.Load, ast.Constant, ast.operator,
          ast.unaryop)


def _compile(expr: str):
    """Check that ``expr`` is arithmetic on x, numbers and the allowed functions and constants only."""
    text = expr.replace("^", "**")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"f: cannot parse expression {expr!r}: {exc.msg}") from None
    allowed = set(_UNARY) | set(_CONSTANTS) | {"x"}
    for node in ast.walk(tree):
        if not isinstance(node, _NODES) or (isinstance(node, ast.Constant) and
                                            not isinstance(node.value, (int, float))):
            raise ValueError(f"f: {expr!r} may only use arithmetic, numbers, x and {sorted(allowed - {'x'})}")
        if isinstance(node, ast.Name) and node.id not in allowed:
            raise ValueError(f"f: unknown name {node.id!r} in {expr!r}; allowed: x, {sorted(allowed - {'x'})}")
        if isinstance(node, ast.Call) and (not isinstance(node.func, ast.Name) or node.keywords):
            raise ValueError(f"f: {expr!r} may only call the allowed functions with positional arguments")
    return _Lambda(text, _mp_namespace), _Lambda(_ball_text(tree), _ball_namespace), _Lambda(text, _np_namespace)


_BALL_CONSTANTS = ("pi", "e", "ln2")


def _ball_text(tree) -> str:
    """The expression with each constant name a call (pi -> pi()), for the ball namespace."""
    class Calls(ast.NodeTransformer):
        def visit_Name(self, node):
            if node.id in _BALL_CONSTANTS:
                return ast.Call(func=ast.Name(id=node.id, ctx=ast.Load()), args=[], keywords=[])
            return node
    return ast.unparse(ast.fix_missing_locations(Calls().visit(tree)))


class _Lambda:
    """``lambda x: (text)`` evaluated in one arithmetic, its globals that arithmetic's names only; compiled on
    the first call, which imports the arithmetic's package (so naming a target costs no import)."""
    __slots__ = ("text", "namespace", "fn")

    def __init__(self, text: str, namespace: Callable):
        self.text, self.namespace, self.fn = text, namespace, None

    def __call__(self, x):
        if self.fn is None:
            self.fn = eval(f"lambda x: ({self.text})", {"__builtins__": {}, **self.namespace()})  # noqa: S307
        return self.fn(x)


def make_target(f) -> Target:
    """Wrap ``f`` (expression string or callable) as a :class:`Target`."""
    if isinstance(f, Target):
        return f
    if isinstance(f, str):
        mp_eval, ball_eval, np_eval = _compile(f)
        return Target(f, mp_eval, ball_eval, np_eval)
    if callable(f):
        return Target(getattr(f, "__name__", repr(f)), f, f)
    raise ValueError(f"f: expected an expression string or a callable, got {type(f).__name__}")


EXP2 = make_target("2^x")


def zero_order(target: Target, *, max_order: int = 8) -> int:
    """Order of the zero of f at x = 0 (0 when f(0) != 0): the number of leading Taylor coefficients at 0
    that are exactly zero in ball arithmetic (for a callable without balls: below 2^-100 in mpmath)."""
    import flint
    import mpmath
    if takes_balls(target):
        old = flint.ctx.prec
        flint.ctx.prec = 128
        try:
            ser = target.ball(flint.arb_series([flint.arb(0), 1], prec=max_order + 1))
            coeffs = [ser[j] for j in range(max_order + 1)]
        except (ZeroDivisionError, ValueError):
            return 0
        finally:
            flint.ctx.prec = old
        z = 0
        while z <= max_order and coeffs[z].is_exact() and coeffs[z] == 0:
            z += 1
        return z
    with mpmath.workprec(160):
        try:
            coeffs = mpmath.taylor(target.mp, mpmath.mpf(0), max_order)
        except (ZeroDivisionError, ValueError):
            return 0
    z = 0
    while z <= max_order and abs(coeffs[z]) < mpmath.mpf(2) ** -100:
        z += 1
    return z


def check_target(target: Target, a, b, *, relative: bool, samples: int = 257, zero_at_origin: int = 0) -> None:
    """Raise ValueError when f is not finite on [a, b] (a pole, a NaN) or, for relative error, has a zero
    (see _check_target). A target that passed is not checked again for the same interval in this process (a
    few ms of mpmath and ball evaluations per fit: fit_exp2's 2^x, say, is the same Target every call)."""
    try:
        _checked(target, float(a), float(b), relative, samples, zero_at_origin)
    except TypeError:   # an unhashable callable in the Target
        _check_target(target, a, b, relative=relative, samples=samples, zero_at_origin=zero_at_origin)


@functools.lru_cache(maxsize=64)   # only passes are cached: a failure raises, so it is checked every time
def _checked(target, a, b, relative, samples, zero_at_origin) -> None:
    _check_target(target, a, b, relative=relative, samples=samples, zero_at_origin=zero_at_origin)


def _check_target(target: Target, a, b, *, relative: bool, samples: int = 257, zero_at_origin: int = 0) -> None:
    """Raise ValueError when f is not finite on [a, b] (a pole, a NaN) or, for relative error, has a zero.

    Rigorous where the target takes balls: [a, b] is cut into pieces and a piece whose enclosure is not
    finite (or contains 0 for relative error) is bisected; one that stays bad down to a width of 2^-40 of
    the interval holds a pole or zero. Otherwise the check samples ``samples`` points with mpmath.
    ``zero_at_origin`` > 0: the zero of f at x = 0 is divided out (see Problem.shift), so it is allowed; the
    certificate then checks the quotient there.
    A function finite at a point where its derivatives are not (sqrt at 0) is named as such.
    """
    import flint
    import mpmath
    what = "a zero (relative error is undefined there)" if relative else "a pole or non-finite value"
    with mpmath.workprec(80):
        for i in range(samples):
            x = mpmath.mpf(a) + (mpmath.mpf(b) - a) * i / (samples - 1)
            if zero_at_origin and x == 0:
                continue
            try:
                y = target.mp(x)
            except (ZeroDivisionError, ValueError, OverflowError):
                raise ValueError(f"f: {target.name} has a pole or non-finite value at x={float(x)!r} "
                                 f"in interval [{a}, {b}]") from None
            if not mpmath.isfinite(y) or (relative and y == 0):
                raise ValueError(f"f: {target.name} has {what} at x={float(x)!r} in interval [{a}, {b}]")
            if isinstance(y, mpmath.mpc):
                raise ValueError(f"f: {target.name} is complex at x={float(x)!r} in interval [{a}, {b}]")
    if not takes_balls(target):
        return
    old = flint.ctx.prec
    flint.ctx.prec = 80
    try:
        with mpmath.workprec(200):  # the piece ends are exact dyadics, so the pieces tile [a, b]
            width = (mpmath.mpf(b) - a)
            stack = [(mpmath.mpf(a) + width * i / 64, mpmath.mpf(a) + width * (i + 1) / 64) for i in range(64)]
            while stack:
                lo, hi = stack.pop()
                mid = (lo + hi) / 2
                ball = to_arb(mid).union(to_arb(lo)).union(to_arb(hi))
                try:
                    y = target.ball(flint.arb_series([ball], prec=1))[0]
                except (ZeroDivisionError, ValueError):
                    y = flint.arb(0, math.inf)
                finite = y.is_finite()
                if zero_at_origin and lo <= 0 <= hi and finite:
                    continue   # the divided-out zero; the certificate bounds f / x^s there
                if not finite or (relative and y.contains(0)):
                    if hi - lo < width * 2.0 ** -40:
                        pole = not finite and _grows(target, mid, width)
                        kind = "a pole" if pole else "a pole or non-finite value" if not finite else what
                        if not finite and not pole and _finite_mp(target, mid, lo, hi):
                            raise ValueError(
                                f"f: {target.name} is finite but not differentiable near x={float(mid)!r} in "
                                f"interval [{a}, {b}] (a sqrt-type branch point: infinite derivative), so no "
                                f"polynomial converges fast there and the certificate's Taylor models do not "
                                f"apply; move that endpoint inside (e.g. [1e-6, 1]) or substitute x = t^2")
                        raise ValueError(f"f: {target.name} has {kind} near x={float(mid)!r} "
                                         f"in interval [{a}, {b}]")
                    stack += [(lo, mid), (mid, hi)]
    finally:
        flint.ctx.prec = old


def _grows(target: Target, x, width) -> bool:
    """|f| grows without bound towards x (a pole: tan at pi/2), as opposed to a branch point where f stays
    finite and only its derivative does not (sqrt at 0): |f| at distances 2^-12 and 2^-36 of the interval's
    width from x, on the side where f is real, grows by more than 2^12."""
    import mpmath
    with mpmath.workprec(200):
        for side in (1, -1):
            try:
                near, far = (abs(target.mp(mpmath.mpf(x) + side * width * mpmath.mpf(2) ** -k)) for k in (36, 12))
            except (ZeroDivisionError, ValueError, OverflowError):
                return True
            if isinstance(near, mpmath.mpc) or isinstance(far, mpmath.mpc):
                continue
            if not mpmath.isfinite(near) or near > far * 2 ** 12:
                return True
    return False


def _finite_mp(target: Target, *points) -> bool:
    """f is finite and real at every one of ``points`` (in mpmath)."""
    import mpmath
    try:
        ys = [target.mp(mpmath.mpf(p)) for p in points]
    except (ZeroDivisionError, ValueError, OverflowError):
        return False
    return all(mpmath.isfinite(y) and not isinstance(y, mpmath.mpc) for y in ys)


def to_arb(x) -> flint.arb:
    """Exact conversion of an mpmath number or Python float to a flint ball of radius 0."""
    import flint
    import mpmath
    sign, man, exp, _ = mpmath.mpf(x)._mpf_   # man is the magnitude; the sign is separate
    if not man:
        return flint.arb(0)
    return flint.arb(flint.fmpz(-int(man) if sign else int(man))) * flint.arb(2) ** int(exp)


def takes_balls(target: Target) -> bool:
    """Whether the target evaluates on flint ball series (string targets always do)."""
    import flint
    try:
        y = target.ball(flint.arb_series([flint.arb(0.5), 1], prec=2))
    except Exception:  # noqa: BLE001 -- any failure means "cannot certify this callable"
        return False
    return isinstance(y, flint.arb_series)
