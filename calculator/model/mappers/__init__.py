"""Mappers from a Hugging Face config.json to a ModelSpec, one module per family of model types, each read beside the
transformers modeling file it mirrors and held to the real model's parameter count (tests/model/mappers/):

    archs          dense and MoE decoders whose layer is the engine's own (llama, mistral, qwen, gemma, phi, ...)
    hybrid         Qwen3-Next / Qwen3.5 (Gated DeltaNet + attention)
    ssm            Mamba-1/2 and its hybrids (nemotron_h, granitemoehybrid, bamba, falcon_h1, jamba)
    linear         short convolutions, KDA, lightning attention (lfm2, kimi_linear, minimax, bailing_hybrid)
    dsa            DeepSeek sparse attention and the MLA MoE families around it
    variants(_more) decoders with a few tensors or saved activations beyond the engine's layer (VariantSpec)
    gpt_style      the older GPT-style variant layouts (GPT-J, GPT-Neo, BLOOM, MPT, OPT, XGLM, BioGPT, Persimmon)
    remote         remote-code types (trust_remote_code) whose block is the engine's layer (qwen v1, mimo, nemotron-nas)
    longcat        LongCat-Flash, each block two engine layers (MLA + MoE beside a dense MLP, MLA + dense MLP)
    vlm_text       vision-language models' text towers (Qwen2-VL, GLM-4.1V / 4.5V / 4.6V, GLM-OCR, Qwen2.5-Omni)

calculator.model.hf_config dispatches a model_type to one of them. Adding a model type is a mapper here plus, at
most, one new kind in calculator.model.architectures.

May import: calculator.model.spec, architectures, mixer_specs, variants, config_read, calculator.core.
"""
