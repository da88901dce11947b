r"""A tiny verifiable task that a random-init two-layer model learns on CPU in minutes.

The task ("counted repetition"). A prompt names a letter and a count ``k``::

    repeat c 5 :

and the one correct response declares the count on its first line, then writes ``k`` numbered
lines, each line ending in the newline token, then ``<eos>``::

    5
    c 1
    c 2
    c 3
    c 4
    c 5

Reward is binary: 1 when the completion's lines equal exactly that list, else 0
(:func:`toy_reward`). Responses take ``3k + 3`` tokens (12 to 39 for ``k`` in 3..12), so
their lengths vary fourfold and a prefix of ``tau`` tokens snaps to a newline within 3 tokens.

Why it suits PAIR. The policy is warm-started (:func:`warm_up`) by supervised training on an
*imperfect demonstrator*: half of its demonstrations declare a wrong count (``k`` +- 1 or 2)
and then follow the declared count faithfully, and a quarter slip one letter somewhere in the
body. A model that learns the demonstrator succeeds with probability about
``0.5 * 0.75 = 0.375``, so groups of G samples have reward contrast; the first line (inside
any prefix) carries most of the information about success, which is what prefix heads are
meant to pick up, while a slip later in the body keeps the prediction uncertain. RL then
raises the success rate towards 1 by learning to copy the count and not to slip.

Everything is built in code: a word-level tokenizer (``tokenizers`` + ``PreTrainedTokenizerFast``,
no hub download) and a small ``LlamaForCausalLM``. Given a seed, datasets, model
initialisation and warm-up are deterministic on CPU.

Held-out split. Of the 8 x 10 (letter, count) combinations, the 16 with
``(letter_index + count) % 5 == 0`` are kept for evaluation (:data:`EVAL_COMBOS`) and never
appear in warm-up demonstrations or RL training prompts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pairht._validation import RNGLike, as_generator
from pairht.rollout.tiny_model import TinyLlamaSpec

if TYPE_CHECKING:  # torch/transformers are imported lazily: `import pairht.demo.toy` stays cheap
    import datasets
    import torch
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

__all__ = [
    "EVAL_COMBOS",
    "LETTERS",
    "MAX_COUNT",
    "MIN_COUNT",
    "NEWLINE",
    "TOY_TASK",
    "TRAIN_COMBOS",
    "Task",
    "ToyModelConfig",
    "WarmUpResult",
    "demonstration",
    "make_dataset",
    "make_model",
    "make_tokenizer",
    "prompt_text",
    "response_length",
    "sample_prompts",
    "success_by_item",
    "success_rate",
    "target_completion",
    "toy_reward",
    "warm_started_model",
    "warm_up",
]

LETTERS: tuple[str, ...] = tuple("abcdefgh")
MIN_COUNT = 3
MAX_COUNT = 12
# Declared counts can be off by up to 2 in demonstrations, so numbers up to MAX_COUNT + 2 occur;
# the vocabulary holds a few more so a sampled "wrong" number is still a known token.
_MAX_NUMBER = MAX_COUNT + 4
NEWLINE = "\n"
PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
_WORDS: tuple[str, ...] = (
    PAD,
    EOS,
    UNK,
    NEWLINE,
    "repeat",
    ":",
    *LETTERS,
    *(str(i) for i in range(_MAX_NUMBER + 1)),
)

_ALL_COMBOS = tuple((c, k) for c in LETTERS for k in range(MIN_COUNT, MAX_COUNT + 1))
EVAL_COMBOS: tuple[tuple[str, int], ...] = tuple(
    (c, k) for c, k in _ALL_COMBOS if (LETTERS.index(c) + k) % 5 == 0
)
TRAIN_COMBOS: tuple[tuple[str, int], ...] = tuple(
    ck for ck in _ALL_COMBOS if ck not in set(EVAL_COMBOS)
)

# The imperfect demonstrator (see module docstring).
_P_WRONG_COUNT = 0.5
_P_SLIP = 0.25


# --------------------------------------------------------------------------- task definition


def prompt_text(letter: str, count: int) -> str:
    """The prompt for one (letter, count) pair, e.g. ``"repeat c 5 :"``."""
    _check_combo(letter, count)
    return f"repeat {letter} {count} :"


def target_completion(letter: str, count: int) -> str:
    r"""The unique correct completion text (without ``<eos>``), lines joined by ``" \n "``.

    Examples
    --------
    >>> target_completion("c", 3)
    '3 \n c 1 \n c 2 \n c 3 \n'
    """
    _check_combo(letter, count)
    return _completion_text(count, [letter] * count)


def response_length(count: int) -> int:
    """Tokens in the correct response for ``count`` including ``<eos>``: ``3 * count + 3``.

    Examples
    --------
    >>> response_length(3), response_length(12)
    (12, 39)
    """
    return 3 * count + 3


def _completion_text(declared: int, body_letters: Sequence[str]) -> str:
    lines = [str(declared)] + [f"{c} {i}" for i, c in enumerate(body_letters, start=1)]
    return "".join(f"{line} {NEWLINE} " for line in lines).rstrip(" ")


def _check_combo(letter: str, count: int) -> None:
    if letter not in LETTERS:
        raise ValueError(f"letter must be one of {''.join(LETTERS)!r}; got {letter!r}")
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)):
        raise ValueError(f"count must be an int; got {type(count).__name__} {count!r}")
    if not MIN_COUNT <= count <= MAX_COUNT:
        raise ValueError(f"count must lie in [{MIN_COUNT}, {MAX_COUNT}]; got {count}")


def _parse_prompt(prompt: str) -> tuple[str, int]:
    words = prompt.split()
    if len(words) != 4 or words[0] != "repeat" or words[3] != ":" or not words[2].isdigit():
        raise ValueError(
            f"prompt must read 'repeat <letter> <count> :' (the toy task's format); got {prompt!r}"
        )
    return words[1], int(words[2])


def _completion_lines(completion: str) -> list[list[str]]:
    # Special tokens may or may not have been skipped when decoding; they are not content.
    lines = []
    for raw in completion.split(NEWLINE):
        words = [w for w in raw.split() if w not in (EOS, PAD)]
        if words:
            lines.append(words)
    return lines


def toy_reward(
    prompts: Sequence[Any],
    completions: Sequence[Any],
    letter: Sequence[str] | None = None,
    count: Sequence[int] | None = None,
    **kwargs: Any,
) -> list[float]:
    r"""Binary verifiable reward, in the signature TRL reward functions use.

    ``r = 1`` when the completion's non-empty lines (split at the newline token, special tokens
    ignored, whitespace-insensitive) are exactly ``[k], [c, 1], ..., [c, k]``; else ``r = 0``.
    Text after the last correct line (an extra line) makes the completion wrong; a missing
    ``<eos>`` does not matter.

    Parameters
    ----------
    prompts : sequence of str
        Prompts as in the dataset (``"repeat c 5 :"``); used for the answer when ``letter`` /
        ``count`` are not given.
    completions : sequence of str
        Decoded completions (TRL decodes with ``skip_special_tokens=True``). A conversational
        completion ``[{"content": ...}]`` is read from its last message.
    letter, count : sequences, optional
        The answer columns of :func:`make_dataset` (TRL passes dataset columns as keywords).
    **kwargs
        Ignored (TRL passes ``completion_ids``, ``trainer_state`` and more).

    Returns
    -------
    list of float, one 0.0 / 1.0 per completion.

    Examples
    --------
    >>> good, short, tight = "3 \n c 1 \n c 2 \n c 3 \n", "3 \n c 1 \n", "3\nc 1\nc 2\nc 3"
    >>> toy_reward(["repeat c 3 :"] * 3, [good, short, tight])
    [1.0, 0.0, 1.0]
    """
    items = graded_items(prompts, completions, (letter, count), lambda c, k: (c, int(k)),
                         _parse_prompt)
    out = []
    for (c, k), completion in zip(items, completions):
        _check_combo(c, k)
        expected = [[str(k)]] + [[c, str(i)] for i in range(1, k + 1)]
        out.append(1.0 if _completion_lines(_as_text(completion)) == expected else 0.0)
    return out


def graded_items(
    prompts: Sequence[Any],
    completions: Sequence[Any],
    columns: tuple[Sequence[Any] | None, ...],
    from_columns: Callable[..., Any],
    parse: Callable[[str], Any],
) -> list[Any]:
    """The item each completion answers, for a task's reward function (TRL's signature).

    From the dataset ``columns`` (``from_columns(*row)``) when all are given, else parsed from
    the prompt text (``parse``); prompts and completions of different lengths are refused.
    """
    if len(prompts) != len(completions):
        raise ValueError(
            f"prompts and completions must have the same length; got {len(prompts)} and "
            f"{len(completions)}"
        )
    if all(col is not None for col in columns):
        return [from_columns(*(col[i] for col in columns if col is not None))
                for i in range(len(prompts))]
    return [parse(_as_text(prompt)) for prompt in prompts]


def _as_text(x: Any) -> str:
    if isinstance(x, str):
        return x
    if isinstance(x, list) and x and isinstance(x[-1], dict) and "content" in x[-1]:
        return str(x[-1]["content"])
    raise ValueError(f"prompts/completions must be str or chat messages; got {type(x).__name__}")


def demonstration(letter: str, count: int, rng: RNGLike = None) -> tuple[str, bool]:
    r"""One completion from the imperfect demonstrator, and whether it is correct.

    With probability 1/2 the declared count is ``count + delta``, ``delta`` uniform on
    ``{-2, -1, 1, 2}`` (kept >= 1), and the body then has that many lines; independently, with
    probability 1/4 one body line (uniform position) carries a different letter.

    Examples
    --------
    >>> text, ok = demonstration("a", 3, rng=0)
    >>> ok == (toy_reward(["repeat a 3 :"], [text]) == [1.0])
    True
    """
    _check_combo(letter, count)
    gen = as_generator(rng)
    declared = count
    if gen.random() < _P_WRONG_COUNT:
        declared = max(1, count + int(gen.choice([-2, -1, 1, 2])))
    body = [letter] * declared
    if gen.random() < _P_SLIP:
        pos = int(gen.integers(declared))
        others = [c for c in LETTERS if c != letter]
        body[pos] = others[int(gen.integers(len(others)))]
    return _completion_text(declared, body), declared == count and body == [letter] * count


def sample_prompts(
    n: int, rng: RNGLike = None, *, split: str = "train"
) -> list[tuple[str, int]]:
    """``n`` (letter, count) pairs drawn uniformly with replacement from one split's combos."""
    combos = _split_combos(split)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive int; got {n!r}")
    idx = as_generator(rng).integers(len(combos), size=int(n))
    return [combos[i] for i in idx]


