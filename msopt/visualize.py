"""Folded pictures of a partition: a signature's ops, name scopes folded into boxes coloured by stream, as DOT.

Three steps, each a function: ``signature_ops`` lists the ops one signature runs (TF2 function
calls opened: a called body is inlined under the call node's scope), ``fold`` turns name scopes
into boxes (open to ``depth`` levels, plus the scopes named by ``expand``; an open scope with
too many members is cut into stages along the data flow), ``to_dot`` draws boxes, aggregated
edges and the legend. ``render`` runs graphviz's ``dot``.
"""
import heapq
import math
import os
import shutil
import subprocess
from collections import Counter, defaultdict

from msopt.errors import InputError
from msopt.graph import MAIN

CALL_OPS = {"PartitionedCall", "StatefulPartitionedCall"}
BOOKKEEPING_OPS = {"VarHandleOp"}  # TF2 main graph: variable handles fed to the signature's call
PLUMBING_OPS = {"Identity", "NoOp"}  # at the top of a function body: its outputs and automatic control dependencies
RETURNS_SCOPE = "(returns)"  # the scope they are folded into
INPUTS_SCOPE = "(inputs)"  # top-level placeholders, when there are more than GROUPED_INPUTS
GROUPED_INPUTS = 4
MAX_MEMBERS = 40  # an open scope with more members than this is cut into stages
STAGE_TARGET = 18  # about this many stages per cut scope
# ColorBrewer Set3, then golden-ratio hues.
PALETTE = ["#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462",
           "#b3de69", "#fccde5", "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f"]
CROSS_COLOR = "#d62728"
BAR_WIDTH = 120  # points: the bar of stream shares under a box's label


def stream_color(stream):
    if stream < len(PALETTE):
        return PALETTE[stream]
    hue = (stream * 0.618033988749895) % 1.0
    return f"{hue:.3f} 0.35 0.95"  # graphviz HSV


# -- 1. the ops a signature runs ---------------------------------------------------------------
class Op:
    __slots__ = ("key", "path", "op", "callers")

    def __init__(self, key, path, op, callers):
        self.key = key  # node key in the graph view (several Ops share a key when a function is called twice)
        self.path = path  # scope names, then the op's own name
        self.op = op
        self.callers = callers  # keys of the call nodes this op's body was inlined for, outermost first


def op_streams(ops, partition):
    """Each op's stream: its own entry, else its innermost caller's, else 0 (as the simulator and TensorFlow place it)."""
    streams = []
    for op in ops:
        stream = partition.get(op.key)
        if stream is None:
            stream = next((partition[c] for c in reversed(op.callers) if c in partition), 0)
        streams.append(stream)
    return streams


def signature_ops(model, view, signature=None):
    """(ops, edges, signature name): the ops one signature runs, function calls opened.

    edges are (source op index, destination op index, is_control). A model without signatures
    shows its whole main graph. TF2's variable handles in the main graph are left out.
    """
    sigs = model.signatures
    name = None
    if signature is not None:
        if signature not in sigs:
            raise InputError(f"no signature '{signature}'; the model has: {', '.join(sorted(sigs)) or 'none'}")
        name = signature
    elif sigs:
        name = "serving_default" if "serving_default" in sigs else sorted(sigs)[0]
    if name is None:
        keep = None
    else:
        outputs = [t.name.split(":")[0].lstrip("^") for t in sigs[name].outputs.values() if t.name]
        keep = _ancestors(view, [o for o in outputs if o in view.nodes])
        if model.is_tf2:
            keep = {k for k in keep if view.nodes[k].op not in BOOKKEEPING_OPS}
    flat = _Flattener(view)
    flat.body(MAIN, (), keep, [], ())
    inputs = [op for op in flat.ops if op.op == "Placeholder" and len(op.path) == 1]
    if len(inputs) > GROUPED_INPUTS:
        for op in inputs:
            op.path = (INPUTS_SCOPE,) + op.path
    return flat.ops, flat.edges, name


def _ancestors(view, roots):
    seen = set(roots)
    stack = list(roots)
    while stack:
        node = view.nodes[stack.pop()]
        for src in [s for s, _ in node.inputs] + node.control_inputs:
            if src not in seen:
                seen.add(src)
                stack.append(src)
    return seen


