"""The PNG of bench/ddp_resnet50.py: where each mode's step goes, and speedup against N.

Left: one bar per (mode, N), the step split into compute (step - exposed communication)
and exposed communication, with the 1-rank baseline first; a mode with no hook to time its
buckets (backend) is one unsplit bar, and the no-comm step (the ceiling) a dotted line
per N. Right: speedup S = N·T1/TN
against N for each mode, with the baseline's S = 1 at N = 1 and the ideal S = N.
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # files only; no display on the hosts that run benchmarks
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

COLORS = {"baseline": "#7f7f7f", "stock": "#1f77b4", "ring": "#d62728",
          "ring-bf16": "#2ca02c", "ring-fp16": "#9467bd", "no-comm": "#bcbd22",
          "backend": "#8c564b"}


def plot(records, path):
    shown = [r for r in records if r.get("available") and r.get("step_time_s")]
    if not shown:
        raise ValueError("plot: no measured mode to draw")
    first = shown[0]
    fig, (bars, speed) = plt.subplots(1, 2, figsize=(12, 4.8),
                                      gridspec_kw=dict(width_ratios=[3, 2]))

    labels = [f"{r['mode']}\nN={r['world_size']}" for r in shown]
    # No split where exposed communication was not measured (no hook): the whole step.
    compute = [(r.get("compute_s") or r["step_time_s"]) * 1e3 for r in shown]
    exposed = [(r.get("exposed_comm_s") or 0.0) * 1e3 for r in shown]
    x = range(len(shown))
    bars.bar(x, compute, color=[COLORS.get(r["mode"], "#17becf") for r in shown])
    bars.bar(x, exposed, bottom=compute, color="#ff7f0e", hatch="//", edgecolor="white")
    for i, r in enumerate(shown):
        bars.annotate(f"{r['step_time_s'] * 1e3:.0f} ms", (i, compute[i] + exposed[i]),
                      ha="center", va="bottom", fontsize=8, xytext=(0, 2),
                      textcoords="offset points")
    for r in shown:
        if r["mode"] == "no-comm" and r["world_size"] > 1:
            bars.axhline(r["step_time_s"] * 1e3, color=COLORS["no-comm"], ls=":", lw=1)
    bars.set_xticks(list(x))
    bars.set_xticklabels(labels, fontsize=8)
    bars.set_ylabel("median step time (ms)")
    bars.set_title("Step time per mode")
    bars.legend(handles=[Patch(facecolor="#bbbbbb", label="compute: step - exposed comm"),
                         Patch(facecolor="#ff7f0e", hatch="//", edgecolor="white",
                               label="exposed communication")],
                fontsize=8, loc="lower right")

    base = next((r for r in shown if r["mode"] == "baseline"), None)
    sizes = sorted({r["world_size"] for r in shown} | {1})
    speed.plot(sizes, sizes, "k--", lw=1, label="ideal S = N")
    for mode in dict.fromkeys(r["mode"] for r in shown if r["mode"] != "baseline"):
        pts = sorted((r["world_size"], r["speedup"]) for r in shown
                     if r["mode"] == mode and r.get("speedup") is not None)
        if base is not None and all(n != 1 for n, _ in pts):
            pts.insert(0, (1, 1.0))
        if pts:
            speed.plot([n for n, _ in pts], [s for _, s in pts], "o-",
                       color=COLORS.get(mode, "#17becf"), label=mode)
    if base is not None:
        speed.plot([1], [1.0], "s", color=COLORS["baseline"], ms=8, label="1-rank baseline (T1)")
    else:
        speed.text(0.5, 0.5, "no 1-rank baseline:\nno speedup", ha="center", va="center",
                   transform=speed.transAxes)
    speed.set_xticks(sizes)
    speed.set_xlabel("ranks N")
    speed.set_ylabel("speedup S = N·T1 / TN")
    speed.set_title("Speedup against N")
    speed.legend(fontsize=8)
    speed.grid(alpha=0.3)

    fig.suptitle(f"{first['model']} DDP on {first['device']} ({first['backend']}), "
                 f"{first['image_size']}px, batch {first['batch_size']} per rank", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