def _split_combos(split: str) -> tuple[tuple[str, int], ...]:
    if split == "train":
        return TRAIN_COMBOS
    if split == "eval":
        return EVAL_COMBOS
    raise ValueError(f"split must be 'train' or 'eval'; got {split!r}")


def make_dataset(n: int, rng: RNGLike = None, *, split: str = "train") -> datasets.Dataset:
    """A ``datasets.Dataset`` of ``n`` prompts with columns ``prompt`` (plain text), ``letter``,
    ``count`` and ``answer`` (the correct completion text).

    Examples
    --------
    >>> ds = make_dataset(4, rng=0)
    >>> ds.column_names
    ['prompt', 'letter', 'count', 'answer']
    """
    return TOY_TASK.dataset(n, rng, split=split)


# --------------------------------------------------------------------------- tokenizer and model


def make_tokenizer(task: Task | None = None) -> PreTrainedTokenizerFast:
    r"""The task's word-level tokenizer, built in memory (no download).

    Words are separated by single spaces; ``"\n"`` is a token of its own (the delimiter that
    prefix snapping looks for). Decoding joins tokens with single spaces, so canonical texts
    (those this module writes) round-trip exactly. Padding is on the left, as generation wants.

    Examples
    --------
    >>> tok = make_tokenizer()
    >>> tok.decode(tok("3 \n a 1 \n")["input_ids"])
    '3 \n a 1 \n'
    """
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate((task or TOY_TASK).words)}
    core = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(" ", behavior="removed")
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        eos_token=EOS,
        unk_token=UNK,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    tok.model_max_length = 128
    return tok


