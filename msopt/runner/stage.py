"""--stage: a model cut at boundary tensors into two Session calls, measured through the stage pipeline.

The upstream call (inputs -> boundary) runs ahead in msopt.runner.stage_pipeline's threads; every
delivered record is checked against the unpipelined run of the same graph.
"""

from msopt.errors import CheckFailed, InputError
from msopt.graph import protos
from msopt.load import Model
from msopt.runner.executable import Executable
from msopt.runner.stage_pipeline import StagePipeline
from msopt.runner.trace import executed_names
from msopt.runner.verify import compare_outputs


def run_stage(runner, view, name, feeds, model_outputs, config, progress):
    """The --stage figures of signature ``name``: the pipelined records against the unpipelined ones."""
    executable, names = cuttable(runner, name)
    if config.stage_boundary:
        boundary = boundary_tensors(executable.graph, names, given=config.stage_boundary.split(","))
    else:
        boundary = boundary_tensors(executable.graph, names, edges=_stage_rule_edges(view))
    split = SessionSplit(executable, name, boundary)
    count, n = config.iterations, len(feeds)
    # The unpipelined run: the whole signature on the same graph, record by record.
    whole = [executable.step(name, f)() for f in feeds]
    model_diff = max(compare_outputs(m, w)[1] for m, w in zip(model_outputs, whole))
    for i in range(min(config.warmup, n)):
        split.downstream(split.upstream(feeds[i]), feeds[i])
    mismatches = []

    def deliver(i, outputs):  # every record, in the order delivered, against its own unpipelined outputs
        if not compare_outputs(whole[i % n], outputs)[0]:
            mismatches.append(i)

    pipeline = StagePipeline(
        lambda i: (i, split.upstream(feeds[i % n])),
        lambda item: split.downstream(item[1], feeds[item[0] % n]),
        config.stage_threads,
        config.stage_capacity,
    )
    progress(f"pipelining {count} records through {config.stage_threads} stage thread(s)")
    stats = pipeline.run(count, deliver)
    stats["identical_to_unpipelined"] = not mismatches
    if mismatches:
        raise CheckFailed(f"--stage: record {mismatches[0]} differs from the unpipelined run")
    frozen = executable is not runner.session_executable
    return {
        **split.describe(),
        **stats,
        "graph": "frozen copy of the TF2 signature" if frozen else "the model's graph",
        "max_abs_diff_to_model": model_diff,
    }


def _stage_rule_edges(view):
    """Edges from the stage rule's stage stream into the rest (the rule marks the input subgraph)."""
    from msopt.rules import POLICIES, RuleOptions, run_rule

    if "stage" not in POLICIES:
        raise InputError("--stage needs --stage-boundary (the stage rule is not available)")
    plan = run_rule("stage", view, RuleOptions(streams=2)).partition
    return [
        (src, node.key)
        for node in view.real_nodes()
        if plan.get(node.key, 0) == 0
        for src, _ in node.inputs
        if plan.get(src, 0) != 0
    ]


# -- splitting a Session graph at boundary tensors ------------------------------------------------------
SOURCE_OPS = {"Const", "Placeholder", "PlaceholderWithDefault", "VariableV2", "VarHandleOp", "NoOp"}


class SessionSplit:
    """A signature of a Session graph cut at ``boundary`` tensors: upstream = inputs -> boundary,
    downstream = boundary (plus any input it still reads) -> outputs. Feeding a tensor makes the
    Session prune everything above it, so each part computes only its side.
    """

    def __init__(self, executable, signature, boundary):
        graph = getattr(executable, "graph", None)
        if graph is None:
            raise InputError("--stage needs the model in a Session graph")
        spec = executable.specs[signature]
        self.boundary = [_tensor(graph, name) for name in boundary]
        if not self.boundary:
            raise InputError("--stage-boundary names no tensor")
        self.inputs = sorted(spec["inputs"])
        self.outputs = sorted(spec["outputs"])
        input_tensors = {k: graph.get_tensor_by_name(spec["inputs"][k]["name"]) for k in self.inputs}
        output_tensors = [graph.get_tensor_by_name(spec["outputs"][k]["name"]) for k in self.outputs]
        stop = {t.name for t in self.boundary}
        down, reached = _ancestors(output_tensors, stop)
        up, _ = _ancestors(self.boundary, set())
        unused = [t.name for t in self.boundary if t.name not in reached]
        if unused:
            raise InputError(f"boundary tensor '{unused[0]}' does not feed the outputs of signature '{signature}'")
        self.down_inputs = [k for k in self.inputs if input_tensors[k].op.name in down]
        self.ops = {
            "upstream": sum(1 for op in up.values() if op.type not in SOURCE_OPS),
            "downstream": sum(1 for op in down.values() if op.type not in SOURCE_OPS),
            "shared": sum(1 for name, op in down.items() if name in up and op.type not in SOURCE_OPS),
        }
        if not self.ops["upstream"]:
            raise InputError("--stage: no op computes upstream of the boundary, nothing to pipeline")
        names = [t.name for t in self.boundary]
        self._up = executable.tensor_step(names, [spec["inputs"][k]["name"] for k in self.inputs])
        self._down = executable.tensor_step(
            [spec["outputs"][k]["name"] for k in self.outputs],
            names + [spec["inputs"][k]["name"] for k in self.down_inputs],
        )

    def upstream(self, feeds):
        """The boundary values for one record's ``feeds`` ({input key: array})."""
        return self._up(*(feeds[k] for k in self.inputs))

    def downstream(self, values, feeds):
        """The outputs ({key: array}) from boundary ``values`` (and the inputs the downstream part reads)."""
        return dict(zip(self.outputs, self._down(*values, *(feeds[k] for k in self.down_inputs))))

    def describe(self):
        return {
            "boundary": [t.name for t in self.boundary],
            "ops": self.ops,
            "downstream_reads_inputs": self.down_inputs,
        }


