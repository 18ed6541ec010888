"""Name scopes folded into boxes: open to a depth and along expanded paths; crowded scopes cut into stages."""

import math
from collections import Counter, defaultdict

from msopt.errors import InputError
from msopt.graph.order import priority_order
from msopt.visualize.ops import op_streams

MAX_MEMBERS = 40  # an open scope with more members than this is cut into stages
STAGE_TARGET = 18  # about this many stages per cut scope
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
            raise InputError(
                f"--expand: no scope '{'/'.join(path)}' in the picture; scopes at the top: {top or 'none'}"
            )
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
        for i in member.all_ops() if isinstance(member, Box) else [member]:
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
    """Members in data-flow order, ties broken by first op; members on cycles last, by first op.

    The ready member holding the earliest op goes first (``msopt.graph.order.priority_order``), not the first
    ready one, and scopes that feed each other go last, so that the picture reads in the ops' order.
    """
    order = priority_order([list(succ[m]) for m in range(n)], [-first[m] for m in range(n)])
    if len(order) < n:
        seen = set(order)
        order.extend(sorted((m for m in range(n) if m not in seen), key=lambda m: first[m]))
    return order
