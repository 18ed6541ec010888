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
"""
import re
from dataclasses import dataclass

import yaml

from msopt.errors import InputError

TOP_KEYS = ("default", "override", "rules")
RULE_KEYS = ("match", "scope", "op", "function", "stream", "name", "override")
SELECTORS = ("match", "scope", "op", "function")


@dataclass
class Rule:
    index: int  # 1-based position in the file
    line: int
    stream: int
    label: str
    override: bool = False
    match: re.Pattern = None
    scope: str = None
    ops: frozenset = None
    function: re.Pattern = None

    def selects(self, node):
        return ((self.match is None or self.match.fullmatch(node.name) is not None)
                and (self.scope is None or node.name.startswith(self.scope))
                and (self.ops is None or node.op in self.ops)
                and (self.function is None or self.function.fullmatch(node.function) is not None))

    def where(self, path):
        return f"rule {self.index}{' (' + self.label + ')' if self.label else ''} at {path}:{self.line}"


@dataclass
class RulesFile:
    path: str
    rules: list
    default: int = None
    default_line: int = 0
    override: bool = False


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
    for node in view.real_nodes():
        existing = node.stream
        rule = next((r for r in spec.rules if r.selects(node)), None)
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
    rows = [{"rule": r.index, "line": r.line, "name": r.label, "stream": r.stream, "matched": matched[i],
             "applied": applied[i]} for i, r in enumerate(spec.rules)]
    report = {"rules": rows, "unmatched_rules": [row for row in rows if row["matched"] == 0]}
    return RuleResult(partition, fallback, report)


def _check_streams(partition, sources, streams):
    for key, stream in partition.items():
        if not 0 <= stream < streams:
            raise InputError(f"node '{key}' gets stream {stream} from {sources[key]}, outside [0, {streams}) "
                             f"for --streams {streams}")


# -- reading the file ------------------------------------------------------------------------------
def read_rules(path):
    """Parse and check a rules file; every error names the file and line."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise InputError(f"{path}: cannot read rules file: {e.strerror}") from None
    try:
        loader = yaml.SafeLoader(text)
        try:
            root = loader.get_single_node()
        finally:
            loader.dispose()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise InputError(f"{where}: not valid YAML: {getattr(e, 'problem', None) or e}") from None
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
    for index, item in enumerate(rules_node.value, 1):
        spec.rules.append(_rule(item, index, path))
    return spec


def _rule(node, index, path):
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
        rule.match = _regex(fields["match"][1], path, "match")
    if "function" in fields:
        rule.function = _regex(fields["function"][1], path, "function")
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
            raise InputError(f"{path}:{_line(key_node)}: unknown key '{key}' in {what} (expected one of: {', '.join(allowed)})")
        if key in fields:
            raise InputError(f"{path}:{_line(key_node)}: key '{key}' appears twice in {what}")
        fields[key] = (key_node, value_node)
    return fields


def _scalar(node, path, key):
    """(value, YAML type name) of a scalar node, e.g. (3, 'int')."""
    if not isinstance(node, yaml.ScalarNode):
        raise InputError(f"{path}:{_line(node)}: '{key}' must be a single value")
    return yaml.SafeLoader("").construct_object(node), node.tag.rpartition(":")[2]


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


def _regex(node, path, key):
    text = _string(node, path, key)
    try:
        return re.compile(text)
    except re.error as e:
        raise InputError(f"{path}:{_line(node)}: invalid regex in '{key}': {text!r}: {e}") from None
