"""A seeded mutator over the sample models: byte flips, truncations, and structural mutations of the protos.

Structural mutations touch nodes, inputs, functions, dtypes, shapes, ``_stream_id``, signatures
and the TF2 object graph. ``make_variant(rng, seeds)`` gives one mutated model as bytes.
"""

from pathlib import Path

from msopt.graph import protos

SAMPLES = Path(__file__).resolve().parent.parent / "sample_models"
# (sample, weight): small models more often, so that a run of hundreds stays short.
SEEDS = [
    ("linreg_frozen.pb", 4),
    ("linreg_frozen.pbtxt", 2),
    ("linreg_tf1", 3),
    ("linreg_tf2", 3),
    ("towers_tf1", 2),
    ("towers_tf1.meta", 1),
    ("towers_tf2", 2),
    ("custom_op_tf1", 2),
    ("stage_tf1", 2),
    ("stage_tf2", 1),
    ("deepfm_tf1", 1),
    ("deepfm_tf2", 1),
]
GARBAGE = [
    "",
    "x",
    "ghost",
    "ghost:0",
    "MatMul:abc",
    "X:99",
    "X:-1",
    "^ghost",
    "a:b:c:d",
    ":",
    "^",
    "X:" + "9" * 30,
    "\u00e9\u00e8",
    "call:output:7",
    "x:0",
    "node:out:zz",
]
OPS = [
    "Placeholder",
    "Const",
    "Identity",
    "MatMul",
    "AddV2",
    "Conv2D",
    "MaxPool",
    "ConcatV2",
    "PartitionedCall",
    "StatefulPartitionedCall",
    "If",
    "While",
    "Merge",
    "NextIteration",
    "Enter",
    "Switch",
    "Pack",
    "GatherV2",
    "BatchMatMulV2",
    "DepthwiseConv2dNative",
    "Mean",
    "Shape",
    "NoSuchOp",
    "_FusedMatMul",
    "AvgPool",
    "",
]


class Seed:
    """One sample model: its protos as bytes, the file holding them and how to write a variant."""

    def __init__(self, name):
        self.name = name
        path = SAMPLES / name
        self.directory = path.is_dir()
        self.file = "saved_model.pb" if self.directory else name
        self.data = (path / self.file if self.directory else path).read_bytes()
        self.text = name.endswith(".pbtxt")
        self.kind = "saved_model" if self.directory else ("meta" if name.endswith(".meta") else "graph")

    def parse(self):
        message = {"saved_model": protos.SavedModel, "meta": protos.MetaGraphDef, "graph": protos.GraphDef}[self.kind]()
        if self.text:
            protos.parse_text(self.data.decode(), message)
        else:
            message.ParseFromString(self.data)
        return message

    def serialize(self, message):
        return protos.to_text(message).encode() if self.text else message.SerializeToString()

    def graphs(self, message):
        """(graph_def, meta_graph or None) pairs of a parsed seed."""
        if self.kind == "saved_model":
            return [(mg.graph_def, mg) for mg in message.meta_graphs]
        if self.kind == "meta":
            return [(message.graph_def, message)]
        return [(message, None)]

    def write(self, data, where):
        """Write the variant under ``where``; returns the model path to give the CLI."""
        if self.directory:
            model = where / self.name
            model.mkdir()
            (model / self.file).write_bytes(data)
            return model
        model = where / self.file
        model.write_bytes(data)
        return model


# -- mutations -------------------------------------------------------------------------------------
def byte_flips(rng, data):
    data = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        if data:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    return bytes(data)


def truncate(rng, data):
    return data[: rng.randrange(len(data))] if data else data


def bodies(graph):
    """[(node list, function proto or None)] of a GraphDef: the main graph and every function body."""
    return [(graph.node, None)] + [(f.node_def, f) for f in graph.library.function]


def pick_node(rng, graph):
    candidates = [(nodes, f) for nodes, f in bodies(graph) if len(nodes)]
    if not candidates:
        return None, None, None
    nodes, fdef = rng.choice(candidates)
    return nodes, fdef, nodes[rng.randrange(len(nodes))]


