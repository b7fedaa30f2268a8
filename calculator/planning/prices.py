"""Pricing the planner's layouts once for every GPU they are asked about. A training estimate depends on the GPU
only through its cuBLAS workspace (an allocation inside the peak) and its CUDA context (a line item added last, the
same on every stage), so the fit cards of GPUs with the same workspace share every price: a layout estimated one by
one (training_totals) and a whole GPU count's grid on the fast byte model (count_grid) are priced on the first
catalogue GPU of that workspace and the context difference added."""
from __future__ import annotations

from functools import lru_cache

from calculator.core.bounded_cache import get_or_build
from calculator.core.errors import InputError
from calculator.stages.estimate import estimate
from calculator.model.spec import ModelSpec
from calculator.planning.grid import Layout, layouts_of, workload_of
from calculator.core.workload import Workload


def training_totals(m: ModelSpec, w: Workload, lay: Layout) -> tuple[int, int] | None:
    """(nvidia-smi total, peak allocated) of estimate() for a training layout; None when the engine refuses it.
    A training estimate depends on the GPU only through its cuBLAS workspace (an allocation the caching allocator
    replays) and its CUDA context (a line item added last), so layouts are estimated once per workspace size and
    the context swapped: the fit cards of GPUs with the same workspace share every estimate."""
    from calculator.stages.terms import gpu_of
    gpu = gpu_of(w.gpu)
    if gpu is None:
        return _estimated(m, workload_of(w, lay))
    peer = _workspace_peer(gpu)
    got = _estimated(m, workload_of(w.model_copy(update={"gpu": peer.id}), lay))
    if got is None:
        return None
    return got[0] + _context_shift(w, gpu, peer), got[1]


def _workspace_peer(gpu):
    """The first catalogue GPU with this GPU's cuBLAS workspace (the GPU itself when it is not in the catalogue):
    training estimates priced on it serve every GPU of that workspace, the CUDA context swapped."""
    if gpu.id not in _catalogue_ids():
        return gpu
    return next(g for g in _catalogue() if g.cublas_workspace_bytes == gpu.cublas_workspace_bytes)


def _context_shift(w: Workload, gpu, peer) -> int:
    """What a total priced on `peer` gains on `gpu`: the difference of their CUDA contexts (none when the user
    set the context)."""
    return 0 if w.overheads.cuda_context_bytes is not None else gpu.cuda_context_bytes - peer.cuda_context_bytes


_COUNT_GRIDS: dict = {}  # (model, job on its workspace peer, n, max_tp, max micro-batch, search) -> grid
_MAX_COUNT_GRIDS = 512


def count_grid(m: ModelSpec, w: Workload, n: int, max_tp: int, max_micro_batch: int | None, search: str,
               global_batch: int | None = None):
    """(layouts of n GPUs, the fast model's (total, peak, covered) for them or None), shared by the fit cards of
    every catalogue GPU with the same cuBLAS workspace: as in training_totals, a training layout's total depends
    on the GPU only through that workspace (inside the peak) and its CUDA context (added last, the same on every
    stage), so the grid is priced once on the first GPU of that workspace and the context difference added."""
    from calculator.planning import fast as fast_model
    from calculator.stages.terms import gpu_of
    gpu = gpu_of(w.gpu)
    if w.mode != "train" or gpu is None or gpu.id not in _catalogue_ids():
        layouts = list(layouts_of(m, w, n, max_tp, max_micro_batch, search, global_batch))
        return layouts, fast_model.totals(m, w, layouts)
    peer = _workspace_peer(gpu)
    on_peer = w if peer.id == gpu.id else w.model_copy(update={"gpu": peer.id})
    key = (m, on_peer, n, max_tp, max_micro_batch, search, global_batch)

    def price() -> tuple:
        layouts = list(layouts_of(m, on_peer, n, max_tp, max_micro_batch, search, global_batch))
        return layouts, fast_model.totals(m, on_peer, layouts)
    layouts, fast = get_or_build(_COUNT_GRIDS, key, price, _MAX_COUNT_GRIDS)
    shift = _context_shift(w, gpu, peer)
    if fast is None or shift == 0:
        return layouts, fast
    total, peak, covered = fast
    return layouts, (total + shift, peak, covered)  # a new array: the cached one is the peer's


@lru_cache(maxsize=1)
def _catalogue() -> tuple:
    from calculator.stages.terms import all_gpus
    return all_gpus()


@lru_cache(maxsize=1)
def _catalogue_ids() -> frozenset:
    return frozenset(g.id for g in _catalogue())


@lru_cache(maxsize=16384)
def _estimated(m: ModelSpec, w: Workload) -> tuple[int, int] | None:
    try:
        est = estimate(m, w, with_fits=False)
    except InputError:
        return None
    return est.total_bytes, est.peak_allocated_bytes
