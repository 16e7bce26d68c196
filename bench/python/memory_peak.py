#!/usr/bin/env python3
"""What is held at a run's peak of allocated device memory, from memory snapshots
(stoke-bench --memory-history, train_reference.py --memory-history): replays each
snapshot's trace of allocations and frees, finds the moment the allocated total was
highest, and lists the blocks alive then by size, largest share first, as Markdown.

    memory_peak.py [--top N] LABEL=SNAPSHOT.pickle ...

Sizes are what the caching allocator handed out (rounded up to 512 bytes). Blocks
allocated before the recording began are not in the trace, and are not counted."""
import argparse
import collections
import pickle
import sys

MIB = 2 ** 20


def replay(events, stop=None):
    """Allocated total after each event up to `stop` (all when None): (peak, index of the
    peak, {addr: size} alive after event `stop`)."""
    alive, total, peak, at = {}, 0, 0, 0
    for i, event in enumerate(events):
        action = event.get("action")
        if action == "alloc":
            alive[event["addr"]] = event["size"]
            total += event["size"]
        elif action == "free_completed":
            total -= alive.pop(event["addr"], 0)
        if total > peak:
            peak, at = total, i
        if i == stop:
            break
    return peak, at, alive


def peak_blocks(snapshot):
    """(peak bytes, event index of the peak, event count, {addr: size} alive then)."""
    events = [e for trace in snapshot.get("device_traces", []) for e in trace]
    peak, at, _ = replay(events)
    _, _, alive = replay(events, stop=at)
    return peak, at, len(events), alive


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=25, help="sizes listed per snapshot")
    parser.add_argument("snapshots", nargs="+", metavar="LABEL=PATH")
    args = parser.parse_args()
    for item in args.snapshots:
        label, _, path = item.partition("=")
        if not path:
            sys.exit(f"memory_peak.py: expected LABEL=PATH, got {item!r}")
        try:
            with open(path, "rb") as f:
                snapshot = pickle.load(f)
        except (OSError, pickle.UnpicklingError, EOFError) as e:
            sys.exit(f"memory_peak.py: cannot read {path}: {e}")
        peak, at, count, alive = peak_blocks(snapshot)
        if count == 0:
            print(f"### {label}\n\nno allocations recorded in {path}\n")
            continue
        by_size = collections.Counter(alive.values())
        print(f"### {label}\n")
        print(f"peak {peak / 2**30:.3f} GiB allocated, at event {at} of {count} "
              f"({100 * at / count:.0f}% through the recording); {len(alive)} blocks alive\n")
        print("| block MiB | blocks | MiB | share |")
        print("|---|---|---|---|")
        rows = sorted(by_size.items(), key=lambda kv: kv[0] * kv[1], reverse=True)
        for size, n in rows[:args.top]:
            print(f"| {size / MIB:.2f} | {n} | {size * n / MIB:.1f} | "
                  f"{100 * size * n / max(peak, 1):.1f}% |")
        rest = sum(size * n for size, n in rows[args.top:])
        if rest:
            print(f"| others | {sum(n for _, n in rows[args.top:])} | {rest / MIB:.1f} | "
                  f"{100 * rest / max(peak, 1):.1f}% |")
        print()


if __name__ == "__main__":
    main()
