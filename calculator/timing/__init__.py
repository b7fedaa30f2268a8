"""Time: the operations of a step and their FLOPs and bytes (the roofline), communication per parallel group,
the step time of training, and the prefill and decode time of inference, with the efficiencies as inputs.

May import: calculator.memory, calculator.model, calculator.core.
"""
