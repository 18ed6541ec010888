"""A rules file's regexes: sized before they are compiled, compiled once each, matched within one budget for the file.

Compiling. The ``regex`` package unrolls a counted repeat into that many copies of what it repeats:
``(?:(?:(?:(?:a{100}){100}){100}){100})`` is 10^8 positions and over 6 GB before compile() returns,
and no timeout covers compiling. So a pattern's unrolled size is bounded from its text before it is
compiled: every atom (a character, an escape, a set) is one position, a group the sum of its
alternatives, a counted repeat ``{m,n}`` multiplies what it repeats by its largest count, so nested
counts multiply. Where this scan could misread the structure (verbose mode, whose comments may hold
parentheses; version-1 nested sets) the bound is the product of every count in the pattern times its
length instead. A pattern over MAX_PATTERN_SIZE, a file whose distinct patterns sum to more than
MAX_PATTERNS_SIZE, or groups nested deeper than MAX_GROUP_DEPTH (the package's parser recurses) is
refused, naming the rule. We chose this check over compiling under a memory cap in a child process:
it costs microseconds, needs no process per pattern, and its refusal says which count is too large.
A real rule needs a few hundred positions: a node name is shorter than that.

Matching. Identical patterns are compiled once; one node's result for a pattern is computed once however
many rules share the pattern; a ``function:`` pattern's result is kept per distinct function name, not
per node. The whole rules file, compiling and matching, runs within one budget, BUDGET_S + NODE_BUDGET_S
per node of the graph (so a legitimate file on a million-node graph still finishes): past it msopt stops
(exit 2) naming the rule that was running. Each regex call keeps its own bound too (MATCH_TIMEOUT_S, or
what is left of the budget if less).
"""

import re
import time

import regex

MAX_PATTERN_SIZE = 10_000  # unrolled positions of one pattern (compiling 10,000 takes ~20 ms and ~3 MB)
MAX_PATTERNS_SIZE = 1_000_000  # of a file's distinct patterns together (~2 s and ~300 MB to compile, at worst)
MAX_GROUP_DEPTH = 100  # nested groups; the regex package's parser recurses once per level
MATCH_TIMEOUT_S = 1.0  # one regex on one name; real patterns take microseconds
BUDGET_S = 10.0  # the whole rules file: compiling its regexes and matching every node
# And this much more per node of the graph: a large rules file on a large graph matches for longer than a fixed
# budget allows, and that is legitimate work, not a runaway regex.
NODE_BUDGET_S = 100e-6

_COUNT = re.compile(r"\{(\d*)(?:,(\d*))?\}")
_GROUP_HEADER = re.compile(r"\?(?:[:=!>|]|<[=!]|P?<\w+>|'\w+'|[a-zA-Z0-9-]*:)")
_FRAGILE = re.compile(r"\(\?[a-zA-Z0-9^-]*[xV]")  # inline flags turning on verbose mode or version 1
_CAP = MAX_PATTERNS_SIZE + 1  # sizes are clamped here: a long chain of counts stays a small integer


class PatternError(ValueError):
    """A pattern refused before compiling, or one the regex package cannot compile: the reason."""


class BudgetSpent(Exception):
    """The rules file's time budget ran out."""


