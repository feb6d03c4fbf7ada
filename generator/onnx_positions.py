"""Let the builder's model return the logits of its last few positions, not only the last one.

onnxruntime-genai's builder, with ``prune_lm_head``, ends the graph with ``Gather(hidden, -1,
axis=1)`` and ``Unsqueeze``, so a read of many tokens multiplies only the last one's hidden state
by the 49,152-row head. Checking drafted tokens (:mod:`crag.generator.prompt_lookup`) needs the
logits after each of them, so this rewrites that end as ``Slice(hidden, -n, end, axis=1)`` with
``n`` a new int64 input, :data:`POSITIONS_INPUT`: a prompt's read asks for 1 and costs what it
cost, a check of ``k`` drafts asks for ``k + 1``. Only the graph's file is rewritten; its weights
stay in the external data file beside it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

POSITIONS_INPUT = "logits_positions"
"""The int64 input (shape ``[1]``) saying how many last positions' logits the model returns."""

_PRUNE_GATHER = "/lm_head/prune/Gather"
_PRUNE_UNSQUEEZE = "/lm_head/prune/Unsqueeze"


def return_last_positions(model_file: Path) -> bool:
    """Rewrite ``model_file``'s pruned head to return the last :data:`POSITIONS_INPUT` positions.

    Returns False, leaving the file as it was, when the graph does not end as the builder's
    pruned head does (a future builder, say) or the file cannot be read or replaced: the model
    then returns the last logits only.
    """
    import onnx
    from google.protobuf.message import DecodeError

    try:
        model = onnx.load(str(model_file), load_external_data=False)
    except (OSError, DecodeError) as exc:  # the builder's file stays
        logger.warning("%s could not be read for the rewrite: %s", model_file, exc)
        return False
    if not _rewrite_head(model.graph):
        logger.warning(
            "%s has no pruned head to rewrite: drafted tokens are not checked", model_file
        )
        return False
    written = model_file.with_name(model_file.name + ".rewritten")
    try:
        onnx.save(model, str(written))
        os.replace(written, model_file)  # whole or not at all
    except OSError as exc:
        written.unlink(missing_ok=True)
        logger.warning(
            "%s could not be rewritten (%s): drafted tokens are not checked", model_file, exc
        )
        return False
    return True


def _rewrite_head(graph: Any) -> bool:
    """Replace ``graph``'s ``Gather(-1)`` and ``Unsqueeze`` by the slice; False: not found."""
    from onnx import TensorProto, helper

    nodes = {node.name: node for node in graph.node}
    gather, unsqueeze = nodes.get(_PRUNE_GATHER), nodes.get(_PRUNE_UNSQUEEZE)
    if (
        gather is None
        or unsqueeze is None
        or gather.op_type != "Gather"
        or unsqueeze.op_type != "Unsqueeze"
        or unsqueeze.input[0] != gather.output[0]
    ):
        return False
    kept = unsqueeze.output[0]
    position = list(graph.node).index(gather)
    stale = {gather.output[0], kept}  # their recorded shapes say one position
    kept_nodes = [n for n in graph.node if n.name not in {_PRUNE_GATHER, _PRUNE_UNSQUEEZE}]
    index = gather.input[1]  # the constant -1: dropped too unless another node reads it
    if not any(index in node.input for node in kept_nodes):
        kept_nodes = [node for node in kept_nodes if index not in node.output]
        position -= sum(1 for node in list(graph.node)[:position] if index in node.output)
    new_nodes = _slice_nodes(gather.input[0], kept)
    del graph.node[:]
    graph.node.extend(kept_nodes[:position] + new_nodes + kept_nodes[position:])
    kept_infos = [info for info in graph.value_info if info.name not in stale]
    del graph.value_info[:]
    graph.value_info.extend(kept_infos)
    graph.input.append(helper.make_tensor_value_info(POSITIONS_INPUT, TensorProto.INT64, [1]))
    for output in graph.output:
        if output.name == "logits":
            output.type.tensor_type.shape.dim[1].dim_param = "logits_positions"
    return True


def _slice_nodes(hidden: str, kept: str) -> list[Any]:
    """Nodes writing ``hidden[:, -n:]`` into ``kept``, ``n`` being :data:`POSITIONS_INPUT`."""
    from onnx import TensorProto, helper

    prefix = "/lm_head/positions"

    def constant(name: str, value: int) -> Any:
        return helper.make_node(
            "Constant",
            [],
            [f"{prefix}/{name}"],
            name=f"{prefix}/{name}",
            value=helper.make_tensor(name, TensorProto.INT64, [1], [value]),
        )

    return [
        helper.make_node("Neg", [POSITIONS_INPUT], [f"{prefix}/starts"], name=f"{prefix}/Neg"),
        constant("ends", 2**62),
        constant("axes", 1),
        helper.make_node(
            "Slice",
            [hidden, f"{prefix}/starts", f"{prefix}/ends", f"{prefix}/axes"],
            [kept],
            name=f"{prefix}/Slice",
        ),
    ]
