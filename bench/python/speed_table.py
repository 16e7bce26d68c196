"""Prints bench/speed.sh's Markdown tables from its JSON lines (one per run): the speed
table, Stoke against the best Python of every mode with the median and spread of the
runs, then every Python mode's median, then the ablation when one was run.

    python3 speed_table.py RESULTS.jsonl GPU TORCH WARMUP WINDOWS WINDOW_STEPS "PY_MODES" RUNS
"""
import datetime
import json
import statistics
import sys

path, gpu, torch_version, warmup, windows, window_steps, py_modes, runs = sys.argv[1:9]
py_modes = py_modes.split()
rows = [json.loads(line) for line in open(path) if line.strip()]
MODES = ["eager", "compile", "compile-reduce-overhead", "compile-max-autotune-no-cudagraphs",
         "compile-max-autotune", "cuda-graph", "compile-cuda-graph",
         "compile-max-autotune-cuda-graph"]
# What most users write: torch.compile in one of its modes, no hand-made capture.
COMPILE_ONLY = ["compile", "compile-reduce-overhead", "compile-max-autotune-no-cudagraphs",
                "compile-max-autotune"]
TITLES = {"eager": "eager", "compile": "compile", "compile-reduce-overhead": "reduce-overhead",
          "compile-max-autotune-no-cudagraphs": "max-autotune-no-cudagraphs",
          "compile-max-autotune": "max-autotune",
          "cuda-graph": "eager + whole-step graph",
          "compile-cuda-graph": "compile + whole-step graph",
          "compile-max-autotune-cuda-graph": "max-autotune-no-cudagraphs + whole-step graph"}
BATCH = {"gpt2-small": 16, "resnet50": 256, "resnet34-cifar": 256, "fmnist-cnn": 256}


def name(case):
    if case.startswith("mlp-"):
        d = int(case[4:])
        return f"MLP d={d} ({d}→{4 * d}→{d}→10)"
    return {"gpt2-small": "GPT-2 small (context 1024)", "resnet50": "ResNet-50 (224×224)",
            "resnet34-cifar": "ResNet-34 (32×32)",
            "fmnist-cnn": "Fashion-MNIST CNN (real data)"}.get(case, case)


def ok(r):
    return r is not None and "error" not in r and "skipped" not in r and \
        r.get("samples_per_second") is not None


def failure(r):
    if r is None:
        return "-"
    if "skipped" in r:
        return f"skipped: {r['skipped']}"
    text = " ".join(str(r.get("error", "?")).split())
    return "error: " + (text[:90] + "…" if len(text) > 90 else text).replace("|", "\\|")


def cell(r, fmt=lambda r: f"{r['samples_per_second']:,.0f}"):
    if not ok(r):
        return failure(r)
    try:
        return fmt(r)
    except (KeyError, TypeError, ValueError):
        return "?"


def find(group, case, impl, label=""):
    return next((r for r in rows if r.get("group") == group and r.get("case") == case
                 and r.get("impl") == impl and r.get("label", "") == label), None)


