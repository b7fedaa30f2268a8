"""The parameter tensors of a vision tower and its projector, tensor by tensor, as each transformers 5.23 module
builds them (the files are named in calculator/model/vision/spec.py); their counts are the tower's parameters.

Each tensor is (name, shape, part, role): part "tower" (the encoder: what LLaMA-Factory's freeze_vision_tower and
ms-swift's freeze_vit freeze) or "projector" (what maps the encoder's output to the language model's width:
Qwen's merger and DeepStack mergers, Gemma 3's, Llama 4's and Mistral 3's multi_modal_projector, Gemma 4's
embed_vision); role "qv" (q and v, or Qwen's fused qkv) / "attn" (the other attention projections) / "mlp" (every
other nn.Linear: MLPs, Llama 4's and Gemma 4's patch embedding, Llama 4's adapter, the projectors' linears) for
nn.Linear weights (LoRA targets; Gemma 4's are the `.linear` inside each Gemma4ClippableLinear: PEFT's all-linear
adapts those, while a target named q_proj hits the wrapper, which PEFT refuses), "" for everything else
(convolutions, norms, biases, embeddings, Gemma 3's projection matrix, which is an nn.Parameter used by
torch.matmul, not an nn.Linear).
"""
from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from calculator.model.vision.spec import QWEN_KINDS, VisionSpec


class Tensor(NamedTuple):
    name: str
    shape: tuple[int, ...]
    part: str  # "tower" or "projector"
    role: str  # "qv", "attn", "mlp" for nn.Linear weights; "" otherwise

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


class VisionParams(NamedTuple):
    tower: int
    projector: int
    tower_linear: int  # nn.Linear weights of the tower (what bitsandbytes quantizes under QLoRA)
    projector_linear: int
    tensors: int

    @property
    def total(self) -> int:
        return self.tower + self.projector


def _linear(name: str, out: int, inp: int, part: str, role: str, bias: bool) -> list[Tensor]:
    t = [Tensor(f"{name}.weight", (out, inp), part, role)]
    return t + [Tensor(f"{name}.bias", (out,), part, "")] if bias else t


def _norm(name: str, width: int, part: str, bias: bool) -> list[Tensor]:
    t = [Tensor(f"{name}.weight", (width,), part, "")]
    return t + [Tensor(f"{name}.bias", (width,), part, "")] if bias else t


def _gemma4_block(v: VisionSpec, p: str) -> list[Tensor]:
    """Gemma4VisionEncoderLayer: Gemma4ClippableLinear q/k/v/o and gate/up/down (no biases; the clip bounds are
    buffers), q_norm and k_norm of head_dim (v_norm has no weight), four Gemma4RMSNorms of hv."""
    hv, fv, t = v.hidden_size, v.intermediate_size, []
    for proj, role in (("q", "qv"), ("k", "attn"), ("v", "qv"), ("o", "attn")):
        t += _linear(f"{p}.self_attn.{proj}_proj.linear", hv, hv, "tower", role, False)
    t += _norm(f"{p}.self_attn.q_norm", v.head_dim, "tower", False) + _norm(f"{p}.self_attn.k_norm", v.head_dim,
                                                                            "tower", False)
    for proj, out, inp in (("gate", fv, hv), ("up", fv, hv), ("down", hv, fv)):
        t += _linear(f"{p}.mlp.{proj}_proj.linear", out, inp, "tower", "mlp", False)
    for norm in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                 "post_feedforward_layernorm"):
        t += _norm(f"{p}.{norm}", hv, "tower", False)
    return t


def _glm4v_block(v: VisionSpec, p: str) -> list[Tensor]:
    """Glm4vVisionBlock: two Glm4vRMSNorms, qkv (bias per attention_bias) and a bias-free proj, Glm4VisionMlp's
    bias-free gate / up / down (fv = out_hidden_size)."""
    hv, fv = v.hidden_size, v.intermediate_size
    t = _norm(f"{p}.norm1", hv, "tower", False) + _norm(f"{p}.norm2", hv, "tower", False)
    t += _linear(f"{p}.attn.qkv", 3 * hv, hv, "tower", "qv", v.attention_bias)
    t += _linear(f"{p}.attn.proj", hv, hv, "tower", "attn", False)
    for proj, out, inp in (("gate", fv, hv), ("up", fv, hv), ("down", hv, fv)):
        t += _linear(f"{p}.mlp.{proj}_proj", out, inp, "tower", "mlp", False)
    return t


