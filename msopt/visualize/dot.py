"""The DOT picture of folded boxes (built and rendered with the graphviz package), its colours and legend."""

import math
from collections import Counter

import graphviz

PALETTE = [
    "#8dd3c7",
    "#ffffb3",
    "#bebada",
    "#fb8072",
    "#80b1d3",
    "#fdb462",
    "#b3de69",
    "#fccde5",
    "#d9d9d9",
    "#bc80bd",
    "#ccebc5",
    "#ffed6f",
]
CROSS_COLOR = "#d62728"
BAR_WIDTH = 120  # points: the bar of stream shares under a box's label


def stream_color(stream):
    if stream < len(PALETTE):
        return PALETTE[stream]
    hue = (stream * 0.618033988749895) % 1.0
    return f"{hue:.3f} 0.35 0.95"  # graphviz HSV


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
    unit_of, ids = _units(root, len(ops))
    bundles, crossing_inside = _bundles(edges, unit_of, streams)
    graph = graphviz.Digraph("msopt")
    graph.attr(
        "graph",
        rankdir="TB",
        newrank="true",
        fontname="Helvetica",
        fontsize="12",
        labelloc="t",
        nodesep="0.25",
        ranksep="0.4",
        label=_esc(title),
    )
    graph.attr("node", fontname="Helvetica", fontsize="10", shape="box", style="rounded,filled", penwidth="0.8")
    graph.attr("edge", color="#7f7f7f", arrowsize="0.6", fontname="Helvetica", fontsize="8")

    def draw(box, into):
        for child in box.children.values():
            if child.open:
                with into.subgraph(name=f"cluster_{ids[id(child)]}") as frame:
                    frame.attr(
                        label=f"{_esc(_short(child.name))} ({child.size} ops)",
                        style="rounded,dashed",
                        color="#9e9e9e",
                        fontsize="10",
                        **{"class": "stage" if child.stage else "scope"},
                    )
                    draw(child, frame)
            else:
                uid = f"b{ids[id(child)]}"
                into.node(uid, **_box_attrs(child, crossing_inside[uid]))
        for i in box.ops:
            s = streams[i]
            name = _short(ops[i].path[-1])
            into.node(
                f"o{i}",
                label=_esc(name if name == ops[i].op else f"{name}\n{ops[i].op}"),
                shape="ellipse",
                style="filled",
                fillcolor=stream_color(s),
                tooltip=_esc("/".join(ops[i].path)),
                **{"class": f"stream{s}"},
            )

    draw(root, graph)
    for (u, v, kind), count in bundles.items():
        attrs = {"penwidth": f"{min(4.0, 0.8 + math.log2(count) * 0.5):.2f}"}
        if count > 1:
            attrs["label"] = str(count)
        if kind == "cross":
            attrs.update(color=CROSS_COLOR, style="dashed", fontcolor=CROSS_COLOR, **{"class": "cross"})
        elif kind == "control":
            attrs["style"] = "dotted"
        graph.edge(u, v, **attrs)
    graph.node("legend", shape="plaintext", style="solid", label=f"<{_legend_html(rows, share_of)}>")
    return graph.source


def _units(root, count):
    """Which drawn unit shows each op (a closed box bN or the op itself oI), and the number of every box drawn."""
    unit_of, ids = [None] * count, {}

    def number(box):  # in drawing order: each child, then what an open child holds, depth first
        for child in box.children.values():
            ids[id(child)] = len(ids) + 1
            if child.open:
                number(child)
            else:
                for i in child.all_ops():
                    unit_of[i] = f"b{ids[id(child)]}"
        for i in box.ops:
            unit_of[i] = f"o{i}"

    number(root)
    return unit_of, ids


def _bundles(edges, unit_of, streams):
    """Edges between drawn units counted per (source, destination, kind), and cross-stream edges inside each unit."""
    bundles, crossing_inside = Counter(), Counter()
    for s, d, control in edges:
        u, v = unit_of[s], unit_of[d]
        if u is None or v is None:
            continue
        if u == v:
            crossing_inside[u] += streams[s] != streams[d]
            continue
        kind = "cross" if streams[s] != streams[d] else ("control" if control else "data")
        bundles[(u, v, kind)] += 1
    return bundles, crossing_inside


def _box_attrs(box, cross_inside):
    """A closed box: filled with its main stream's colour; a box over several streams gets a bar of its shares."""
    size = box.size
    shares = sorted(box.streams.items(), key=lambda kv: (-kv[1], kv[0]))
    attrs = {
        "style": "rounded,filled",
        "fillcolor": stream_color(shares[0][0]),
        "class": " ".join(f"stream{s}" for s in sorted(box.streams)),
        "tooltip": _esc("/".join(box.path) or box.name),
    }
    if len(shares) == 1:
        return {"label": _esc(f"{_short(box.name)}\n{size} ops · stream {shares[0][0]}"), **attrs}
    detail = "  ".join(f"s{s} {n / size:.0%}" for s, n in shares[:4]) + ("  …" if len(shares) > 4 else "")
    inside = (
        f'<TR><TD><FONT COLOR="{CROSS_COLOR}">{_count(cross_inside, "cross-stream edge")} inside</FONT></TD></TR>'
        if cross_inside
        else ""
    )
    bar = "".join(
        f'<TD BGCOLOR="{stream_color(s)}" WIDTH="{max(1, round(n / size * BAR_WIDTH))}" HEIGHT="7" '
        'FIXEDSIZE="TRUE"></TD>'
        for s, n in sorted(box.streams.items())
    )
    label = (
        f'<<TABLE BORDER="0" CELLSPACING="0" CELLPADDING="1"><TR><TD>{_html(_short(box.name))}</TD></TR>'
        f"<TR><TD>{size} ops · {_html(detail)}</TD></TR>{inside}"
        f'<TR><TD><TABLE BORDER="1" CELLBORDER="0" CELLSPACING="0" CELLPADDING="0" COLOR="#555555"><TR>{bar}</TR>'
        "</TABLE></TD></TR></TABLE>>"
    )
    return {"label": label, **attrs}


def _legend_html(rows, share_of):
    cells = [
        '<TABLE BORDER="0" CELLBORDER="1" CELLSPACING="0" CELLPADDING="3">',
        f"<TR><TD><B>stream</B></TD><TD><B>ops</B></TD><TD><B>{_html(share_of)}</B></TD></TR>",
    ]
    for row in rows:
        cells.append(
            f'<TR><TD BGCOLOR="{row["color"]}">stream {row["stream"]}</TD><TD ALIGN="RIGHT">{row["ops"]}</TD>'
            f'<TD ALIGN="RIGHT">{row["share"]:.0%}</TD></TR>'
        )
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


def render(dot_text, fmt, out=None):
    """Lay out with graphviz's ``dot`` into ``fmt``; write ``out`` atomically, or return the bytes when out is None."""
    try:
        data = graphviz.pipe("dot", fmt, dot_text.encode("utf-8"), quiet=True)
    except graphviz.ExecutableNotFound:
        raise DotMissing("graphviz 'dot' not found on PATH") from None
    except graphviz.CalledProcessError as e:
        detail = (e.stderr or b"").decode("utf-8", "replace").strip().splitlines()
        raise RuntimeError(f"dot -T{fmt} failed: {detail[0] if detail else e.returncode}") from None
    if out is None:
        return data
    from msopt.files.outputs import write_bytes

    write_bytes(out, data)
    return None