#: Size of the toy policy (a ``LlamaForCausalLM``): the tiny Llama's settings, whose defaults
#: train in seconds on CPU (``ToyModelConfig(max_positions=96)`` overrides one).
ToyModelConfig = TinyLlamaSpec


def make_model(
    seed: int = 0, config: ToyModelConfig | None = None, task: Task | None = None
) -> LlamaForCausalLM:
    """A randomly initialised tiny ``LlamaForCausalLM`` for a task's vocabulary (default: the
    toy task; deterministic in ``seed``), with ``eos``/``pad`` ids and a generation config set
    for the task."""
    from transformers import GenerationConfig

    from pairht.rollout.tiny_model import tiny_llama

    cfg = config or ToyModelConfig()
    task = task or TOY_TASK
    tok = make_tokenizer(task)
    model = tiny_llama(tok, cfg, vocab_size=len(task.words), seed=seed)
    model.generation_config = GenerationConfig(
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.eos_token_id,
        max_new_tokens=task.max_new_tokens,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
    )
    return model


# --------------------------------------------------------------------------- warm-up


@dataclass(frozen=True)
class WarmUpResult:
    """What :func:`warm_up` did: steps, final training loss, seconds."""

    steps: int
    final_loss: float
    seconds: float


def _demo_batch(
    tok: PreTrainedTokenizerFast, items: Sequence[Any], gen: np.random.Generator, task: Task
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    import torch

    rows, loss_rows = [], []
    for item in items:
        p = tok(task.prompt(item))["input_ids"]
        text, _ = task.demonstration(item, gen)
        y = tok(text)["input_ids"] + [tok.eos_token_id]
        rows.append(p + y)
        loss_rows.append([0] * len(p) + [1] * len(y))
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    lmask = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, (r, m) in enumerate(zip(rows, loss_rows)):  # right padding: no position shift
        ids[i, : len(r)] = torch.tensor(r)
        attn[i, : len(r)] = 1
        lmask[i, : len(r)] = torch.tensor(m, dtype=torch.bool)
    return ids, attn, lmask


def warm_up(
    model: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerFast | None = None,
    *,
    steps: int = 400,
    batch_size: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
    progress: bool = False,
    task: Task | None = None,
) -> WarmUpResult:
    """Supervised warm-up on the imperfect demonstrator, in place (plain torch, CPU seconds).

    Minimises the mean next-token cross-entropy on completion tokens (prompt tokens are masked)
    with AdamW and a cosine learning-rate decay; the policy it leaves behind succeeds about
    0.3-0.6 of the time (:func:`success_rate`), which gives GRPO/PAIR groups reward contrast.
    """
    import time

    import torch

    for name, v in (("steps", steps), ("batch_size", batch_size)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int; got {v!r}")
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a positive finite float; got {lr!r}")
    task = task or TOY_TASK
    tok = tokenizer or make_tokenizer(task)
    gen = as_generator(seed)
    t0 = time.perf_counter()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1.0 + math.cos(math.pi * min(s, steps) / steps))
    )
    loss_val = float("nan")
    bar = _progress(range(steps), progress, "warm-up")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for _ in bar:
            items = task.sample(batch_size, gen, "train")
            ids, attn, lmask = _demo_batch(tok, items, gen, task)
            logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]
            target = ids[:, 1:]
            m = lmask[:, 1:]
            loss = torch.nn.functional.cross_entropy(logits[m], target[m])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            loss_val = float(loss.detach())
    model.eval()
    return WarmUpResult(steps=steps, final_loss=loss_val, seconds=time.perf_counter() - t0)


