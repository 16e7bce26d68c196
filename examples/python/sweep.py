#!/usr/bin/env python3
"""A learning-rate sweep, as a small service would run one through Stoke's Python SDK.

Submits one job per learning rate (a job file with only the learning rate and name
changed), waits for all of them, and picks the best by accuracy on held-out data;
optionally downloads the winner's model.

    ./build/bin/stoke-coordinator --data-dir /tmp/stoke &     # CPU workers if no GPU
    PYTHONPATH=client/python /usr/bin/python3 examples/python/sweep.py --steps 200
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

HERE = Path(__file__).resolve().parent
try:
    import stoke
except ImportError:  # run from a checkout without installing: the built package beside it
    sys.path.insert(0, str(HERE.parent.parent / "client" / "python"))
    import stoke


def submit_sweep(
    client: stoke.Client, base: stoke.JobSpec, rates: Sequence[float], steps: Optional[int]
) -> List[Tuple[float, stoke.Job]]:
    """Submits ``base`` once per learning rate; returns (rate, job) pairs."""
    jobs = []
    for rate in rates:
        spec = stoke.JobSpec()
        spec.CopyFrom(base)
        spec.name = f"{base.name}-lr{rate:g}"
        spec.optimizer.lr = rate
        if steps:
            spec.training.steps = steps
        job = client.submit(spec)
        print(f"submitted job {job.id} ({spec.name})", flush=True)
        jobs.append((rate, job))
    return jobs


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", help="coordinator host:port (default $STOKE_ADDRESS or 127.0.0.1:50051)")
    parser.add_argument("--spec", type=Path, default=HERE.parent / "mlp-synthetic.yaml", help="the job file to sweep")
    parser.add_argument("--lrs", default="0.0003,0.001,0.003", help="comma-separated learning rates")
    parser.add_argument("--steps", type=int, help="train this many steps instead of the file's")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds to wait for each job")
    parser.add_argument("--export", type=Path, help="write the best job's model here")
    args = parser.parse_args(argv)
    rates = [float(r) for r in args.lrs.split(",")]

    with stoke.Client(args.address) as client:
        try:
            jobs = submit_sweep(client, client.read_job_spec(args.spec), rates, args.steps)
        except stoke.StokeError as error:
            print(f"sweep: {error}", file=sys.stderr)
            return 2
        results = []
        for rate, job in jobs:
            job.wait(timeout=args.timeout)
            evaluation = job.latest_eval
            if job.state is stoke.JobState.SUCCEEDED and evaluation is not None:
                print(f"job {job.id} lr={rate:g}: eval accuracy {evaluation.accuracy:.4f}, loss {evaluation.loss:.4f}")
                results.append((evaluation.accuracy, rate, job))
            else:
                print(f"job {job.id} lr={rate:g}: {job.state} {job.message}")
        if not results:
            print("sweep: no job finished with an evaluation", file=sys.stderr)
            return 1
        accuracy, rate, best = max(results, key=lambda r: r[0])
        print(f"best: job {best.id} lr={rate:g} eval accuracy {accuracy:.4f}")
        if args.export:
            exported = best.export(args.export)
            print(f"wrote its model (step {exported.step}, {exported.bytes} bytes) to {exported.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
