"""The exported OpenVINO graph of a sentence pipeline re-fed for packed passes
(models/packing.py): positions and the block-diagonal mask as inputs, the token states before
pooling as output. Where the graph lacks one of those places, passes stay padded."""

from typing import TYPE_CHECKING

from models.packing import ATTENTION_MASK, PACK_MASK, POSITION_IDS

if TYPE_CHECKING:
    import openvino as ov


def _attention_mask_source(model: "ov.Model") -> "ov.Output | None":
    """The one output that every attention node takes as its additive mask, if it is one."""
    masks = [
        node.input_value(3)
        for node in model.get_ordered_ops()
        if node.get_type_name() == "ScaledDotProductAttention" and node.get_input_size() >= 4
    ]
    places = {(mask.get_node().get_friendly_name(), mask.get_index()) for mask in masks}
    return masks[0] if len(places) == 1 else None


def _position_lookup(model: "ov.Model") -> "ov.Node | None":
    """The lookup of the position-embedding table, whose indices the graph makes itself."""
    for node in model.get_ordered_ops():
        if (
            node.get_type_name() == "Gather"
            and "position_embeddings" in node.get_friendly_name()
            and node.input_value(1).get_node().get_type_name() != "Parameter"
        ):
            return node
    return None


def _pooled_states(model: "ov.Model") -> "ov.Output | None":
    """The token states that mean pooling multiplies by the attention mask (texts, tokens, dim):
    the other factor of the product that the mask reaches through Unsqueeze and Convert."""
    frontier = [p for p in model.get_parameters() if p.get_friendly_name() == ATTENTION_MASK]
    for _ in range(3):
        reached = []
        for node in frontier:
            for target in node.output(0).get_target_inputs():
                consumer = target.get_node()
                kind = consumer.get_type_name()
                if kind == "Multiply":
                    other = consumer.input_value(1 - target.get_index())
                    rank = other.get_partial_shape().rank
                    if rank.is_static and rank.get_length() == 3:
                        return other
                elif kind in ("Unsqueeze", "Convert"):
                    reached.append(consumer)
        frontier = reached
    return None


def packed_graph(model: "ov.Model") -> "ov.Model | None":
    """`model`, a sentence pipeline that pools by the mean, re-fed for packed rows: inputs
    `position_ids` (rows, tokens) and `pack_mask` (rows, 1, tokens or 1, tokens), additive, in
    place of the positions and the mask the graph derives from `attention_mask`; output the
    token states before pooling (rows, tokens, dim). None where a place is missing. Changes
    `model`."""
    import openvino as ov
    from openvino import opset13

    mask_source, lookup, states = (
        _attention_mask_source(model),
        _position_lookup(model),
        _pooled_states(model),
    )
    if mask_source is None or lookup is None or states is None:
        return None
    positions = opset13.parameter(ov.PartialShape([-1, -1]), ov.Type.i64, name=POSITION_IDS)
    positions.output(0).get_tensor().set_names({POSITION_IDS})
    lookup.input(1).replace_source_output(positions.output(0))
    shape = ov.PartialShape([-1, 1, -1, -1])
    mask = opset13.parameter(shape, mask_source.get_element_type(), name=PACK_MASK)
    mask.output(0).get_tensor().set_names({PACK_MASK})
    for target in list(mask_source.get_target_inputs()):
        target.replace_source_output(mask.output(0))
    kept = [p for p in model.get_parameters() if p.get_friendly_name() != ATTENTION_MASK]
    try:
        packed = ov.Model([opset13.result(states)], [*kept, positions, mask], "packed")
        packed.validate_nodes_and_infer_types()
    except RuntimeError:  # attention_mask still needed elsewhere: not a graph this knows
        return None
    return packed