class _Flattener:
    """Inlines function bodies into one list of ops; producers of a call's outputs resolve through its body."""

    def __init__(self, view):
        self.view = view
        self.ops = []
        self.edges = []
        self.members = defaultdict(list)
        for node in view.nodes.values():
            if node.proto is not None:
                self.members[node.function].append(node)
        self.active = set()  # functions being inlined (guards against recursion)

    def body(self, function, prefix, keep, arg_sources, callers):
        """Add one graph's ops under scope ``prefix``; return the producers of each of its outputs."""
        view = self.view
        nodes = [n for n in self.members[function] if keep is None or n.key in keep]
        produced = {}  # key -> [op index] for an op, ("call", [[op index] per output], callee) for a call
        if function != MAIN:
            for i, key in enumerate(view.functions[function].args):
                produced[key] = arg_sources[i] if i < len(arg_sources) else []
        self.active.add(function)
        placed = []
        for node in _topological(nodes):
            callee = self._callee(node)
            if callee is not None and callee not in self.active:
                sources = [self._resolve(produced, src, port) for src, port in node.inputs]
                scope = tuple(node.scope.split("/")) if node.scope else ()
                produced[node.key] = ("call", self.body(callee, prefix + scope, None, sources, callers + (node.key,)), callee)
                continue
            index = len(self.ops)
            path = tuple(node.name.split("/"))
            if function != MAIN and len(path) == 1 and node.op in PLUMBING_OPS:
                path = (RETURNS_SCOPE,) + path
            self.ops.append(Op(node.key, prefix + path, node.op, callers))
            produced[node.key] = [index]
            placed.append((node, index))
            for branch in node.calls:  # functional control flow (If, While, Case ...): bodies inside the node
                if branch not in self.active:
                    nargs = len(view.functions[branch].args)
                    self.body(branch, prefix + tuple(node.name.split("/")) + (branch,), None, [[index]] * nargs,
                              callers + (node.key,))
        for node, index in placed:
            for src, port in node.inputs:
                self.edges.extend((s, index, False) for s in self._resolve(produced, src, port))
            if self.ops[index].path[-2:-1] == (RETURNS_SCOPE,) and node.op == "NoOp":
                continue  # a body's automatic control dependencies on all its stateful ops
            for src in node.control_inputs:
                self.edges.extend((s, index, True) for s in self._resolve(produced, src, None))
        self.active.discard(function)
        if function == MAIN:
            return []
        info = view.functions[function]
        out_names = [a.name for a in info.proto.signature.output_arg]
        return [self._resolve(produced, *info.returns[n]) if n in info.returns else [] for n in out_names]

    def _callee(self, node):
        if node.op in self.view.functions:
            return node.op
        if node.op in CALL_OPS and node.calls:
            name = node.proto.attr["f"].func.name if "f" in node.proto.attr else node.calls[0]
            return name if name in self.view.functions else None
        return None

    def _resolve(self, produced, src, port):
        entry = produced.get(src)
        if entry is None:
            return []
        if isinstance(entry, list):
            return entry
        _, outputs, callee = entry
        index = self.view.functions[callee].output_index(port)
        if index is None or index >= len(outputs):
            return [i for out in outputs for i in out]
        return outputs[index]


