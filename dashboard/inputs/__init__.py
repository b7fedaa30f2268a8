"""The calculator page's inputs: the link checked before any widget reads it (query), widget values turned into the
engine's inputs with every refusal mapped back to its input (state), the sections of inputs drawn only while open,
one URL-bound widget, the model by Hugging Face id, and the example scenarios. The URL format itself (keys,
defaults) is calculator/exports/page_keys.py.

May import: calculator, dashboard's top-level helpers (safe_text, memo); never dashboard.views.
"""