def mutate_node(rng, graph, meta):
    nodes, fdef, nd = pick_node(rng, graph)
    if nd is None:
        return
    names = [n.name for n in nodes]
    choice = rng.randrange(9)
    if choice == 0:
        del nodes[names.index(nd.name)]
    elif choice == 1:
        nodes.add().CopyFrom(nd)  # a duplicate name
    elif choice == 2:
        nd.name = rng.choice(names + GARBAGE)
    elif choice == 3:
        nd.op = rng.choice(OPS)
    elif choice == 4 and nd.attr:
        del nd.attr[rng.choice(sorted(nd.attr))]
    elif choice == 5:
        nd.device = rng.choice(["", "/device:GPU:99", "garbage", "/job:x/device:CPU:0"])
    elif choice == 6:  # another node's attributes, mismatched to this op
        other = nodes[rng.randrange(len(nodes))]
        for key in sorted(other.attr):
            nd.attr[key].CopyFrom(other.attr[key])
    elif choice == 7:
        attr = nd.attr[rng.choice(["strides", "ksize", "transpose_a", "transpose_b", "N", "axis", "data_format"])]
        kind = rng.randrange(4)
        if kind == 0:
            attr.list.i.extend(rng.choice([0, -1, 1, 2, 2**40]) for _ in range(rng.randrange(6)))
        elif kind == 1:
            attr.b = True
        elif kind == 2:
            attr.i = rng.choice([0, -1, 2**62])
        else:
            attr.s = rng.choice([b"NCHW", b"NHWC", b"", b"\xff"])
    else:
        for _ in range(rng.randint(2, 20)):
            nodes.add(
                name=f"fuzz_{rng.randrange(10**6)}", op=rng.choice(OPS), input=[rng.choice(names)] if names else []
            )


def mutate_inputs(rng, graph, meta):
    nodes, fdef, nd = pick_node(rng, graph)
    if nd is None:
        return
    names = [n.name for n in nodes] + ([a.name for a in fdef.signature.input_arg] if fdef else [])
    choice = rng.randrange(6)
    if choice == 0 and nd.input:
        del nd.input[rng.randrange(len(nd.input))]
    elif choice == 1 and nd.input:
        nd.input[rng.randrange(len(nd.input))] = rng.choice(GARBAGE)
    elif choice == 2:  # an edge from anywhere: maybe a cycle
        nd.input.append(rng.choice(["", "^"]) + rng.choice(names))
    elif choice == 3 and nd.input:
        ref = nd.input[rng.randrange(len(nd.input))]
        nd.input.append(ref.split(":")[0] + rng.choice([":1", ":7", ":output:3", ":z:0", ":0:0"]))
    elif choice == 4:
        nd.input.append(nd.name)  # its own output
    else:
        rng.shuffle(nd.input)


def mutate_function(rng, graph, meta):
    functions = graph.library.function
    if not len(functions):
        nd = graph.node.add(name="fuzz_call", op=rng.choice(["PartitionedCall", "StatefulPartitionedCall"]))
        nd.attr["f"].func.name = rng.choice(["", "missing"])
        return
    fdef = functions[rng.randrange(len(functions))]
    choice = rng.randrange(7)
    if choice == 0:
        del functions[rng.randrange(len(functions))]
    elif choice == 1:
        fdef.signature.name = rng.choice(["", functions[rng.randrange(len(functions))].signature.name, "renamed"])
    elif choice == 2 and fdef.signature.input_arg:
        del fdef.signature.input_arg[rng.randrange(len(fdef.signature.input_arg))]
    elif choice == 3:
        fdef.signature.output_arg.add(name=rng.choice(["extra", "y"]), type=rng.choice([0, 1, 20]))
    elif choice == 4 and fdef.ret:
        fdef.ret[rng.choice(sorted(fdef.ret))] = rng.choice(GARBAGE + ["x", "ghost:output:0"])
    elif choice == 5:  # a call to itself, or to some other function
        nodes, _, nd = pick_node(rng, graph)
        if nd is not None:
            nd.op = "PartitionedCall"
            nd.attr["f"].func.name = rng.choice([fdef.signature.name, "missing", ""])
    else:
        fdef.node_def.add(
            name="fuzz_self", op=fdef.signature.name, input=[a.name for a in fdef.signature.input_arg][:1]
        )


