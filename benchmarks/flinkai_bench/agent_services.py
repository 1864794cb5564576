"""The risk agents as three HTTP microservices (aiohttp), for ``flinkai bench agents``.

Each runs in its own process and loads what it needs once:

* ``fraud``: ``POST /score {"features": [29 floats]}`` -> ``{"score": p}`` (ONNX model);
* ``credit``: ``POST /score {"account_id"}`` -> ``{"status", "score", "limit"}`` (ONNX
  model and the account table);
* ``limit``: ``POST /check {"account_id", "ts", "amount", "limit"}`` -> ``{"over",
  "spend"}``; keeps each account's 24 h spend in memory and adds the amount when it
  is within the limit (the last step: within the limit means approved).

Two clients, each a Kafka consumer writing one decision record per transaction:

* :func:`serial_client`: one transaction at a time, the three calls in series (the
  design's comparison);
* :func:`concurrent_client`: asyncio and aiohttp, up to ``inflight`` transactions at
  once; each transaction's calls stay in series and an account's transactions are
  decided in arrival order (a lock per account), so the limit service sees the same
  order as the graph's keyed state.

Each service is one process with one aiohttp event loop; the OS shares the machine's
cores between the three services, the client and the broker (nothing is pinned).

Run one with ``python -m flinkai_bench.agent_services NAME --port P --models DIR``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = ["SERVICES", "concurrent_client", "main", "make_app", "serial_client"]

SERVICES = ("fraud", "credit", "limit")


def make_app(name: str, models_dir: Path | None, accounts: Path | None) -> Any:
    """The aiohttp application of one service."""
    from aiohttp import web

    from flinkai.agents.data import load_accounts
    from flinkai.agents.models import RiskModels
    from flinkai.agents.window import SpendWindow

    app = web.Application()
    if name == "fraud":
        fraud = RiskModels(models_dir).fraud

        async def score_fraud(request: web.Request) -> web.Response:
            body = await request.json()
            return web.json_response({"score": fraud.score(body["features"])})

        app.router.add_post("/score", score_fraud)
    elif name == "credit":
        credit = RiskModels(models_dir).credit
        table = load_accounts(accounts)

        async def score_credit(request: web.Request) -> web.Response:
            account = table.get((await request.json())["account_id"])
            if account is None:
                return web.json_response({"status": "unknown_account"})
            p = credit.score(account.features)
            status = "high_risk" if p >= credit.info.threshold else "ok"
            return web.json_response({"status": status, "score": p, "limit": account.credit_limit})

        app.router.add_post("/score", score_credit)
    elif name == "limit":
        windows: dict[str, SpendWindow] = {}

        async def check(request: web.Request) -> web.Response:
            body = await request.json()
            window = windows.get(body["account_id"], SpendWindow())
            spend = window.spend(int(body["ts"]))
            over = spend + float(body["amount"]) > float(body["limit"])
            if not over:
                windows[body["account_id"]] = window.add(int(body["ts"]), float(body["amount"]))
            return web.json_response({"over": over, "spend": spend})

        app.router.add_post("/check", check)
    else:
        raise ValueError(f"unknown service {name!r}; expected one of {SERVICES}")

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app.router.add_get("/health", health)
    return app


def serial_client(bootstrap: str, source: str, sink: str, ports: dict[str, int],
                  fraud_threshold: float) -> None:  # fmt: skip
    """A plain Kafka consumer that calls the three services in series per transaction.

    The same steps as the graph: fraud, then (unless the score declines) credit, then
    (unless the account is unknown or risky) limit; one decision record per
    transaction on ``sink``. Runs until killed.
    """
    import json

    import httpx
    from kafka import KafkaConsumer, KafkaProducer

    from flinkai.agents.data import V_FIELDS

    consumer = KafkaConsumer(source, bootstrap_servers=bootstrap, group_id=None,
                             auto_offset_reset="earliest", fetch_max_wait_ms=5)  # fmt: skip
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, acks=1)
    url = {n: f"http://127.0.0.1:{p}" for n, p in ports.items()}
    with httpx.Client(timeout=30.0) as http:
        for record in consumer:
            e = json.loads(record.value)
            path, reasons = ["fraud"], []
            score = http.post(f"{url['fraud']}/score",
                              json={"features": [*(e[v] for v in V_FIELDS), e["amount"]]}
                              ).json()["score"]  # fmt: skip
            reasons.append("fraud_high" if score >= fraud_threshold else "fraud_ok")
            approved = False
            if reasons[-1] == "fraud_ok":
                path.append("credit")
                credit = http.post(f"{url['credit']}/score",
                                   json={"account_id": e["account_id"]}).json()  # fmt: skip
                status = credit["status"]
                reasons.append({"ok": "credit_ok", "high_risk": "credit_high_risk"}.get(
                    status, "unknown_account"))  # fmt: skip
                if status == "ok":
                    path.append("limit")
                    check = http.post(f"{url['limit']}/check", json={
                        "account_id": e["account_id"], "ts": e["ts"], "amount": e["amount"],
                        "limit": credit["limit"]}).json()  # fmt: skip
                    reasons.append("over_limit" if check["over"] else "within_limit")
                    approved = not check["over"]
            path.append("decide")
            decision = {"tx_id": e["tx_id"], "approved": approved, "fraud_score": score,
                        "reasons": list(reasons), "path": list(path)}  # fmt: skip
            producer.send(sink, json.dumps(decision).encode())


def concurrent_client(bootstrap: str, source: str, sink: str, ports: dict[str, int],
                      fraud_threshold: float, inflight: int) -> None:  # fmt: skip
    """Like :func:`serial_client`, with up to ``inflight`` transactions in flight.

    Runs until killed.
    """
    import asyncio
    import json

    import aiohttp
    from kafka import KafkaConsumer, KafkaProducer

    from flinkai.agents.data import V_FIELDS

    consumer = KafkaConsumer(source, bootstrap_servers=bootstrap, group_id=None,
                             auto_offset_reset="earliest", fetch_max_wait_ms=5)  # fmt: skip
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, acks=1)
    url = {n: f"http://127.0.0.1:{p}" for n, p in ports.items()}

    async def post(http: aiohttp.ClientSession, where: str, body: dict[str, Any]) -> Any:
        async with http.post(where, json=body) as response:
            return await response.json()

    async def decide(http: aiohttp.ClientSession, e: dict[str, Any]) -> dict[str, Any]:
        path, reasons = ["fraud"], []
        body = {"features": [*(e[v] for v in V_FIELDS), e["amount"]]}
        score = (await post(http, f"{url['fraud']}/score", body))["score"]
        reasons.append("fraud_high" if score >= fraud_threshold else "fraud_ok")
        approved = False
        if reasons[-1] == "fraud_ok":
            path.append("credit")
            credit = await post(http, f"{url['credit']}/score", {"account_id": e["account_id"]})
            status = credit["status"]
            reasons.append({"ok": "credit_ok", "high_risk": "credit_high_risk"}.get(
                status, "unknown_account"))  # fmt: skip
            if status == "ok":
                path.append("limit")
                check = await post(http, f"{url['limit']}/check", {
                    "account_id": e["account_id"], "ts": e["ts"], "amount": e["amount"],
                    "limit": credit["limit"]})  # fmt: skip
                reasons.append("over_limit" if check["over"] else "within_limit")
                approved = not check["over"]
        path.append("decide")
        return {"tx_id": e["tx_id"], "approved": approved, "fraud_score": score,
                "reasons": reasons, "path": path}  # fmt: skip

    async def run() -> None:
        loop = asyncio.get_running_loop()
        slots = asyncio.Semaphore(inflight)
        locks: dict[str, asyncio.Lock] = {}
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as http:

            async def one(e: dict[str, Any]) -> None:
                try:
                    async with locks.setdefault(e["account_id"], asyncio.Lock()):
                        decision = await decide(http, e)
                    producer.send(sink, json.dumps(decision).encode())
                finally:
                    slots.release()

            tasks: set[asyncio.Task[None]] = set()
            while True:
                polled = await loop.run_in_executor(None, lambda: consumer.poll(timeout_ms=20))
                for records in polled.values():
                    for record in records:
                        await slots.acquire()
                        task = asyncio.ensure_future(one(json.loads(record.value)))
                        tasks.add(task)
                        task.add_done_callback(tasks.discard)

    asyncio.run(run())


def main(argv: list[str] | None = None) -> None:
    from aiohttp import web

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("name", choices=(*SERVICES, "client"))
    p.add_argument("--inflight", type=int, default=0,
                   help="client: transactions in flight (0: the serial client)")  # fmt: skip
    p.add_argument("--port", type=int)
    p.add_argument("--models")
    p.add_argument("--accounts")
    p.add_argument("--bootstrap")
    p.add_argument("--source")
    p.add_argument("--sink")
    p.add_argument("--ports", help="fraud,credit,limit ports (client)")
    p.add_argument("--fraud-threshold", type=float)
    args = p.parse_args(argv)
    if args.name == "client":
        ports = dict(zip(SERVICES, (int(x) for x in args.ports.split(",")), strict=True))
        if args.inflight > 0:
            concurrent_client(args.bootstrap, args.source, args.sink, ports,
                              args.fraud_threshold, args.inflight)  # fmt: skip
        else:
            serial_client(args.bootstrap, args.source, args.sink, ports, args.fraud_threshold)
        return
    app = make_app(args.name, Path(args.models) if args.models else None,
                   Path(args.accounts) if args.accounts else None)  # fmt: skip
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
