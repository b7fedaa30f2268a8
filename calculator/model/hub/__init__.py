"""The Hugging Face Hub client: fetch a model's config.json by id and count its parameters from the checkpoint
headers, with one deadline per fetch, bounded sizes, and an on-disk cache keyed by the credential used.

May import: calculator.core (and the standard library). The engine's math never imports this package.
"""
