"""Draws the README's peer plot from committed peers.py records: per model (one column each), µs per
layer against T (log-log) and the fraction of the memory floor against T, one line per implementation.

    python bench/peers/plot_peers.py bench/results/*_peers_gpt-oss-120b.json \
        bench/results/*_peers_gpt-oss-20b.json --out docs/peers.png
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# One colour and marker per implementation, whichever records are drawn.
STYLE = {
    "mxmoe": ("tab:red", "o"),
    "triton_kernels": ("tab:blue", "s"),
    "transformers": ("tab:green", "^"),
    "transformers-eager": ("tab:olive", "v"),
    "torch-grouped-mm": ("tab:purple", "D"),
}


def load(paths: list) -> list:
    records = []
    for p in paths:
        record = json.loads(Path(p).read_text())
        if record.get("kind") != "peers":
            raise SystemExit(f"{p}: not a peers.py record (kind {record.get('kind')!r})")
        records.append(record)
    return records


def draw(records: list, out: Path) -> None:
    fig, axes = plt.subplots(2, len(records), figsize=(6.2 * len(records), 8.4), squeeze=False, sharex="col")
    for col, record in enumerate(records):
        top, bottom = axes[0][col], axes[1][col]
        for impl in record["implementations"]:
            rows = impl.get("rows") or []
            if impl.get("status") != "ok" or not rows:
                continue
            color, marker = STYLE.get(impl["name"], (None, "x"))
            t = [r["tokens"] for r in rows]
            label = impl["name"] + (" (eager)" if impl.get("timing") == "eager" else "")
            top.plot(t, [r["us"] for r in rows], marker=marker, color=color, label=label, ms=4)
            bottom.plot(t, [100 * r["fraction_of_floor"] for r in rows], marker=marker, color=color, label=label,
                        ms=4)
        missing = [f"{i['name']}: {i['status']}" for i in record["implementations"] if i.get("status") != "ok"]
        title = f"{record['model']} on {record['device']}"
        top.set_title(title if not missing else title + "\nnot shown: " + "; ".join(missing), fontsize=9)
        top.set_xscale("log", base=2)
        top.set_yscale("log")
        top.set_ylabel("µs per layer")
        top.grid(True, which="both", alpha=0.3)
        top.legend(fontsize=8)
        bottom.set_xscale("log", base=2)
        bottom.set_ylim(0, max(100, bottom.get_ylim()[1]))  # over 100%: the L2 helped, and the plot shows it
        bottom.set_xlabel("tokens T")
        bottom.set_ylabel(f"% of the memory floor (copy {record['copy_gbps']:.0f} GB/s)")
        bottom.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Plot peers.py records (one column per record)")
    p.add_argument("records", nargs="+", help="peers.py JSON records")
    p.add_argument("--out", required=True, help="the PNG to write")
    args = p.parse_args(argv)
    draw(load(args.records), Path(args.out))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
