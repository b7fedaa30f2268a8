"""The serving engines' and RL frameworks' sources (merged into calculator.core.sources.SOURCES)."""
from __future__ import annotations

from calculator.core.citation import Source

ENGINE_SOURCES: dict[str, Source] = {
    "vllm-budget": Source(
        "vLLM V1 start-up memory profiling (vllm 0.33.0 and 0.11.0 source)",
        "https://github.com/vllm-project/vllm/blob/main/vllm/v1/worker/gpu_worker.py",
        "gpu_worker.determine_available_memory: KV = ceil(total × gpu_memory_utilization) − weights − torch peak "
        "increase of profile_run − non-torch increase (− the CUDA-graph estimate since v0.21); "
        "v1/core/kv_cache_planning.py: blocks = KV // (block_size × page bytes × layers per group), "
        "_check_enough_kv_cache_memory refuses a max_model_len whose blocks do not fit"),
    "sglang-budget": Source(
        "SGLang static memory and token pool (sglang 0.5.23 source)",
        "https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/arg_groups/memory_hook.py",
        "memory_hook.handle_gpu_memory_settings: mem_fraction_static = (GPU MiB − reserved) / GPU MiB; "
        "mem_cache/kv_cache_configurator._profile_available_bytes: pool = free after loading − free before "
        "loading × (1 − mem_fraction_static); model_executor/pool_configurator: tokens = pool // cell size"),
    "llm-d-empirical": Source(
        "llm-d capacity planner: empirical vLLM memory results on H100 (vLLM 0.11)",
        "https://github.com/llm-d/llm-d-benchmark/blob/d773a122/config_explorer/empirical-vllm-memory-results.md",
        "weights, torch peak increase, non-torch, CUDA-graph and available KV memory read from vLLM start-up logs"),
    "rl-colocate": Source(
        "Colocated RL post-training: slime, verl, OpenRLHF, TRL",
        "https://github.com/THUDM/slime/blob/main/docs/en/get_started/usage.md",
        "slime --colocate sets offload_train and offload_rollout (slime/utils/arguments.py); the trainer's state "
        "goes to host memory during rollout, SGLang releases weights and KV during training; verl "
        "ppo_trainer.yaml rollout.gpu_memory_utilization 0.5 with free_cache_engine; TRL GRPOConfig "
        "vllm_mode='colocate', vllm_gpu_memory_utilization 0.3, vllm_enable_sleep_mode"),
}
