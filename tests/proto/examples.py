"""Small valid messages the protocol tests change one field of."""

from spex.proto import GenerateRequest

ENV = {"msg_id": "m", "query_id": "q"}
JOB = GenerateRequest(
    **ENV,
    job_id="j",
    node_id="n",
    parent_id="r",
    child_index=0,
    action="expand",
    prompt_node_ids=["r"],
    prompt_tokens=[10],
    seed=1,
)
