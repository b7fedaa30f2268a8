"""SGLang's KV pools for Gemma 3n and Gemma 4 text decoders (ModelSpec.gemma_next): the bytes one token takes in the
full-attention pool and in the sliding-window pool on one GPU, as SGLang sizes them.

    Gemma 4   hybrid SWA: configs/model_config.py is_hybrid_swa_model lists Gemma4ForCausalLM,
              Gemma4ForConditionalGeneration and Gemma4UnifiedForConditionalGeneration; get_hybrid_layer_ids takes
              the swa / full layer ids straight from layer_types, so the KV-shared layers are counted too (their
              RadixAttention reads the producer's layer id, gemma4_causal.py Gemma4Attention, but the pool still
              holds a buffer for each id).
              full per token = max(1, num_key_value_heads // attn_tp) × (head_dim + v_head_dim) × kv bytes
              swa  per token = max(1, swa_num_key_value_heads // attn_tp) × (swa_head_dim + swa_v_head_dim) × kv bytes
                                   (model_executor/pool_configurator.py HybridSWAPoolConfigurator.__init__)
              with SGLang's Gemma 4 names: head_dim = global_head_dim, num_key_value_heads =
              num_global_key_value_heads, swa_* = the checkpoint's head_dim / num_key_value_heads, v_head_dim =
              head_dim (utils/hf_transformers_utils.py get_config, model_type "gemma4"; model_config.py
              _derive_model_shapes). K and V are both stored, attention_k_eq_v or not.
              tokens = ⌊available / (full × n_full + swa_full_tokens_ratio × swa × n_swa)⌋, swa tokens =
              ⌊full tokens × ratio⌋ (HybridSWAPoolConfigurator._solve_pool_sizes); the server refuses to start when
              sliding_window − 1 + page ≥ swa tokens (gemma4_causal.py get_attention_sliding_window_size).
    Gemma 3n  no hybrid SWA pool (not in is_hybrid_swa_model): DefaultPoolConfigurator, cell = KV heads ×
              (head_dim + v_head_dim) × num_effective_layers × kv bytes, num_effective_layers = end_layer −
              start_layer: every layer of this GPU, the KV-shared ones and the sliding ones at full length
              (pool_configurator.py DefaultPoolConfigurator._compute_cell_size; model_runner.py num_effective_layers).

Source read: the sgl-project/sglang repository as stored (pool_configurator.py 003fca80, configs/model_config.py
001adf56, models/gemma4_causal.py 03826cdd, hf_transformers_utils get_config); the tag v0.5.23 itself could not be
checked out here, so these rules stand for 0.5.23 on that reading.
"""
from __future__ import annotations

from dataclasses import dataclass

from calculator.memory.inference import with_kv_dtype
from calculator.core.dtypes import nbytes
from calculator.core.errors import InputError
from calculator.engines.common import attention_tp

# mem_cache/.../SWAChunkCapPoolConfigurator.is_applicable: with --max-running-requests and the radix cache off the
# sliding pool is sized from a per-request cap (SGLANG_SWA_EVICTION_INTERVAL), not by the ratio: not modelled
CHUNK_CAP_REFUSED = ("SGLang: Gemma 4 with --max-running-requests and the radix cache off sizes its sliding pool by "
                     "SWAChunkCapPoolConfigurator (pool_configurator.py), which is not modelled; turn prefix caching "
                     "on or leave max_num_seqs unset")


@dataclass(frozen=True)
class GemmaCells:
    """One token's bytes over this GPU's layers: in the full pool and in the sliding pool (0: no sliding pool)."""

    full_cell: int
    swa_cell: int
    full_layers: int
    swa_layers: int
    hybrid: bool
    note: str


def _one(values: set[int], what: str) -> int:
    if len(values) > 1:
        raise InputError("model", f"SGLang keeps one {what} per pool; this Gemma config has {sorted(values)}")
    return values.pop()


def cells(m, w, layers: range) -> GemmaCells:
    """SGLang's per-token pool bytes of a Gemma 3n / Gemma 4 decoder over `layers` (the module docstring's rules)."""
    w = with_kv_dtype(m, w)  # kv_dtype "auto" as the runtime picks it (memory.inference.kv_cache_dtype)
    g, tp, e = m.gemma_next, attention_tp(w), nbytes(1, w.kv_dtype)
    full = [i for i in layers if not m.layer_is_sliding(i)]
    swa = [i for i in layers if m.layer_is_sliding(i)]

    def per_token(ids: list[int], what: str) -> int:
        if not ids:
            return 0
        heads = _one({g.kv_heads[i] for i in ids}, f"{what} KV-head count")
        dim = _one({g.head_dims[i] for i in ids}, f"{what} head_dim")
        return int(max(1, heads // tp) * (dim + dim) * e)

    shared = sum(1 for i in layers if g.kv_modes[i] == "reuse")
    if g.generation == "3n":
        cell = per_token(list(layers), "layer")
        note = (f"Gemma 3n in SGLang: one token pool over all {len(layers)} layers of this GPU ({shared} KV-shared and "
                "the sliding ones included; pool_configurator.py DefaultPoolConfigurator)")
        return GemmaCells(cell * len(layers), 0, len(layers), 0, False, note)
    if not swa:  # HybridSWAPoolConfigurator.__init__: assert "Hybrid SWA model must have at least one SWA layer"
        raise InputError("model", "SGLang: a Gemma 4 stage without sliding layers fails HybridSWAPoolConfigurator's "
                                  "assert (at least one SWA layer)")
    full_tok, swa_tok = per_token(full, "full-attention"), per_token(swa, "sliding")
    note = (f"Gemma 4 in SGLang: hybrid SWA pool, {len(full)} full layers of {full_tok:,} B a token and {len(swa)} "
            f"sliding layers of {swa_tok:,} B ({shared} KV-shared layers still get buffers; model_config.py "
            "get_hybrid_layer_ids, pool_configurator.py HybridSWAPoolConfigurator)")
    return GemmaCells(full_tok * len(full), swa_tok * len(swa), len(full), len(swa), bool(full and swa), note)


def check_serving(m, s) -> None:
    """Refuse what the rules above do not cover."""
    if m.gemma_next.generation == "4" and s.max_num_seqs and not s.prefix_caching:
        raise InputError("serving.max_num_seqs", CHUNK_CAP_REFUSED)


def swa_start_error(m, tokens: int, ratio: float, page: int) -> str:
    """The start failure of HybridSWAPoolConfigurator._solve_pool_sizes when the sliding pool cannot hold one
    request: sliding_window_size (HF window − 1, gemma4_causal.py) + page ≥ swa tokens; "" when it starts."""
    return swa_floor_error((m.sliding_window or 0) - 1, page, int(tokens * ratio) // page * page)


def swa_floor_error(window: int, page: int, swa_tokens: int) -> str:
    """MemoryPoolConfigurator.validate_swa_pool_size, for every hybrid SWA pool (Gemma 4, MiMo-V2-Flash): the start
    fails when sliding_window_size + page ≥ the sliding pool's tokens; "" when it starts."""
    if window + page >= swa_tokens:
        return (f"SWA pool ({swa_tokens} tokens) cannot hold even one request: the prefill admission floor is "
                f"sliding_window_size ({window}) + page_size ({page}). Increase --swa-full-tokens-ratio or the "
                "total KV budget.")
    return ""
