"""Math-verify worker process (run as a script by :mod:`pairht_verifiers.math_answers`).

Why a process: math-verify's own timeouts use ``signal.alarm`` (main thread only), and some
inputs hang inside C code no signal can interrupt (``\\boxed{9^{9^{9^9}}}`` evaluates a
370-million-digit integer). Here, in the worker's main thread, a ``setitimer`` soft limit
stops pure-Python work cleanly; the parent kills the worker when even that does not return.

Protocol: one JSON object per line on stdin ``{"gold": str, "pred": str, "timeout": float}``,
one per line on stdout ``{"match": bool, "pred_parsed": bool, "gold_parsed": bool}`` or
``{"timeout": true}`` or ``{"error": str}``. The first line written is ``{"ready": true}``.
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
            match = bool(gold and pred and verify(gold, pred, timeout_seconds=None))
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
