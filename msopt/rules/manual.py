"""Policy manual: a YAML rules file, ordered, first match wins, selecting nodes by name, scope, op or function.

    default: 0                   # stream for nodes no rule matches (omit: they keep stream 0 and their device)
    override: false              # true: rules also apply to nodes that already carry a _stream_id
    rules:
      - match: "input_layer/C1[0-9]_embedding/.*"   # regex, full match on the node name
        stream: 1
      - scope: "tower_1/"                           # name-scope prefix
        stream: 2
      - op: [GatherV2, ResourceGather]              # op types (one or a list)
        stream: 3
      - function: ".*encoder.*"                     # regex, full match on the enclosing function's name
        stream: 1

A rule with several selectors matches nodes that satisfy all of them. Optional per-rule keys:
``name`` (a label for the report) and ``override`` (this rule also wins over existing ids).

The file is data: read through msopt.files.reading (a regular file, UTF-8 text, at most MAX_BYTES), plain
YAML without tags (yaml.SafeLoader's composer), bounded in nesting and rule count. Regexes run on
the ``regex`` package with a time bound per match (MATCH_TIMEOUT_S). We chose it over RE2 because it
keeps Python's regex syntax (lookarounds, backreferences) that existing rules files may use, is a
pure dependency of one wheel, and turns a catastrophic pattern such as ``(.*)*x`` into one error
naming the rule and the node instead of a hang. msopt.rules.patterns bounds the rest: each pattern's
compiled size is checked before it is compiled, identical patterns are compiled and matched once,
``function:`` results are kept per function name, and the whole file runs within one time budget
(exit 2 naming the rule that was running when it ran out).
"""

from dataclasses import dataclass, field

import yaml

from msopt.errors import InputError
from msopt.files.reading import MAX_RULES_BYTES, read_text
from msopt.rules.patterns import MATCH_TIMEOUT_S, BudgetSpent, PatternError, Patterns

TOP_KEYS = ("default", "override", "rules")
RULE_KEYS = ("match", "scope", "op", "function", "stream", "name", "override")
SELECTORS = ("match", "scope", "op", "function")
MAX_BYTES = MAX_RULES_BYTES  # 1 MiB holds thousands of rules; a larger file is generated, not written
MAX_RULES = 5000  # every node is tested against the rules in order: the work is nodes x rules
MAX_DEPTH = 8  # a rules file nests 4 deep (mapping, list, rule, op list)


@dataclass
class Rule:
    index: int  # 1-based position in the file
    line: int
    stream: int
    label: str
    override: bool = False
    match: object = None  # a compiled regex.Pattern (one object per distinct pattern in the file)
    scope: str = None
    ops: frozenset = None
    function: object = None

    def where(self, path):
        return f"rule {self.index}{' (' + self.label + ')' if self.label else ''} at {path}:{self.line}"


@dataclass
class RulesFile:
    path: str
    rules: list
    default: int = None
    default_line: int = 0
    override: bool = False
    patterns: Patterns = field(default_factory=Patterns)  # its compiled regexes, results and time budget


def manual(view, options):
    """Partition by the rules file ``options.manual.rules``; the result's report holds per-rule matches."""
    from msopt.rules import RuleResult

    if not options.manual.rules:
        raise InputError("policy manual needs a rules file: --rules FILE")
    spec = read_rules(options.manual.rules)
    override = options.manual.override
    partition, fallback, sources = {}, set(), {}
    matched = [0] * len(spec.rules)
    applied = [0] * len(spec.rules)
    spec.patterns.allow(sum(map(len, view.bodies.values())))  # the budget grows with the nodes to match
    for node in view.real_nodes():
        existing = node.stream
        rule = _first_match(spec, node)
        if rule is not None:
            matched[rule.index - 1] += 1
        free = existing is None or override or spec.override
        if rule is not None and (free or rule.override):
            partition[node.key] = rule.stream
            sources[node.key] = rule.where(spec.path)
            applied[rule.index - 1] += 1
        elif existing is not None:
            partition[node.key] = existing
            sources[node.key] = "the existing _stream_id attribute"
        elif spec.default is not None:
            partition[node.key] = spec.default
            sources[node.key] = f"default at {spec.path}:{spec.default_line}"
            fallback.add(node.key)
    _check_streams(partition, sources, options.streams)
    rows = [
        {
            "rule": r.index,
            "line": r.line,
            "name": r.label,
            "stream": r.stream,
            "matched": matched[i],
            "applied": applied[i],
        }
        for i, r in enumerate(spec.rules)
    ]
    report = {"rules": rows, "unmatched_rules": [row for row in rows if row["matched"] == 0]}
    return RuleResult(partition, fallback, report)


