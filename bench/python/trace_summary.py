"""Where a training step's GPU time goes, from Kineto traces (Chrome JSON) that
stoke-bench --trace and train_reference.py --trace write: per trace, the device time per
step by kind of kernel, the busiest kernels, and how long the device sat idle between
kernels (launch-bound steps leave gaps). Given several traces, the kinds side by side.

    python3 trace_summary.py --steps 5 stoke=gpt-stoke.json eager=gpt-eager.json
"""
import argparse
import bisect
import collections
import gzip
import json
import re

# First match wins: fused and library kernels before the generic element-wise ones.
KINDS = [
    # NCCL's kernels run on their own stream, beside backward: their time overlaps the rest.
    ("all-reduce (NCCL, overlapping)", r"nccl"),
    ("attention", r"flash|fmha|attention|sdpa|_efficient_attention|cudnn_generated_fort_native_sdpa"),
    ("matrix products", r"gemm|nvjet|cutlass|xmma|wgmma|cublas|s1688|s16816|matmul|sm90_"),
    ("convolution", r"conv|implicit_convolve|winograd|dgrad|wgrad|fprop|cudnn"),
    ("compiled (Triton)", r"^triton_"),
    ("layer norm", r"layer_norm|layernorm"),
    ("batch norm", r"batch_norm|batchnorm|bn_"),
    ("softmax / loss", r"softmax|nll_loss|cross_?entropy"),
    ("optimizer", r"adam|multi_tensor_apply|foreach|fused_adam"),
    ("embedding / index", r"embedding|index|scatter|gather|radix|sort|unique"),
    ("reduction", r"reduce|column_?sum"),
    ("copy / cast / fill", r"copy|memcpy|memset|fill|cast|to_copy|catarray|cat_"),
    ("element-wise", r"elementwise|vectorized|unrolled|pointwise"),
]


# Kinds whose kernels are listed by the operator that launched them.
ATTRIBUTED = ("copy / cast / fill", "reduction", "element-wise", "other")


def kind_of(name):
    low = name.lower()
    for kind, pattern in KINDS:
        if re.search(pattern, low):
            return kind
    return "other"


def load(path):
    """The trace's device events, and its host events (CPU operators, runtime calls)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    complete = [e for e in events if e.get("ph") == "X" and "dur" in e]
    device = [e for e in complete if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    return device, complete


def launchers(complete):
    """correlation id -> the operators the launch happened inside, innermost first: which
    line of the model a kernel or memset comes from, where its name does not say."""
    ops = collections.defaultdict(list)
    for e in complete:
        if e.get("cat") in ("cpu_op", "user_annotation"):
            ops[(e.get("pid"), e.get("tid"))].append((e["ts"], e["ts"] + e["dur"], e["name"]))
    for spans in ops.values():
        spans.sort(key=lambda s: (s[0], -s[1]))
    found = {}
    for e in complete:
        if e.get("cat") not in ("cuda_runtime", "cuda_driver"):
            continue
        corr = (e.get("args") or {}).get("correlation")
        spans = ops.get((e.get("pid"), e.get("tid")), [])
        if corr is None or not spans:
            continue
        i = bisect.bisect_right(spans, (e["ts"], float("inf"), "")) - 1
        chain = []
        # Spans opening before the call that still enclose it; nesting makes them its stack.
        while i >= 0 and len(chain) < 40:
            start, stop, name = spans[i]
            if start <= e["ts"] <= stop and name not in chain:
                chain.append(name)
            i -= 1
            if start < e["ts"] - 5e6:  # no operator lasts 5 s within a traced step
                break
        found[corr] = chain
    return found


def origin(chain):
    """The innermost operators (up to three), and the autograd node around them."""
    if not chain:
        return "(no operator)"
    names = chain[:3]
    node = next((n for n in chain if "evaluate_function" in n), None)
    if node and node not in names:
        names.append(node.replace("autograd::engine::evaluate_function: ", "backward of "))
    return " < ".join(names)


def busy_and_span(kernels):
    """Microseconds the device ran anything (overlaps merged), and first start to last end."""
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in kernels)
    busy, end = 0.0, None
    for start, stop in spans:
        if end is None or start > end:
            busy += stop - start
            end = stop
        elif stop > end:
            busy += stop - end
            end = stop
    return busy, (spans[-1][1] - spans[0][0]) if spans else 0.0


def short(name, width=70):
    name = re.sub(r"\s+", " ", name)
    return name if len(name) <= width else name[: width - 1] + "…"


def summarize(label, path, steps, top):
    kernels, complete = load(path)
    busy, span = busy_and_span(kernels)
    by_kind = collections.defaultdict(float)
    by_name = collections.defaultdict(lambda: [0.0, 0])
    for e in kernels:
        by_kind[kind_of(e["name"])] += e["dur"]
        by_name[e["name"]][0] += e["dur"]
        by_name[e["name"]][1] += 1
    ms = lambda us: us / steps / 1000
    print(f"\n### {label} ({path})\n")
    print(f"{len(kernels) / steps:.0f} kernels per step; device busy {ms(busy):.2f} ms per "
          f"step of a {ms(span):.2f} ms span (idle between kernels: "
          f"{100 * (1 - busy / span) if span else 0:.1f}%)\n")
    print("| kernel | calls per step | ms per step | share |")
    print("|---|---|---|---|")
    total = sum(v[0] for v in by_name.values()) or 1
    for name, (us, calls) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"| `{short(name)}` ({kind_of(name)}) | {calls / steps:.0f} | {ms(us):.3f} | "
              f"{100 * us / total:.1f}% |")
    # Small kernels by the operator that launched them: their names say nothing of which
    # tensor they touch, and a captured step pays for each one as a graph node.
    chains = launchers(complete)
    by_origin = collections.defaultdict(lambda: [0.0, 0])
    for e in kernels:
        if kind_of(e["name"]) not in ATTRIBUTED:
            continue
        corr = (e.get("args") or {}).get("correlation")
        key = (short(e["name"], 40), short(origin(chains.get(corr, [])), 140))
        by_origin[key][0] += e["dur"]
        by_origin[key][1] += 1
    if by_origin:
        print("\n| copy, cast, fill, reduction, element-wise, other | launched by | calls per step | ms per step |")
        print("|---|---|---|---|")
        for (name, where), (us, calls) in sorted(by_origin.items(), key=lambda kv: -kv[1][1])[:2 * top]:
            print(f"| `{name}` | `{where}` | {calls / steps:.1f} | {ms(us):.3f} |")
    return {k: ms(v) for k, v in by_kind.items()}, ms(busy), ms(span)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, required=True, help="steps each trace holds")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("traces", nargs="+", help="label=path")
    args = parser.parse_args()
    results = {}
    for item in args.traces:
        label, _, path = item.partition("=")
        results[label] = summarize(label, path or label, args.steps, args.top)
    labels = list(results)
    kinds = [k for k, _ in KINDS] + ["other"]
    print("\n### Device ms per step by kind of kernel\n")
    print("| kind | " + " | ".join(labels) + " |")
    print("|---|" + "---|" * len(labels))
    for kind in kinds:
        if any(results[l][0].get(kind) for l in labels):
            print(f"| {kind} | " + " | ".join(f"{results[l][0].get(kind, 0):.2f}" for l in labels) + " |")
    print("| **device busy** | " + " | ".join(f"**{results[l][1]:.2f}**" for l in labels) + " |")
    print("| span (busy + idle) | " + " | ".join(f"{results[l][2]:.2f}" for l in labels) + " |")


if __name__ == "__main__":
    main()
