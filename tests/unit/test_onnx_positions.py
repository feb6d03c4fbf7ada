"""The rewrite of the builder's pruned head (crag.generator.onnx_positions), on a small graph.

The graph ends as onnxruntime-genai's builder ends a ``prune_lm_head`` model (the same node
names): hidden states, ``Gather(-1, axis=1)``, ``Unsqueeze``, the head's ``MatMul``. After the
rewrite onnxruntime must return the last ``n`` positions' logits, each what numpy computes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from crag.generator.onnx_positions import POSITIONS_INPUT, return_last_positions

HIDDEN, VOCABULARY = 4, 6


def pruned_head_graph(path: Path, weight: np.ndarray, prune_names: bool = True) -> Path:
    gather = "/lm_head/prune/Gather" if prune_names else "gather"
    unsqueeze = "/lm_head/prune/Unsqueeze" if prune_names else "unsqueeze"
    nodes = [
        helper.make_node("Relu", ["hidden"], ["normed"], name="/model/final_norm"),
        helper.make_node(
            "Constant",
            [],
            ["minus_one"],
            name="/model/constant_nodes/INT64/-1",
            value=helper.make_tensor("v", TensorProto.INT64, [], [-1]),
        ),
        helper.make_node("Gather", ["normed", "minus_one"], ["last"], name=gather, axis=1),
        helper.make_node(
            "Constant",
            [],
            ["one"],
            name="/model/constant_nodes/INT64/[1]",
            value=helper.make_tensor("o", TensorProto.INT64, [1], [1]),
        ),
        helper.make_node("Unsqueeze", ["last", "one"], ["kept"], name=unsqueeze),
        helper.make_node("MatMul", ["kept", "head"], ["logits"], name="/lm_head/MatMul"),
    ]
    graph = helper.make_graph(
        nodes,
        "head",
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "seq", HIDDEN])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1, VOCABULARY])],
        [numpy_helper.from_array(weight, "head")],
        value_info=[helper.make_tensor_value_info("kept", TensorProto.FLOAT, ["batch", 1, HIDDEN])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))
    return path


def test_the_rewritten_head_returns_the_last_positions_asked_for(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((HIDDEN, VOCABULARY)).astype(np.float32)
    path = pruned_head_graph(tmp_path / "model.onnx", weight)
    assert return_last_positions(path)
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert POSITIONS_INPUT in [i.name for i in session.get_inputs()]
    hidden = rng.standard_normal((1, 5, HIDDEN)).astype(np.float32)
    want = np.maximum(hidden, 0) @ weight
    for count in (1, 3, 5):
        (logits,) = session.run(None, {"hidden": hidden, POSITIONS_INPUT: np.array([count])})
        assert logits.shape == (1, count, VOCABULARY)
        np.testing.assert_allclose(logits[0], want[0, -count:], rtol=1e-6)


def test_a_graph_without_the_pruned_head_is_left_as_it_was(tmp_path: Path) -> None:
    weight = np.ones((HIDDEN, VOCABULARY), np.float32)
    path = pruned_head_graph(tmp_path / "model.onnx", weight, prune_names=False)
    before = path.read_bytes()
    assert not return_last_positions(path)
    assert path.read_bytes() == before


def test_a_file_that_is_not_a_model_is_left_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(b"\x08\xff\xff not a model")
    assert not return_last_positions(path)
    assert path.read_bytes() == b"\x08\xff\xff not a model"
    assert [p.name for p in tmp_path.iterdir()] == ["model.onnx"]
