"""The rules' DAG: one run's op instances (msopt.graph.flat, the one inliner) with predecessor and successor lists.

The rules plan the run the cost model simulates and the visualizer draws: the plan layer hands
them the flattened run of the chosen signature (``RuleOptions.run``, the cost model's when there
is one); without one, the run of every main-graph node, calls inlined, is planned. A vertex is a
task of that run (an op instance: a node key and the call nodes its body was inlined for), so
an op of a function called twice is two vertices; the partition keeps the stream of its first.
Nodes the run never executes (a function no signature calls, save and restore plumbing) get
no stream from the rules: they run on stream 0, as TensorFlow runs any unassigned op.
"""

import weakref
from functools import cached_property
from itertools import repeat

import numpy as np

from msopt.compiled.gc_pause import gc_paused
from msopt.graph.flat import flatten_run
from msopt.graph.op_tables import FREE_OPS
from msopt.graph.order import csr
from msopt.graph.tasks import RunCosts, codes_in, csr_lists, distinct_keys, op_codes


class Dag:
    """Vertices (a run's tasks, numbered in its topological order), edges both ways as CSR arrays (lists made on
    first use, for the rules that walk them vertex by vertex), the order itself."""

    def __init__(self, keys, ops, arrays, tasks=None):
        self.keys = keys  # vertex -> view node key
        self.ops = ops  # vertex -> op type
        self.order = range(len(keys))  # the run numbers its tasks in a topological order
        # pred_ptr, pred_idx: each vertex's predecessors, each once, data inputs first; succ_ptr, succ_idx: its
        # successors, ascending (msopt.graph.tasks.Tasks.neighbour_arrays, int64 CSR arrays)
        self.pred_ptr, self.pred_idx, self.succ_ptr, self.succ_idx = arrays
        self._tasks = tasks

    @classmethod
    def of_lists(cls, keys, preds, succs, ops=None):
        """A Dag of per-vertex predecessor and successor lists (a hand-made graph)."""
        dag = cls(keys, ops if ops is not None else [""] * len(keys), (*csr(preds), *csr(succs)))
        dag.__dict__.update(preds=preds, succs=succs)  # the lists as given
        return dag

    def __len__(self):
        return len(self.keys)

    @cached_property
    def preds(self):
        """vertex -> [vertex]: ``pred_idx`` cut per vertex."""
        return csr_lists(self.pred_idx, self.pred_ptr)

    @cached_property
    def succs(self):
        """vertex -> [vertex]: ``succ_idx`` cut per vertex."""
        return csr_lists(self.succ_idx, self.succ_ptr)

    @cached_property
    def first(self):
        """{view node key: its first vertex} (the one whose stream the partition keeps)."""
        keys, first = self.distinct()
        return dict(zip(keys, first.tolist()))

    def distinct(self):
        """(the vertices' keys each once, in order, as a tuple; each one's first vertex as int64): the run's
        (msopt.graph.tasks.Tasks.distinct)."""
        if self._tasks is not None:
            return self._tasks.distinct()
        found = self.__dict__.get("_distinct")
        if found is None:
            found = self._distinct = distinct_keys(self.keys)
        return found

    def op_codes(self):
        """(op names, per-vertex int64 code into them): the run's, computed once (msopt.graph.tasks.op_codes)."""
        return self._tasks.op_codes() if self._tasks is not None else op_codes(self.ops)

    @property
    def callers(self):
        """vertex -> keys of the call nodes its body was inlined for, outermost first."""
        t = self._tasks
        return [t.callers(v) for v in range(len(self.keys))] if t is not None else [()] * len(self.keys)

    def edge_count(self):
        return len(self.pred_idx)

    def partition(self, stream_of):
        """{node key: stream} from a per-vertex stream array (each node: the stream of its first instance)."""
        return self.as_plan(self.run_streams(stream_of))

    def as_plan(self, streams):
        """{node key: stream} of a plan given as an int array over ``distinct()``'s keys."""
        return dict(zip(self.distinct()[0], streams.tolist()))

    def run_streams(self, stream_of):
        """A per-vertex stream array as a plan over ``distinct()``'s keys: the stream of each key's first vertex."""
        _, first = self.distinct()
        return np.asarray(stream_of, dtype=np.int64)[first]


def dag_of(tasks):
    """The Dag of a flattened run (msopt.graph.flat.Tasks): every input and control edge, each pair once."""
    return Dag(tasks.key, tasks.op, tasks.neighbour_arrays(), tasks)


_BY_RUN = weakref.WeakKeyDictionary()  # run (Tasks) -> its Dag: the auto search runs several rules over one run
_BY_VIEW = weakref.WeakKeyDictionary()  # view -> (node count, the Dag of every main-graph node's run)


def flatten(view, run=None):
    """The Dag the rules plan: of ``run`` (msopt.graph.flat.Tasks) if given, else of the run of every main-graph node
    of ``view``; built once per run, as the rules only read it."""
    with gc_paused():
        if run is not None:
            dag = _BY_RUN.get(run)
            if dag is None:
                dag = _BY_RUN[run] = dag_of(run)
            return dag
        cached = _BY_VIEW.get(view)
        if cached is not None and cached[0] == len(view.nodes):
            return cached[1]
        dag = dag_of(flatten_run(view, None))
        _BY_VIEW[view] = (len(view.nodes), dag)
        return dag


def vertex_costs(view, dag, options):
    """Per-vertex time as a float64 array: options.node_costs ({key: time}, the plan layer passes the cost model's)
    if given, else topology-only work: one unit per op that launches a kernel, nothing for bookkeeping ops
    (FREE_OPS) and calls."""
    given = options.node_costs
    if isinstance(given, RunCosts) and given.keys_list is dag.keys:  # the times of this very run, as an array
        return given.times.copy()
    if given is not None:
        keys = dag.keys
        if len(given) == len(keys) and list(given) == list(keys):  # given in the vertices' order (a key each)
            return np.fromiter(given.values(), np.float64, len(keys))
        return np.fromiter(map(given.get, keys, repeat(0.0)), np.float64, len(keys))
    free = codes_in(*dag.op_codes(), FREE_OPS)
    calls = {key for info in view.functions.values() for key in info.callers}
    if calls:  # a call the run did not inline (its body unknown) does no work of its own either
        free |= np.fromiter(map(calls.__contains__, dag.keys), bool, len(dag.keys))
    return np.where(free, 0.0, 1.0)
