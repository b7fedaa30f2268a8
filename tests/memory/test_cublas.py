"""PyTorch's cuBLAS workspace size rule (calculator/memory/cublas.py, CublasHandlePool.cpp
parseChosenWorkspaceSize)."""
from calculator.memory import cublas


def test_config_is_the_sum_of_size_kib_times_count():
    assert cublas.parse_workspace_config(":4096:8") == 32 * 2**20
    assert cublas.parse_workspace_config(":4096:2:16:8") == 4096 * 1024 * 2 + 16 * 1024 * 8 == 8_519_680
    assert cublas.parse_workspace_config("garbage") is None


def test_default_by_architecture_and_pytorch_version():
    assert cublas.workspace_bytes((9, 0)) == 32 * 2**20
    assert cublas.workspace_bytes((8, 0)) == 8_519_680
    assert cublas.workspace_bytes((10, 0)) == 32 * 2**20  # pytorch/pytorch#175344
    assert cublas.workspace_bytes((10, 0), blackwell_32mib=False) == 8_519_680  # a PyTorch before it
    assert cublas.workspace_bytes((9, 0), blackwell_32mib=False) == 32 * 2**20
    assert cublas.workspace_bytes(None) == 32 * 2**20


def test_an_explicit_config_wins_over_the_default():
    assert cublas.workspace_bytes((10, 0), ":4096:8", blackwell_32mib=False) == 32 * 2**20
    assert cublas.workspace_bytes((9, 0), ":1024:2") == 2 * 2**20
    assert cublas.workspace_bytes((8, 0), "nonsense") == 8_519_680  # unparseable: PyTorch warns, uses the default