def _internvl_block(v: VisionSpec, p: str) -> list[Tensor]:
    """InternVLVisionLayer: q/k/v (bias per attention_bias), projection_layer with a bias, q_norm / k_norm over the
    whole width (use_qk_norm: InternVLVisionRMSNorm, weight only), lambda_1 and lambda_2, layernorm_before / after
    (nn.LayerNorm, or the RMSNorm of norm_type "rms_norm"), InternVLVisionMLP fc1 / fc2 with biases."""
    hv, fv = v.hidden_size, v.intermediate_size
    t: list[Tensor] = []
    if v.fused_qkv:  # modeling_intern_vit.py InternAttention: qkv = Linear(hv, 3·hv, bias=qkv_bias), the same values
        t += _linear(f"{p}.attn.qkv", 3 * hv, hv, "tower", "qv", v.attention_bias)
    for proj, role in (() if v.fused_qkv else (("q", "qv"), ("k", "attn"), ("v", "qv"))):
        t += _linear(f"{p}.attention.{proj}_proj", hv, hv, "tower", role, v.attention_bias)
    t += _linear(f"{p}.attention.projection_layer", hv, hv, "tower", "attn", True)
    if v.qk_norm:
        t += _norm(f"{p}.attention.q_norm", hv, "tower", False) + _norm(f"{p}.attention.k_norm", hv, "tower", False)
    t += _linear(f"{p}.mlp.fc1", fv, hv, "tower", "mlp", True) + _linear(f"{p}.mlp.fc2", hv, fv, "tower", "mlp", True)
    t += _norm(f"{p}.layernorm_before", hv, "tower", not v.rms_norm) + _norm(f"{p}.layernorm_after", hv, "tower",
                                                                              not v.rms_norm)
    return t + [Tensor(f"{p}.lambda_1", (hv,), "tower", ""), Tensor(f"{p}.lambda_2", (hv,), "tower", "")]


def _block(v: VisionSpec, i: int) -> list[Tensor]:
    """One encoder block's tensors."""
    hv, fv, k = v.hidden_size, v.intermediate_size, v.kind
    p = f"blocks.{i}"
    if k == "internvl":
        return _internvl_block(v, p)
    if k == "gemma4":
        return _gemma4_block(v, p)
    if k == "glm4v":
        return _glm4v_block(v, p)
    if k in QWEN_KINDS:  # fused qkv with bias, proj with bias; LayerNorms (Qwen2.5-VL: RMSNorms)
        ln = k != "qwen2_5_vl"
        t = _norm(f"{p}.norm1", hv, "tower", ln) + _norm(f"{p}.norm2", hv, "tower", ln)
        t += _linear(f"{p}.attn.qkv", 3 * hv, hv, "tower", "qv", True) + _linear(f"{p}.attn.proj", hv, hv, "tower",
                                                                                  "attn", True)
        if k == "qwen2_5_vl":  # Qwen2_5_VLMLP: gate, up, down, all with bias
            return t + _linear(f"{p}.mlp.gate_proj", fv, hv, "tower", "mlp", True) + _linear(
                f"{p}.mlp.up_proj", fv, hv, "tower", "mlp", True) + _linear(f"{p}.mlp.down_proj", hv, fv, "tower",
                                                                            "mlp", True)
        fc = "fc" if k == "qwen2_vl" else "linear_fc"  # VisionMlp fc1 / fc2; Qwen3VLVisionMLP linear_fc1 / 2
        return t + _linear(f"{p}.mlp.{fc}1", fv, hv, "tower", "mlp", True) + _linear(
            f"{p}.mlp.{fc}2", hv, fv, "tower", "mlp", True)
    bias = k != "pixtral"
    t = _norm(f"{p}.norm1", hv, "tower", bias) + _norm(f"{p}.norm2", hv, "tower", bias)
    for proj, role in (("q", "qv"), ("k", "attn"), ("v", "qv"), ("o", "attn")):
        t += _linear(f"{p}.attn.{proj}_proj", hv, hv, "tower", role, bias)
    if k == "pixtral":  # PixtralMLP: gated, no biases
        return t + _linear(f"{p}.mlp.gate_proj", fv, hv, "tower", "mlp", False) + _linear(
            f"{p}.mlp.up_proj", fv, hv, "tower", "mlp", False) + _linear(f"{p}.mlp.down_proj", hv, fv, "tower",
                                                                         "mlp", False)
    return t + _linear(f"{p}.mlp.fc1", fv, hv, "tower", "mlp", True) + _linear(f"{p}.mlp.fc2", hv, fv, "tower",
                                                                                "mlp", True)


