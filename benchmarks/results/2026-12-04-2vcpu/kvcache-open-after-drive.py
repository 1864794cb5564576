import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from flinkai.kafka.broker import LocalKafka
from flinkai.local.process import free_port

script = "/work/main/benchmarks/results/2026-12-04-2vcpu/kvcache-open-ab.py"
py = "/work/main/.venv/bin/python"
trees = {"after": "/work/main"}
mb = float(sys.argv[1])
out_path = sys.argv[2]
profile = len(sys.argv) > 3
res = {"fill_mb": mb, "runs": [], "load_start": os.getloadavg()}
with (
    tempfile.TemporaryDirectory() as work,
    LocalKafka(Path(work) / "kafka", port=free_port()) as broker,
):
    for label, tree in trees.items():
        env = {**os.environ, "PYTHONPATH": tree}
        o = subprocess.run(
            [
                py,
                script,
                "--bootstrap",
                broker.bootstrap,
                "--topic",
                f"open-{label}",
                "--fill",
                "--mb",
                str(mb),
            ],
            env=env,
            cwd="/tmp",
            capture_output=True,
            text=True,
            check=True,
        )
        res[f"fill_{label}"] = json.loads(o.stdout.strip().splitlines()[-1])
    for i in range(3):
        for label, tree in trees.items():
            env = {**os.environ, "PYTHONPATH": tree}
            cmd = [
                py,
                script,
                "--bootstrap",
                broker.bootstrap,
                "--topic",
                f"open-{label}",
                "--open",
            ]
            if profile and i == 2:
                cmd = [
                    "/work/main/.venv/bin/py-spy",
                    "record",
                    "--idle",
                    "-r",
                    "200",
                    "-f",
                    "raw",
                    "-o",
                    f"/tmp/i23s2/open-{label}.txt",
                    "--",
                    *cmd,
                ]
            o = subprocess.run(cmd, env=env, cwd="/tmp", capture_output=True, text=True, check=True)
            line = [ln for ln in o.stdout.splitlines() if ln.startswith("{")][-1]
            res["runs"].append({"code": label, **json.loads(line)})
            print(label, res["runs"][-1], flush=True)
res["load_end"] = os.getloadavg()
Path(out_path).write_text(json.dumps(res, indent=1))
