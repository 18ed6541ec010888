"""Each task's stream once a plan is placed: msopt.planning.constraints.apply, then msopt.simulator.simulate.stream_array, on arrays.

The auto search places every candidate of one run before simulating it. Done on dicts, each candidate copied the
plan, tested each linked group's streams member by member and read the run's streams back key by key (at a million
op instances, about a third of the search). Here the run's keys are numbered once per search (the run's own keys
first, then the groups' other members and the call nodes the run was inlined for), and each plan becomes an int
array over them (-1: unassigned): host-only keys cleared, each group's streams reduced with numpy, the groups
whose members disagree put to msopt.planning.constraints' vote, on arrays too. A plan naming a key outside the run, or a
stream outside [0, streams), takes the dict path instead (``__call__`` returns None), whose result or error stands.
"""

from itertools import chain, repeat

import numpy as np

from msopt.planning.constraints import voter_class
from msopt.planning.links import view_constraints
from msopt.simulator.simulate import inherited_streams

UNASSIGNED = -1


class PlacedStreams:
    """``placed(values, keys, streams)``: ``stream_array(cost, apply(view, plan, streams, scope=run keys)[0], streams)``
    for plans of the run of ``cost``, given as their keys (a tuple, shared between plans of the same keys in the same
    order: their positions are looked up once; the run's own, ``cost.tasks.distinct()``, need none) and their
    streams (an int64 array)."""

    def __init__(self, view, cost):
        t = cost.tasks
        self.view = view
        self.scope = t.key_set()
        host, self.groups = view_constraints(view, self.scope)
        run_keys, _ = t.distinct()
        self.in_run = len(run_keys)
        self.index = dict(zip(run_keys, range(self.in_run)))  # the run's keys first: a plan's keys must fall among them
        members = [key for real, _ in self.groups for key in real]
        calls = [call for call, _ in t.instances[1:]]
        others = dict.fromkeys(k for k in chain(members, calls) if k not in self.index)
        self.index.update(zip(others, range(self.in_run, self.in_run + len(others))))
        at = self.index.__getitem__
        self.size = len(self.index)
        if len(run_keys) == len(t.key):  # each task its own key, numbered in task order
            self.task_at = np.arange(len(t.key), dtype=np.int64)
        else:
            self.task_at = np.fromiter(map(at, t.key), np.int64, len(t.key))
        self.host_at = np.fromiter(map(at, host), np.int64, len(host))
        self.member_at = np.fromiter(map(at, members), np.int64, len(members))
        self.group_sizes = np.fromiter((len(real) for real, _ in self.groups), np.int64, len(self.groups))
        self.group_starts = np.concatenate([[0], np.cumsum(self.group_sizes)[:-1]]).astype(np.int64)
        self.voter_classes = np.full(len(members), -1, np.int8)  # per member (msopt.planning.constraints.voter_class)
        self.call_at = np.fromiter(map(at, calls), np.int64, len(calls))
        self.instances = t.instances
        self.task_instance = np.asarray(t.instance, np.int64) if calls else None
        self._positions = [(run_keys, np.arange(self.in_run))]  # (key tuple, its positions)

    def __call__(self, values, keys, streams):
        positions = self._positions_of(keys)
        if positions is None:
            return None
        if len(values) and (values.min() < 0 or values.max() >= streams):
            return None
        placed = np.full(self.size, UNASSIGNED, np.int64)
        placed[positions] = values
        placed[self.host_at] = UNASSIGNED  # host-only: keeps its device, no stream
        self._share(placed)
        return self._task_streams(placed)

    def _positions_of(self, keys):
        for known, positions in self._positions:
            if known is keys:
                return positions
        get = self.index.get
        positions = np.fromiter(map(get, keys, repeat(self.size, len(keys))), np.int64, len(keys))
        if len(positions) and positions.max() >= self.in_run:  # a key outside the run (or not in the view)
            positions = None
        self._positions.append((keys, positions))
        return positions

    def _share(self, placed):
        """msopt.planning.constraints.share_streams on ``placed``: each group whose assigned members disagree takes the vote's
        stream, each group on one stream other than 0 takes that stream, whole (its unassigned members too)."""
        if not len(self.member_at):
            return
        values = placed[self.member_at]
        starts = self.group_starts
        top = np.maximum.reduceat(values, starts)  # -1: no member assigned
        least = np.minimum.reduceat(np.where(values < 0, np.iinfo(np.int64).max, values), starts)
        target = np.where((top > 0) & (least == top), top, UNASSIGNED)
        mixed = np.flatnonzero((top >= 0) & (least != top))  # groups whose assigned members are on several streams
        if len(mixed):
            target[mixed] = self._votes(mixed, values, int(top.max()) + 1)
        per_member = np.repeat(target, self.group_sizes)
        moved = per_member >= 0
        placed[self.member_at[moved]] = per_member[moved]

    def _votes(self, mixed, values, streams):
        """msopt.planning.constraints.vote for each group of ``mixed`` (no fallback): the stream most of its assigned members
        of the least voter class have, the smallest on a tie. A group's classes are worked out when it first votes."""
        sizes, starts = self.group_sizes[mixed], self.group_starts[mixed]
        classes = self.voter_classes
        for g in mixed[classes[starts] < 0].tolist():
            real, start = self.groups[g][0], int(self.group_starts[g])
            members = set(real)
            classes[start : start + len(real)] = [voter_class(self.view, key, members) for key in real]
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)  # each group's first, once gathered
        at = np.repeat(starts - offsets, sizes) + np.arange(int(sizes.sum()))  # the members of the mixed groups
        group = np.repeat(np.arange(len(mixed)), sizes)
        stream, kind = values[at], classes[at]
        kind = np.where(stream >= 0, kind, 3)  # an unassigned member does not vote
        voters = kind == np.minimum.reduceat(kind, offsets)[group]
        counts = np.bincount(group[voters] * streams + stream[voters], minlength=len(mixed) * streams)
        return counts.reshape(len(mixed), streams).argmax(axis=1)  # the first of the most: the smallest stream

    def _task_streams(self, placed):
        """Each task's stream: its own, else its call's (recursively), else 0 (msopt.simulator.simulate.streams_of)."""
        own = placed[self.task_at]
        if self.task_instance is None:
            return np.where(own < 0, 0, own)
        inherited = inherited_streams(self.instances, placed[self.call_at].tolist(), UNASSIGNED)
        return np.where(own < 0, np.asarray(inherited, np.int64)[self.task_instance], own)
