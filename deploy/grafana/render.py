"""Plot the Grafana dashboard's panels from a Prometheus' query API into one PNG (no Grafana needed).

    python deploy/grafana/render.py --prometheus http://127.0.0.1:9090 --minutes 15 --out dashboard.png

Every target of every panel in ``dashboards/slidingwindow.json`` is run as a range query and drawn with its
legend format; the layout follows the panels' grid positions (two per row).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

DASHBOARD = Path(__file__).resolve().parent / "dashboards" / "slidingwindow.json"


def query_range(prometheus: str, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
    params = urllib.parse.urlencode({"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"})
    with urllib.request.urlopen(f"{prometheus.rstrip('/')}/api/v1/query_range?{params}", timeout=60) as r:
        body = json.loads(r.read())
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body.get('error')}")
    return body["data"]["result"]


def legend(fmt: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt) or json.dumps(labels)


def render(
    prometheus: str, start: float, end: float, out: Path, dashboard: Path = DASHBOARD, step: float | None = None
) -> dict[str, int]:
    """Draw every panel; returns {panel title: number of series drawn}."""
    import matplotlib

    matplotlib.use("Agg")
    from datetime import datetime, timezone

    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    dash = json.loads(dashboard.read_text())
    panels = sorted(dash["panels"], key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"]))
    step = step or max(1.0, (end - start) / 300)
    cols = 2
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(14, 3.2 * rows), squeeze=False)
    drawn: dict[str, int] = {}
    for ax, panel in zip(axes.flat, panels, strict=False):  # the grid may have one cell more than panels
        n = 0
        for t in panel["targets"]:
            for s in query_range(prometheus, t["expr"], start, end, step):
                xs = [datetime.fromtimestamp(float(v[0]), tz=timezone.utc) for v in s["values"]]
                ys = [float(v[1]) for v in s["values"]]
                ax.plot(xs, ys, linewidth=1.2, label=legend(t.get("legendFormat", ""), s["metric"]))
                n += 1
        drawn[panel["title"]] = n
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        ax.set_title(f"{panel['title']}" + (f"  [{unit}]" if unit else ""), fontsize=10)
        fmt = "%H:%M:%S" if end - start < 1800 else "%H:%M"
        ax.xaxis.set_major_formatter(mdates.DateFormatter(fmt, tz=timezone.utc))
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        if n:
            ax.legend(fontsize=7, loc="upper left")
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.suptitle(
        f"{dash['title']} - {datetime.fromtimestamp(start, tz=timezone.utc):%Y-%m-%d %H:%M} to "
        f"{datetime.fromtimestamp(end, tz=timezone.utc):%H:%M} UTC",
        fontsize=12,
    )
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return drawn


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prometheus", default="http://127.0.0.1:9090")
    ap.add_argument("--minutes", type=float, default=15, help="the last N minutes (unless --start/--end)")
    ap.add_argument("--start", type=float, help="epoch seconds")
    ap.add_argument("--end", type=float, help="epoch seconds")
    ap.add_argument("--out", type=Path, default=Path("dashboard.png"))
    ap.add_argument("--dashboard", type=Path, default=DASHBOARD)
    a = ap.parse_args(argv)
    end = a.end or time.time()
    start = a.start or end - 60 * a.minutes
    drawn = render(a.prometheus, start, end, a.out, a.dashboard)
    for title, n in drawn.items():
        print(f"{n:3d} series  {title}")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