class Patterns:
    """The distinct regexes of one rules file, compiled once, and the budget and results kept while matching."""

    def __init__(self):
        self.compiled = {}  # pattern text -> regex.Pattern
        self.size = 0  # estimated unrolled positions of every distinct pattern
        self.started = time.monotonic()
        self.deadline = self.started + BUDGET_S
        self.by_function = {}  # (pattern, function name) -> whether it fully matches
        self.last_rule = None  # the rule tested last (named when the budget runs out between two nodes)

    def compile(self, text):
        """The compiled pattern of ``text`` (the same object for the same text), or PatternError."""
        if text in self.compiled:
            return self.compiled[text]
        size = unrolled_size(text)
        if size > MAX_PATTERN_SIZE:
            about = f"over {MAX_PATTERNS_SIZE:,}" if size >= _CAP else f"about {size:,}"
            raise PatternError(
                f"it unrolls to {about} positions when compiled (counted repeats multiply); "
                f"msopt compiles at most {MAX_PATTERN_SIZE:,}"
            )
        if self.size + size > MAX_PATTERNS_SIZE:
            raise PatternError(
                f"the file's distinct regexes unroll to over {MAX_PATTERNS_SIZE:,} positions together; "
                f"merge rules or use scope/op selectors"
            )
        self.check()
        try:
            compiled = regex.compile(text)
        except (regex.error, ValueError, OverflowError, RecursionError) as e:
            raise PatternError(str(e) or type(e).__name__) from None
        self.size += size
        self.compiled[text] = compiled
        return compiled

    @property
    def budget_s(self):
        return self.deadline - self.started

    def allow(self, nodes):
        """Matching ``nodes`` nodes: the budget becomes BUDGET_S + NODE_BUDGET_S per node, from the start."""
        self.deadline = self.started + BUDGET_S + NODE_BUDGET_S * nodes

    def check(self):
        """BudgetSpent once the deadline has passed (read before each node and inside every regex call)."""
        if time.monotonic() >= self.deadline:
            raise BudgetSpent()

    def fullmatch(self, pattern, text):
        """Whether ``pattern`` matches all of ``text``: TimeoutError past MATCH_TIMEOUT_S, BudgetSpent past the budget."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise BudgetSpent()
        try:
            return pattern.fullmatch(text, timeout=min(MATCH_TIMEOUT_S, left)) is not None
        except TimeoutError:
            if left < MATCH_TIMEOUT_S:
                raise BudgetSpent() from None
            raise

    def function_matches(self, pattern, name):
        """fullmatch of a function name, computed once per distinct name."""
        key = (pattern, name)
        if key not in self.by_function:
            self.by_function[key] = self.fullmatch(pattern, name)
        return self.by_function[key]


def unrolled_size(text):
    """An upper bound on the positions the regex package unrolls ``text`` into (see the module docstring)."""
    if _FRAGILE.search(text):
        product = 1
        for m in _COUNT.finditer(text):
            product = min(product * max(_count(m), 1), _CAP)
        return min(product * max(len(text), 1), _CAP)
    # Per open group: [positions of its finished atoms and alternatives, positions of its last atom].
    frames = [[0, 0]]
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        frame = frames[-1]
        if c == "\\":
            i = _escape_end(text, i)
            frame[0], frame[1] = frame[0] + frame[1], 1
            continue
        if c == "[":
            i = _set_end(text, i)
            frame[0], frame[1] = frame[0] + frame[1], 1
            continue
        if c == "(" and text.startswith("(?#", i):
            end = text.find(")", i)
            i = n if end < 0 else end + 1
            continue
        if c == "(":
            if len(frames) > MAX_GROUP_DEPTH:
                raise PatternError(f"it nests groups deeper than {MAX_GROUP_DEPTH} levels")
            frames.append([0, 0])
            header = _GROUP_HEADER.match(text, i + 1)  # (?:  (?P<name>  (?<=  (?i:  ... are no positions
            if header:
                i = header.end()
                continue
        elif c == ")" and len(frames) > 1:
            done, last = frames.pop()
            parent = frames[-1]
            parent[0], parent[1] = parent[0] + parent[1], min(done + last, _CAP)
        elif c == "|":
            frame[0], frame[1] = frame[0] + frame[1], 0
        elif c == "{" and _is_count(_COUNT.match(text, i)):
            frame[1] = min(frame[1] * max(_count(_COUNT.match(text, i)), 1), _CAP)
            i = _COUNT.match(text, i).end()
            continue
        elif c not in "*+?":
            frame[0], frame[1] = frame[0] + frame[1], 1
        i += 1
    total = 0
    for done, last in reversed(frames):  # groups left open count as if closed here
        total = done + last + total
    return total


def _is_count(m):
    return m is not None and bool(m.group(1) or m.group(2))  # "{}" and "{,}" are literal text


def _count(m):
    """The largest count of a repeat {m}, {m,}, {,n} or {m,n} (a count of over 12 digits as _CAP)."""
    return max(int(d) if len(d) <= 12 else _CAP for d in (m.group(1) or "0", m.group(2) or "0"))


def _escape_end(text, i):
    """The index after the escape at ``i``: ``\\x``, or ``\\p{...}``, ``\\N{...}`` and the like whole."""
    if i + 2 < len(text) and text[i + 2] in "{<" and text[i + 1] in "pPNgLX":
        close = text.find("}" if text[i + 2] == "{" else ">", i + 3)
        return len(text) if close < 0 else close + 1
    return i + 2


def _set_end(text, i):
    """The index after the set opening at ``i`` (version 0: no nested sets; ``[]...]`` holds a ']')."""
    j = i + 1
    if j < len(text) and text[j] == "^":
        j += 1
    if j < len(text) and text[j] == "]":
        j += 1
    while j < len(text):
        c = text[j]
        if c == "\\":
            j += 2
            continue
        if c == "[" and text.startswith("[:", j):  # a POSIX class [:alpha:] inside the set
            close = text.find(":]", j + 2)
            j = j + 1 if close < 0 else close + 2
            continue
        if c == "]":
            return j + 1
        j += 1
    return len(text)
