"""What every stage estimate shares: the term list (TermList), the GPU lookup, and the overheads that turn peak
allocated into the nvidia-smi total (allocator fragmentation, NCCL buffers, CUDA context), added last by finish_stage.
calculator/stages/estimate.py assembles; calculator/stages/training.py and stages/inference.py price one stage each."""

from functools import lru_cache

from calculator.core.dtypes import DTYPE_BITS
from calculator.core.fit import DEFAULT_CUBLAS_WORKSPACE_BYTES, DEFAULT_CUDA_CONTEXT_BYTES
from calculator.memory.parallel import (StageShard, communicators)
from calculator.core.result import ALLOCATED_COMPONENTS, StageEstimate, Term
from calculator.allocator import step_plan
from calculator.core.bounded_cache import get_or_build



@lru_cache(maxsize=None)
def dtype_bytes_text(dtype: str | None) -> str:
    """'2 B' / '0.5 B' for formulas."""
    if dtype is None:
        return "0 B"
    bits = DTYPE_BITS[dtype]
    return f"{bits // 8} B" if bits % 8 == 0 else f"{bits / 8:g} B"


_new_term = tuple.__new__  # Term(...) without the NamedTuple constructor's Python frame


class TermList:
    """Collects the terms of one stage."""

    def __init__(self, items: tuple = (), by_component: dict | None = None, host: tuple = ()) -> None:
        """Empty, or starting from the terms (and their sums by component) of an earlier list."""
        self.items: list[Term] = list(items)
        # (long-lived bytes, allocated bytes) of each phase of the step: reserved memory only grows, so the
        # fragmentation of every phase counts, not only that of the allocation peak
        self.phases: list[tuple[int, int]] = []
        self.by_component: dict[str, int] = dict(by_component) if by_component else {}
        self.host: list[Term] = list(host)  # moved to CPU RAM by offloading
        # the step's moments for the timeline: (name, long-lived bytes, allocated bytes), in order
        self.timeline: list[tuple[str, int, int]] = []
        self.moments: tuple = ()  # the terms live at each moment of a training step (calculator/stages/moments.py)
        # (key, build): the step's allocation order (calculator/step_plan.StepPlan) for the allocator replay,
        # built by build() when the replay of `key` is not cached
        self.plan = None

    def add(self, key: str, component: str, label: str, nbytes_: int, formula: str, substituted: str,
            source: str, note: str = "", keep: bool = False) -> None:
        if nbytes_ or component == "weights" or keep:
            n = int(nbytes_)
            self.items.append(_new_term(Term, (key, component, label, n, formula, substituted, source, note)))
            by = self.by_component
            by[component] = by.get(component, 0) + n

    def extend(self, terms: tuple[Term, ...]) -> None:
        """Terms built (and filtered by add) before."""
        self.items.extend(terms)
        by = self.by_component
        for x in terms:
            by[x.component] = by[x.component] + x.bytes if x.component in by else x.bytes

    def total(self, components: frozenset[str] | None = None) -> int:
        if components is None:
            return sum(self.by_component.values())
        return sum(v for k, v in self.by_component.items() if k in components)


@lru_cache(maxsize=64)
def gpu_of(w_gpu: str | None):
    if not w_gpu:
        return None
    from calculator.model.presets import get_gpu  # data loader; imported lazily so the math has no I/O at import
    return get_gpu(w_gpu)


@lru_cache(maxsize=1)
def all_gpus() -> tuple:
    from calculator.model.presets import list_gpus
    return tuple(list_gpus())


_REPLAYS: dict = {}  # (model, workload, shard) -> step_plan.Replay, the newest 256 (as the per-model lru caches)
_MAX_REPLAYS = 256


def _replayed(key: tuple, build_plan):
    """The caching allocator replayed over the step plan of `key` (calculator/step_plan.replayed). The plan is a
    function of the key, so a replay seen before needs neither the plan nor the replay again."""
    return get_or_build(_REPLAYS, key, lambda: step_plan.replayed(build_plan(), key[1].expandable_segments),
                        _MAX_REPLAYS)  # key: (model, workload, shard)


LONG_LIVED = frozenset({"weights", "master_weights", "gradients", "optimizer_states", "kv_cache"})


@lru_cache(maxsize=256)
def _nccl_label(groups: tuple[tuple[str, int], ...]) -> str:
    return "NCCL buffers (" + ", ".join(f"{k}={v}" for k, v in groups) + ")"


