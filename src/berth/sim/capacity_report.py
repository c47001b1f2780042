"""The capacity plan as data, markdown and a plot (docs/plan-capacity.md).

`plan_data` is pure (a JSON-able dict); `write_plan` is the edge: ``plan.json``, ``report.md``
and ``acceptance-curve.png`` (matplotlib, Agg, imported only when plotting).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from berth.sim.capacity_plan import Outcome, PlanResult

CURVE = "acceptance-curve.png"


def _verdict(result: PlanResult, o: Outcome) -> str:
    if o.pruned is not None:
        return "fails (bound)"
    return "meets" if o.meets(result.target) else "fails"


def plan_data(result: PlanResult, context: dict[str, Any]) -> dict[str, Any]:
    """Everything the report says, as plain data; `context` describes the inputs."""

    def row(o: Outcome) -> dict[str, Any]:
        return {
            **o.to_dict(),
            "mix": result.describe(o.purchase),
            "cost": result.cost(o.purchase),
            "bought_hosts": result.clusters * sum(o.purchase),
            "verdict": _verdict(result, o),
        }

    curve = sorted(result.evaluated, key=lambda o: (result.cost(o.purchase), o.purchase))
    return {
        **context,
        "offers": [{"type": o.name, "price": o.price} for o in result.offers],
        "clusters": result.clusters,
        "target": {
            "acceptance": result.target.acceptance,
            "evictions": result.target.evictions,
        },
        "answer": row(result.outcome) if result.outcome is not None else None,
        "claim": result.claim,
        "bound_purchase": (
            {
                "purchase": list(result.bound_purchase),
                "mix": result.describe(result.bound_purchase),
                "cost": result.cost(result.bound_purchase),
            }
            if result.bound_purchase is not None
            else None
        ),
        "minimality_checks": [row(o) for o in result.checks],
        "replays": sum(1 for o in result.evaluated if o.pruned is None),
        "pruned_by_bound": sum(1 for o in result.evaluated if o.pruned is not None),
        "curve": [row(o) for o in curve],
        "notes": result.notes,
    }


CLAIMS = {
    "optimal": "optimal: it is the cheapest purchase the lower bound allows, so no cheaper "
    "purchase can meet the target",
    "minimal": "minimal: with one host fewer (per cluster) of any type in the mix, the target "
    "is missed (each checked by a replay or proven by the bound)",
    "unverified": "not verified minimal: the replay budget ran out first",
    "none": "no purchase found",
}


def money(x: float) -> str:
    """A cost or price: ``2,400,000`` (whole above 1,000), ``9.5``."""
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def _pct(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{100 * x:.{digits}f}%"


def markdown(data: dict[str, Any], plot: bool) -> str:
    t = data["target"]
    lines = [
        "# Capacity plan",
        "",
        f"Command: `{data.get('command') or 'berth plan-capacity'}`",
        "",
        f"* trace: {data['trace']} ({data['requests']:,} requests, growth {data['growth']:g}x)",
        f"* fleet: {data['fleet']}; policy: {data['policy']}; "
        f"purchases are per cluster ({data['clusters']} cluster"
        f"{'s' if data['clusters'] != 1 else ''})",
        "* offers: " + ", ".join(f"{o['type']} at {money(o['price'])}" for o in data["offers"]),
        f"* target: {_pct(t['acceptance'])} of {', '.join(data['target_business'])} requests "
        "accepted (window and warm-up apart)"
        + (
            f", at most {_pct(t['evictions'])} of preemptible placements evicted"
            if t["evictions"] is not None
            else ""
        ),
        "",
    ]
    answer = data["answer"]
    if answer is None:
        lines += ["**No purchase found.** " + " ".join(data["notes"]), ""]
    else:
        lines += [
            f"**Buy {answer['mix']} per cluster** ({answer['bought_hosts']} hosts, cost "
            f"{money(answer['cost'])}): on-demand acceptance {_pct(answer['acceptance'])} in the "
            f"window, {_pct(answer['warmup_acceptance'])} in the warm-up, evictions "
            f"{_pct(answer['eviction_rate'])}.",
            "",
            f"It is {CLAIMS[data['claim']]}.",
            "",
        ]
    if data["bound_purchase"] is not None:
        b = data["bound_purchase"]
        lines += [f"Lower bound: at least {b['mix']} per cluster (cost {money(b['cost'])}).", ""]
    if data["minimality_checks"]:
        lines += ["## One host fewer", "", *_table(data["minimality_checks"]), ""]
    lines += [
        f"## Acceptance curve ({data['replays']} replays, {data['pruned_by_bound']} purchases "
        "pruned by the bound)",
        "",
        *_table(data["curve"]),
        "",
    ]
    if plot:
        lines += [f"![acceptance curve]({CURVE})", ""]
    if data.get("citation"):
        lines += [f"Data: {data['citation']}", ""]
    lines += [f"* {n}" for n in data["notes"]]
    return "\n".join(lines).rstrip() + "\n"


def _table(rows: list[dict[str, Any]]) -> list[str]:
    out = [
        "| purchase per cluster | cost | hosts | accepted (window) | accepted (warm-up) "
        "| evicted | all requests | verdict |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['mix']} | {money(r['cost'])} | {r['hosts'] or '–'} | {_pct(r['acceptance'])} "
            f"| {_pct(r['warmup_acceptance'])} | {_pct(r['eviction_rate'])} "
            f"| {_pct(r['overall_acceptance'])} | {r['verdict']} |"
        )
    return out


def plot_curve(data: dict[str, Any], path: Path) -> Path:
    """Acceptance (window and warm-up) against cost, each purchase a point; the answer ringed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    replayed = [r for r in data["curve"] if r["pruned"] is None and r["acceptance"] is not None]
    fig, ax = plt.subplots(figsize=(9, 5))
    if replayed:
        cost = [r["cost"] for r in replayed]
        window = [100 * r["acceptance"] for r in replayed]
        # the curve: the best acceptance any purchase up to that cost reached
        best = [max(window[: k + 1]) for k in range(len(window))]
        ax.step(cost, best, where="post", color="grey", linewidth=1, label="best up to this cost")
        for verdict, colour in (("meets", "tab:green"), ("fails", "tab:red")):
            label = "meets the target" if verdict == "meets" else "misses it"
            pts = [(c, w) for c, w, r in zip(cost, window, replayed, strict=True)
                   if r["verdict"] == verdict]  # fmt: skip
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.scatter(xs, ys, color=colour, s=28, label=f"{label} (window)", zorder=3)
        warm = [(r["cost"], 100 * r["warmup_acceptance"]) for r in replayed
                if r["warmup_acceptance"] is not None]  # fmt: skip
        if warm:
            xs, ys = zip(*warm, strict=True)
            ax.scatter(xs, ys, marker="s", s=18, facecolors="none", edgecolors="tab:blue",
                       label="warm-up", zorder=2)  # fmt: skip
    ax.axhline(100 * data["target"]["acceptance"], color="red", linewidth=1, label="target")
    answer = data["answer"]
    if answer is not None and answer["acceptance"] is not None:
        ax.scatter(
            [answer["cost"]],
            [100 * answer["acceptance"]],
            s=220,
            facecolors="none",
            edgecolors="black",
            linewidths=1.5,
            label=f"answer: {answer['mix']}",
            zorder=5,
        )
    ax.set_xlabel("purchase cost")
    ax.set_ylabel(f"{', '.join(data['target_business'])} requests accepted (%)")
    ax.set_title(f"Acceptance curve: {data['trace']}, growth {data['growth']:g}x")
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    limit = data["target"]["evictions"]
    evicted = [(r["cost"], 100 * r["eviction_rate"]) for r in replayed
               if r["eviction_rate"] is not None]  # fmt: skip
    if limit is not None and evicted:  # the eviction target decides too: its share, right axis
        right = ax.twinx()
        xs, ys = zip(*evicted, strict=True)
        right.scatter(xs, ys, marker="x", color="tab:purple", s=22, label="evicted (preemptible)")
        right.axhline(100 * limit, color="tab:purple", linestyle="--", linewidth=1,
                      label="eviction target")  # fmt: skip
        right.set_ylabel("preemptible placements evicted (%)")
        more_handles, more_labels = right.get_legend_handles_labels()
        handles, labels = handles + more_handles, labels + more_labels
    ax.legend(handles, labels, loc="center right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_plan(out: Path, data: dict[str, Any], plot: bool = True) -> None:
    """``plan.json``, ``report.md`` and (unless `plot` is False) the curve's PNG in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan.json").write_text(json.dumps(data, indent=1, allow_nan=False) + "\n")
    if plot:
        plot_curve(data, out / CURVE)
    (out / "report.md").write_text(markdown(data, plot))