_WARM_CACHE: dict[tuple[Any, ...], tuple[dict, WarmUpResult]] = {}


def warm_started_model(
    seed: int = 0,
    *,
    steps: int = 400,
    batch_size: int = 64,
    lr: float = 3e-3,
    config: ToyModelConfig | None = None,
    progress: bool = False,
    task: Task | None = None,
) -> tuple[LlamaForCausalLM, WarmUpResult]:
    """:func:`make_model` then :func:`warm_up`, memoised within the process.

    The first call for a given ``(seed, steps, batch_size, lr, config)`` trains (tens of CPU
    seconds); later calls return a fresh model with the same weights (a copy: callers may train
    it). Tests and the demo share one warm-up this way.
    """
    cfg = config or ToyModelConfig()
    task = task or TOY_TASK
    key = (task.name, int(seed), int(steps), int(batch_size), float(lr), cfg)
    if key not in _WARM_CACHE:
        model = make_model(seed, cfg, task)
        result = warm_up(
            model, steps=steps, batch_size=batch_size, lr=lr, seed=seed, progress=progress,
            task=task,
        )
        _WARM_CACHE[key] = ({k: v.clone() for k, v in model.state_dict().items()}, result)
    state, result = _WARM_CACHE[key]
    model = make_model(seed, cfg, task)
    model.load_state_dict(state)
    model.eval()
    return model, result


def _progress(it: Any, enabled: bool, desc: str) -> Any:
    if not enabled:
        return it
    from tqdm.auto import tqdm

    return tqdm(it, desc=desc, leave=False)


# --------------------------------------------------------------------------- evaluation


def success_rate(
    model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast | None = None, **options: Any
) -> float:
    """Mean :func:`toy_reward` of the model's completions on one split's prompts: the mean of
    :func:`success_by_item`, whose keyword ``options`` (``split``, ``n_prompts``,
    ``samples_per_prompt``, ``greedy``, ``seed``, ``task``) it takes."""
    return float(np.mean(success_by_item(model, tokenizer, **options)))


