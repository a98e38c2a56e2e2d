"""What the MoE benchmark reports share: reading each rank's JSON line, averaging over ranks,
the proxy traces' message counts, the machine line, and a horizontal bar chart as SVG (no
plotting library on the GPU image)."""

import glob
import json
import os


def ranks_of(path):
    """Every rank's JSON line (`{"label": ...}`) in a benchmark's output file."""
    ranks = []
    with open(path) as f:
        for line in f:
            at = line.find('{"label"')
            if at >= 0:
                ranks.append(json.loads(line[at:]))
    return ranks


def merged(ranks, keys):
    """The first rank's line with `keys` replaced by their mean over the ranks reporting them."""
    r = dict(ranks[0])
    r.pop("rank", None)
    for k in keys:
        vals = [x[k] for x in ranks if x.get(k) is not None]
        r[k] = round(sum(vals) / len(vals), 2) if vals else None
    r["ranks_reporting"] = len(ranks)
    return r


def proxy_summaries(out, label):
    """The GPU proxies' trace summaries of run `label` (OUT/trace-LABEL/t.*.summary.json)."""
    return glob.glob(os.path.join(out, f"trace-{label}", "t.pshmem-gpu-proxy-*.summary.json"))


def counted_traffic(summary):
    """Messages and bytes of the counted puts and signals in one proxy trace summary."""
    msgs = nbytes = 0
    for kind in ("put_counted", "signal_counted"):
        k = summary.get("per_kind", {}).get(kind)
        if k:
            msgs += k["messages"]
            nbytes += k["bytes"]
    return msgs, nbytes


def machine(out):
    mt = os.path.join(out, "machine.txt")
    return open(mt).read().strip().replace("\n", "; ") if os.path.exists(mt) else ""


def gpus(out):
    """GPUs of the machine the runs had (machine.txt: one line per GPU), 0 when unknown."""
    m = machine(out)
    return len(m.split("; ")) if m else 0


def sharing(out, sizes):
    """The sentence on how EP ranks met GPUs, from the GPU count and the EP sizes run."""
    n = gpus(out)
    if not n:
        return ""
    shared = sorted({s for s in sizes if s > n})
    if not shared:
        return f"One EP rank per GPU ({n} GPUs): 'direct' is NVLink through CUDA IPC."
    return (f"At EP {', '.join(map(str, shared))} the ranks outnumber the {n} GPU(s) and share them "
            "under CUDA MPS: 'direct' between ranks on one GPU is copies inside it, not NVLink.")


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
