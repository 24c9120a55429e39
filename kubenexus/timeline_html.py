"""The gang timeline as one self-contained HTML page with an inline SVG (no scripts, no external assets).

Pure: gangs in, HTML out. Per gang a heading row, then a row per member with up to four bars in time order:
waiting (created, gated) -> released (gate removed, not yet bound) -> starting (bound, containers starting) ->
running (until it finished, or until the picture was taken). The page's coordinates are the SVG's own (no
margin, no scaling), so a screenshot shows each element where the SVG puts it.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from html import escape

from kubenexus.timeline import Gang, Member

WIDTH = 1000
LABEL = 260  # the member names' column
PLOT_LEFT, PLOT_RIGHT = LABEL + 10, WIDTH - 20
ROW, BAR = 18, 12  # a member's row height and its bars' height
GANG_GAP = 26  # the gang's heading row
LEGEND_Y, TOP = 38, 92  # the legend's first row; the first gang's heading
LEGEND_COLUMN, LEGEND_ROW = 400, 22
SWATCH = 14
NAME_CHARS = 36

#: The bars, in the order a member goes through them: (class, colour, legend text).
SEGMENTS = (
    ("waiting", "#e8a33d", "waiting: created, held by the gang's gate"),
    ("released", "#4c7bd9", "released: gate removed, not yet on a node"),
    ("starting", "#8e5cc4", "starting: bound to a node, containers starting"),
    ("running", "#2e9e5b", "running (until it finished or the picture was taken)"),
)
STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 43200, 86400)


def _tick_step(span: float) -> int:
    """The smallest step that puts at most ten ticks on the axis."""
    return next((step for step in STEPS if span / step <= 10), math.ceil(span / 10))


def _tick_label(seconds: int) -> str:
    if seconds % 3600 == 0 and seconds:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0 and seconds:
        return f"{seconds // 60}m"
    return f"{seconds}s"


def _clock(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).strftime("%H:%M:%S")


def spans(member: Member, now: float) -> list[tuple[str, float, float]]:
    """The member's bars: (class, start, end) for each stage it reached, each ending where the next begins."""
    marks = [member.created, member.released, member.scheduled, member.running]
    end = member.finished if member.finished is not None else now
    result = []
    for index, (kind, _, _) in enumerate(SEGMENTS):
        start = marks[index]
        if start is None:
            break
        following = next((m for m in marks[index + 1:] if m is not None), end)
        result.append((kind, start, max(following, start)))
    return result


def render(gangs: list[Gang], now: float, scope: str) -> str:
    """The page: a title, the legend, each gang's members against one time axis starting at the first creation."""
    origin = min((m.created for g in gangs for m in g.members), default=now)
    span = max(now - origin, 1.0)
    scale = (PLOT_RIGHT - PLOT_LEFT) / span

    def x(moment: float) -> float:
        return round(PLOT_LEFT + (moment - origin) * scale, 2)

    body: list[str] = []
    y = TOP
    for gang in gangs:
        waited, waiting = gang.waited(now)
        heading = (f"gang {gang.name} ({gang.namespace})" + (f" · {gang.phase}" if gang.phase else "")
                   + f" · min-available {gang.min_available} · {len(gang.members)} pods"
                   + f" · {'waiting' if waiting else 'waited'} {waited:.0f}s")
        body.append(f'<g class="gang" data-gang="{escape(gang.name)}" data-namespace="{escape(gang.namespace)}">')
        body.append(f'<text class="gang-name" x="8" y="{y + 16}">{escape(heading)}</text>')
        y += GANG_GAP
        for member in gang.members:
            name = member.name if len(member.name) <= NAME_CHARS else member.name[:NAME_CHARS - 1] + "…"
            body.append(f'<g class="member" data-pod="{escape(member.name)}">')
            body.append(f'<text class="pod" x="20" y="{y + BAR - 1}">{escape(name)}<title>{escape(member.name)}'
                        f"{' on ' + escape(member.node) if member.node else ''}</title></text>")
            for kind, start, end in spans(member, now):
                body.append(f'<rect class="{kind}" x="{x(start)}" y="{y + 1}" width="{round(x(end) - x(start), 2)}" '
                            f'height="{BAR}"><title>{escape(member.name)}: {kind} {end - start:.1f}s '
                            f"({_clock(start)} to {_clock(end)} UTC)</title></rect>")
            body.append("</g>")
            y += ROW
        body.append("</g>")
    if not gangs:
        body.append(f'<text x="8" y="{y + 16}">no gang members in {escape(scope)}</text>')
        y += GANG_GAP
    axis_y = y + 8
    step = _tick_step(span)
    grid = [f'<line class="axis" x1="{PLOT_LEFT}" y1="{axis_y}" x2="{PLOT_RIGHT}" y2="{axis_y}"/>']
    axis = []
    for tick in range(0, int(span) + 1, step):
        grid.append(f'<line class="grid" x1="{x(origin + tick)}" y1="{TOP}" x2="{x(origin + tick)}" y2="{axis_y}"/>')
        axis.append(f'<text class="tick" x="{x(origin + tick)}" y="{axis_y + 16}">{_tick_label(tick)}</text>')
    axis.append(f'<text class="tick-note" x="{PLOT_LEFT}" y="{axis_y + 34}">seconds since the first pod was '
                f"created ({_clock(origin)} UTC); the picture was taken at {_clock(now)} UTC</text>")
    legend = []
    for index, (kind, _, text) in enumerate(SEGMENTS):
        left, top = 8 + index % 2 * LEGEND_COLUMN, LEGEND_Y + index // 2 * LEGEND_ROW
        legend.append(f'<g class="legend-item" data-segment="{kind}"><rect class="{kind}" x="{left}" y="{top}" '
                      f'width="{SWATCH}" height="{SWATCH}"/><text x="{left + SWATCH + 6}" y="{top + 12}">'
                      f"{escape(text)}</text></g>")
    height = axis_y + 48
    title = f"Gang timeline: {scope}"
    colours = "\n".join(f".{kind} {{ fill: {colour}; }}" for kind, colour, _ in SEGMENTS)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{escape(title)}</title>
<style>
html, body {{ margin: 0; padding: 0; background: #ffffff; }}
svg {{ display: block; font-family: sans-serif; font-size: 12px; }}
text.title {{ font-size: 16px; font-weight: bold; }}
text.gang-name {{ font-weight: bold; }}
text.pod {{ font-family: monospace; }}
text.tick {{ text-anchor: middle; fill: #555555; }}
text.tick-note {{ fill: #555555; }}
line.axis {{ stroke: #333333; }}
line.grid {{ stroke: #e4e4e4; }}
{colours}
</style>
</head>
<body>
<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}">
<text class="title" x="8" y="22">{escape(title)}</text>
{"".join(legend)}
{"".join(grid)}
{chr(10).join(body)}
{"".join(axis)}
</svg>
</body>
</html>
"""
