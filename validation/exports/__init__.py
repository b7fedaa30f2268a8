"""Checks of the launch files calculator/exports writes, for frameworks that do not install here: their
command-line flags recorded from source into tests/data/exports/ (`python -m validation.exports.flags`).

May import: calculator.
"""
