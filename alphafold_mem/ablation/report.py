"""``report.md``: the ablation's tables and figures, readable on GitHub, regenerated from the result
rows (``results.json``) and the run record (``run.json``: command, dates, machine load).

Aggregates over chains: peaks and times as the median of per-chain values and of per-chain ratios
to the reference; deviations as the worst chain; accuracies as the mean over the chains that have an
experimental structure.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

from ..io import atomic_write
from ..units import GIB
from .plots import draw_all
from .results import MEASURES
from .scaling import ANCHORS

__all__ = ["load_run_info", "save_run_info", "write_report"]

MIB = 2**20


def _f(x, spec=".1f", none="—") -> str:
    return none if x is None else format(x, spec)


def _med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    if not rows:
        return ["(none)"]
    cell = lambda text: str(text).replace("|", "\\|")  # noqa: E731 - a pipe would end the cell
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + [
        "| " + " | ".join(cell(c) for c in r) + " |" for r in rows
    ]


class _Rows:
    def __init__(self, rows):
        self.rows = rows
        self.idx = {}
        for r in rows:
            if r["status"] == "ok" and r["value"] is not None:
                self.idx[(r["section"], r["technique"], r["chain"], r["measure"], r["step"])] = r["value"]

    def v(self, section, technique, chain, measure, step=None):
        return self.idx.get((section, technique, chain, measure, step))

    def names(self, section, status="ok"):
        return list(
            dict.fromkeys(r["technique"] for r in self.rows if r["section"] == section and r["status"] == status)
        )

    def chains(self, section):
        return list(dict.fromkeys(r["chain"] for r in self.rows if r["section"] == section and r["status"] == "ok"))


def _ratio(R, section, name, chains, measure, over=("reference", None)):
    """Median over chains of ``measure`` of ``name`` divided by ``over`` (technique, measure; default:
    the same measure of the reference)."""
    t2, m2 = over[0], over[1] or measure
    pairs = [(R.v(section, name, c, measure), R.v(section, t2, c, m2)) for c in chains]
    return _med([a / b for a, b in pairs if a is not None and b])


def _inference(R: _Rows) -> list[str]:
    chains = R.chains("inference")
    out = []
    for name in R.names("inference"):
        vals = lambda m: [R.v("inference", name, c, m) for c in chains]  # noqa: E731
        worst = lambda m: max((x for x in vals(m) if x is not None), default=None)  # noqa: E731
        mean = lambda m: _f(statistics.fmean(x) if (x := [y for y in vals(m) if y is not None]) else None, ".3f")  # noqa: E731
        pred = _ratio(R, "inference", name, chains, "predicted_peak_bytes", (name, "peak_counter_bytes"))
        meas = _ratio(R, "inference", name, chains, "peak_counter_bytes")
        out.append(
            [
                f"`{name}`",
                str(sum(v is not None for v in vals("peak_counter_bytes"))),
                _f(_med(vals("peak_counter_bytes")) and _med(vals("peak_counter_bytes")) / MIB),
                _f(meas, ".3f"),
                _f(_med(vals("peak_rss_bytes")) and _med(vals("peak_rss_bytes")) / MIB),
                _f(_med(vals("predicted_peak_bytes")) and _med(vals("predicted_peak_bytes")) / MIB),
                _f(pred, ".3f"),
                _f(_med(vals("seconds")), ".2f"),
                _f(_ratio(R, "inference", name, chains, "seconds"), ".2f"),
                _f(worst("ca_rmsd_to_reference"), ".1e"),
                _f(worst("plddt_max_abs_diff"), ".1e"),
                _f(worst("ptm_abs_diff"), ".1e"),
                f"{mean('lddt_ca_reference')} → {mean('lddt_ca')}",
                f"{mean('tm_score_reference')} → {mean('tm_score')}",
                f"{mean('gdt_ts_reference')} → {mean('gdt_ts')}",
            ]
        )
    head = [
        "technique",
        "chains",
        "peak MiB (counter)",
        "peak / ref",
        "peak MiB (RSS)",
        "predicted MiB",
        "predicted / counter",
        "s",
        "s / ref",
        "worst Cα-RMSD to ref (Å)",
        "worst max abs ΔpLDDT",
        "worst abs ΔpTM",
        "lDDT-Cα ref → this",
        "TM-score ref → this",
        "GDT-TS ref → this",
    ]
    return _table(head, out)


def _per_chain(R: _Rows, rows) -> list[str]:
    out = []
    for c in R.chains("inference"):
        cfg = next((r["config"] for r in rows if r["section"] == "inference" and r["chain"] == c and r["config"]), {})
        lddts = [R.v("inference", n, c, "lddt_ca") for n in R.names("inference")]
        lddts = [x for x in lddts if x is not None]
        out.append(
            [
                c,
                str(cfg.get("n_res", "")),
                str(cfg.get("msa_depth", "")),
                _f(
                    R.v("inference", "reference", c, "peak_counter_bytes")
                    and R.v("inference", "reference", c, "peak_counter_bytes") / MIB
                ),
                _f(R.v("inference", "reference", c, "lddt_ca"), ".3f"),
                _f(R.v("inference", "reference", c, "tm_score"), ".3f"),
                _f(R.v("inference", "reference", c, "gdt_ts"), ".3f"),
                f"{min(lddts):.3f} – {max(lddts):.3f}" if lddts else "—",
            ]
        )
    return _table(
        [
            "chain",
            "N_res",
            "MSA depth",
            "reference peak MiB",
            "lDDT-Cα (ref)",
            "TM-score (ref)",
            "GDT-TS (ref)",
            "lDDT-Cα range over techniques",
        ],
        out,
    )


def _training(R: _Rows) -> list[str]:
    out = []
    for name in R.names("training"):
        losses = [v for (s, t, _, m, step), v in R.idx.items() if s == "training" and t == name and m == "loss"]
        ref_s, ref_p = (
            R.v("training", "reference", "train", "step_seconds"),
            R.v("training", "reference", "train", "train_peak_bytes"),
        )
        s, p = R.v("training", name, "train", "step_seconds"), R.v("training", name, "train", "train_peak_bytes")
        out.append(
            [
                f"`{name}`",
                _f(s, ".2f"),
                _f(s / ref_s if s and ref_s else None, ".2f"),
                _f(p and p / MIB),
                _f(p / ref_p if p and ref_p else None, ".3f"),
                _f(R.v("training", name, "train", "loss_max_rel_dev"), ".1e"),
                _f(losses[-1] if losses else None, ".3f"),
                _f(R.v("training", name, "train", "heldout_lddt_ca"), ".3f"),
            ]
        )
    return _table(
        [
            "technique",
            "step s (median)",
            "s / ref",
            "step peak MiB",
            "peak / ref",
            "max rel loss dev",
            "last loss",
            "held-out lDDT-Cα",
        ],
        out,
    )


def _scaling(R: _Rows) -> list[str]:
    sizes = sorted({int(c.split("=")[1]) for c in R.chains("scaling")})
    out = []
    for name in R.names("scaling"):
        cells = []
        for n in sizes:
            m, p = (
                R.v("scaling", name, f"n_res={n}", "measured_peak_bytes"),
                R.v("scaling", name, f"n_res={n}", "predicted_peak_bytes"),
            )
            cells.append(f"{_f(m and m / GIB, '.3g', '')}{' / ' if m else ''}{_f(p and p / GIB, '.3g')}")
        out.append([f"`{name}`"] + cells)
    return _table(["technique"] + [f"N {n}" for n in sizes], out)


def _openfold(R: _Rows) -> list[str]:
    out = []
    for c in R.chains("openfold"):
        for setting in dict.fromkeys(n.split(":")[1] for n in R.names("openfold")):
            g = lambda side, m: R.v("openfold", f"{side}:{setting}", c, m)  # noqa: E731
            out.append(
                [
                    c.split("=")[1],
                    setting,
                    _f(g("openfold", "seconds"), ".1f"),
                    _f(g("ours", "seconds"), ".1f"),
                    _f(g("openfold", "rss_growth_bytes") and g("openfold", "rss_growth_bytes") / GIB, ".3g"),
                    _f(g("ours", "rss_growth_bytes") and g("ours", "rss_growth_bytes") / GIB, ".3g"),
                    _f(g("ours", "peak_counter_bytes") and g("ours", "peak_counter_bytes") / GIB, ".3g"),
                ]
            )
    return _table(
        ["N_res", "setting", "OpenFold s", "ours s", "OpenFold RSS GiB", "ours RSS GiB", "ours counter GiB"], out
    )


def _not_run(rows) -> list[str]:
    seen = {}
    for r in rows:
        if r["status"] in ("skipped", "failed") or (r["status"] == "ok" and r["value"] is None and r["reason"]):
            seen.setdefault((r["section"], r["technique"], r["status"], r["measure"], r["reason"]), []).append(
                r["chain"]
            )
    out = [
        [s, f"`{t}`", st + (f" ({m})" if m else ""), str(len(c)), reason.replace("|", "/")]
        for (s, t, st, m, reason), c in seen.items()
    ]
    return _table(["section", "technique", "status", "rows", "reason"], out)


def _loaded(machine: str) -> bool:
    """Whether a ``run.json`` machine line ("2 CPUs, load average (1/5/15 min) 9.3/9.6/10.5; ...") shows
    a 1-minute load average above the CPU count at start or end."""
    return any(
        float(load) > int(cpus)
        for cpus, load in re.findall(r"(\d+) CPUs, load average \(1/5/15 min\) ([\d.]+)", machine)
    )


def write_report(out_dir: Path, rows: list[dict], run_info: dict) -> Path:
    """Write ``out_dir/report.md`` (and the figures) from ``rows`` and the run record; returns its path."""
    R = _Rows(rows)
    figs = draw_all(rows, out_dir)
    img = lambda key, alt: [f"![{alt}]({figs[key].name})", ""] if key in figs else []  # noqa: E731
    runs = run_info.get("runs", [])
    lines = ["# Memory and accuracy ablation (`alphafold-mem ablate`)", ""]
    for i, r in enumerate(runs):
        command = f"`{r['command']}`" if r.get("command") else "(Python API)"
        lines += [
            f"{'Run' if i == 0 else 'Resumed'} {r.get('started', '?')} – {r.get('finished', 'interrupted')} "
            f"(UTC): {command}; {r.get('machine', '')}",
            "",
        ]
    meta = run_info.get("meta", {})
    if meta:
        lines += [
            "Versions: " + ", ".join(f"{k} {v}" for k, v in meta.get("versions", {}).items()),
            "",
            f"Weights: `{meta.get('weights', '')}`; device {meta.get('device', '')}; torch threads "
            f"{meta.get('threads', '')}; timing repeats {meta.get('repeats', '')}; seed {meta.get('seed', '')}.",
            "",
        ]
    if any(_loaded(r.get("machine", "")) for r in runs):
        lines += [
            "Timings were taken on a shared, loaded machine (load average above its CPU count, see above): "
            "absolute seconds move with the other work on it; compare the `s / ref` ratios of one run, "
            "which interleave the techniques' repeats.",
            "",
        ]
    lines += [
        "Every number below is a row of `results.csv` / `results.json` (columns and measures documented "
        "there and in `alphafold_mem/ablation/results.py`).",
        "",
    ]
    if R.names("inference"):
        lines += [
            "## Inference",
            "",
            "Per technique over the chains: activation peak by the storage counter "
            "(`track_peak`) and by peak-RSS growth of a fresh process (CPU) or the CUDA allocator; the "
            "planner's prediction; median time of interleaved repeats; deviation from the fp32 reference "
            "run; accuracy against the experimental structure, reference run → this run.",
            "",
        ]
        lines += _inference(R) + ["", "Per chain (reference run):", ""] + _per_chain(R, rows) + [""]
        lines += img("deviation_vs_saving", "accuracy deviation vs memory saving")
        lines += img("lddt_per_chain", "per-chain lDDT-Cα")
    if R.names("training"):
        lines += (
            [
                "## Training",
                "",
                "Fine-tuning from the same weights, seed and draws; peak of one step "
                "(forward, AF2 loss, backward) by the storage counter.",
                "",
            ]
            + _training(R)
            + [""]
        )
        lines += img("training_loss", "training loss curves")
    if R.names("scaling"):
        setup = next(
            (
                r["config"]
                for r in rows
                if r["section"] == "scaling" and r["measure"] == "measured_peak_bytes" and r["config"]
            ),
            {},
        )
        how = (
            f" Measured: preset {setup.get('preset')}, {setup.get('measured_blocks')}, N_seq {setup.get('n_seq')}, "
            f"N_extra {setup.get('n_extra')}, no templates, storage counter, torch threads "
            f"{setup.get('measure_threads', 'as above')}."
            if setup
            else ""
        )
        lines += [
            "## Scaling",
            "",
            "Inference activation peak in GiB (2^30 bytes), `measured / predicted` "
            "(predicted only where not measured)."
            + how
            + " Published anchors: "
            + "; ".join(f"{label} ({src})" for label, _, _, src in ANCHORS)
            + ".",
            "",
        ]
        lines += _scaling(R) + [""] + img("memory_vs_nres", "memory vs N_res")
    if R.names("openfold"):
        lines += (
            [
                "## OpenFold side by side",
                "",
                "Fresh process per cell, one forward after a warm-up, peak-RSS growth in GiB (2^30 bytes).",
                "",
            ]
            + _openfold(R)
            + [""]
        )
    lines += ["## Rows not measured here", ""] + _not_run(rows) + [""]
    lines += ["## Measures", ""] + _table(["measure", "unit", "meaning"], [[m, u, d] for m, (u, d) in MEASURES.items()])
    path = out_dir / "report.md"
    with atomic_write(path) as tmp:
        Path(tmp).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def load_run_info(out_dir: Path) -> dict:
    path = out_dir / "run.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def save_run_info(out_dir: Path, info: dict) -> None:
    with atomic_write(out_dir / "run.json") as tmp:
        Path(tmp).write_text(json.dumps(info, indent=1))
