# Reads a job's events as `stoke -o json watch ID` writes them, one JSON object a line, and
# prints one line: SECONDS STEP BEST STATE, where SECONDS is the time from the job's
# submission (its PENDING event) to its first evaluation at or above TARGET (a fraction)
# and STEP that evaluation's step ("never ?" if none reached it), BEST the best accuracy
# in percent and STATE the last state. For bench/time-to-accuracy.sh and
# scripts/gpu-check.sh.
#   python3 seconds_to_accuracy.py EVENTS.jsonl TARGET
import json, sys
from datetime import datetime
def seconds(stamp):  # RFC 3339 with nanoseconds; datetime takes microseconds
    day, frac = stamp.rstrip("Z").split(".") if "." in stamp else (stamp.rstrip("Z"), "0")
    return datetime.fromisoformat(day).timestamp() + float("0." + frac)
submitted = first_step = reached = None
best, state = 0.0, "?"
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    e = json.loads(line)
    t = seconds(e["time"])
    change = e.get("state_change")
    if change:
        state = change["state"].replace("JOB_STATE_", "")
        if submitted is None and state == "PENDING":
            submitted = t
    m = e.get("metrics", {})
    if "eval" in m:
        acc = m["eval"].get("accuracy", 0.0)
        best = max(best, acc)
        if reached is None and acc >= float(sys.argv[2]):
            reached = (t, int(m.get("step", 0)))
    elif m and first_step is None:
        first_step = t
if submitted is None:
    print("no-submit-event ? ? ? " + state)
else:
    to_target = f"{reached[0] - submitted:.2f} {reached[1]}" if reached else "never ?"
    print(f"{to_target} {100 * best:.2f} {state}")
