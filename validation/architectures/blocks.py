"""Which traced modules make up one engine layer: the real model's decoder layer i (its norms, mixer, feed-forward and
its own functional calls), except for a type whose real block holds several engine layers, each sublayer's modules
then being entries of ModuleLists inside the block (SPLIT_BLOCKS)."""
from __future__ import annotations

from typing import NamedTuple

# model_type -> (the block's ModuleLists indexed by sublayer, the block's modules that belong to sublayer 0)
SPLIT_BLOCKS = {
    # models/longcat_flash/modeling_longcat_flash.py LongcatFlashDecoderLayer: self_attn[r], mlps[r],
    # input_layernorm[r], post_attention_layernorm[r] for r = 0, 1; the shortcut MoE (mlp) reads
    # post_attention_layernorm[0]'s output (calculator/model/mappers/longcat.py)
    "longcat_flash": (("input_layernorm", "self_attn", "post_attention_layernorm", "mlps"), ("mlp",)),
}


class Layers(NamedTuple):
    prefix: str  # the ModuleList of the real decoder blocks
    lists: tuple[str, ...] = ()  # SPLIT_BLOCKS' entries (empty: one engine layer per block)
    first: tuple[str, ...] = ()
    per_block: int = 1

    def block(self, i: int) -> int:
        """The real block engine layer i is in."""
        return i // self.per_block

    def owns(self, i: int, name: str) -> bool:
        """Whether the traced module `name` (or its functional calls) belongs to engine layer i."""
        block = f"{self.prefix}.{self.block(i)}"
        if not (name == block or name.startswith(block + ".")):
            return False
        if self.per_block == 1:
            return True
        r, rest = i % self.per_block, name[len(block) + 1:].split(".")
        if name == block or rest[0] in self.first:  # the block's own calls (residual sums: nothing saved) go first
            return r == 0
        return rest[0] in self.lists and len(rest) > 1 and rest[1] == str(r)


def layers_of(model_type: str, prefix_of, n: int) -> Layers:
    """The engine's n layers in the real model: `prefix_of(count)` finds the ModuleList of `count` blocks."""
    if model_type not in SPLIT_BLOCKS:
        return Layers(prefix_of(n))
    lists, first = SPLIT_BLOCKS[model_type]
    return Layers(prefix_of(n // 2), lists, first, 2)
