"""How Megatron-Core splits the decoder layers over pipeline ranks and, under the interleaved schedule, over each
rank's virtual stages (model chunks): the decoder layers of every (rank, virtual stage), and the refusals Megatron
makes, as InputError naming the field.

Four ways, as in megatron/core/transformer/transformer_block.py get_num_layers_to_build and
transformer_layer.py get_transformer_layer_offset (NVIDIA/Megatron-LM d98e8a64, 2026-08-22), checked by
transformer_config.py TransformerConfig.__post_init__:

- even: L / (p·v) layers per chunk.
- account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split (Parallelism.pp_embedding_in_split,
  pp_loss_in_split): the embedding and the loss each count as one layer, N = L + e + l must split into p·v equal
  chunks, and the first chunk of rank 0 builds one decoder layer fewer (embedding), the last chunk of rank p − 1
  one fewer (loss). Qwen3-235B's 94 layers + 2 = 96 = 4 ranks × 12 chunks × 2.
- num_layers_in_first/last_pipeline_stage (pp_first_stage_layers / pp_last_stage_layers): the first / last rank
  holds its own count, the other ranks share the rest evenly; with virtual stages each count splits evenly over
  the rank's v chunks (each must be divisible by v).
- pipeline_model_parallel_layout (pp_layout): a string of p·v stages split by '|', stage i = a·p + b being virtual
  stage a of rank b; 'E' embedding, 't' decoder layer, 'm' MTP layer, 'L' loss; "(…)*n" and "x*n" repeat,
  commas are cosmetic (megatron/core/transformer/pipeline_parallel_layer_layout.py parse_str_to_list,
  validate_layer_layout). DeepSeek-V3's "Et*4|(t*4|)*14tmL" = 61 layers over 16 chunks.

The embedding stays on rank 0's first chunk and the loss (LM head) on the last rank's last chunk in every way.
"""
from __future__ import annotations

import re

from calculator.core import bounds as B
from calculator.core.errors import InputError

_LAYOUT_CHARS = "ELtm"
_MAX_UNROLLED = 4 * B.MAX_LAYERS  # every layer, MTP layer and stage separator, with room to spare


def divisors(n: int) -> list[int]:
    """Divisors of n up to 64, to suggest valid degrees."""
    return [d for d in range(1, min(n, 64) + 1) if n % d == 0]


def virtual_stages(p) -> int:
    """Model chunks per rank: Parallelism.virtual_stages under the interleaved schedule, else 1."""
    return p.virtual_stages if getattr(p, "schedule", "1f1b") == "interleaved" else 1


def parse_layout(text: str, pp: int) -> tuple[str, ...]:
    """The stages of a Megatron pipeline layout string, each as its layer characters, in layout order (virtual
    stage a of rank b at a·pp + b). InputError("pp_layout") on a character Megatron does not know or a stage count
    that pp does not divide."""
    s = text.replace(",", "")

    def unroll(x: re.Match) -> str:
        if len(x.group(1)) * int(x.group(2)) > _MAX_UNROLLED:
            raise InputError("pp_layout", f"{x.group(0)!r} unrolls to more than {_MAX_UNROLLED} characters")
        return x.group(1) * int(x.group(2))
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):  # Megatron's own two unrolling passes, in its order
        s = re.sub(pattern, unroll, s)
        if len(s) > _MAX_UNROLLED:
            raise InputError("pp_layout", f"the layout unrolls to more than {_MAX_UNROLLED} characters")
    stages = tuple(s.split("|"))
    bad = sorted({c for c in s if c not in _LAYOUT_CHARS + "|"})
    if bad:
        raise InputError("pp_layout", f"unknown layer character(s) {bad} in {text!r}: Megatron's layout knows "
                                      f"E (embedding), t (decoder layer), m (MTP layer), L (loss), '|' between "
                                      f"stages, (…)*n and x*n to repeat")
    if len(stages) % pp:
        raise InputError("pp_layout", f"the layout has {len(stages)} stages, not a multiple of pp = {pp}")
    return stages


def _layout_chunks(stages: tuple[str, ...], pp: int) -> tuple[tuple[int, ...], ...]:
    v = len(stages) // pp
    return tuple(tuple(stages[a * pp + b].count("t") for a in range(v)) for b in range(pp))


