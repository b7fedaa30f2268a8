"""A vision-language model's vision tower in a serving engine: both engines load it by default, beside the language
model, and SGLang lowers its memory fraction for it (issue 21).

- vLLM 0.33 builds the tower inside `_mark_tower_model` (model_executor/models/interfaces.py): it is skipped only
  when `--limit-mm-per-prompt` sets every modality to 0 or `--language-model-only` is given
  (config/multimodal.py get_limit_per_prompt), and, under Model Runner V2 (the default), on every pipeline stage
  but the first. SGLang 0.5.23 builds it unless `--language-model-only` (models/qwen3_vl.py and the other VLMs:
  `self.visual = None` when config.language_model_only).
- Its linears are split over tensor parallelism by default (vLLM `mm_encoder_tp_mode="weights"`: QKVParallelLinear,
  ColumnParallelLinear and RowParallelLinear in the towers, e.g. qwen3_vl.py Qwen3_VisionTransformer; SGLang's
  towers likewise unless `--mm-enable-dp-encoder`, over the attention TP group under DP attention); convolutions,
  norms, biases and position tables are whole on every rank (column-parallel biases are split too: the engine
  counts them whole, at most 3·hv + fv values a block). It is loaded in the model dtype: the quantization configs of
  AWQ / GPTQ / FP8 checkpoints leave the towers out (modules_to_not_convert / ignored layers).
- SGLang's default mem_fraction_static for a multimodal model (arg_groups/memory_hook.py
  adjust_mem_fraction_for_vlm): × 0.95 × clamp(1 − 0.1·(L·h² / (24·1024²) − 1), 0.8, 1.05), L and h the vision
  config's num_hidden_layers and hidden_size attributes (a ViT-L/14 is 1).
Not counted: vLLM's profile run also runs the encoder on a dummy batch of the largest image or video the processor
makes and keeps its outputs through the language model's dummy forward (v1/worker/gpu_model_runner.py profile_run);
that working set is left out (the serving notes say so).

May import: calculator.model, calculator.core (calculator.engines.common adds the weights to every budget's and
gives the tower's TP group, attention_tp).
"""
from __future__ import annotations

from functools import lru_cache

from calculator.core.dtypes import nbytes
from calculator.model.spec import ModelSpec
from calculator.model.vision.spec import VisionSpec
from calculator.model.vision import vision_tensors

VIT_L_LAYERS, VIT_L_HIDDEN = 24, 1024  # SGLang's baseline tower (ViT-L/14)


def loads_tower(m: ModelSpec, w, shard) -> bool:
    """Whether this GPU holds the tower: a mapped tower, not --language-model-only, the first pipeline stage."""
    return m.vision is not None and not w.serving.language_model_only and shard.has_embedding


@lru_cache(maxsize=64)
def tower_weight_elements(v: VisionSpec, tp: int) -> int:
    """Elements of the tower and projector on one TP rank: nn.Linear weights split over `tp`, the rest whole."""
    return sum(-(-t.numel // tp) if t.role else t.numel for t in vision_tensors(v))


def tower_weight_bytes(m: ModelSpec, w, shard, tp: int) -> int:
    """Bytes of the tower and projector one GPU loads (0 where it loads none), in the model dtype, over the tower's
    TP group `tp` (common.attention_tp: the layout's TP; SGLang under DP attention, the attention TP group)."""
    if not loads_tower(m, w, shard):
        return 0
    return nbytes(tower_weight_elements(m.vision, tp), w.precision.params)


def sglang_vlm_factor(m: ModelSpec) -> tuple[float, str]:
    """(SGLang's factor on its default mem_fraction_static for a multimodal model, its text). The vision config's
    hidden_size attribute is the tower's width, but Qwen2-VL's config names its merger's output so (embed_dim is the
    width: Qwen2VLVisionConfig), which is what SGLang reads."""
    v = m.vision
    hidden = v.out_hidden_size if v.kind == "qwen2_vl" else v.hidden_size
    ratio = v.num_layers * hidden ** 2 / (VIT_L_LAYERS * VIT_L_HIDDEN ** 2)
    factor = 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))
    return factor, (f"× {factor:.4f} for the vision tower (0.95 × clamp(1 − 0.1 × ({v.num_layers} × {hidden}² / "
                    f"(24 × 1024²) − 1), 0.8, 1.05))")


def tower_note(m: ModelSpec, w, shard, tp: int) -> str:
    """The serving note of a GPU that loads the tower ('' otherwise)."""
    if not loads_tower(m, w, shard):
        return ""
    n = tower_weight_elements(m.vision, tp)
    text = (f"vision tower and projector loaded ({n:,} parameters on this GPU, its linears split over TP; "
            f"--language-model-only leaves it out)")
    if w.engine == "vllm":
        text += ("; not counted: the profile run's encoder pass on the largest image or video and its outputs, "
                 "which vLLM also subtracts from the KV pool")
    return text
