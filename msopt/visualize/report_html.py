"""The HTML report of a partition: one self-contained file (graph picture, stream table, simulated figures, Gantt chart)."""

import html
import re

from msopt.visualize import stream_color

GANTT_WIDTH = 1100  # pixels for the whole makespan
LANE_HEIGHT = 22
MAX_WAIT_LINES = 400  # cross-stream waits drawn; the table gives the total

STYLE = """
body{font-family:Helvetica,Arial,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em;margin-bottom:.2em} h2{font-size:1.1em;margin-top:1.6em}
.meta{color:#555;margin-top:0}
table{border-collapse:collapse;margin:.5em 0} td,th{border:1px solid #bbb;padding:3px 8px;text-align:right}
th{background:#f2f2f2} td.name{text-align:left}
#legend tr{cursor:pointer} #legend tr.picked td{font-weight:bold}
.swatch{display:inline-block;width:1em;height:1em;border:1px solid #777;vertical-align:middle;margin-right:.4em}
.figures td:first-child{text-align:left}
.graph{overflow:auto;border:1px solid #ddd;max-height:85vh}
.graph.fit svg{max-width:100%;height:auto}
.dim{opacity:.18}
.note{color:#555;font-size:.9em}
button{margin:.3em 0}
"""

SCRIPT = """
(function(){
  var picked = null;
  function pick(stream){
    picked = (picked === stream) ? null : stream;
    document.querySelectorAll('#legend tr[data-stream]').forEach(function(row){
      row.classList.toggle('picked', row.dataset.stream === picked);
    });
    document.querySelectorAll('.graph g.node, .gantt rect[data-stream]').forEach(function(el){
      var cls = el.getAttribute('class') || '';
      var on = picked === null || cls.split(/\\s+/).indexOf('stream' + picked) >= 0
               || el.getAttribute('data-stream') === picked;
      el.classList.toggle('dim', !on);
    });
  }
  document.querySelectorAll('#legend tr[data-stream]').forEach(function(row){
    row.addEventListener('click', function(){ pick(row.dataset.stream); });
  });
  var linked = /stream=(\\d+)/.exec(location.hash);  // report.html#stream=1 opens with stream 1 highlighted
  if (linked) pick(linked[1]);
  var fit = document.getElementById('fit');
  if (fit) fit.addEventListener('click', function(){
    document.querySelector('.graph').classList.toggle('fit');
  });
  document.body.setAttribute('data-ready', 'yes');
})();
"""


