"""A stage pipeline: the upstream part of a model runs ahead in threads into a bounded, ordered buffer.

Like DeepRec's ``tf.staged`` prefetch, applied to an exported model split at boundary tensors, with
one difference: no record is ever dropped or reordered. A producer may run at most ``capacity``
records ahead of the consumer; when the buffer is full it waits (and that wait is reported) rather
than discarding its record after a timeout. The consumer takes records strictly in order.
"""
import threading
import time


class StageFailed(Exception):
    """The upstream part failed on a record; carries the record index and the original error."""

    def __init__(self, record, error):
        super().__init__(f"upstream part failed on record {record}: {error}")
        self.record = record
        self.error = error


class StagePipeline:
    """``upstream(i) -> item`` in ``threads`` threads feeding ``downstream(item) -> result`` in the caller's thread."""

    def __init__(self, upstream, downstream, threads=1, capacity=1):
        if threads < 1 or capacity < 1:
            raise ValueError("threads and capacity must be at least 1")
        self.upstream = upstream
        self.downstream = downstream
        self.threads = threads
        self.capacity = capacity

    def run(self, count, deliver=None):
        """Push records 0..count-1 through both parts; ``deliver(i, result)`` sees them in order.

        Returns the statistics: wall time, busy and blocked seconds on each side, the largest
        number of records buffered at once, and the records delivered (always ``count``).
        """
        cond = threading.Condition()
        state = {"claim": 0, "consume": 0, "error": None, "up_blocked": 0.0, "up_busy": 0.0, "peak": 0}
        ready = {}
        clock = time.perf_counter

        def produce():
            while True:
                with cond:
                    while (state["claim"] < count and state["error"] is None
                           and state["claim"] >= state["consume"] + self.capacity):
                        t = clock()
                        cond.wait()
                        state["up_blocked"] += clock() - t
                    if state["claim"] >= count or state["error"] is not None:
                        return
                    i = state["claim"]
                    state["claim"] += 1
                t = clock()
                try:
                    item = self.upstream(i)
                except BaseException as e:  # handed to the consumer, which raises it
                    with cond:
                        state["error"] = StageFailed(i, e)
                        cond.notify_all()
                    return
                busy = clock() - t
                with cond:
                    state["up_busy"] += busy
                    ready[i] = item
                    state["peak"] = max(state["peak"], len(ready))
                    cond.notify_all()

        workers = [threading.Thread(target=produce, name=f"msopt-stage-{k}", daemon=True) for k in range(self.threads)]
        started = clock()
        for w in workers:
            w.start()
        down_blocked = down_busy = 0.0
        delivered = 0
        try:
            for i in range(count):
                with cond:
                    t = clock()
                    while i not in ready and state["error"] is None:
                        cond.wait()
                    down_blocked += clock() - t
                    if i not in ready:
                        raise state["error"]
                    item = ready.pop(i)
                    state["consume"] = i + 1
                    cond.notify_all()
                t = clock()
                result = self.downstream(item)
                down_busy += clock() - t
                if deliver is not None:
                    deliver(i, result)
                delivered += 1
        finally:
            with cond:
                if state["error"] is None and delivered < count:
                    state["error"] = StageFailed(-1, "stopped")
                cond.notify_all()
            for w in workers:
                w.join()
        wall = clock() - started
        return {
            "records": delivered, "threads": self.threads, "capacity": self.capacity, "wall_s": round(wall, 4),
            "records_per_s": round(delivered / wall, 3) if wall > 0 else None,
            "upstream_busy_s": round(state["up_busy"], 4), "upstream_blocked_s": round(state["up_blocked"], 4),
            "downstream_busy_s": round(down_busy, 4), "downstream_blocked_s": round(down_blocked, 4),
            "peak_buffered": state["peak"],
        }


# -- splitting a Session graph at boundary tensors ------------------------------------------------------
SOURCE_OPS = {"Const", "Placeholder", "PlaceholderWithDefault", "VariableV2", "VarHandleOp", "NoOp"}


class SessionSplit:
    """A signature of a Session graph cut at ``boundary`` tensors: upstream = inputs -> boundary,
    downstream = boundary (plus any input it still reads) -> outputs. Feeding a tensor makes the
    Session prune everything above it, so each part computes only its side.
    """

    def __init__(self, executable, signature, boundary):
        from msopt.errors import InputError

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
        self.ops = {"upstream": sum(1 for op in up.values() if op.type not in SOURCE_OPS),
                    "downstream": sum(1 for op in down.values() if op.type not in SOURCE_OPS),
                    "shared": sum(1 for name, op in down.items() if name in up and op.type not in SOURCE_OPS)}
        if not self.ops["upstream"]:
            raise InputError("--stage: no op computes upstream of the boundary, nothing to pipeline")
        names = [t.name for t in self.boundary]
        self._up = executable.tensor_step(names, [spec["inputs"][k]["name"] for k in self.inputs])
        self._down = executable.tensor_step([spec["outputs"][k]["name"] for k in self.outputs],
                                            names + [spec["inputs"][k]["name"] for k in self.down_inputs])

    def upstream(self, feeds):
        """The boundary values for one record's ``feeds`` ({input key: array})."""
        return self._up(*(feeds[k] for k in self.inputs))

    def downstream(self, values, feeds):
        """The outputs ({key: array}) from boundary ``values`` (and the inputs the downstream part reads)."""
        return dict(zip(self.outputs, self._down(*values, *(feeds[k] for k in self.down_inputs))))

    def describe(self):
        return {"boundary": [t.name for t in self.boundary], "ops": self.ops, "downstream_reads_inputs": self.down_inputs}


def _tensor(graph, name):
    from msopt.errors import InputError

    name = name.strip()
    full = name if ":" in name else f"{name}:0"
    try:
        return graph.get_tensor_by_name(full)
    except (KeyError, ValueError):
        raise InputError(f"--stage-boundary: no tensor '{name}' in the model (give a tensor name, a node key "
                         "'function:node[:port]', or a node name found in one function only)") from None


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
    from msopt.runner.trace import executed_names

    if not (runner.model.format == "saved_model" and runner.model.is_tf2):
        return runner.session_executable, executed_names(runner.view)
    from msopt import protos
    from msopt.runner.executable import Executable
    from msopt.load import Model
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2_as_graph

    tf = runner.tf
    function = runner.executable._loaded.signatures[signature]
    frozen, graph_def = convert_variables_to_constants_v2_as_graph(function)
    meta = protos.MetaGraphDef()
    meta.graph_def.ParseFromString(graph_def.SerializeToString())
    executable = Executable(Model(runner.model.path, "graph_def", False, meta), runner.streams, runner.device_type,
                            session_config=runner.config)
    spec = runner.specs[signature]
    inputs = function.structured_input_signature[1]
    outputs = dict(zip(tf.nest.flatten(sorted(function.structured_outputs)), frozen.outputs))
    executable.specs = {signature: {
        "inputs": {k: {**v, "name": f"{inputs[k].name}:0"} for k, v in spec["inputs"].items()},
        "outputs": {k: {**v, "name": outputs[k].name} for k, v in spec["outputs"].items()},
    }}
    call = runner.view.nodes[spec["outputs"][next(iter(spec["outputs"]))]["name"].split(":")[0]]
    names = executed_names(runner.view, root=call.calls[0])
    return executable, names


def boundary_tensors(graph, names, given=None, edges=None):
    """Tensor names in ``graph`` for ``given`` names (tensors of the graph, or view keys with an optional
    ':port') or for ``edges`` (source key, destination key) of the view ({view key: op name} ``names``)."""
    from msopt.errors import InputError

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
