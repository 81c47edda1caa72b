"""Summarise `gpuclass status` JSON from stdin as a table, like `kubectl get gpuclasses`."""

import json
import sys

items = json.load(sys.stdin)["items"]
print(f"{'NAME':28} {'FREE':>5} {'MAXFREE/NODE':>12} {'MAXUNITS/NODE':>13}  READY  PROBLEMS")
for item in items:
    status = item["status"]
    conditions = {c["type"]: c for c in status["conditions"]}
    problems = [
        c["message"] for t, c in conditions.items() if t != "Ready" and c["status"] == "True"
    ]
    print(
        f"{item['name']:28} {status['free']:>5} {status['maxFreePerNode']:>12} {status['maxUnitsPerNode']:>13}"
        f"  {conditions['Ready']['status']:5}  {'; '.join(problems)}"
    )