def _embeddings(v: VisionSpec) -> list[Tensor]:
    hv, c, p, k = v.hidden_size, v.num_channels, v.patch_size, v.kind
    if k in QWEN_KINDS:  # Conv3d over (temporal_patch_size, P, P); Qwen3 adds a bias and positions
        t = [Tensor("patch_embed.proj.weight", (hv, c, v.temporal_patch_size, p, p), "tower", "")]
        if k == "qwen3_vl":
            t += [Tensor("patch_embed.proj.bias", (hv,), "tower", ""),
                  Tensor("pos_embed.weight", (v.num_position_embeddings, hv), "tower", "")]
        return t
    if k == "glm4v":  # Conv3d with bias, post_conv_layernorm (RMSNorm), the learned (image_size / P)² positions
        return ([Tensor("patch_embed.proj.weight", (hv, c, v.temporal_patch_size, p, p), "tower", ""),
                 Tensor("patch_embed.proj.bias", (hv,), "tower", "")] + _norm("post_conv_layernorm", hv, "tower", False)
                + [Tensor("embeddings.position_embedding.weight", (v.num_position_embeddings, hv), "tower", "")])
    if k == "kimi":  # Kimi_K25VisionPatchEmbed: Conv2d with bias, the (pos_emb_height, pos_emb_width, hv) table
        return [Tensor("patch_embed.proj.weight", (hv, c, p, p), "tower", ""),
                Tensor("patch_embed.proj.bias", (hv,), "tower", ""),
                Tensor("patch_embed.pos_emb.position_embeddings", (v.num_position_embeddings, hv), "tower", "")]
    if k == "clip":  # CLIPVisionEmbeddings: class_embedding, a bias-free Conv2d, (S/P)² + 1 positions; pre_layrnorm
        return ([Tensor("embeddings.class_embedding", (hv,), "tower", ""),
                 Tensor("embeddings.patch_embedding.weight", (hv, c, p, p), "tower", ""),
                 Tensor("embeddings.position_embedding.weight", ((v.image_size // p) ** 2 + 1, hv), "tower", "")]
                + _norm("pre_layrnorm", hv, "tower", True))
    if k in ("siglip", "paligemma", "smolvlm", "aya", "cohere2", "onevision"):  # Conv2d + bias, a position a patch
        return [Tensor("embeddings.patch_embedding.weight", (hv, c, p, p), "tower", ""),
                Tensor("embeddings.patch_embedding.bias", (hv,), "tower", ""),
                Tensor("embeddings.position_embedding.weight", ((v.image_size // p) ** 2, hv), "tower", "")]
    if k == "llama4":  # Llama4UnfoldConvolution: nn.Linear over unfolded patches; CLS + positions; pre norm
        return (_linear("patch_embedding.linear", hv, c * p * p, "tower", "mlp", False)
                + [Tensor("class_embedding", (hv,), "tower", ""),
                   Tensor("positional_embedding_vlm", ((v.image_size // p) ** 2 + 1, hv), "tower", "")]
                + _norm("layernorm_pre", hv, "tower", True))
    if k == "internvl":  # InternVLVisionEmbeddings: CLS (and mask) token, Conv2d with bias, (image_size / P)² + 1
        # learned positions (use_absolute_position_embeddings)
        t = [Tensor("embeddings.cls_token", (1, 1, hv), "tower", "")]
        t += [Tensor("embeddings.mask_token", (1, 1, hv), "tower", "")] if v.mask_token else []
        t += [Tensor("embeddings.patch_embeddings.projection.weight", (hv, c, p, p), "tower", ""),
              Tensor("embeddings.patch_embeddings.projection.bias", (hv,), "tower", "")]
        return t + ([Tensor("embeddings.position_embeddings", (1, (v.image_size // p) ** 2 + 1, hv), "tower", "")]
                    if v.positions else [])
    if k == "gemma4":  # Gemma4VisionPatchEmbedder: Linear(3·P² → hv), a (2, position_embedding_size, hv) table
        return (_linear("patch_embedder.input_proj", hv, c * p * p, "tower", "mlp", False)
                + [Tensor("patch_embedder.position_embedding_table", (2, v.num_position_embeddings, hv), "tower", "")])
    return [Tensor("patch_conv.weight", (hv, c, p, p), "tower", "")] + _norm("ln_pre", hv, "tower", False)


def _after(v: VisionSpec) -> list[Tensor]:
    """What follows the blocks: final norms, heads, adapters and the projector."""
    hv, fv, out, k = v.hidden_size, v.intermediate_size, v.out_hidden_size, v.kind
    if k == "glm4v":  # post_layernorm, the m×m Conv2d downsample (tower); Glm4vVisionPatchMerger (projector): proj,
        # post_projection_norm (LayerNorm), gate / up / down to and from merger_intermediate_size, no biases
        m, ctx = v.spatial_merge_size, v.merger_intermediate_size
        t = _norm("post_layernorm", hv, "tower", False) + [Tensor("downsample.weight", (out, hv, m, m), "tower", ""),
                                                           Tensor("downsample.bias", (out,), "tower", "")]
        t += _linear("merger.proj", out, out, "projector", "mlp", False) + _norm("merger.post_projection_norm", out,
                                                                                  "projector", True)
        for proj, o, inp in (("gate", ctx, out), ("up", ctx, out), ("down", out, ctx)):
            t += _linear(f"merger.{proj}_proj", o, inp, "projector", "mlp", False)
        return t
    if k == "qwen2_vl":  # PatchMerger: ln_q (LayerNorm), mlp = Linear(hm, hm), GELU, Linear(hm, out)
        hm = v.merged_width
        return (_norm("merger.ln_q", hv, "projector", True) + _linear("merger.mlp.0", hm, hm, "projector", "mlp", True)
                + _linear("merger.mlp.2", out, hm, "projector", "mlp", True))
    if k in ("qwen2_5_vl", "qwen3_vl"):
        hm = v.merged_width
        mlp = lambda name: (_linear(f"{name}.fc1", hm, hm, "projector", "mlp", True)  # noqa: E731
                            + _linear(f"{name}.fc2", out, hm, "projector", "mlp", True))
        t = _norm("merger.norm", hv, "projector", k == "qwen3_vl") + mlp("merger")
        for i in v.deepstack_layers:  # Qwen3VLVisionPatchMerger(use_postshuffle_norm=True): LayerNorm(hv·m²)
            t += _norm(f"deepstack_merger_list.{i}.norm", hm, "projector", True) + mlp(f"deepstack_merger_list.{i}")
        return t
    if k in ("siglip", "paligemma", "aya", "cohere2", "onevision"):
        t = _norm("post_layernorm", hv, "tower", True)
        if v.use_head:  # SiglipMultiheadAttentionPoolingHead: probe, nn.MultiheadAttention, LayerNorm, MLP
            t += [Tensor("head.probe", (1, 1, hv), "tower", ""),
                  Tensor("head.attention.in_proj_weight", (3 * hv, hv), "tower", ""),
                  Tensor("head.attention.in_proj_bias", (3 * hv,), "tower", "")]
            t += _linear("head.attention.out_proj", hv, hv, "tower", "attn", True) + _norm(
                "head.layernorm", hv, "tower", True) + _linear("head.mlp.fc1", fv, hv, "tower", "mlp", True) + \
                _linear("head.mlp.fc2", hv, fv, "tower", "mlp", True)
        if k == "onevision":  # LLaVA's two linears; OneVision's image_newline (its anyres canvases)
            return t + _linear("multi_modal_projector.linear_1", out, hv * v.feature_layers, "projector", "mlp",
                               v.projector_bias) + _linear("multi_modal_projector.linear_2", out, out, "projector",
                                                          "mlp", v.projector_bias) + (
                [Tensor("image_newline", (out,), "projector", "")] if v.grid_pinpoints else [])
        if k in ("aya", "cohere2"):  # AyaVisionMultiModalProjector: LayerNorm(hv·s²) (not Command A Vision's),
            a = v.merger_intermediate_size  # linear_1 to the alignment width, linear_2
            norm = _norm("multi_modal_projector.layernorm", v.merged_width, "projector", True) if k == "aya" else []
            return t + norm + _linear(
                "multi_modal_projector.linear_1", a, v.merged_width, "projector", "mlp", True) + _linear(
                "multi_modal_projector.linear_2", out, a // 2, "projector", "mlp", True)
        if k == "paligemma":  # PaliGemmaMultiModalProjector: nn.Linear(hv, projection_dim, bias=True)
            return t + _linear("multi_modal_projector.linear", out, hv, "projector", "mlp", True)
        return t + [Tensor("multi_modal_projector.mm_input_projection_weight", (hv, out), "projector", ""),
                    Tensor("multi_modal_projector.mm_soft_emb_norm.weight", (hv,), "projector", "")]
    if k == "llama4":  # layernorm_post, the pixel-shuffle adapter (Llama4VisionMLP2, no biases), the projector
        return (_norm("layernorm_post", hv, "tower", True)
                + _linear("vision_adapter.mlp.fc1", v.projector_input_dim, fv, "tower", "mlp", False)
                + _linear("vision_adapter.mlp.fc2", v.projector_output_dim, v.projector_output_dim, "tower", "mlp",
                          False)
                + _linear("multi_modal_projector.linear_1", out, v.vision_output_dim, "projector", "mlp", False))
    if k == "internvl":  # the final LayerNorm (use_mean_pooling False; else Identity); InternVLMultiModalProjector:
        # LayerNorm(hv·m²), linear_1 to the language model's width, GELU, linear_2, with biases
        hm = v.merged_width
        return ((_norm("layernorm", hv, "tower", True) if v.final_norm else []) + _norm(
            "multi_modal_projector.layer_norm", hm, "projector", True)
            + _linear("multi_modal_projector.linear_1", out, hm, "projector", "mlp", True)
            + _linear("multi_modal_projector.linear_2", out, out, "projector", "mlp", True))
    if k == "kimi":  # final_layernorm; Kimi_K25MultimodalProjection: pre_norm (hv), in_proj (hv·k²), out_proj
        hm = v.merged_width
        return (_norm("final_layernorm", hv, "tower", True) + _norm("mm_projector.pre_norm", hv, "projector", True)
                + _linear("mm_projector.in_proj", hm, hm, "projector", "mlp", True)
                + _linear("mm_projector.out_proj", out, hm, "projector", "mlp", True))
    if k == "clip":  # post_layernorm (built, reading only the pooled CLS); LlavaMultiModalProjector; LLaVA-NeXT's
        # image_newline, one vector of the text width
        newline = [Tensor("image_newline", (out,), "projector", "")] if v.grid_pinpoints else []
        norm = _norm("multi_modal_projector.projector_layernorm", hv * v.feature_layers, "projector", True) \
            if v.projector_norm else []  # VipLLaVA's
        return (_norm("post_layernorm", hv, "tower", True) + newline + norm
                + _linear("multi_modal_projector.linear_1", out, hv * v.feature_layers, "projector", "mlp",
                          v.projector_bias)
                + _linear("multi_modal_projector.linear_2", out, out, "projector", "mlp", v.projector_bias))
    if k == "smolvlm":  # post_layernorm; SmolVLMConnector.modality_projection.proj: Linear(hv·s², out, bias=False)
        return _norm("post_layernorm", hv, "tower", True) + _linear("connector.modality_projection.proj", out,
                                                                     v.merged_width, "projector", "mlp", False)
    if k == "gemma4":  # the pooler and the weightless pre-projection norm have no parameters; std_bias/scale: buffers
        return _linear("embed_vision.embedding_projection", out, hv, "projector", "mlp", False)
    m, b = v.spatial_merge_size, v.projector_bias  # Mistral3MultiModalProjector; Pixtral-12B's is LLaVA's
    if v.llava_projector:
        return (_linear("multi_modal_projector.linear_1", out, hv * v.feature_layers, "projector", "mlp", b)
                + _linear("multi_modal_projector.linear_2", out, out, "projector", "mlp", b))
    return (_norm("multi_modal_projector.norm", hv, "projector", False)
            + _linear("multi_modal_projector.patch_merger.merging_layer", hv, hv * m * m, "projector", "mlp", False)
            + _linear("multi_modal_projector.linear_1", out, hv * v.feature_layers, "projector", "mlp", b)
            + _linear("multi_modal_projector.linear_2", out, out, "projector", "mlp", b))


@lru_cache(maxsize=64)
def vision_tensors(v: VisionSpec) -> tuple[Tensor, ...]:
    """Every parameter tensor of the tower and the projector."""
    t = _embeddings(v)
    for i in range(v.num_layers):
        t += _block(v, i)
    return tuple(t + _after(v))


@lru_cache(maxsize=64)
def vision_parameters(v: VisionSpec) -> VisionParams:
    """Parameters of the tower and of the projector (exact: tests/model/test_vision.py builds the real modules)."""
    tower = projector = tower_linear = projector_linear = 0
    tensors = vision_tensors(v)
    for t in tensors:
        if t.part == "tower":
            tower += t.numel
            tower_linear += t.numel if t.role else 0
        else:
            projector += t.numel
            projector_linear += t.numel if t.role else 0
    return VisionParams(tower, projector, tower_linear, projector_linear, len(tensors))


def adapted_linears(v: VisionSpec, targets: str) -> list[Tensor]:
    """The tower's and projector's nn.Linear weights a LoRA of `targets` adapts when the tower is trained:
    all-linear (PEFT's rule: every nn.Linear but the output layer), attention (q/k/v/o, fused qkv and proj),
    qv (q and v, or Qwen's fused qkv)."""
    roles = {"all-linear": ("qv", "attn", "mlp"), "attention": ("qv", "attn"), "qv": ("qv",)}[targets]
    return [t for t in vision_tensors(v) if t.role in roles]
