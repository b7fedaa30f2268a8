"""The order in which a training step allocates and frees its tensors (the plan: calculator/allocator/step_plan.py), run on
an allocator: the caching-allocator replay (calculator/allocator/fast.py) or an event list (calculator/allocator/reference.py's
replay, expandable segments, tests).

The loop is the one a user runs on one GPU (HF Trainer / accelerate / a plain PyTorch loop; DDP and FSDP2 add
their buffers): the model is built, then two steps of forward, backward, `opt.step()` and
`opt.zero_grad(set_to_none=True)` (the shared H200 protocol: the measured figure is the second, steady step, with
the reserved memory the first left behind).
- forward: each layer's saved tensors in layer order (full recompute: only its input, the rest allocated and
  freed); transformers' loss (transformers/loss/loss_utils.py ForCausalLMLoss): model-dtype logits, their fp32
  upcast, the fp32 log-softmax kept for backward; the upcast and the logits are freed when the loss returns;
- backward (torch/csrc/autograd): the NLL gradient (fp32), the log-softmax gradient (fp32), its cast back, the
  LM head's input gradient and weight gradient; then per layer in reverse (recomputed first under full
  recompute) the MLP and attention input gradients, the layer's parameter gradients (born on first use,
  torch/csrc/autograd/functions/accumulate_grad.h), its saved tensors freed; the embedding gradient last;
- step: the first `opt.step()` creates the optimizer state lazily, param by param (torch/optim/adamw.py
  `_init_group`: exp_avg and exp_avg_sq `zeros_like(p)`), after the backward, into whatever blocks the
  activations left free; the foreach implementation materialises `_foreach_sqrt(exp_avg_sqs)`, one temporary per
  parameter (torch/optim/adamw.py `_multi_tensor_adamw`); the fused one none. zero_grad frees the gradients.
  DeepSpeed ZeRO-3 steps sub-group by sub-group instead: the flattened bf16 gradients, their fp32 copy (the bf16
  one freed), the states and temporaries of that sub-group, the fp32 copy freed (`step_groups`).
"""
from __future__ import annotations

from calculator.allocator.tensors import StepPlan


class _Events:
    """run_step's allocator recording events ((id, bytes) allocates, (id, 0) frees) instead of replaying them."""

    def __init__(self) -> None:
        self.events: list[tuple[int, int]] = []
        self.tensors = 0

    def alloc(self, n: int) -> int:
        if n <= 0:
            return 0
        self.tensors += 1
        self.events.append((self.tensors, n))
        return self.tensors

    def free_one(self, key: int) -> None:
        if key:
            self.events.append((key, 0))

    def alloc_free(self, n: int) -> None:
        self.free_one(self.alloc(n))

    def allocs(self, sizes) -> list[int]:
        return [self.alloc(n) for n in sizes]

    def frees(self, keys) -> None:
        for k in keys:
            self.free_one(k)

    def allocs_repeated(self, block, k: int) -> list[list[int]]:
        return [self.allocs(block) for _ in range(k)]

    def allocs_runs(self, sizes, periods) -> None:
        self.allocs(sizes)


def training_events(plan: StepPlan) -> list[tuple[int, int]]:
    """Build + two training steps as allocator events ((id, bytes) allocates, (id, 0) frees)."""
    rec = _Events()
    run_step(plan, rec)
    return rec.events


def _int(n) -> int:
    """A tensor's bytes as an int (a positive size under 1 B stays a tensor: one 512 B block)."""
    return max(int(n), 1) if n > 0 else 0


def _ints(sizes) -> tuple[int, ...]:
    return tuple(max(int(n), 1) if n > 0 else 0 for n in sizes)


def scaled_sizes(sizes, factors) -> list[int]:
    """[int(n * k) for n in sizes for k in factors], at C speed where that is exact: a factor p / 2^q (every float
    factor here: 2.0, 1.0, 0.5, 1/64) on sizes with n·p < 2^53 makes n * k an exact float, so int(n * k) is
    n·p // 2^q (a model's hundreds of master weights, optimizer states and foreach temporaries)."""
    ratios = [float(k).as_integer_ratio() for k in factors]
    if not sizes or not ratios or min(sizes) < 0 or max(sizes) * max(p for p, _ in ratios) >= 1 << 53 or \
            any(p < 0 or q & (q - 1) for p, q in ratios):
        return [int(n * k) for n in sizes for k in factors]
    out = [0] * (len(sizes) * len(ratios))
    for i, (p, q) in enumerate(ratios):  # factor i of every size at positions i, i + len(factors), ...
        out[i::len(ratios)] = map(p.__mul__, sizes) if q == 1 else map(q.__rfloordiv__, map(p.__mul__, sizes))
    return out


