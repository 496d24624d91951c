"""SPEX from Python: offline evaluation in one process, and a client of the HTTP service.

Offline evaluation searches a dataset's questions on an engine (the simulated GPU, a model in
process, a vLLM or SGLang server) with no Redis and no services, and returns a result per
question:

```python
import spex

questions = spex.load_dataset("easy", limit=20)
results = spex.evaluate(questions, engine=spex.Engine.hf("/models/SmolLM2"), algorithm="rebase", target=8)
results.to_pandas()
both = spex.evaluate(questions, engine=spex.Engine.sim(), mode="compare")
both.lossless, both.speedup
```

`Client` and `AsyncClient` speak to a running service's HTTP ingress (`spex up`): submit a
question, wait for its answer, read its tree, follow its events, cancel it.

Everything named here is the public API, kept stable; the rest of `spex` is the runtime's own.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spex._async_client import AsyncClient
    from spex._client import Client
    from spex._dataset import Dataset, DatasetLike, Question, load_dataset
    from spex._evaluate import evaluate
    from spex._http import ClientError, NotFound, Rejected, Unauthorized, Unavailable
    from spex._options import Engine, Prompt, Reward
    from spex._replies import Answer, AnswerEvent, BaselineTwin, Event, NodeEvent, ServedBy, Tree, TreeNode
    from spex._results import Comparison, Evaluation, QuestionResult
    from spex.shared.core.spec.early_stop import EarlyStop
    from spex.shared.engine.api import EngineFailed

__all__ = [
    "Answer",
    "AnswerEvent",
    "AsyncClient",
    "BaselineTwin",
    "Client",
    "ClientError",
    "Comparison",
    "Dataset",
    "DatasetLike",
    "EarlyStop",
    "Engine",
    "EngineFailed",
    "Evaluation",
    "Event",
    "NodeEvent",
    "NotFound",
    "Prompt",
    "Question",
    "QuestionResult",
    "Rejected",
    "Reward",
    "ServedBy",
    "Tree",
    "TreeNode",
    "Unauthorized",
    "Unavailable",
    "evaluate",
    "load_dataset",
]

# Where each name lives. They are imported on first use, not with `spex`: every service imports
# `spex.proto` and the rest, which import this package first, and must not pay for the
# evaluation's imports (the benchmark, the simulator, numpy) nor the client's.
_HOMES = {
    "spex._async_client": ("AsyncClient",),
    "spex._client": ("Client",),
    "spex._dataset": ("Dataset", "DatasetLike", "Question", "load_dataset"),
    "spex._evaluate": ("evaluate",),
    "spex._http": ("ClientError", "NotFound", "Rejected", "Unauthorized", "Unavailable"),
    "spex._options": ("Engine", "Prompt", "Reward"),
    "spex._replies": (
        "Answer", "AnswerEvent", "BaselineTwin", "Event", "NodeEvent", "ServedBy", "Tree", "TreeNode",
    ),
    "spex._results": ("Comparison", "Evaluation", "QuestionResult"),
    "spex.shared.core.spec.early_stop": ("EarlyStop",),
    "spex.shared.engine.api": ("EngineFailed",),
}  # fmt: skip
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'spex' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
