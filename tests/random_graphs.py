"""Random GraphDefs for comparing passes with their references: calls, control flow, loops, shapes and attributes."""

import random

from msopt.graph import protos

FLOAT, INT32, HALF = 1, 3, 19
UNARY = ("Relu", "Tanh", "Identity", "Sigmoid", "Cast", "Shape", "Size", "Exp", "Softplus", "Neg")
BINARY = ("AddV2", "Mul", "Sub", "Maximum", "Greater", "SquaredDifference")
SHAPED = ("Conv2D", "DepthwiseConv2dNative", "MaxPool", "AvgPool", "MatMul", "BatchMatMulV2", "GatherV2")
OTHER = ("AddN", "Select", "FusedBatchNormV3", "ConcatV2", "Mean", "Pack", "Reshape", "Sum", "UnknownOp")


class _Body:
    """Adds random nodes to the main graph or a function body; ``refs`` are the references its nodes may read."""

    def __init__(self, rng, nodes, refs, in_function, functions):
        self.rng, self.nodes, self.refs, self.in_function, self.functions = (
            rng,
            nodes,
            list(refs),
            in_function,
            functions,
        )
        self.count = 0

    def ref(self):
        rng = self.rng
        name, outputs = rng.choice(self.refs) if self.refs else (None, 1)
        if name is None:
            return self.placeholder()
        if outputs == 0:  # a function argument
            return name
        port = rng.choice([0] * 6 + [1, 2, 7]) if outputs > 1 else rng.choice([0] * 12 + [1])
        if not self.in_function:
            return f"{name}:{port}" if port else name
        arg = rng.choice(("y", "batch_mean", "output", "z")) if outputs > 1 else "output"
        return f"{name}:{arg}:{port % 2}"

    def add(self, op, inputs=(), outputs=1, **attrs):
        self.count += 1
        node = self.nodes.add(name=f"{op.lower()}_{self.count}", op=op)
        node.input.extend(inputs)
        rng = self.rng
        if rng.random() < 0.7 and op not in ("NoOp",):
            node.attr["T"].type = rng.choice((FLOAT, FLOAT, FLOAT, HALF, INT32))
        if rng.random() < 0.25:  # recorded shapes, some of unknown rank or dimension
            out = node.attr["_output_shapes"].list
            for _ in range(outputs if rng.random() < 0.9 else outputs + 1):
                shape = out.shape.add()
                if rng.random() < 0.1:
                    shape.unknown_rank = True
                else:
                    for _ in range(rng.randint(0, 4)):
                        shape.dim.add(size=rng.choice((-1, 1, 2, 3, 8, 16)))
        for key, value in attrs.items():
            if isinstance(value, bool):
                node.attr[key].b = value
            elif isinstance(value, bytes):
                node.attr[key].s = value
            elif isinstance(value, list):
                node.attr[key].list.i.extend(value)
            else:
                node.attr[key].type = value
        self.refs.append((node.name, outputs))
        if rng.random() < 0.08 and len(self.refs) > 2:  # a control input
            node.input.append("^" + rng.choice(self.refs[:-1])[0])
        return node.name

    def placeholder(self):
        rng = self.rng
        self.count += 1
        node = self.nodes.add(name=f"p_{self.count}", op=rng.choice(("Placeholder", "Const", "VarHandleOp")))
        if rng.random() < 0.8:
            node.attr["dtype"].type = rng.choice((FLOAT, FLOAT, INT32, HALF))
        if node.op == "Const" and rng.random() < 0.8:
            tensor = node.attr["value"].tensor
            tensor.dtype = rng.choice((FLOAT, INT32))
            dims = rng.choice(([], [3, 3, 4, 4], [4, 8], [2, 4, 8], [1]))
            for d in dims:
                tensor.tensor_shape.dim.add(size=d)
            if not dims:
                tensor.int_val.append(rng.choice((0, 1, -1, 3)))
        elif rng.random() < 0.7:
            for d in rng.choice(([-1, 8, 8, 4], [-1, 8], [2, 8], [-1], [-1, 4, 4, 4, 4])):
                node.attr["shape"].shape.dim.add(size=d)
        self.refs.append((node.name, 1))
        return node.name

    def matrix(self):
        self.count += 1
        node = self.nodes.add(name=f"m_{self.count}", op="Placeholder")
        for d in self.rng.choice(([-1, 8], [8, 8], [8, -1])):
            node.attr["shape"].shape.dim.add(size=d)
        self.refs.append((node.name, 1))
        return node.name

    def random_node(self):
        rng = self.rng
        kind = rng.random()
        if kind < 0.15:
            return self.placeholder()
        if kind < 0.40:
            return self.add(rng.choice(UNARY), [self.ref()], DstT=FLOAT)
        if kind < 0.60:
            return self.add(rng.choice(BINARY), [self.ref(), self.ref()])
        if kind < 0.75:
            op = rng.choice(SHAPED)
            attrs = {}
            if op in ("Conv2D", "DepthwiseConv2dNative", "MaxPool", "AvgPool"):
                attrs = {
                    "strides": rng.choice(([1, 1, 1, 1], [1, 2, 2, 1], [1, 1])),
                    "padding": rng.choice((b"SAME", b"VALID")),
                }
                if rng.random() < 0.2:
                    attrs["data_format"] = b"NCHW"
                if op in ("MaxPool", "AvgPool"):
                    attrs["ksize"] = rng.choice(([1, 2, 2, 1], [1, 3, 3, 1], [2]))
            if op == "MatMul":
                attrs = {"transpose_a": rng.random() < 0.5, "transpose_b": rng.random() < 0.5}
            inputs = [self.ref()] if op in ("MaxPool", "AvgPool") else [self.ref(), self.ref()]
            if op == "MatMul" and rng.random() < 0.9:  # matrices (other shapes are an error, also compared)
                inputs = [self.matrix(), self.matrix()]
            if op == "GatherV2":
                inputs.append(self.ref())
            return self.add(op, inputs, **attrs)
        if kind < 0.85:
            op = rng.choice(OTHER)
            if op == "FusedBatchNormV3":
                return self.add(op, [self.ref() for _ in range(5)], outputs=6)
            if op == "ConcatV2":
                return self.add(op, [self.ref() for _ in range(rng.randint(1, 3))] + [self.placeholder()])
            if op in ("Mean", "Sum"):
                return self.add(op, [self.ref(), self.ref()], keep_dims=rng.random() < 0.5)
            return self.add(op, [self.ref() for _ in range(rng.randint(0, 3))])
        if kind < 0.93 and self.functions:
            return self.call()
        if kind < 0.96:
            return self.loop()
        return self.add("NoOp", ["^" + self.ref().split(":")[0] for _ in range(2)])

    def call(self):
        rng = self.rng
        name, args, outs = rng.choice(self.functions)
        kind = rng.random()
        if kind < 0.5:
            op = rng.choice(("PartitionedCall", "StatefulPartitionedCall"))
            node = self.add(op, [self.ref() for _ in range(args)], outputs=outs)
            self.nodes[-1].attr["f"].func.name = name
        elif kind < 0.8:
            node = self.add(rng.choice(("If", "StatelessIf")), [self.ref()] + [self.ref() for _ in range(args)], outs)
            other = rng.choice(self.functions)[0]
            self.nodes[-1].attr["then_branch"].func.name = name
            self.nodes[-1].attr["else_branch"].func.name = other
        else:
            node = self.add(rng.choice(("While", "StatelessWhile")), [self.ref() for _ in range(args)], outs)
            self.nodes[-1].attr["cond"].func.name = rng.choice(self.functions)[0]
            self.nodes[-1].attr["body"].func.name = name
        if rng.random() < 0.2:
            self.nodes[-1].input.append("^" + self.ref().split(":")[0])
        return node

    def loop(self):
        """A v1 while loop: Enter -> Merge <- NextIteration, Switch, the body, Exit."""
        enter = self.add("Enter", [self.ref()])
        self.count += 1
        merge = self.nodes.add(name=f"merge_{self.count}", op="Merge")
        nxt = f"next_{self.count}"
        merge.input.extend([enter, nxt])
        self.refs.append((merge.name, 2))
        switch = self.add("Switch", [merge.name, self.ref()], outputs=2)
        body = self.add("Relu", [f"{switch}:1" if not self.in_function else f"{switch}:output_true:0"])
        self.nodes.add(name=nxt, op="NextIteration").input.append(body)
        return self.add("Exit", [switch])


