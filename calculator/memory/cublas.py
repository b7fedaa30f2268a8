"""PyTorch's cuBLAS workspace per (cuBLAS handle, stream): the size rule of aten/src/ATen/cuda/CublasHandlePool.cpp
parseChosenWorkspaceSize / getChosenWorkspaceSize (key "cublas-workspace" in calculator/core/sources.py).

- CUBLAS_WORKSPACE_CONFIG=":SIZE:COUNT[:SIZE:COUNT…]" sets it to Σ SIZE KiB × COUNT (":4096:8" = 32 MiB, the
  setting deterministic cuBLAS asks for);
- unset, it is 4096 KiB × 8 = 32 MiB where the default names the architecture and ":4096:2:16:8" = 8.125 MiB
  elsewhere. Hopper (compute capability 9.x) has had 32 MiB since pytorch/pytorch#89027; Blackwell (10.x, 12.x)
  only since pytorch/pytorch#175344 (merged 2026-02-19) — a PyTorch built before it gives Blackwell 8.125 MiB.
The GPU catalogue's cublas_workspace_bytes (presets/gpus.json) is the current PyTorch's default; this function
prices an explicit setting or an older PyTorch (Workload.overheads.cublas_workspace_bytes takes the result).
"""
from __future__ import annotations

import re

WORKSPACE_32MIB = 4096 * 1024 * 8
WORKSPACE_LEGACY = 4096 * 1024 * 2 + 16 * 1024 * 8  # ":4096:2:16:8"


def parse_workspace_config(config: str) -> int | None:
    """Bytes of a CUBLAS_WORKSPACE_CONFIG value (":SIZE:COUNT" pairs, SIZE in KiB); None if nothing parses
    (PyTorch then warns and uses its default)."""
    pairs = re.findall(r":([0-9]+):([0-9]+)", config)
    if not pairs:
        return None
    return sum(int(size) * 1024 * int(count) for size, count in pairs)


def workspace_bytes(compute_capability: tuple[int, int] | None, config: str | None = None,
                    blackwell_32mib: bool = True) -> int:
    """One cuBLAS workspace: CUBLAS_WORKSPACE_CONFIG when set (and parseable), else PyTorch's default for the
    architecture — 32 MiB on 9.x, and on 10.x / 11.x / 12.x when the PyTorch has pytorch/pytorch#175344
    (`blackwell_32mib`), 8.125 MiB otherwise. Unknown GPU: 32 MiB."""
    if config:
        parsed = parse_workspace_config(config)
        if parsed is not None:
            return parsed
    if compute_capability is None:
        return WORKSPACE_32MIB
    major = compute_capability[0]
    if major == 9 or (blackwell_32mib and major in (10, 11, 12)):
        return WORKSPACE_32MIB
    return WORKSPACE_LEGACY