def _topological(nodes):
    """Nodes in data-flow order (Kahn's, ties by original order); nodes on cycles follow in original order."""
    position = {n.key: i for i, n in enumerate(nodes)}
    indegree = [0] * len(nodes)
    consumers = defaultdict(list)
    for i, n in enumerate(nodes):
        for src in {s for s, _ in n.inputs} | set(n.control_inputs):
            if src in position:
                indegree[i] += 1
                consumers[position[src]].append(i)
    ready = [i for i, d in enumerate(indegree) if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in consumers[i]:
            indegree[j] -= 1
            if indegree[j] == 0:
                heapq.heappush(ready, j)
    if len(order) < len(nodes):
        seen = set(order)
        order.extend(i for i in range(len(nodes)) if i not in seen)
    return [nodes[i] for i in order]


# -- 2. folding name scopes into boxes ---------------------------------------------------------
DOMINANT = 0.8  # a scope holding this share of its parent's ops opens without using a depth level


class Box:
    """A name scope, or a stage of a crowded one: one box when closed, a frame around its members when open."""

    __slots__ = ("name", "path", "children", "ops", "size", "streams", "open", "stage")

    def __init__(self, name, path, stage=False):
        self.name = name
        self.path = path  # scope names from the top (a stage has its scope's path)
        self.children = {}  # name -> Box
        self.ops = []  # indices of the ops directly inside
        self.size = 0  # ops inside at any depth
        self.streams = Counter()  # ops inside per stream
        self.open = False
        self.stage = stage

    def all_ops(self):
        stack, found = [self], []
        while stack:
            box = stack.pop()
            found.extend(box.ops)
            stack.extend(box.children.values())
        return found


def fold(ops, edges, partition, depth=1, expand=()):
    """(root box, stream of each op): the scope tree of ``ops`` opened to ``depth`` levels and along ``expand``."""
    streams = op_streams(ops, partition)
    scopes = {op.path[:i] for op in ops for i in range(1, len(op.path))}
    root = Box("", ())
    for index, op in enumerate(ops):
        # an op named like a scope (conv/Conv2D beside conv/Conv2D/ReadVariableOp) goes inside that scope
        container = op.path if op.path in scopes else op.path[:-1]
        box = root
        for i in range(len(container) + 1):
            if i:
                box = box.children.setdefault(container[i - 1], Box(container[i - 1], container[:i]))
            box.size += 1
            box.streams[streams[index]] += 1
        box.ops.append(index)
    wanted = [tuple(p for p in e.split("/") if p) for e in expand]
    for path in wanted:
        if path not in scopes:
            top = ", ".join(sorted(root.children)[:12])
            raise InputError(f"--expand: no scope '{'/'.join(path)}' in the picture; scopes at the top: {top or 'none'}")
    _Opener(ops, edges, streams, depth, wanted).open(root, 0)
    return root, streams


class _Opener:
    """Decides which boxes are open: a box at level L opens when L < depth or it lies on an expanded path."""

    def __init__(self, ops, edges, streams, depth, wanted):
        self.ops, self.edges, self.streams = ops, edges, streams
        self.depth, self.wanted = depth, wanted

    def wanted_inside(self, box):
        paths = [c.path for c in box.children.values()] if box.stage else [box.path]
        return any(w[: len(p)] == p for w in self.wanted for p in paths)

    def open(self, box, level):
        box.open = True
        if len(box.children) + len(box.ops) > MAX_MEMBERS:
            _cut_into_stages(box, self.ops, self.edges, self.streams)
            for stage in box.children.values():  # stages are a level of their own
                if level + 1 < self.depth or self.wanted_inside(stage):
                    self.open_members(stage, level + 1)
                    stage.open = True
            return
        self.open_members(box, level)

    def open_members(self, box, level):
        members = len(box.children) + len(box.ops)
        for child in box.children.values():
            if members == 1 or child.size > DOMINANT * box.size:
                self.open(child, level)
            elif level + 1 < self.depth or self.wanted_inside(child):
                self.open(child, level + 1)


def _cut_into_stages(box, ops, edges, streams):
    """Regroup a crowded scope's members into stages: runs along the data flow, cut where few members' outputs cross."""
    members = list(box.children.values()) + box.ops
    member_of = {}
    for m, member in enumerate(members):
        for i in (member.all_ops() if isinstance(member, Box) else [member]):
            member_of[i] = m
    first = [math.inf] * len(members)
    for i, m in member_of.items():
        first[m] = min(first[m], i)
    succ = defaultdict(set)
    for s, d, _ in edges:
        ms, md = member_of.get(s), member_of.get(d)
        if ms is not None and md is not None and ms != md:
            succ[ms].add(md)
    order = _member_order(len(members), succ, first)
    pos = {m: p for p, m in enumerate(order)}
    n = len(order)
    crossing = [0] * (n + 1)  # after the prefix sum: members at or before p whose outputs are used after p
    for m in range(n):
        last = max((pos[d] for d in succ[m]), default=pos[m])
        if last > pos[m]:
            crossing[pos[m]] += 1
            crossing[last] -= 1
    for p in range(1, n):
        crossing[p] += crossing[p - 1]
    weight = [members[m].size if isinstance(members[m], Box) else 1 for m in order]
    before = [0] * (n + 1)  # ops in the first p members
    for p in range(n):
        before[p + 1] = before[p] + weight[p]
    target = max(2.0, before[n] / STAGE_TARGET)
    runs, start = [], 0
    while start < n:
        window = [e for e in range(start, n - 1) if target / 2 <= before[e + 1] - before[start] <= target * 2]
        if before[n] - before[start] <= target * 1.5 or not window:
            end = n - 1 if before[n] - before[start] <= target * 1.5 else _first_reaching(before, start, target)
        else:
            end = min(window, key=lambda e: (crossing[e], abs(before[e + 1] - before[start] - target)))
        runs.append((start, end))
        start = end + 1
    box.children, box.ops = {}, []
    for number, (a, b) in enumerate(runs, 1):
        chosen = [members[order[p]] for p in range(a, b + 1)]
        names = [c.name if isinstance(c, Box) else ops[c].path[-1] for c in chosen]
        stage = Box(names[0] if len(names) == 1 else f"{names[0]} … {names[-1]}", box.path, stage=True)
        for c in chosen:
            if isinstance(c, Box):
                stage.children[c.name] = c
                stage.size += c.size
                stage.streams.update(c.streams)
            else:
                stage.ops.append(c)
                stage.size += 1
                stage.streams[streams[c]] += 1
        box.children[f"stage {number}"] = stage


def _first_reaching(before, start, target):
    """The last member of the shortest run from ``start`` holding at least ``target`` ops."""
    end = start
    while end + 1 < len(before) - 1 and before[end + 1] - before[start] < target:
        end += 1
    return end


def _member_order(n, succ, first):
    """Members in data-flow order, ties broken by first op; members on cycles last, by first op."""
    indegree = [0] * n
    for m in range(n):
        for d in succ[m]:
            indegree[d] += 1
    ready = [(first[m], m) for m in range(n) if indegree[m] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, m = heapq.heappop(ready)
        order.append(m)
        for d in succ[m]:
            indegree[d] -= 1
            if indegree[d] == 0:
                heapq.heappush(ready, (first[d], d))
    if len(order) < n:
        seen = set(order)
        order.extend(sorted((m for m in range(n) if m not in seen), key=lambda m: first[m]))
    return order


# -- 3. DOT -------------------------------------------------------------------------------------
def legend_rows(streams_of_ops, stream_count, busy_ms=None):
    """One row per stream 0..N-1: colour, ops shown, and share of estimated time (or of ops without a cost model)."""
    counts = Counter(streams_of_ops)
    n = max([stream_count] + [s + 1 for s in counts])
    total_ops = sum(counts.values()) or 1
    total_ms = sum(busy_ms.values()) if busy_ms else 0
    rows = []
    for s in range(n):
        row = {"stream": s, "color": stream_color(s), "ops": counts.get(s, 0)}
        if busy_ms is not None:
            row["busy_ms"] = round(busy_ms.get(s, 0.0), 4)
            row["share"] = round(busy_ms.get(s, 0.0) / total_ms, 4) if total_ms else 0.0
        else:
            row["share"] = round(counts.get(s, 0) / total_ops, 4)
        rows.append(row)
    return rows


def to_dot(ops, edges, root, streams, rows, title, share_of="est. time"):
    """The DOT text: open boxes as frames, closed boxes and lone ops as nodes, edges aggregated per pair and kind."""
    unit_of = [None] * len(ops)
    lines = [
        "digraph msopt {",
        f'  graph [rankdir=TB, newrank=true, fontname="Helvetica", fontsize=12, labelloc=t, nodesep=0.25, ranksep=0.4, '
        f'label="{_esc(title)}"];',
        '  node [fontname="Helvetica", fontsize=10, shape=box, style="rounded,filled", penwidth=0.8];',
        '  edge [color="#7f7f7f", arrowsize=0.6, fontname="Helvetica", fontsize=8];',
    ]
    counter = [0]
    closed = []  # (line index, unit id, box): labelled once the edges inside are counted

    def draw(box, indent):
        for child in box.children.values():
            counter[0] += 1
            if child.open:
                kind = "stage" if child.stage else "scope"
                lines.append(f"{indent}subgraph cluster_{counter[0]} {{")
                lines.append(f'{indent}  graph [label="{_esc(_short(child.name))} ({child.size} ops)", style="rounded,dashed", '
                             f'color="#9e9e9e", fontsize=10, class="{kind}"];')
                draw(child, indent + "  ")
                lines.append(f"{indent}}}")
            else:
                uid = f"b{counter[0]}"
                for i in child.all_ops():
                    unit_of[i] = uid
                closed.append((len(lines), uid, child))
                lines.append(indent)
        for i in box.ops:
            uid = f"o{i}"
            unit_of[i] = uid
            s = streams[i]
            name = _short(ops[i].path[-1])
            label = _esc(name if name == ops[i].op else f"{name}\n{ops[i].op}")
            lines.append(f'{indent}{uid} [label="{label}", shape=ellipse, style=filled, fillcolor="{stream_color(s)}", '
                         f'class="stream{s}", tooltip="{_esc("/".join(ops[i].path))}"];')

    draw(root, "  ")
    bundles = Counter()
    crossing_inside = Counter()
    for s, d, control in edges:
        u, v = unit_of[s], unit_of[d]
        if u is None or v is None:
            continue
        if u == v:
            crossing_inside[u] += streams[s] != streams[d]
            continue
        kind = "cross" if streams[s] != streams[d] else ("control" if control else "data")
        bundles[(u, v, kind)] += 1
    for (u, v, kind), count in bundles.items():
        attrs = [f"penwidth={min(4.0, 0.8 + math.log2(count) * 0.5):.2f}"]
        if count > 1:
            attrs.append(f'label="{count}"')
        if kind == "cross":
            attrs += [f'color="{CROSS_COLOR}"', "style=dashed", f'fontcolor="{CROSS_COLOR}"', 'class="cross"']
        elif kind == "control":
            attrs.append("style=dotted")
        lines.append(f"  {u} -> {v} [{', '.join(attrs)}];")
    for at, uid, box in closed:
        lines[at] += f"{uid} [{_box_attrs(box, crossing_inside[uid])}];"
    lines.append(f"  legend [shape=plaintext, style=solid, label=<{_legend_html(rows, share_of)}>];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _box_attrs(box, cross_inside):
    """A closed box: filled with its main stream's colour; a box over several streams gets a bar of its shares."""
    size = box.size
    shares = sorted(box.streams.items(), key=lambda kv: (-kv[1], kv[0]))
    classes = " ".join(f"stream{s}" for s in sorted(box.streams))
    common = f'style="rounded,filled", fillcolor="{stream_color(shares[0][0])}", class="{classes}", ' \
             f'tooltip="{_esc("/".join(box.path) or box.name)}"'
    if len(shares) == 1:
        return f'label="{_esc(f"{_short(box.name)}{chr(10)}{size} ops · stream {shares[0][0]}")}", {common}'
    detail = "  ".join(f"s{s} {n / size:.0%}" for s, n in shares[:4]) + ("  …" if len(shares) > 4 else "")
    inside = f'<TR><TD><FONT COLOR="{CROSS_COLOR}">{_count(cross_inside, "cross-stream edge")} inside</FONT></TD></TR>' \
        if cross_inside else ""
    bar = "".join(f'<TD BGCOLOR="{stream_color(s)}" WIDTH="{max(1, round(n / size * BAR_WIDTH))}" HEIGHT="7" '
                  'FIXEDSIZE="TRUE"></TD>' for s, n in sorted(box.streams.items()))
    label = (f'<<TABLE BORDER="0" CELLSPACING="0" CELLPADDING="1"><TR><TD>{_html(_short(box.name))}</TD></TR>'
             f'<TR><TD>{size} ops · {_html(detail)}</TD></TR>{inside}'
             f'<TR><TD><TABLE BORDER="1" CELLBORDER="0" CELLSPACING="0" CELLPADDING="0" COLOR="#555555"><TR>{bar}</TR>'
             '</TABLE></TD></TR></TABLE>>')
    return f"label={label}, {common}"


def _legend_html(rows, share_of):
    cells = ['<TABLE BORDER="0" CELLBORDER="1" CELLSPACING="0" CELLPADDING="3">',
             f'<TR><TD><B>stream</B></TD><TD><B>ops</B></TD><TD><B>{_html(share_of)}</B></TD></TR>']
    for row in rows:
        cells.append(f'<TR><TD BGCOLOR="{row["color"]}">stream {row["stream"]}</TD><TD ALIGN="RIGHT">{row["ops"]}</TD>'
                     f'<TD ALIGN="RIGHT">{row["share"]:.0%}</TD></TR>')
    cells.append(f'<TR><TD COLSPAN="3"><FONT COLOR="{CROSS_COLOR}">- - -</FONT> cross-stream edges (count)</TD></TR>')
    cells.append("</TABLE>")
    return "".join(cells)


def _count(n, noun):
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _short(name, limit=48):
    return name if len(name) <= limit else name[: limit - 1] + "…"


def _esc(text):
    return str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _html(text):
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


# -- rendering ----------------------------------------------------------------------------------
class DotMissing(Exception):
    """graphviz's dot is not on PATH."""


def render(dot_text, fmt, out=None, timeout=600):
    """Run ``dot -T<fmt>``; write ``out`` atomically, or return the bytes when out is None."""
    exe = shutil.which("dot")
    if exe is None:
        raise DotMissing("graphviz 'dot' not found on PATH")
    result = subprocess.run([exe, f"-T{fmt}"], input=dot_text.encode("utf-8"), capture_output=True, timeout=timeout)
    if result.returncode != 0:
        detail = result.stderr.decode("utf-8", "replace").strip().splitlines()
        raise RuntimeError(f"dot -T{fmt} failed: {detail[0] if detail else result.returncode}")
    if out is None:
        return result.stdout
    tmp = f"{out}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(result.stdout)
    os.replace(tmp, out)
    return None
