"""The shared H200 measurement protocol on CUDA (see protocol.py) and the cases it runs (cases.py)."""
