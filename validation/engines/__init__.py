"""What the serving engines can load, read from their released code: `python -m validation.engines.native_types`
reads vLLM's model registry and SGLang's EntryClass names from the unzipped wheels, and transformers' backend gates
from the installed transformers, and writes calculator/engines/native_types.py. May import calculator (never the
dashboard).
"""