def run_step(plan: StepPlan, a) -> None:
    """The build and two steps on an allocator `a` (allocator.fast.CachingAllocator, or _Events): alloc / allocs /
    allocs_repeated / allocs_runs grant handles (0: no tensor), free_one / frees return them, alloc_free is a
    transient (allocated and freed at once). Sizes are ints."""
    t = plan.tensors
    saved_sizes, work_sizes, head_sizes = _ints(plan.layer_saved), _ints(plan.layer_grad_work), \
        _ints(plan.head_saved)
    gather, transient, recompute = t.layer_gather, t.layer_transient, _int(plan.recompute_input)
    hidden, (e_logits, f_logits) = _int(plan.hidden_grad), _ints(plan.logits)
    a.allocs_runs(t.weights, t.periods)
    a.allocs_runs(t.masters, t.periods)
    a.allocs(_ints(plan.persistent))
    a.alloc_free(_int(plan.init_transient))
    grads: list[int] = []
    states_made = False
    n_layers = plan.n_layers
    persistent_grads: list[int] = []
    for _step in range(2):
        # forward
        if gather or transient or recompute:
            saved: list[list[int]] = []
            for i in range(n_layers):
                g = a.alloc(gather)
                for n in transient:
                    a.alloc_free(n)
                if recompute:
                    keep = [a.alloc(recompute)]
                    a.frees(a.allocs(saved_sizes))
                else:
                    keep = a.allocs(saved_sizes)
                a.free_one(g)
                saved.append(keep)
        else:  # every layer saves the same tensors, nothing freed in between
            saved = a.allocs_repeated(saved_sizes, n_layers)
        head = a.allocs(head_sizes)
        if e_logits:
            logits = a.alloc(e_logits)
            tanh = 0
            if plan.softcap:  # transformers Gemma2ForCausalLM: logits / cap, tanh, × cap
                scaled = a.alloc(e_logits)
                a.free_one(logits)
                tanh = a.alloc(e_logits)
                a.free_one(scaled)
                logits = a.alloc(e_logits)
            upcast = a.alloc(f_logits)
            lsm = a.alloc(f_logits)
            a.frees((upcast, logits))
            # backward of the loss
            g_nll = a.alloc(f_logits)
            g_lsm = a.alloc(f_logits)
            a.frees((g_nll, lsm))
            g_cast = a.alloc(e_logits)
            a.free_one(g_lsm)
            for _ in range(2 if plan.softcap else 0):  # through × cap and tanh
                nxt = a.alloc(e_logits)
                a.free_one(g_cast)
                g_cast = nxt
            a.free_one(tanh)
        else:
            g_cast = a.alloc(_int(plan.head_transient))
        d_hidden = a.alloc(hidden)
        fresh = not persistent_grads
        if fresh:
            grads += a.allocs(t.head_grads)
        a.free_one(g_cast)
        a.frees(head)
        for i in reversed(range(n_layers)):
            g = a.alloc(gather)
            if recompute:
                saved[i] += a.allocs(saved_sizes)
            for n in transient:
                a.alloc_free(n)
            work = a.allocs(work_sizes)
            if fresh:
                grads += a.allocs(t.layer_grads[i])
            a.frees(saved[i])
            a.frees(work)
            a.free_one(g)
            nxt = a.alloc(hidden)
            a.free_one(d_hidden)
            d_hidden = nxt
        if fresh:
            grads += a.allocs(t.embedding_grads)
            if t.tied_sum and grads:
                # stacks/common.tied_embedding_extra: the head's gradient waits in the input buffer; the
                # embedding's own gradient and their sum are new tensors, the sum becomes .grad
                own = a.alloc(t.tied_sum)
                total = a.alloc(t.tied_sum)
                a.frees((own, grads[0]))
                grads[0] = total
        a.free_one(d_hidden)
        # optimizer step
        sizes = t.model_order or (t.head_grads + tuple(n for lg in t.layer_grads for n in lg) + t.embedding_grads)
        if plan.step_groups:  # stage3.py step: _prepare_sub_group → _optimizer_step → _release_sub_group
            for flat, fp32, temp in plan.step_groups:
                low = a.alloc(flat)
                high = a.alloc(fp32)
                a.free_one(low)
                if not states_made:
                    a.allocs([int(flat * k) for k in plan.state_per_grad])
                a.alloc_free(temp)
                a.free_one(high)
            states_made = True
        if not states_made:
            a.allocs(scaled_sizes(sizes, plan.state_per_grad))
            states_made = True
        # nothing is allocated after the second step's temporaries: its frees (the temporaries, zero_grad) cannot
        # move either peak, so they are not replayed
        last = _step == 1
        if plan.foreach_temp and not plan.step_groups:
            temps = a.allocs(scaled_sizes(sizes, (plan.foreach_temp,)))
            if not last:
                a.frees(temps)
        if plan.grads_persist:
            persistent_grads = grads
        elif not last:
            a.frees(grads)
            grads = []