def random_graph(seed, size=120, functions=4):
    """A GraphDef of about ``size`` main-graph nodes and up to ``functions`` library functions."""
    rng = random.Random(seed)
    graph = protos.GraphDef()
    defined = []
    for k in range(rng.randint(0, functions)):
        fdef = graph.library.function.add()
        name = f"fn_{k}"
        fdef.signature.name = name
        args = rng.randint(0, 3)
        outs = rng.randint(1, 3)
        for a in range(args):
            fdef.signature.input_arg.add(name=f"arg{a}", type=FLOAT)
        for o in range(outs):
            fdef.signature.output_arg.add(name=f"out{o}", type=FLOAT)
        body = _Body(rng, fdef.node_def, [(f"arg{a}", 0) for a in range(args)], True, list(defined))
        if rng.random() < 0.2:  # a recursive call
            body.functions.append((name, args, outs))
        for _ in range(rng.randint(1, 12)):
            body.random_node()
        names = [n.name for n in fdef.node_def if n.op not in ("NextIteration",)]
        for o in range(outs):
            choice = rng.random()
            if choice < 0.15 and args:
                fdef.ret[f"out{o}"] = f"arg{rng.randrange(args)}"
            else:
                fdef.ret[f"out{o}"] = f"{rng.choice(names)}:{rng.choice(('output', 'y', 'batch_mean'))}:0"
        if rng.random() < 0.3:
            fdef.signature.control_output.append("done")
            fdef.control_ret["done"] = rng.choice(names)
        defined.append((name, args, outs))
    main = _Body(rng, graph.node, [], False, defined)
    for _ in range(size):
        main.random_node()
    return graph