class Runs:
    """Every run of one implementation on one case: the median run stands for them all."""

    def __init__(self, case, impl):
        self.all = [r for r in rows if r.get("group") == "main" and r.get("case") == case
                    and r.get("impl") == impl]
        self.good = sorted((r for r in self.all if ok(r)),
                           key=lambda r: r["samples_per_second"])
        # The median run (the lower middle one of an even count), so that its step time,
        # memory and MFU belong to one real run.
        self.median = self.good[(len(self.good) - 1) // 2] if self.good else None

    def rate(self):
        return self.median["samples_per_second"] if self.median else None

    def spread(self):
        """min–max of the runs, as ± half the range in percent of the median."""
        if len(self.good) < 2:
            return ""
        lo, hi = self.good[0]["samples_per_second"], self.good[-1]["samples_per_second"]
        return f" ±{50 * (hi - lo) / self.rate():.1f}%"

    def summary(self):
        if self.median is None:
            return failure(self.all[0]) if self.all else "not run"
        failed = len(self.all) - len(self.good)
        # Modes swept once (PY_ONCE_MODES) say so: their figure is not a median.
        fewer = len(self.all) < int(runs) and not failed
        return (f"{self.rate():,.0f}{self.spread()}"
                + (f" ({failed} of {len(self.all)} runs failed)" if failed else "")
                + (f" ({len(self.all)} run{'s' if len(self.all) > 1 else ''})" if fewer else ""))


def ms(r):
    v = r["step_ms"]
    return f"{v:.3g}" if v < 100 else f"{v:.0f}"


def gib(r):
    return f"{r['peak_memory_bytes'] / 2**30:.2f}"


def mfu(r):
    return f"{100 * r['mfu']:.1f}%"


each = ("One run per figure" if int(runs) == 1 else
        f"Each figure is the median of {runs} runs (± half their range, in percent)")
print(f"GPU: {gpu or '?'}; torch {torch_version}; {datetime.date.today()}. {each}; a run "
      f"warms up {warmup} steps, "
      f"then times {windows} windows of {window_steps} steps between CUDA events and reports "
      "its median window. Stoke: `stoke-bench` on the spec in `bench/specs/`; Python: "
      "`bench/python/train_reference.py` (bf16 autocast, fused AdamW, TF32, cudnn.benchmark, "
      "channels_last for CNNs, the loss inside the compiled module; whole-step CUDA graphs by "
      "`torch.cuda.graph` capture of forward, backward and capturable fused AdamW). Best "
      "Python: the fastest mode's median. MFU against 989 TFLOP/s dense bf16; model FLOPs "
      "counted as Stoke counts them (6 × multiply-adds; GPT by PaLM's formula).\n")
main_cases = list(dict.fromkeys(r["case"] for r in rows if r.get("group") == "main"))
shown = [m for m in MODES if m in py_modes or any(
    r.get("group") == "main" and r.get("impl") == f"python-{m}" for r in rows)]
print("| model | batch | Stoke samples/s | best Python samples/s (mode) | Stoke / best Python "
      "| Stoke / best `torch.compile` (mode) | step ms, Stoke / Python | peak GiB, Stoke / "
      "Python | MFU, Stoke / Python |")
print("|---|---|---|---|---|---|---|---|---|")
notes, everything = [], []
for case in main_cases:
    stoke = Runs(case, "stoke")
    py = {m: Runs(case, f"python-{m}") for m in shown}
    done = {m: r for m, r in py.items() if r.median}
    best = max(done, key=lambda m: done[m].rate()) if done else None
    compiled = [m for m in COMPILE_ONLY if m in done]
    best_compile = max(compiled, key=lambda m: done[m].rate()) if compiled else None
    batch = next((r["batch"] for r in [stoke.median, *(p.median for p in py.values())]
                  if ok(r) and "batch" in r),
                 BATCH.get(case, 512 if case.startswith("mlp-") else "-"))

    def versus(mode):
        if not stoke.median or not mode:
            return "-"
        return f"{stoke.rate() / done[mode].rate():.2f}×"

    def pair(fmt):
        theirs = cell(done[best].median, fmt) if best else "-"
        return f"{cell(stoke.median, fmt) if stoke.median else '-'} / {theirs}"

    best_cell = f"{done[best].summary()} ({TITLES[best]})" if best else "-"
    compile_cell = (f"{versus(best_compile)} ({TITLES[best_compile]})"
                    if best_compile and stoke.median else "-")
    print(f"| {name(case)} | {batch} | {stoke.summary()} | {best_cell} | **{versus(best)}** | "
          f"{compile_cell} | {pair(ms)} | {pair(gib)} | {pair(mfu)} |")
    everything.append((case, py))
    s = stoke.median
    if s:
        wait = s.get("data_wait_ratio")
        graph = {True: "captured as one CUDA graph", False: "not captured (eager)"}.get(
            s.get("cuda_graph"), "capture not reported")
        notes.append(f"{name(case)}: Stoke step {graph}"
                     + (f", data wait {100 * wait:.2f}% of step time" if wait is not None else ""))
    for m, r in py.items():
        if r.median and r.median.get("notes"):
            notes.append(f"{name(case)}, Python {TITLES[m]}: " + "; ".join(r.median["notes"]))
if notes:
    print("\n" + "\n".join(f"- {n}" for n in notes))
if everything and shown:
    print("\nEvery Python mode (median samples/s ± half the range of the runs):\n")
    print("| model | " + " | ".join(TITLES[m] for m in shown) + " |")
    print("|---|" + "---|" * len(shown))
    for case, py in everything:
        print(f"| {name(case)} | " + " | ".join(py[m].summary() for m in shown) + " |")

abl = [r for r in rows if r.get("group") == "ablation"]
if abl and "skipped" in abl[0]:
    print(f"\nAblation ({abl[0]['case']}): skipped, {abl[0]['skipped']}.")
elif abl:
    case = abl[0]["case"]
    s_base = find("ablation", case, "stoke", "baseline")
    big = next((r["batch"] for r in abl if r.get("label") == "batch" and ok(r)), "4× batch")
    piped = find("ablation", case, "stoke", "pipeline") is not None
    steps = [("baseline", "fp32, TF32 off, per-parameter AdamW, no CUDA graph"
              + (", loader of 1 thread, 1 batch ahead, pageable memory" if piped else ""),
              "python-eager", "eager, fp32, TF32 off, for-loop AdamW"),
             *([("pipeline", "+ data pipeline (loader threads, 4 batches ahead, pinned "
                 "memory, copies on their own stream)", "python-eager",
                 "(same as above: the Python reference keeps the data set on the GPU)")]
               if piped else []),
             ("bf16", "+ bf16 autocast", "python-eager", "eager, bf16, TF32 off, for-loop AdamW"),
             ("batch", f"+ larger batch (×4: {big})", "python-eager",
              "eager, bf16, TF32 off, for-loop AdamW, ×4 batch"),
             ("fused", "+ fused AdamW (`optimizer.adamw.implementation=fused`)", "python-eager",
              "eager, bf16, TF32 off, fused AdamW, ×4 batch"),
             ("graph", "+ whole-step CUDA graph (`training.cuda_graph=on`)", "python-cuda-graph",
              "eager + whole-step CUDA graph, bf16, TF32 off, fused AdamW, ×4 batch"),
             ("kernels", "+ Stoke's own CUDA kernels (`training.fused_kernels=on`)",
              "python-compile-reduce-overhead",
              "`torch.compile(mode=\"reduce-overhead\")` (Inductor's fused kernels), bf16, "
              "TF32 off, fused AdamW, ×4 batch")]
    print(f"\nAblation, {name(case)}: Stoke's settings added one at a time (each row keeps the "
          "ones above it; all but the last on ATen's operations, `training.fused_kernels=off`); "
          "same timing as above.\n")
    print("| step | Stoke samples/s | × baseline | × previous row | Python, nearest settings "
          "| Python samples/s |")
    print("|---|---|---|---|---|---|")
    prev = s_base
    for label, what, impl, py_what in steps:
        s, p = find("ablation", case, "stoke", label), find("ablation", case, impl, label)
        times = lambda a: (f"{s['samples_per_second'] / a['samples_per_second']:.2f}×"
                           if ok(s) and ok(a) else "-")
        versus_prev = times(prev) if label != "baseline" else "-"
        print(f"| {what} | {cell(s)} | {times(s_base)} | {versus_prev} | {py_what} | {cell(p)} |")
        prev = s
    if not piped:
        print("\nData pipeline: no row — the data are synthetic, made on the GPU each step (no "
              "loader threads, no host-to-device copy), so there is no pipeline to switch on.")
    waits = [(label, find("ablation", case, "stoke", label)) for label, *_ in steps]
    print("\nStoke's data wait (share of step time the device waited for batches): " + ", ".join(
        f"{label} {100 * r['data_wait_ratio']:.1f}%" for label, r in waits
        if ok(r) and r.get("data_wait_ratio") is not None) + ".")
