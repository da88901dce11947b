"""Groups that span processes: gather what the allocation needs, share one design draw.

TRL's ``RepeatSampler`` puts the ``G`` copies of a prompt on consecutive rows of the *global*
generation batch, which accelerate then slices into equal per-process blocks, so a group can
span two processes. The allocation and the design draw are per group, hence global: every
process gathers the per-row predictions (``p_hat``, ``c_hat``: a few floats per row), every
process solves the same problems and draws from an identically seeded generator, and the main
process's draw is then broadcast, so all processes hold bit-identical ``pi``, ``J`` and
``rho`` (and keep their generators in lockstep). Each process keeps its own rows' slice.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def gather_rows(accelerator: Any, values: np.ndarray) -> np.ndarray:
    """Concatenate a per-process ``(n_local, ...)`` array over processes, in process order."""
    if accelerator.num_processes == 1:
        return np.asarray(values)
    t = torch.as_tensor(np.ascontiguousarray(values), device=accelerator.device)
    return accelerator.gather(t).cpu().numpy()


def broadcast_from_main(accelerator: Any, obj: Any) -> Any:
    """Every process receives the main process's ``obj`` (any picklable object)."""
    if accelerator.num_processes == 1:
        return obj
    from accelerate.utils import broadcast_object_list

    box = [obj]
    broadcast_object_list(box, from_process=0)
    return box[0]


def local_slice(accelerator: Any, n_local: int) -> slice:
    """Rows of the global batch held by this process (equal blocks in process order)."""
    start = accelerator.process_index * n_local
    return slice(start, start + n_local)
