"""The command line, `python -m calculator presets | estimate | solve | plan | advise | sweep | export`: the flags,
what is refused before computing, what is printed, and the sub-commands' handlers.

May import: any part of calculator.
"""