def _first_match(spec, node):
    """The first rule selecting ``node``; a pattern's result on the node's name is computed once per node."""
    patterns, name, op, seen = spec.patterns, node.name, node.op, {}
    rule = patterns.last_rule or (spec.rules[0] if spec.rules else None)  # named if the clock runs out first
    try:
        patterns.check()
        for rule in spec.rules:
            if rule.scope is not None and not name.startswith(rule.scope):
                continue
            if rule.ops is not None and op not in rule.ops:
                continue
            if rule.match is not None:
                found = seen.get(rule.match)
                if found is None:
                    found = seen[rule.match] = patterns.fullmatch(rule.match, name)
                if not found:
                    continue
            if rule.function is not None and not patterns.function_matches(rule.function, node.function):
                continue
            patterns.last_rule = rule
            return rule
    except TimeoutError:
        raise InputError(
            f"{_where(rule, spec)}: its regex ran over {MATCH_TIMEOUT_S:g} s on node '{node.key}' "
            f"(catastrophic backtracking? simplify the pattern)"
        ) from None
    except BudgetSpent:
        raise InputError(
            f"{_where(rule, spec)}: matching the rules file ran over its time budget of "
            f"{patterns.budget_s:.0f} s (this rule was being tested, on node '{node.key}'); "
            f"simplify the regexes or select by scope or op"
        ) from None
    patterns.last_rule = rule
    return None


def _where(rule, spec):
    return rule.where(spec.path) if rule is not None else spec.path


def _check_streams(partition, sources, streams):
    for key, stream in partition.items():
        if not 0 <= stream < streams:
            raise InputError(
                f"node '{key}' gets stream {stream} from {sources[key]}, outside [0, {streams}) for --streams {streams}"
            )


# -- reading the file ------------------------------------------------------------------------------
def read_rules(path):
    """Parse and check a rules file; every error names the file and line."""
    text = read_text(path, "rules file", MAX_BYTES)
    try:
        loader = _Loader(text, path)
        try:
            root = loader.get_single_node()
        finally:
            loader.dispose()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        detail = getattr(e, "problem", None) or getattr(e, "reason", None) or str(e).splitlines()[0]
        raise InputError(f"{where}: not valid YAML: {detail}") from None
    if root is None:
        raise InputError(f"{path}: the rules file is empty")
    top = _mapping(root, path, "the rules file", TOP_KEYS)
    if "rules" not in top:
        raise InputError(f"{path}:{_line(root)}: missing key 'rules' (a list of rules)")
    spec = RulesFile(str(path), [])
    if "default" in top:
        spec.default = _stream(top["default"][1], path, "default")
        spec.default_line = _line(top["default"][1])
    if "override" in top:
        spec.override = _bool(top["override"][1], path, "override")
    rules_node = top["rules"][1]
    if not isinstance(rules_node, yaml.SequenceNode):
        raise InputError(f"{path}:{_line(rules_node)}: 'rules' must be a list of rules")
    if len(rules_node.value) > MAX_RULES:
        raise InputError(
            f"{path}: {len(rules_node.value)} rules; msopt reads at most {MAX_RULES} "
            f"(merge rules with a regex or an op list)"
        )
    for index, item in enumerate(rules_node.value, 1):
        spec.rules.append(_rule(item, index, path, spec.patterns))
    return spec


