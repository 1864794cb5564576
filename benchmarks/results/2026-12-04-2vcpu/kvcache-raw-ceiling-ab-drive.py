"""Old tree vs new tree measure_raw_ceiling, one run each, interleaved, one broker."""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from flinkai.kafka.broker import LocalKafka
from flinkai.local.process import free_port

trees = {"before": "/tmp/i23s2/old", "after": "/work/main"}
code = "import json,sys; from flinkai_bench.kvcache_raw import measure_raw_ceiling; print(json.dumps(measure_raw_ceiling(sys.argv[1], runs=1)))"
out = {"runs": [], "load_start": os.getloadavg()}
with (
    tempfile.TemporaryDirectory() as work,
    LocalKafka(Path(work) / "kafka", port=free_port()) as broker,
):
    for _run in range(int(sys.argv[1])):
        for label, tree in trees.items():
            o = subprocess.run(
                ["/work/main/.venv/bin/python", "-c", code, broker.bootstrap],
                env={**os.environ, "PYTHONPATH": tree},
                cwd="/tmp",
                capture_output=True,
                text=True,
                check=True,
            )
            r = json.loads(o.stdout.strip().splitlines()[-1])
            out["runs"].append({"code": label, "load": os.getloadavg(), **r})
            print(label, r["runs"][0], flush=True)
out["load_end"] = os.getloadavg()
Path(sys.argv[2]).write_text(json.dumps(out, indent=1))
