"""The compute-matched experiment: PAIR vs GRPO and small-group GRPO at equal generated tokens.

Same as ``pairht experiment``; see docs/experiment.md. Example::

    python benchmarks/compute_matched.py --seeds 0,1,2 --steps 40
"""

from pairht.demo.experiment import main

if __name__ == "__main__":
    raise SystemExit(main())
