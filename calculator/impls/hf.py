"""Hugging Face transformers, eager modules: the exact model traced from real model code (calculator.memory.activations,
validation/README.md). The loss head (ForCausalLMLoss) upcasts the logits to fp32 and keeps the fp32 log-softmax;
its backward holds the model-dtype logits, the fp32 gradient and its cast at once."""
from __future__ import annotations

from calculator.memory import activations as act
from calculator.memory import autocast
from calculator.memory import lora
from calculator.model import architectures
from calculator.impls.common import Head, HeadTerm


def layer(m, w, d, kind) -> act.LayerActivations:
    """One decoder layer as transformers runs it (norm upcasts, SwiGLU's four f-wide tensors, ...)."""
    return act.exact_layer(m, w, d, kind)


def head(m, w, d) -> Head:
    """Final norm (+ LM-head input), fp32 log-softmax, and the loss backward's logits and gradients."""
    v = m.vocab_size // d.tp
    norm = act.final_norm_saved(m, d) if w.finetune == "full" else lora.frozen_head_saved(m, d.T, d.h_sp)
    if m.compressed is not None:  # DeepSeek-V4: hc_head and the fp32-weight final norm (compressed_saved.head)
        norm = architectures.compressed_saved.head(m, d.T, d.e)
    if w.finetune == "full" and autocast.applies(w):  # the fp32 normalised copy under autocast
        norm += autocast.final_norm_extra(m, d.T, d.h_sp, d.e)
    loss = act.loss_saved(m, d, m.vocab_size)
    ws = act.loss_transient(d, m.vocab_size)
    label, formula, source = "Final norm + LM-head input", "norm copies + e·T·h", "hf-llama"
    if m.compressed is not None:  # DeepSeek-V4: hc_head's backward once the head's other tensors are freed
        label, formula, source = ("hc_head + fp32-weight final norm + LM-head input",
                                  "hc_head's saved + norm copies + e·T·h", "compressed-attention")
        hc = architectures.compressed_saved.hyper_head_backward(m, d.T, d.e) - norm - loss if m.hc_mult else 0
        if hc > ws:
            return Head((HeadTerm("final_norm", label, norm, formula, ("{:,} B", norm), source),
                         HeadTerm("loss", "fp32 log-softmax saved by the loss", loss, "4·T·V/t",
                                  ("4 × {:,} × {:,}", d.T, v), "hf-loss")),
                        hc, "hc_head's input_norm backward (the head's other saved tensors freed by then)",
                        "(e + 24)·T·hc_mult·h − head's saved", ("{:,} B", hc), "compressed-attention", hc)
    return Head(
        (HeadTerm("final_norm", label, norm, formula, ("{:,} B", norm), source),
         HeadTerm("loss", "fp32 log-softmax saved by the loss", loss,
                  "4·T·V/t" + (" + e·T·V/t (softcap tanh)" if m.final_logit_softcapping else ""),
                  ("4 × {:,} × {:,}", d.T, v), "hf-loss")),
        ws, "Logits and their gradients during the loss backward", "(2·e + 4)·T·V/t",
        ("{} × {:,} × {:,}", ws // max(1, d.T * v), d.T, v), "hf-loss", ws)


def first_layer_without_input_grad(m, d) -> int:
    """PEFT without checkpointing: the first layer's first norm keeps no fp32 copy and no rsqrt."""
    return lora.first_layer_without_input_grad(m, d.T, d.h_sp)