def _tensor(graph, name):
    name = name.strip()
    full = name if ":" in name else f"{name}:0"
    try:
        return graph.get_tensor_by_name(full)
    except (KeyError, ValueError):
        raise InputError(
            f"--stage-boundary: no tensor '{name}' in the model (give a tensor name, a node key "
            "'function:node[:port]', or a node name found in one function only)"
        ) from None


def _ancestors(tensors, stop):
    """({op name: op} computing ``tensors``, without going above tensors named in ``stop``), stop names reached."""
    seen, reached = {}, set()
    pending = []
    for t in tensors:
        if t.name in stop:
            reached.add(t.name)
        else:
            pending.append(t.op)
    while pending:
        op = pending.pop()
        if op.name in seen:
            continue
        seen[op.name] = op
        for t in op.inputs:
            if t.name in stop:
                reached.add(t.name)
            else:
                pending.append(t.op)
        pending.extend(op.control_inputs)
    return seen, reached


# -- where to cut: a graph a Session can cut, and the boundary tensors in it -------------------------------
def cuttable(runner, signature):
    """(executable whose Session graph holds every op of ``signature``, {view key: op name in that graph}).

    A TF1 graph is itself. A TF2 signature is frozen into one flat graph (its function calls
    inlined, variables turned into constants, devices kept) and loaded in a Session configured
    like the runner's: its ops are named by their call path from the signature's function.
    """
    if not (runner.model.format == "saved_model" and runner.model.is_tf2):
        return runner.session_executable, executed_names(runner.view)
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2_as_graph

    tf = runner.tf
    function = runner.executable._loaded.signatures[signature]
    frozen, graph_def = convert_variables_to_constants_v2_as_graph(function)
    meta = protos.MetaGraphDef()
    meta.graph_def.ParseFromString(graph_def.SerializeToString())
    executable = Executable(
        Model(runner.model.path, "graph_def", False, meta),
        runner.streams,
        runner.device_type,
        session_config=runner.config,
    )
    spec = runner.specs[signature]
    inputs = function.structured_input_signature[1]
    outputs = dict(zip(tf.nest.flatten(sorted(function.structured_outputs)), frozen.outputs))
    executable.specs = {
        signature: {
            "inputs": {k: {**v, "name": f"{inputs[k].name}:0"} for k, v in spec["inputs"].items()},
            "outputs": {k: {**v, "name": outputs[k].name} for k, v in spec["outputs"].items()},
        }
    }
    call = runner.view.nodes[spec["outputs"][next(iter(spec["outputs"]))]["name"].split(":")[0]]
    names = executed_names(runner.view, root=call.calls[0])
    return executable, names


def boundary_tensors(graph, names, given=None, edges=None):
    """Tensor names in ``graph`` for ``given`` names (tensors of the graph, or view keys with an optional
    ':port') or for ``edges`` (source key, destination key) of the view ({view key: op name} ``names``)."""
    ops = {key: name for name, key in names.items()}
    by_name = {}
    for key in ops:
        by_name.setdefault(key.rpartition(":")[2], []).append(key)
    found = []
    for name in given or ():
        name = name.strip()
        base, _, port = name.rpartition(":")
        key, port = (base, port) if port.isdigit() else (name, "0")
        if key not in ops and len(by_name.get(key, ())) == 1:
            key = by_name[key][0]  # a node name found in exactly one function body
        found.append(f"{ops[key]}:{port}" if key in ops else name)
    for src, dst in edges or ():
        if src not in ops or dst not in ops:
            continue
        try:
            consumer = graph.get_operation_by_name(ops[dst])
        except KeyError:
            continue  # folded away when the graph was frozen
        found.extend(t.name for t in consumer.inputs if t.op.name == ops[src])
    if edges is not None and not found:
        raise InputError("--stage: the stage rule found no boundary in the graph that runs; give --stage-boundary")
    return sorted(set(found), key=found.index)