def mutate_dtype(rng, graph, meta):
    _, _, nd = pick_node(rng, graph)
    if nd is None:
        return
    key = rng.choice(sorted(nd.attr) + ["T", "dtype", "Tout"])
    value = rng.choice([0, 1, 3, 7, 9, 20, 21, 101, 2**20])
    if rng.randrange(2):
        nd.attr[key].type = value
    else:
        nd.attr[key].list.type.extend([value, 1])


def mutate_shape(rng, graph, meta):
    _, _, nd = pick_node(rng, graph)
    if nd is None:
        return
    dims = [rng.choice([-1, -7, 0, 1, 3, 2**31, 2**62, 2**63 - 1]) for _ in range(rng.choice([0, 1, 2, 4, 5, 30]))]
    target = rng.randrange(3)
    if target == 0:
        shape = nd.attr["_output_shapes"].list.shape.add()
    elif target == 1:
        shape = nd.attr["shape"].shape
        shape.Clear()
    else:
        shape = nd.attr["value"].tensor.tensor_shape
        shape.Clear()
        nd.attr["value"].tensor.dtype = rng.choice([0, 1, 3])
    for d in dims:
        shape.dim.add(size=d)
    if rng.randrange(8) == 0:
        shape.unknown_rank = True


def mutate_stream(rng, graph, meta):
    _, _, nd = pick_node(rng, graph)
    if nd is None:
        return
    attr = nd.attr["_stream_id"]
    kind = rng.randrange(5)
    if kind == 0:
        attr.f = rng.choice([1.0, 0.5, float("nan")])
    elif kind == 1:
        attr.s = rng.choice([b"1", b"", b"\xff"])
    elif kind == 2:
        attr.list.i.extend([0, 1])
    else:
        attr.i = rng.choice([-1, 0, 1, 3, 1023, 2**40, 2**63 - 1])


def mutate_signature(rng, graph, meta):
    if meta is None or not meta.signature_def:
        return
    sig = meta.signature_def[rng.choice(sorted(meta.signature_def))]
    infos = sig.inputs if rng.randrange(2) and sig.inputs else sig.outputs
    if not infos:
        return
    info = infos[rng.choice(sorted(infos))]
    choice = rng.randrange(4)
    if choice == 0:
        info.name = rng.choice(GARBAGE)
    elif choice == 1:
        info.dtype = rng.choice([0, 1, 9, 300])
    elif choice == 2:
        info.tensor_shape.dim.add(size=rng.choice([-5, 2**62, 0]))
    else:
        info.ClearField("name")


def mutate_object_graph(rng, graph, meta):
    """TF2: the object graph's captured inputs and variables, which --placement device rewrites."""
    if meta is None or not meta.object_graph_def.concrete_functions:
        return mutate_node(rng, graph, meta)
    objects = meta.object_graph_def
    function = objects.concrete_functions[rng.choice(sorted(objects.concrete_functions))]
    choice = rng.randrange(3)
    if choice == 0 and function.bound_inputs:
        function.bound_inputs[rng.randrange(len(function.bound_inputs))] = rng.choice([0, len(objects.nodes), 10**6])
    elif choice == 1 and function.bound_inputs:
        del function.bound_inputs[rng.randrange(len(function.bound_inputs))]
    elif objects.nodes:
        del objects.nodes[rng.randrange(len(objects.nodes)) :]


STRUCTURAL = [
    mutate_node,
    mutate_inputs,
    mutate_function,
    mutate_dtype,
    mutate_shape,
    mutate_stream,
    mutate_signature,
    mutate_object_graph,
]


def make_variant(rng, seeds):
    """(seed, bytes, description) of one mutated model."""
    seed = rng.choices(seeds, weights=[w for _, w in SEEDS])[0]
    kind = rng.randrange(10)
    if kind == 0:
        return seed, byte_flips(rng, seed.data), "byte flips"
    if kind == 1:
        return seed, truncate(rng, seed.data), "truncation"
    message = seed.parse()
    graph, meta = rng.choice(seed.graphs(message))
    done = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        mutation = rng.choice(STRUCTURAL)
        mutation(rng, graph, meta)
        done.append(mutation.__name__)
    return seed, seed.serialize(message), "+".join(done)
