"""The small core every other part stands on: the result types (terms with integer bytes, their formula, values
and source), units (GB = 10^9 B, GiB = 2^30 B), element sizes of dtypes, the one input-error type, the physical
bounds on inputs and results, the source registry every term cites, the Workload input model, fit verdicts on a
GPU, and two caching helpers.

May import: the standard library and pydantic only; nothing else of `calculator`.
"""