def build(title, svg, rows, share_of, simulation=None, events=None, waits=None, notes=()):
    """The report as one HTML string; svg is the graph picture (None without graphviz)."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
    ]
    if simulation:
        parts.append(
            f'<p class="meta">simulated on {_e(simulation.get("target", "?"))}, batch {simulation.get("batch_size", "?")}: '
            f"{simulation['makespan_ms']:.4g} ms on {simulation['streams']} streams vs {simulation['single_stream_ms']:.4g} ms "
            f"on one, speedup {simulation['speedup']:.3g}x; lower bound {simulation['lower_bound_ms']:.4g} ms "
            f"(plan at {simulation['ratio_to_bound']:.3g}x the bound)</p>"
        )
    parts.append("<h2>Streams</h2>")
    parts.append(_stream_table(rows, share_of, simulation))
    parts.append("<h2>Graph</h2>")
    if svg is not None:
        parts.append(
            '<p class="note">Boxes are name scopes (a bar shows the shares of a scope spread over several streams), '
            "ellipses single ops; "
            "red dashed edges cross streams, numbers count the edges bundled. Click a stream above to highlight it. "
            '<button id="fit" type="button">fit / full size</button></p>'
        )
        parts.append(f'<div class="graph fit">{_inline_svg(svg)}</div>')
    else:
        parts.append(
            '<p class="note">No picture: graphviz <code>dot</code> was not found when this report was written.</p>'
        )
    if simulation and events:
        parts.append("<h2>Simulated schedule</h2>")
        parts.append(_gantt(events, waits or [], simulation))
    if simulation:
        parts.append("<h2>Simulated figures</h2>")
        parts.append(_figures(simulation))
    for note in notes:
        parts.append(f'<p class="note">{_e(note)}</p>')
    parts.append(f"<script>{SCRIPT}</script></body></html>")
    return "\n".join(parts) + "\n"


def _stream_table(rows, share_of, simulation):
    busy = simulation.get("stream_busy_ms") if simulation else None
    head = (
        "<tr><th>stream</th><th>ops</th><th>" + _e(share_of) + "</th>" + ("<th>busy ms</th>" if busy else "") + "</tr>"
    )
    body = []
    for row in rows:
        s = row["stream"]
        cells = [
            f'<td class="name"><span class="swatch" style="background:{_color_css(row["color"])}"></span>stream {s}</td>',
            f"<td>{row['ops']}</td>",
            f"<td>{row['share']:.1%}</td>",
        ]
        if busy:
            cells.append(f"<td>{busy[s]:.4g}</td>" if s < len(busy) else "<td>0</td>")
        body.append(f'<tr data-stream="{s}">' + "".join(cells) + "</tr>")
    return f'<table id="legend">{head}{"".join(body)}</table>'


def _figures(sim):
    keys = [
        ("makespan_ms", "makespan (ms)"),
        ("single_stream_ms", "one stream (ms)"),
        ("speedup", "speedup"),
        ("lower_bound_ms", "lower bound (ms)"),
        ("ratio_to_bound", "makespan / bound"),
        ("critical_path_ms", "critical path (ms)"),
        ("total_work_ms", "total work (ms)"),
        ("host_launch_ms", "host launches (ms)"),
        ("syncs", "cross-stream syncs"),
        ("copies", "copies"),
        ("copy_bytes", "bytes copied"),
        ("kernels", "kernels"),
    ]
    rows = "".join(f"<tr><td>{_e(label)}</td><td>{_e(_num(sim[k]))}</td></tr>" for k, label in keys if k in sim)
    return f'<table class="figures">{rows}</table>'


def _gantt(events, waits, sim):
    """An SVG Gantt chart: one lane per stream, kernels as bars, cross-stream waits as red lines."""
    streams = sim["streams"]
    span = max((e["end_us"] for e in events), default=0.0) or 1.0
    scale = GANTT_WIDTH / span
    left, top = 70, 20
    height = top + streams * LANE_HEIGHT + 30
    out = [
        f'<svg class="gantt" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {left + GANTT_WIDTH + 50} {height}" '
        f'style="width:100%;max-width:{left + GANTT_WIDTH + 50}px;height:auto" '
        f'font-family="Helvetica,Arial,sans-serif" font-size="11">'
    ]
    for s in range(streams):
        y = top + s * LANE_HEIGHT
        out.append(f'<text x="4" y="{y + 15}">stream {s}</text>')
        out.append(
            f'<line x1="{left}" y1="{y + LANE_HEIGHT}" x2="{left + GANTT_WIDTH}" y2="{y + LANE_HEIGHT}" stroke="#eee"/>'
        )
    for s, start, end, label in _bars(events, scale):
        y = top + s * LANE_HEIGHT + 3
        out.append(
            f'<rect data-stream="{s}" x="{left + start * scale:.2f}" y="{y}" width="{max(0.6, (end - start) * scale):.2f}" '
            f'height="{LANE_HEIGHT - 6}" fill="{_color_css(stream_color(s))}" stroke="#555" stroke-width="0.3">'
            f"<title>{_e(label)} ({start:.1f}–{end:.1f} µs)</title></rect>"
        )
    for w in waits[:MAX_WAIT_LINES]:
        x1, x2 = left + w["at_us"] * scale, left + w["ready_us"] * scale
        y1 = top + w["src_stream"] * LANE_HEIGHT + LANE_HEIGHT / 2
        y2 = top + w["dst_stream"] * LANE_HEIGHT + LANE_HEIGHT / 2
        out.append(
            f'<line x1="{x1:.2f}" y1="{y1}" x2="{x2:.2f}" y2="{y2}" stroke="#d62728" stroke-width="0.7" opacity="0.6"/>'
        )
    axis_y = top + streams * LANE_HEIGHT + 14
    for k in range(6):
        x = left + GANTT_WIDTH * k / 5
        out.append(
            f'<text x="{x:.1f}" y="{axis_y}" text-anchor="middle" fill="#555">{span * k / 5 / 1000:.3g} ms</text>'
        )
    out.append("</svg>")
    shown = min(len(waits), MAX_WAIT_LINES)
    note = (
        f'<p class="note">{len(events)} kernels; {len(waits)} cross-stream waits (red lines, {shown} drawn). '
        "Hover a bar for its op.</p>"
    )
    return "".join(out) + note


def _bars(events, scale):
    """Kernels per stream, neighbours closer than a pixel merged into one bar (a big model stays a small file)."""
    by_stream = {}
    for e in events:
        by_stream.setdefault(e["stream"], []).append(e)
    for s, evs in sorted(by_stream.items()):
        evs.sort(key=lambda e: e["start_us"])
        cur = None
        for e in evs:
            if cur and (e["start_us"] - cur[1]) * scale < 1.0 and (e["end_us"] - cur[0]) * scale < 4.0:
                cur[1] = max(cur[1], e["end_us"])
                cur[2] += 1
                continue
            if cur:
                yield s, cur[0], cur[1], cur[3] if cur[2] == 1 else f"{cur[2]} kernels from {cur[3]}"
            cur = [e["start_us"], e["end_us"], 1, f"{e['key']} ({e['op']})"]
        if cur:
            yield s, cur[0], cur[1], cur[3] if cur[2] == 1 else f"{cur[2]} kernels from {cur[3]}"


def _inline_svg(svg):
    """dot's SVG without its XML prolog and DOCTYPE, so it can sit inside HTML."""
    text = svg.decode("utf-8") if isinstance(svg, bytes) else svg
    text = re.sub(r"<\?xml[^>]*\?>", "", text)
    text = re.sub(r"<!DOCTYPE[^>]*>", "", text, flags=re.S)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    return text.strip()


def _color_css(color):
    """A palette colour as CSS (graphviz HSV 'h s v' strings become hsl())."""
    if color.startswith("#"):
        return color
    h, s, v = (float(x) for x in color.split())
    lightness = v * (1 - s / 2)
    sat = 0 if lightness in (0, 1) else (v - lightness) / min(lightness, 1 - lightness)
    return f"hsl({h * 360:.0f},{sat * 100:.0f}%,{lightness * 100:.0f}%)"


def _num(value):
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _e(text):
    return html.escape(str(text), quote=True)
