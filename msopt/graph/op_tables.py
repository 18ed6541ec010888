"""The op tables every layer shares: calls, ops without a kernel, neutral sources, back edges, bookkeeping."""

# Ops that call a library function whose body runs in their place (the function is inlined where it is called).
CALL_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})
# Functional control flow whose first input is the branch selector, not an argument of the branches.
FIRST_INPUT_IS_PREDICATE = frozenset({"If", "StatelessIf", "Case", "StatelessCase"})
# Functional control flow: the op runs the functions it names on the host; their ops are the kernels.
CONTROL_FLOW_OPS = frozenset({"If", "StatelessIf", "While", "StatelessWhile", "Case", "StatelessCase"})
# A v1 while loop's back edge: not a dependency of one run.
BACK_EDGE_OPS = frozenset({"NextIteration", "RefNextIteration"})

# Ops that launch no kernel: graph plumbing, aliases, metadata and host-side bookkeeping.
# fmt: off
NO_KERNEL_OPS = frozenset({
    "Const", "HostConst", "Identity", "IdentityN", "NoOp", "Placeholder", "PlaceholderWithDefault", "_Arg", "_Retval",
    "VarHandleOp", "VariableV2", "Variable", "ReadVariableOp", "Reshape", "Squeeze", "ExpandDims", "Shape", "ShapeN",
    "Size", "Rank", "StopGradient", "PreventGradient", "Snapshot", "EnsureShape", "Enter", "Exit", "Merge", "Switch",
    "NextIteration", "LoopCond", "ControlTrigger", "RefEnter", "RefExit", "RefMerge", "RefSwitch", "RefNextIteration",
    "RefIdentity", "Assert", "VarIsInitializedOp", "HashTableV2", "MutableHashTableV2", "MutableHashTableOfTensorsV2",
    "Print", "PrintV2", "StringFormat", "SaveV2", "RestoreV2", "MergeV2Checkpoints", "ShardedFilename",
}) | CONTROL_FLOW_OPS
# Sources every stream can read without a copy: DeepRec duplicates constants into each consuming stream,
# inputs are fed to the consumer, and resource handles are colocated by the constraints.
NEUTRAL_OPS = frozenset({
    "Const", "HostConst", "Placeholder", "PlaceholderWithDefault", "_Arg", "VarHandleOp", "VariableV2", "Variable",
    "HashTableV2", "MutableHashTableV2", "MutableHashTableOfTensorsV2",
})
# Topology-only work (the rules without a cost model): these ops, and calls, count no unit of work.
FREE_OPS = frozenset({
    "Const", "Identity", "IdentityN", "NoOp", "Placeholder", "PlaceholderWithDefault", "VarHandleOp",
    "ReadVariableOp", "VariableV2", "StopGradient", "_Arg", "_Retval", "StatefulPartitionedCall",
    "PartitionedCall", "Enter", "Exit", "Merge", "Switch", "NextIteration", "LoopCond",
})
# TF2 main-graph bookkeeping the drawing leaves out: variable handles fed to the signature's call.
HIDDEN_IN_DRAWING = frozenset({"VarHandleOp"})

# Output argument names of common multi-output ops, to turn "node:arg:i" references into output indices.
OUTPUT_ARGS = {
    "FusedBatchNorm": ("y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2"),
    "FusedBatchNormV2": ("y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2"),
    "FusedBatchNormV3": ("y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2", "reserve_space_3"),
    "Unique": ("y", "idx"), "UniqueV2": ("y", "idx"), "TopKV2": ("values", "indices"),
    "SparseFillEmptyRows": ("output_indices", "output_values", "empty_row_indicator", "reverse_index_map"),
    "SparseReshape": ("output_indices", "output_shape"), "StringSplit": ("indices", "values", "shape"),
    "StringSplitV2": ("indices", "values", "shape"),
}

# fmt: on


def output_index(op, port):
    """The output index a reference's port names: an int, or 'arg:i' of an op listed in OUTPUT_ARGS."""
    if isinstance(port, int):
        return port
    name, _, index = str(port).partition(":")
    index = int(index or 0)
    args = OUTPUT_ARGS.get(op)
    if args and name in args:
        return args.index(name) + index
    return index
