"""What the calculator page draws: the sidebar of inputs (each feature's inputs beside its panel), and from a
computed result the headline and summary, the fit cards and breakdown table as static HTML, the formula panel, the
time-and-cost section, the serving and RL panels, the sections below the breakdown (remedies, sweeps, timeline)
and the launch-config expander.

May import: calculator, dashboard.inputs, dashboard's top-level modules (charts, advice, exports, safe_text, memo).
"""
