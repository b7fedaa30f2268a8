"""The Streamlit dashboard's helpers (app.py and pages/ are the page scripts, thin: widgets in, a calculator call,
charts out). inputs/ reads a page's inputs from its URL and widgets into the engine's inputs; views/ draws the
calculator page; the modules here are what several pages share or one other page computes: the stacked-bar chart,
the remedies and sweeps data, CSV/JSON/PDF exports, the Accuracy, Compare and Planner pages' logic, the formula
references, safe text and a shared LRU. Nothing outside inputs/, views/ and the page scripts imports streamlit at
import time, so most of it is unit-tested directly.

May import: calculator, and validation for the Accuracy page's comparisons (validation never imports the dashboard).
"""