def success_by_item(
    model: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerFast | None = None,
    *,
    split: str = "eval",
    n_prompts: int | None = None,
    samples_per_prompt: int = 8,
    greedy: bool = False,
    seed: int = 0,
    task: Task | None = None,
) -> np.ndarray:
    """Success rate of the model's completions on each of one split's prompts, ``(n_items,)``.

    Each combination of the split (all 16 held-out ones for ``split="eval"``, or ``n_prompts``
    of them drawn with ``seed``) gets ``samples_per_prompt`` completions sampled at temperature
    1 (``greedy=False``, the policy's own success probability) or one greedy completion.
    Deterministic given ``seed``.
    """
    import torch

    task = task or TOY_TASK
    tok = tokenizer or make_tokenizer(task)
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval'; got {split!r}")
    combos = list(task.eval_items) if split == "eval" else list(task.train_items)
    if n_prompts is not None:
        combos = task.sample(n_prompts, seed, split)
    reps = 1 if greedy else samples_per_prompt
    if isinstance(reps, bool) or not isinstance(reps, int) or reps < 1:
        raise ValueError(f"samples_per_prompt must be a positive int; got {samples_per_prompt!r}")
    pairs = [ck for ck in combos for _ in range(reps)]
    prompts = [task.prompt(item) for item in pairs]
    enc = tok(prompts, return_tensors="pt", padding=True)
    was_training = model.training
    model.eval()
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        # transformers' stub of generate declares ``self`` twice (a decorator's typing gap)
        out = model.generate(  # type: ignore[misc]
            **enc,
            do_sample=not greedy,
            temperature=1.0,
            top_p=1.0,
            max_new_tokens=task.max_new_tokens,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
        )
    model.train(was_training)
    texts = tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    rewards = np.asarray(task.reward(prompts, texts, **task.columns(pairs)), dtype=np.float64)
    return rewards.reshape(len(combos), reps).mean(axis=1)


# --------------------------------------------------------------------------- tasks


@dataclass(frozen=True)
class Task:
    """A verifiable task the demo machinery (tokenizer, model, warm-up, evaluation, datasets)
    runs on: the toy task here (:data:`TOY_TASK`), a chain-arithmetic one in
    :mod:`pairht.demo.chain`.

    ``sample(n, rng, split)`` draws items (with replacement) from one split; ``prompt(item)`` is
    the prompt text; ``demonstration(item, gen)`` an imperfect demonstration ``(text, correct)``;
    ``reward`` a TRL-signature reward function; ``columns(items)`` the dataset's answer columns
    that ``reward`` reads as keywords; ``eval_items`` / ``train_items`` the splits (disjoint).
    """

    name: str
    words: tuple[str, ...]
    max_new_tokens: int
    prompt: Callable[[Any], str]
    demonstration: Callable[[Any, np.random.Generator], tuple[str, bool]]
    reward: Callable[..., list[float]]
    sample: Callable[[int, RNGLike, str], list[Any]]
    columns: Callable[[Sequence[Any]], dict[str, list[Any]]]
    answer: Callable[[Any], str]
    train_items: tuple[Any, ...]
    eval_items: tuple[Any, ...]

    def dataset(self, n: int, rng: RNGLike = None, *, split: str = "train") -> datasets.Dataset:
        """A ``datasets.Dataset`` of ``n`` prompts of one split: ``prompt``, the answer columns
        and ``answer`` (the correct completion text)."""
        import datasets

        items = self.sample(n, rng, split)
        return datasets.Dataset.from_dict(
            {
                "prompt": [self.prompt(it) for it in items],
                **self.columns(items),
                "answer": [self.answer(it) for it in items],
            }
        )


def _toy_columns(items: Sequence[tuple[str, int]]) -> dict[str, list[Any]]:
    return {"letter": [c for c, _ in items], "count": [int(k) for _, k in items]}


TOY_TASK = Task(
    name="toy",
    words=_WORDS,
    max_new_tokens=response_length(MAX_COUNT) + 8,
    prompt=lambda item: prompt_text(*item),
    demonstration=lambda item, gen: demonstration(item[0], item[1], gen),
    reward=toy_reward,
    sample=lambda n, rng, split: sample_prompts(n, rng, split=split),
    columns=_toy_columns,
    answer=lambda item: target_completion(*item),
    train_items=TRAIN_COMBOS,
    eval_items=EVAL_COMBOS,
)
