"""Summarise `gpuclass status` JSON from stdin as a table, like `kubectl get gpuclasses -o wide`.

Each class gets one line of figures and node counts, then its Schedulable condition
(can a VM start now, and why not) and any failing condition.
"""

import json
import sys

items = json.load(sys.stdin)["items"]
print(
    f"{'NAME':22} {'FREE':>4} {'MAXFREE/NODE':>12} {'MAXUNITS/NODE':>13} {'ADVERTISING':>11}"
    f" {'ELIGIBLE':>8}  READY  SCHEDULABLE"
)
for item in items:
    status = item["status"]
    conditions = {c["type"]: c for c in status["conditions"]}
    capacity = status["capacity"]
    schedulable = conditions["Schedulable"]
    print(
        f"{item['name']:22} {status['free']:>4} {status['maxFreePerNode']:>12}"
        f" {status['maxUnitsPerNode']:>13} {capacity['advertising']:>11} {capacity['eligible']:>8}"
        f"  {conditions['Ready']['status']:5}  {schedulable['status']} ({schedulable['reason']})"
    )
    if schedulable["status"] != "True":
        print(f"    why: {schedulable['message']}")
    for kind, condition in conditions.items():
        if kind not in ("Ready", "Schedulable") and condition["status"] == "True":
            print(f"    {kind}: {condition['message']}")
