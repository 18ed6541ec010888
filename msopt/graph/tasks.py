"""The op instances of one run (msopt.graph.flat builds them): parallel per-task lists and their edges as arrays."""

from collections.abc import Mapping

import numpy as np


class Tasks:
    """The flattened run: parallel lists indexed by task id, ids in a topological order.

    A run built by ``flatten_run`` holds its edges as arrays (``csr()``); its ``inputs`` and
    ``control`` lists are made from them on first use, so passes that read the arrays never
    pay for a million small lists. ``node`` (the GraphView node of each task) is set on such a run.
    """

    def __init__(self):
        self.key = []  # GraphView node key of the op
        self.op = []
        self.instance = []  # index into instances: the function call this op instance runs in (0 = main graph)
        self.inputs = []  # [(task, output index)] data inputs
        self.control = []  # [task] control predecessors
        self.instances = [(None, None)]  # (call node key, parent instance) per inlined call; 0 is the main graph

    def __len__(self):
        return len(self.key)

    def __getattr__(self, name):  # only called for an attribute not set: the lists of a run built from arrays
        arrays = self.__dict__.get("_csr")
        if arrays is None or name not in ("inputs", "control"):
            raise AttributeError(name)
        data_ptr, data_src, data_port, control_ptr, control_src = arrays
        pairs = list(zip(data_src.tolist(), data_port.tolist()))
        ptr = data_ptr.tolist()
        self.inputs = [pairs[a:b] for a, b in zip(ptr, ptr[1:])]
        ptr, sources = control_ptr.tolist(), control_src.tolist()
        self.control = [sources[a:b] for a, b in zip(ptr, ptr[1:])]
        return self.__dict__[name]

    def csr(self):
        """(data_ptr, data_src, data_port, control_ptr, control_src), int64 arrays: task i reads output
        data_port[e] of task data_src[e] for e in data_ptr[i]:data_ptr[i + 1] (its inputs in order), and
        waits for control_src[control_ptr[i]:control_ptr[i + 1]] (ascending in a built run). Computed once: the lists
        must not change afterwards."""
        arrays = self.__dict__.get("_csr")
        if arrays is None:
            arrays = self._csr = csr_of(self.inputs, self.control)
        return arrays

    def neighbour_arrays(self):
        """(pred_ptr, pred_idx, succ_ptr, succ_idx), int64 CSR arrays computed once: per task its distinct
        predecessors (data inputs in order, then control ones) and its distinct successors ascending; what
        ``dict.fromkeys`` over the lists gives. The rules' DAG and the list schedules both read them."""
        found = self.__dict__.get("_neighbours")
        if found is not None:
            return found
        data_ptr, data_src, _, control_ptr, control_src = self.csr()
        n = len(self.key)
        dst = np.concatenate(
            [np.repeat(np.arange(n), np.diff(data_ptr)), np.repeat(np.arange(n), np.diff(control_ptr))]
        )
        src = np.concatenate([data_src, control_src]).astype(np.int64, copy=False)
        kind = np.concatenate([np.zeros(len(data_src), np.int64), np.ones(len(control_src), np.int64)])
        rank = np.empty(len(src), np.int64)
        rank[np.lexsort((np.arange(len(src)), kind, dst))] = np.arange(len(src))  # a task's listing order
        by_pair = np.lexsort((rank, src, dst))  # each (task, predecessor) pair, its first listing first
        first = np.ones(len(src), bool)
        first[1:] = (dst[by_pair][1:] != dst[by_pair][:-1]) | (src[by_pair][1:] != src[by_pair][:-1])
        kept = by_pair[first]
        kept = kept[np.lexsort((rank[kept], dst[kept]))]
        by_source = kept[np.lexsort((dst[kept], src[kept]))]
        pred_ptr, succ_ptr = np.zeros(n + 1, np.int64), np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(dst[kept], minlength=n), out=pred_ptr[1:])
        np.cumsum(np.bincount(src[kept], minlength=n), out=succ_ptr[1:])
        found = self._neighbours = (pred_ptr, src[kept], succ_ptr, dst[by_source].astype(np.int64, copy=False))
        return found

    def neighbour_lists(self):
        """(preds, succs): ``neighbour_arrays`` as per-task lists."""
        pred_ptr, pred_idx, succ_ptr, succ_idx = self.neighbour_arrays()
        return csr_lists(pred_idx, pred_ptr), csr_lists(succ_idx, succ_ptr)

    def distinct(self):
        """(the run's node keys, each once in first-seen order, as one tuple; per key, the task of its first instance
        as int64), computed once. A plan gives a node its first instance's stream, so a plan of the run is an array
        over these keys (policy auto's candidates, msopt.planning.placed_streams)."""
        found = self.__dict__.get("_distinct")
        if found is None:  # the key set (the plans' scope too) counts the distinct keys
            found = self._distinct = distinct_keys(self.key, len(self.key_set()))
        return found

    def key_set(self):
        """The run's node keys as a frozenset, made once (the auto search's and the plan's scope: one object, so
        the constraints' cache finds it by identity)."""
        found = self.__dict__.get("_key_set")
        if found is None:
            found = self._key_set = frozenset(self.key)
        return found

    def op_codes(self):
        """(op names, per-task int64 code into them), computed once: per-op-type tables index it."""
        codes = self.__dict__.get("_op_codes")
        if codes is None:
            codes = self._op_codes = op_codes(self.op)
        return codes

    def ops_in(self, table):
        """Per task, whether its op type is in ``table`` (a bool array)."""
        return codes_in(*self.op_codes(), table)

    def callers(self, i):
        """Keys of the call nodes task ``i`` was inlined for, outermost first."""
        out = []
        instance = self.instance[i]
        while instance:
            call, instance = self.instances[instance]
            out.append(call)
        return tuple(reversed(out))


