"""A small inline SVG bar chart for the what-if (no JavaScript library): per project, the p90
wait as it was, under today's quotas and under the proposal."""

from __future__ import annotations

from django.utils.html import escape

SERIES = (
    ("actual", "as it was", "#9aa5b1"),
    ("current_quotas", "today's quotas (replay)", "#3e7cb1"),
    ("proposed_quotas", "proposed quotas (replay)", "#e07a1f"),
)
ROW = 14  # bar height
GAP = 10


def _hours(value: float | None) -> float:
    return 0.0 if value is None else value / 3600


def wait_chart(projects: list[dict]) -> str:
    """Horizontal bars of the p90 wait in hours; an empty string without projects."""
    if not projects:
        return ""
    longest = max(
        (_hours(p[key]["wait_p90_seconds"]) for p in projects for key, _, _ in SERIES),
        default=0.0,
    )
    scale = 360 / longest if longest > 0 else 0
    label_width, height_per = 140, ROW * len(SERIES) + GAP
    height = 30 + height_per * len(projects)
    parts = [
        f'<svg class="whatif-chart" role="img" width="{label_width + 460}" height="{height}" '
        f'viewBox="0 0 {label_width + 460} {height}" xmlns="http://www.w3.org/2000/svg">',
        "<title>p90 wait per project (hours)</title>",
    ]
    x = label_width
    for index, (_, name, colour) in enumerate(SERIES):
        parts.append(
            f'<rect x="{x + index * 150}" y="4" width="10" height="10" fill="{colour}"/>'
            f'<text x="{x + index * 150 + 14}" y="13" font-size="11">{escape(name)}</text>'
        )
    for row, project in enumerate(projects):
        top = 24 + row * height_per
        name = escape(project["project"])
        parts.append(f'<text x="0" y="{top + ROW * 2 - 2}" font-size="12">{name}</text>')
        for index, (key, _, colour) in enumerate(SERIES):
            hours = _hours(project[key]["wait_p90_seconds"])
            y = top + index * ROW
            parts.append(
                f'<rect x="{x}" y="{y}" width="{max(1.0, hours * scale):.1f}" '
                f'height="{ROW - 2}" fill="{colour}"><title>{hours:.2f} h</title></rect>'
                f'<text x="{x + hours * scale + 4:.1f}" y="{y + ROW - 4}" font-size="10">'
                f"{hours:.1f} h</text>"
            )
    parts.append("</svg>")
    return "".join(parts)
