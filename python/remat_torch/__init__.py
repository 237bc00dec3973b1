"""remat_torch: the PyTorch side of remat.

trace(model, inputs, labels) records one training step as remat's native
graph JSON; apply(model, plan, example_inputs) runs a `sim plan` schedule
(drop, recompute, swap) in unmodified PyTorch; `python3 -m remat_torch run`
compares sim's predictions with measured runs.
"""

from .apply import PlanError, PlanMismatch, apply
from .trace import trace, write_graph

__all__ = ["trace", "write_graph", "apply", "PlanError", "PlanMismatch"]
from .dtr import dtr  # runtime DTR (issue 14 item 4)
