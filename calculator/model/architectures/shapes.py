"""Parameter tensor shapes as transformers builds them: nn.Linear, depthwise nn.Conv1d, a vector."""
from __future__ import annotations

Shape = tuple[int, ...]


def linear(n_in: int, n_out: int, bias: bool = False) -> list[Shape]:
    """nn.Linear(n_in, n_out): a weight (n_out, n_in) and an optional bias (n_out,)."""
    return [(n_out, n_in)] + ([(n_out,)] if bias else [])


def depthwise_conv1d(channels: int, kernel: int, bias: bool = False) -> list[Shape]:
    """nn.Conv1d(channels, channels, kernel, groups=channels): a weight (channels, 1, kernel) and an optional bias."""
    return [(channels, 1, kernel)] + ([(channels,)] if bias else [])


def numel(shapes) -> int:
    """Elements of all `shapes` together."""
    total = 0
    for shape in shapes:
        n = 1
        for d in shape:
            n *= d
        total += n
    return total