class _Loader(yaml.SafeLoader):
    """PyYAML's safe composer refusing explicit tags (``!!python/name:``, ``!!int "abc"``) and deep nesting."""

    def __init__(self, text, path):
        super().__init__(text)
        self.path = path
        self.depth = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        tag = getattr(event, "tag", None)
        line = event.start_mark.line + 1
        if tag is not None:
            shown = tag.replace("tag:yaml.org,2002:", "!!")
            raise InputError(
                f"{self.path}:{line}: YAML tag '{shown}' is not allowed in a rules file (plain values only)"
            )
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise InputError(f"{self.path}:{line}: nesting deeper than {MAX_DEPTH} levels")
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _rule(node, index, path, patterns):
    fields = _mapping(node, path, f"rule {index}", RULE_KEYS)
    line = _line(node)
    if "stream" not in fields:
        raise InputError(f"{path}:{line}: rule {index} has no 'stream'")
    if not any(k in fields for k in SELECTORS):
        raise InputError(f"{path}:{line}: rule {index} selects nothing: give one of {', '.join(SELECTORS)}")
    rule = Rule(index, line, _stream(fields["stream"][1], path, "stream"), "")
    if "name" in fields:
        rule.label = _string(fields["name"][1], path, "name")
    if "override" in fields:
        rule.override = _bool(fields["override"][1], path, "override")
    if "match" in fields:
        rule.match = _regex(fields["match"][1], path, "match", patterns, index)
    if "function" in fields:
        rule.function = _regex(fields["function"][1], path, "function", patterns, index)
    if "scope" in fields:
        rule.scope = _string(fields["scope"][1], path, "scope")
    if "op" in fields:
        value = fields["op"][1]
        items = value.value if isinstance(value, yaml.SequenceNode) else [value]
        rule.ops = frozenset(_string(v, path, "op") for v in items)
        if not rule.ops:
            raise InputError(f"{path}:{_line(value)}: 'op' lists no op type")
    return rule


def _line(node):
    return node.start_mark.line + 1


def _mapping(node, path, what, allowed):
    if not isinstance(node, yaml.MappingNode):
        raise InputError(f"{path}:{_line(node)}: {what} must be a mapping of keys to values")
    fields = {}
    for key_node, value_node in node.value:
        key = key_node.value
        if key not in allowed:
            raise InputError(
                f"{path}:{_line(key_node)}: unknown key '{key}' in {what} (expected one of: {', '.join(allowed)})"
            )
        if key in fields:
            raise InputError(f"{path}:{_line(key_node)}: key '{key}' appears twice in {what}")
        fields[key] = (key_node, value_node)
    return fields


def _scalar(node, path, key):
    """(value, YAML type name) of a scalar node, e.g. (3, 'int')."""
    if not isinstance(node, yaml.ScalarNode):
        raise InputError(f"{path}:{_line(node)}: '{key}' must be a single value")
    try:
        value = yaml.SafeLoader("").construct_object(node)
    except (ValueError, yaml.YAMLError) as e:  # e.g. an integer of more than 4,300 digits
        raise InputError(f"{path}:{_line(node)}: '{key}' has an unreadable value: {str(e).splitlines()[0]}") from None
    return value, node.tag.rpartition(":")[2]


def _stream(node, path, key):
    value, kind = _scalar(node, path, key)
    if kind != "int" or value < 0:
        raise InputError(f"{path}:{_line(node)}: '{key}' must be an integer stream id >= 0, got {node.value!r}")
    return value


def _bool(node, path, key):
    value, kind = _scalar(node, path, key)
    if kind != "bool":
        raise InputError(f"{path}:{_line(node)}: '{key}' must be true or false, got {node.value!r}")
    return value


def _string(node, path, key):
    _scalar(node, path, key)
    if node.value == "":
        raise InputError(f"{path}:{_line(node)}: '{key}' is empty")
    return node.value


def _regex(node, path, key, patterns, index):
    text = _string(node, path, key)
    try:
        return patterns.compile(text)
    except PatternError as e:
        shown = repr(text) if len(text) <= 200 else f"{text[:200]!r}..."
        raise InputError(f"{path}:{_line(node)}: invalid regex in '{key}': {shown}: {e}") from None
    except BudgetSpent:
        raise InputError(
            f"{path}:{_line(node)}: rule {index}: compiling the rules file's regexes ran over its time budget "
            f"of {patterns.budget_s:.0f} s; merge rules or use scope/op selectors"
        ) from None
