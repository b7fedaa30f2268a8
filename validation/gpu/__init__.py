"""Real GPUs: the shared H200 measurement protocol as code for any CUDA machine (protocol.py, the cases it runs in
cases.py, run.py, which needs no calculator), and, on this side, the real-GPU goldens of tests/golden_gpu/ (goldens.py:
a case mapped to the engine's inputs; import_cases.py), the engine held to them (compare.py), the caching-allocator
replay against the measured reserved memory (allocator_compare.py) and the measured step times (timing_compare.py).

May import: calculator (never from run.py, protocol.py, cases.py, loops.py or deepspeed_case.py, which run alone on
the GPU machine).
"""
