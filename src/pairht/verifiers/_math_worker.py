"""Math-verify worker process (run as a script by :mod:`pairht.verifiers.math_answers`).

Why a process: math-verify's own timeouts use ``signal.alarm`` (main thread only), and some
inputs hang inside C code no signal can interrupt (``\\boxed{9^{9^{9^9}}}`` evaluates a
370-million-digit integer). Here, in the worker's main thread, a ``setitimer`` soft limit
stops pure-Python work cleanly; the parent kills the worker when even that does not return.

Protocol: one JSON object per line on stdin ``{"gold": str, "pred": str, "timeout": float,
"float_rounding": int | null}``,
one per line on stdout ``{"match": bool, "pred_parsed": bool, "gold_parsed": bool}`` or
``{"timeout": true}`` or ``{"error": str}``. The first line written is ``{"ready": true}``.

``float_rounding`` null (the default of :class:`~pairht.verifiers.MathVerifier`): every decimal
number of both sides is replaced by the exact rational it denotes (``0.333333`` is
``333333/10**6``) before math-verify compares them, so a float equals a value only when it is
that value. An int ``d`` keeps math-verify's convention: when one side is a float, both are
rounded to ``d`` decimals before comparing.
"""

import json
import logging
import resource
import signal
import sys


class _SoftTimeout(BaseException):
    """BaseException so math-verify's ``except Exception`` clauses cannot swallow it."""


def _on_alarm(signum, frame):
    raise _SoftTimeout


def _exact_decimals(expr):
    """``expr`` with every sympy ``Float`` replaced by the rational its decimal text denotes."""
    import sympy

    if isinstance(expr, sympy.MatrixBase):
        return expr.applyfunc(_exact_decimals)
    if isinstance(expr, sympy.Basic):
        # str(Float) prints the digits the parser kept (15 significant by default, more when
        # the text had more), so Rational(str) is the decimal the completion wrote.
        return expr.xreplace({f: sympy.Rational(str(f)) for f in expr.atoms(sympy.Float)})
    return expr  # the parser's string forms


def main():
    # A runaway expression must not take the machine's memory with it.
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    logging.disable(logging.WARNING)
    from math_verify import LatexExtractionConfig, parse, verify

    latex_only = [LatexExtractionConfig(boxed_match_priority=0)]
    signal.signal(signal.SIGALRM, _on_alarm)
    out = sys.stdout
    out.write('{"ready": true}\n')
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        signal.setitimer(signal.ITIMER_REAL, max(float(req["timeout"]), 1e-3))
        try:
            # Internal timeouts off (None): ours covers parse and verify together.
            gold = parse("$" + req["gold"] + "$", parsing_timeout=None)
            pred = parse("\\boxed{" + req["pred"] + "}", extraction_config=latex_only,
                         parsing_timeout=None)
            rounding = req.get("float_rounding")
            if rounding is None:
                gold = [_exact_decimals(x) for x in gold]
                pred = [_exact_decimals(x) for x in pred]
                rounding = 6  # unused: no Float is left on either side
            match = bool(gold and pred and verify(gold, pred, float_rounding=int(rounding),
                                                   timeout_seconds=None))
            reply = {"match": match, "pred_parsed": bool(pred), "gold_parsed": bool(gold)}
        except _SoftTimeout:
            reply = {"timeout": True}
        except Exception as exc:
            reply = {"error": type(exc).__name__}
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