def chunk_layer_counts(layers: int, p) -> tuple[tuple[int, ...], ...]:
    """Decoder layers of each (pipeline rank, virtual stage): counts[rank][chunk]. Assumes check_split passed.
    `p`: a Parallelism, or any object with its pipeline fields (missing ones read as unset)."""
    pp, v = p.pp, virtual_stages(p)
    layout = getattr(p, "pp_layout", None)
    if layout:
        return _layout_chunks(parse_layout(layout, pp), pp)
    first, last = getattr(p, "pp_first_stage_layers", None), getattr(p, "pp_last_stage_layers", None)
    if first is not None or last is not None:
        uneven = (first is not None) + (last is not None)
        middle = pp - uneven
        each = (layers - (first or 0) - (last or 0)) // middle if middle else 0
        ranks = [each] * pp
        if first is not None:
            ranks[0] = first
        if last is not None:
            ranks[-1] = last
        return tuple((r // v,) * v for r in ranks)
    e, lo = int(bool(getattr(p, "pp_embedding_in_split", False))), int(bool(getattr(p, "pp_loss_in_split", False)))
    per = (layers + e + lo) // (pp * v)
    grid = [[per] * v for _ in range(pp)]
    grid[0][0] -= e
    grid[-1][-1] -= lo
    return tuple(tuple(row) for row in grid)


def uneven_chunks(p) -> bool:
    """Whether the layout departs from the even L / (p·v) split by a rule of this module."""
    return bool(getattr(p, "pp_layout", None) or getattr(p, "pp_embedding_in_split", False)
                or getattr(p, "pp_loss_in_split", False) or getattr(p, "pp_first_stage_layers", None) is not None
                or getattr(p, "pp_last_stage_layers", None) is not None)


def check_split(layers: int, p, mtp_layers: int | None = None) -> None:
    """Raise InputError where Megatron-Core refuses the split (TransformerConfig.__post_init__,
    PipelineParallelLayerLayout.validate_layer_layout). `mtp_layers`: the MTP layers trained, checked against a
    layout's 'm' (None: not checked)."""
    pp, v = p.pp, virtual_stages(p)
    first, last = p.pp_first_stage_layers, p.pp_last_stage_layers
    emb, loss = p.pp_embedding_in_split, p.pp_loss_in_split
    if p.pp_layout:
        if first is not None or last is not None or emb or loss:
            raise InputError("pp_layout", "a pipeline layout cannot be combined with pp_first_stage_layers, "
                                          "pp_last_stage_layers, pp_embedding_in_split or pp_loss_in_split "
                                          "(Megatron-Core refuses it: the layout places every layer)")
        _check_layout(layers, p, mtp_layers)
        return
    if (first is not None or last is not None) and (emb or loss):
        raise InputError("pp_embedding_in_split" if emb else "pp_loss_in_split",
                         "counting the embedding / loss in the split cannot be combined with uneven first / last "
                         "stages (Megatron-Core refuses it)")
    if first is not None or last is not None:
        _check_first_last(layers, p, v)
        return
    n = layers + emb + loss
    if emb or loss:
        what = "num_hidden_layers + " + " + ".join(x for x, on in (("1 (embedding)", emb), ("1 (loss)", loss)) if on)
        field = "pp_embedding_in_split" if emb else "pp_loss_in_split"
        if n % (pp * v):
            chunks = f"pp × virtual_stages = {pp * v}" if v > 1 else f"pp = {pp}"
            raise InputError(field, f"{what} = {n} must divide into {chunks} equal stages")
        if n // (pp * v) < 1 + (emb and loss and pp * v == 1):
            raise InputError(field, f"a stage of {n // (pp * v)} must hold the embedding / loss and a layer")
        return
    if layers % (pp * v):
        what = f"pp × virtual_stages = {pp * v}" if v > 1 else f"pipeline parallel size {pp}"
        raise InputError("pp", f"{what} must divide num_hidden_layers ({layers}); try one of {divisors(layers)}, "
                               f"uneven stages (pp_first_stage_layers / pp_last_stage_layers), the embedding and "
                               f"loss counted in the split, or a pp_layout")


def _check_first_last(layers: int, p, v: int) -> None:
    first, last = p.pp_first_stage_layers, p.pp_last_stage_layers
    field = "pp_first_stage_layers" if first is not None else "pp_last_stage_layers"
    if p.pp < 2:
        raise InputError(field, "uneven first / last stages need pipeline parallelism (pp ≥ 2)")
    for name, count in (("pp_first_stage_layers", first), ("pp_last_stage_layers", last)):
        if count is not None and count % v:
            raise InputError(name, f"{count} layers on that stage must split evenly over its {v} virtual stages")
    uneven = (first is not None) + (last is not None)
    middle, rest = p.pp - uneven, layers - (first or 0) - (last or 0)
    if middle == 0:
        if rest:
            raise InputError(field, f"with pp = 2 the first and last stages hold every layer: {first} + {last} "
                                    f"must equal num_hidden_layers ({layers})")
        return
    if rest < middle or rest % middle:
        raise InputError(field, f"the {rest} layers left after the first / last stages must split evenly over the "
                                f"other {middle} stages (num_hidden_layers = {layers}, pp = {p.pp})")
    if (rest // middle) % v:
        raise InputError(field, f"the {rest // middle} layers of each middle stage must split evenly over its {v} "
                                f"virtual stages")


def _check_layout(layers: int, p, mtp_layers: int | None) -> None:
    stages = parse_layout(p.pp_layout, p.pp)
    v = len(stages) // p.pp
    if v != virtual_stages(p):
        want = f"schedule 'interleaved' with virtual_stages = {v}" if v > 1 else "schedule '1f1b'"
        raise InputError("pp_layout", f"the layout's {len(stages)} stages over pp = {p.pp} are {v} virtual stages "
                                      f"per rank: use {want}")
    flat = "".join(stages)  # layout order (virtual stage major, rank minor) is Megatron's layer-id order
    if not flat.startswith("E") or not flat.endswith("L") or flat.count("E") != 1 or flat.count("L") != 1:
        raise InputError("pp_layout", "the layout must start with the embedding 'E' and end with the loss 'L', "
                                      "each once")
    if flat.count("t") != layers:
        raise InputError("pp_layout", f"the layout places {flat.count('t')} decoder layers 't'; the model has "
                                      f"{layers}")
    if "m" in flat and "t" in flat[flat.index("m"):]:
        raise InputError("pp_layout", "decoder layers must come before the MTP layers 'm'")
    if mtp_layers is not None and flat.count("m") != mtp_layers:
        raise InputError("pp_layout", f"the layout places {flat.count('m')} MTP layers 'm'; the workload trains "
                                      f"{mtp_layers} (mtp_layers)")
