"""Measurement harness: traces real transformers models byte by byte and writes tests/golden/*.json."""