def gather(values, index):
    """``[values[i] for i in index]`` (an int array), through an object array: half the time of a Python loop at a
    million items in a shuffled order."""
    return np.fromiter(values, object, len(values))[index].tolist()


def distinct_keys(keys, count=None):
    """(``keys`` each once in first-seen order as a tuple, the index of each one's first occurrence as int64);
    ``count``: how many distinct keys there are, if known."""
    if (len(dict.fromkeys(keys)) if count is None else count) == len(keys):  # every key once (no body run twice)
        return tuple(keys), np.arange(len(keys), dtype=np.int64)
    first = dict(zip(reversed(keys), range(len(keys) - 1, -1, -1)))  # the last write of a key is its first index
    at = np.sort(np.fromiter(first.values(), np.int64, len(first)))
    return tuple(keys[i] for i in at.tolist()), at


def op_codes(ops):
    """(distinct op names in first-seen order, each op's index into them as int64)."""
    names = list(dict.fromkeys(ops))
    table = dict(zip(names, range(len(names))))
    return names, np.fromiter(map(table.__getitem__, ops), np.int64, len(ops))


def csr_of(inputs, control):
    """The arrays of ``Tasks.csr`` from per-task lists of (task, output index) and of control tasks."""
    data_ptr = np.zeros(len(inputs) + 1, np.int64)
    np.cumsum([len(x) for x in inputs], out=data_ptr[1:])
    data_src = np.fromiter((s for x in inputs for s, _ in x), np.int64, int(data_ptr[-1]))
    data_port = np.fromiter((p for x in inputs for _, p in x), np.int64, int(data_ptr[-1]))
    control_ptr = np.zeros(len(control) + 1, np.int64)
    np.cumsum([len(x) for x in control], out=control_ptr[1:])
    control_src = np.fromiter((s for x in control for s in x), np.int64, int(control_ptr[-1]))
    return data_ptr, data_src, data_port, control_ptr, control_src


def codes_in(names, codes, table):
    """Per item, whether its op type (``codes`` into ``names``, as ``op_codes`` gives them) is in ``table``."""
    return np.array([op in table for op in names], bool)[codes] if names else np.zeros(len(codes), bool)


def csr_lists(indices, ptr):
    """CSR ``indices`` cut into one list per row at ``ptr``."""
    flat, bounds = indices.tolist(), ptr.tolist()
    return [flat[a:b] for a, b in zip(bounds, bounds[1:])]


class RunCosts(Mapping):
    """``node_costs`` of a run whose keys appear once each: {key: time} over the run's own key list and its times
    as a float64 array in that order. The rules read the array when they plan that run (msopt.rules.walk's
    vertex_costs); the dict is made only if a key is looked up (a million keys: 0.3 s)."""

    def __init__(self, keys, times):
        self.keys_list, self.times = keys, times
        self._dict = None

    def _mapping(self):
        if self._dict is None:
            self._dict = dict(zip(self.keys_list, self.times.tolist()))
        return self._dict

    def __getitem__(self, key):
        return self._mapping()[key]

    def __iter__(self):
        return iter(self.keys_list)

    def __len__(self):
        return len(self.keys_list)
