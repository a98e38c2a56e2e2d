"""A horizontal bar chart as SVG, for the MoE reports (no plotting library on the GPU image)."""


def svg(rows, series, label, title):
    """`rows`: dicts; `series`: (key, colour) pairs, one bar each per row; `label(row)`: the
    row's name. Values are drawn to one scale (the largest), each bar annotated."""
    W, bar, gap, left, top = 860, 14, 10, 330, 30
    h = top + len(rows) * (len(series) * bar + gap) + 30
    vmax = max([r.get(k) or 0 for r in rows for k, _ in series] + [1])
    scale = (W - left - 90) / vmax
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" '
           f'font-family="sans-serif" font-size="11">',
           f'<text x="10" y="18" font-size="13">{title}</text>']
    y = top
    for r in rows:
        out.append(f'<text x="10" y="{y + bar + 4}">{label(r)}</text>')
        for k, (key, color) in enumerate(series):
            v = r.get(key) or 0
            yy = y + k * bar
            out.append(f'<rect x="{left}" y="{yy}" width="{v * scale:.1f}" height="{bar - 2}" '
                       f'fill="{color}"/>')
            out.append(f'<text x="{left + v * scale + 4:.1f}" y="{yy + bar - 4}">{v:g}</text>')
        y += len(series) * bar + gap
    out.append("</svg>")
    return "\n".join(out) + "\n"