def _overheads(t: TermList, w, gpu, peak_allocated: int, comm_groups: dict[str, int]) -> None:
    """Line items outside the tensors: allocator fragmentation, NCCL communicators, CUDA context."""
    o = w.overheads
    if o.fragmentation_pct is not None:
        frag = int(peak_allocated * o.fragmentation_pct / 100)
        t.add("fragmentation", "fragmentation", "Allocator fragmentation (flat)", frag,
              "frag% × peak allocated", ("{:g}% × {:,} B", o.fragmentation_pct, peak_allocated), "allocator",
              "reserved − allocated in PyTorch's caching allocator, as a flat share you set")
    elif t.plan is not None:
        r = _replayed(*t.plan)
        # a peak the replay does not reach (a transient it does not order) lands in blocks the replay left free
        frag = max(0, r.peak_reserved - max(r.peak_allocated, peak_allocated))
        t.add("fragmentation", "fragmentation", "Allocator: reserved − allocated", frag,
              "max reserved (replayed over build + two steps) − max(replayed, estimated peak allocated)",
              ("{:,} − max({:,}, {:,}) B{}", r.peak_reserved, r.peak_allocated, peak_allocated,
               " (expandable segments)" if w.expandable_segments else ""),
              "caching-allocator", "PyTorch's caching allocator rules (segments of 2 / 20 MiB or the request "
              "rounded to 2 MiB, best-fit reuse of freed blocks, splitting, no release without empty_cache) over "
              "the step's tensors in the order they are allocated and freed")
    else:
        phases = t.phases or [(t.total(LONG_LIVED), peak_allocated)]
        a, b = o.fragmentation_states_pct / 100, o.fragmentation_working_pct / 100
        reserved, states, working = max((alloc + a * long + b * (alloc - long), long, alloc - long)
                                        for long, alloc in phases)
        frag = max(0, int(reserved) - peak_allocated)
        t.add("fragmentation", "fragmentation", "Allocator fragmentation", frag,
              "max over phases (allocated + a × long-lived + b × working set) − peak allocated",
              ("{:g}% × {:,} + {:g}% × {:,} B{}", o.fragmentation_states_pct, states, o.fragmentation_working_pct,
               working, " at the phase whose reserved memory is highest" if len(phases) > 1 else ""),
              "allocator-calibration", "reserved − allocated: the churn of short-lived blocks fragments far more "
              "than long-lived states (fit to published nvidia-smi figures; an upper value with FlashAttention)")
    if o.include_comm_buffers and comm_groups:
        n = len(comm_groups)
        t.add("comm_buffers", "comm_buffers", _nccl_label(tuple(comm_groups.items())), n * o.nccl_bytes_per_group,
              "n_communicators × buffer per communicator", ("{} × {:,} B", n, o.nccl_bytes_per_group), "nccl")
    if o.cuda_context_bytes is not None:
        ctx, where = o.cuda_context_bytes, "set by you"
    elif gpu is not None:
        ctx, where = gpu.cuda_context_bytes, f"typical on {gpu.name}"
    else:
        ctx, where = DEFAULT_CUDA_CONTEXT_BYTES, "default; pick a GPU for its own value"
    t.add("cuda_context", "cuda_context", "CUDA context", ctx, "C_ctx", ("{:,} B ({})", ctx, where), "cuda-context")



def finish_stage(t: TermList, w, shard: StageShard, gpu, extra_groups: dict[str, int] | None = None) -> StageEstimate:
    peak = t.total(ALLOCATED_COMPONENTS)
    if w.activation_model == "textbook" and w.mode == "train":
        pct = w.overheads.textbook_overhead_pct
        t.add("framework_overhead", "framework_overhead", f"Framework overhead (flat {pct:g}%)",
              int(peak * pct / 100), "overhead% × (weights + grads + optimizer + activations)",
              ("{:g}% × {:,} B", pct, peak), "textbook-overhead")
    else:
        _overheads(t, w, gpu, peak, {**communicators(w.parallel), **extra_groups} if extra_groups else
                   communicators(w.parallel))
    return StageEstimate(shard.stage, (shard.first_layer, shard.last_layer), tuple(t.items), peak, t.total(),
                         tuple(t.host), tuple(t.timeline), t.moments)


def add_cublas_workspaces(t: TermList, w, gpu, threads: int) -> None:
    """cuBLAS workspaces: PyTorch gives each (cuBLAS handle, stream) its own workspace from the caching allocator
    (aten/src/ATen/cuda/CublasHandlePool.cpp, getChosenWorkspaceSize: 32 MiB on Hopper and Blackwell, 8.125 MiB
    before); handles are per thread, and autograd runs the backward on its own device thread: 2 in training."""
    o = w.overheads
    each = o.cublas_workspace_bytes if o.cublas_workspace_bytes is not None else (
        gpu.cublas_workspace_bytes if gpu is not None else DEFAULT_CUBLAS_WORKSPACE_BYTES)
    t.add("transient.cublas", "transient", "cuBLAS workspaces", threads * each, "threads × W_cublas",
          ("{} × {:,} B", threads, each), "cublas-workspace",
          "forward thread + autograd's backward thread" if threads == 2 else "one thread")
