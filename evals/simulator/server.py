"""The simulated GPU judge server: OpenAI-compatible HTTP (aiohttp) in front of `model.Engine` workers.

    python -m evals.simulator --port 30000 --speedup 10            # one worker
    python -m evals.simulator --port 30000 --workers 4 --policy cache_aware

Routes: ``POST /v1/chat/completions`` (structured output as the judge sends it: ``response_format``
``json_schema`` or ``json_object`` + ``schema``), ``GET /v1/models``, ``GET /health``, and
``GET /sim/stats`` (the scheduler's counters). Every response says it is simulated: the model name,
``system_fingerprint: "simulated"``, the ``X-Simulated: true`` header and the verdict reasons.

Time: real time, with the model's constants divided by `speedup` (a step the model says takes 20 ms
sleeps 2 ms at speedup 10). Each worker's steps are scheduled against a deadline, so sleep overshoot
is caught up, and steps shorter than 2 ms run back to back instead of sleeping (answers may come up to
2 ms early); when the process falls more than `max_lag_s` behind (a busy CPU), the worker restarts from
now and the lost time is counted in the stats (``lag_reset_s``).

Faults (`FaultPlan`): per request, drawn deterministically from the request's arrival number and the
seed: ``garbage`` (an answer that is not JSON), ``truncated`` (cut at ``max_tokens``, finish reason
``length``), ``http_500``, ``stall`` (answers after `stall_s`; 0 = never, until the server stops);
and ``die_after`` N requests (later ones have their connection dropped and the server stops listening).
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

import orjson
from aiohttp import web

from evals.simulator import judging
from evals.simulator.model import ContextTooLong, Engine, GpuModel, Router, SimRequest, estimate_tokens

DEFAULT_MODEL_NAME = "simulated-7b-judge@sim1"
FAULT_KINDS = ("garbage", "truncated", "http_500", "stall")
SLEEP_GRANULARITY_S = 0.002  # asyncio sleeps shorter than this overshoot (epoll waits whole ms)
GARBAGE = "I think it went fine, probably. <no json here>"


@dataclass(frozen=True)
class FaultPlan:
    rates: dict = field(default_factory=dict)  # kind -> probability per request
    die_after: int | None = None
    stall_s: float = 30.0
    seed: int = 0

    def __post_init__(self):
        unknown = set(self.rates) - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kind(s) {sorted(unknown)}; expected {FAULT_KINDS}")
        if sum(self.rates.values()) > 1.0 or min(self.rates.values(), default=0) < 0:
            raise ValueError("fault rates must be >= 0 and sum to at most 1")

    @classmethod
    def parse(cls, spec: str | None, **kwargs) -> "FaultPlan":
        """``"garbage=0.05,http_500=0.02"`` -> a plan."""
        rates = {}
        for part in filter(None, (spec or "").split(",")):
            name, _, value = part.partition("=")
            rates[name.strip()] = float(value)
        return cls(rates=rates, **kwargs)

    def fault_for(self, n: int) -> str | None:
        draw, edge = judging.uniform(self.seed, "fault", n), 0.0
        for kind in FAULT_KINDS:
            edge += self.rates.get(kind, 0.0)
            if draw < edge:
                return kind
        return None


def prompt_text(body: dict) -> str:
    """The prompt as the cache sees it: role-tagged message contents in order (system first)."""
    parts = []
    for message in body.get("messages") or []:
        content = message.get("content")
        if not isinstance(content, str):
            content = orjson.dumps(content).decode()
        parts.append(f"<|{message.get('role')}|>{content}")
    return "".join(parts)


def response_schema(body: dict) -> dict:
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        return (fmt.get("json_schema") or {}).get("schema") or {}
    return fmt.get("schema") or {}


def answer(body: dict) -> tuple[str, str]:
    """(kind, JSON content) of the simulated model's answer to a chat request."""
    messages = body.get("messages") or []
    system = "\n".join(str(m.get("content") or "") for m in messages if m.get("role") == "system")
    users = [m.get("content") for m in messages if m.get("role") == "user"]
    user = users[-1] if users and isinstance(users[-1], str) else ""
    properties = response_schema(body).get("properties") or {}
    if "passed" in properties and "score" in properties:
        episode = user.split("[[ ## trajectory ## ]]", 1)[-1].split("\n\nRespond with", 1)[0].strip()
        return "verdict", orjson.dumps(judging.verdict(system, episode, body.get("seed") or 0)).decode()
    if "new_instruction" in properties:
        return "reflection", orjson.dumps({"new_instruction": judging.reflect(user)}).decode()
    return "other", orjson.dumps(judging.placeholder(response_schema(body))).decode()


class SimServer:
    """The server. `start()` runs it on its own event loop in a daemon thread (tests, benchmarks);
    `serve()` runs it in the current loop (the CLI)."""

    def __init__(self, model: GpuModel = GpuModel(), *, speedup: float = 10.0, workers: int = 1,
                 policy: str = "round_robin", faults: FaultPlan = FaultPlan(), host: str = "127.0.0.1",
                 port: int = 0, model_name: str = DEFAULT_MODEL_NAME, max_lag_s: float = 0.05):
        if speedup <= 0:
            raise ValueError("speedup must be > 0")
        self.model = model
        self.speedup = speedup
        self.faults = faults
        self.host, self.port = host, port
        self.model_name = model_name
        self.max_lag_s = max_lag_s
        self.engines = [Engine(model) for _ in range(workers)]
        self.router = Router(workers, policy, max_tree_pages=model.kv_capacity_tokens // 16)
        self.policy = policy
        self.counts = {"requests": 0, "verdict": 0, "reflection": 0, "other": 0, "rejected": 0, "dropped": 0}
        self.injected = {kind: 0 for kind in FAULT_KINDS}
        self.lag = {"late_steps": 0, "max_late_s": 0.0, "lag_reset_s": 0.0, "resets": 0}
        self.started_wall: float | None = None
        self._wakes: list[asyncio.Event] = []
        self._t0 = 0.0
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._tasks: list[asyncio.Task] = []
        self._stopped: asyncio.Event | None = None
        self._dead = False

    # -- endpoints ---------------------------------------------------------------------------------
    @property
    def api_base(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def stats(self) -> dict:
        return {
            "simulated": True, "server": "evals/simulator", "model_name": self.model_name,
            "gpu_model": self.model.to_dict(), "speedup": self.speedup, "workers": len(self.engines),
            "policy": self.policy, "counts": dict(self.counts), "faults_injected": dict(self.injected),
            "fault_plan": {"rates": self.faults.rates, "die_after": self.faults.die_after,
                           "stall_s": self.faults.stall_s, "seed": self.faults.seed},
            "engines": [e.stats.to_dict() for e in self.engines],
            "router": self.router.decisions if len(self.engines) > 1 else None,
            "lag": {k: round(v, 4) if isinstance(v, float) else v for k, v in self.lag.items()},
            "modelled_clock_s": round(max(e.clock for e in self.engines), 4),
        }

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/sim/stats", lambda request: self._json(self.stats()))
        return app

    @staticmethod
    def _json(payload: dict, status: int = 200) -> web.Response:
        return web.Response(body=orjson.dumps(payload), status=status, content_type="application/json",
                            headers={"X-Simulated": "true"})

    async def _models(self, request: web.Request) -> web.Response:
        return self._json({"object": "list", "data": [{"id": self.model_name, "object": "model",
                                                       "owned_by": "simulated (evals/simulator)"}]})

    async def _health(self, request: web.Request) -> web.Response:
        return self._json({"status": "ok", "simulated": True})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        n = self.counts["requests"]
        self.counts["requests"] += 1
        if self._dead or (self.faults.die_after is not None and n >= self.faults.die_after):
            return self._drop(request)
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            self.counts["rejected"] += 1
            return self._json({"error": {"message": "request body is not JSON (simulated server)"}}, 400)
        fault = self.faults.fault_for(n)
        if fault:
            self.injected[fault] += 1
        try:
            if fault == "http_500":
                return self._json({"error": {"message": "simulated fault: HTTP 500", "code": 500}}, 500)
            if fault == "stall":
                if self.faults.stall_s > 0:
                    await asyncio.sleep(self.faults.stall_s)
                else:
                    await self._stopped.wait()
                    return self._drop(request)
            return await self._complete(request, body, fault)
        finally:
            if self.faults.die_after is not None and n + 1 == self.faults.die_after:
                self._dead = True
                asyncio.get_running_loop().create_task(self._close_site())

    def _drop(self, request: web.Request) -> web.Response:
        self.counts["dropped"] += 1
        if request.transport is not None:
            request.transport.abort()
        return web.Response(status=500)  # never reaches the client: the connection is gone

    async def _complete(self, request: web.Request, body: dict, fault: str | None) -> web.Response:
        kind, content = answer(body)
        self.counts[kind] += 1
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 256)
        finish = "stop"
        if fault == "garbage":
            content = GARBAGE
        out_tokens = estimate_tokens(content)
        if fault == "truncated" or out_tokens > max_tokens:
            keep = max(1, min(len(content) // 2, max_tokens * 4)) if fault == "truncated" else max_tokens * 4
            content, finish, out_tokens = content[:keep], "length", max_tokens
        prompt = prompt_text(body)
        future = asyncio.get_running_loop().create_future()
        sim = SimRequest.from_prompt(prompt, out_tokens, future)
        worker = self.router.choose(sim.keys, [e.load for e in self.engines])
        try:
            self.engines[worker].submit(sim, self._modelled_now())
        except ContextTooLong as error:
            self.counts["rejected"] += 1
            return self._json({"error": {"message": f"simulated server: {error}", "type": "invalid_request_error",
                                         "code": "context_length_exceeded"}}, 400)
        self._wakes[worker].set()
        await future
        usage = {"prompt_tokens": sim.prompt_tokens, "completion_tokens": out_tokens,
                 "total_tokens": sim.prompt_tokens + out_tokens,
                 "prompt_tokens_details": {"cached_tokens": sim.cached_tokens}}
        return self._json({
            "id": f"chatcmpl-simulated-{self.counts['requests']}-{id(sim):x}", "object": "chat.completion",
            "created": int(time.time()), "model": self.model_name, "system_fingerprint": "simulated",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": finish}],
            "usage": usage, "simulated": True, "worker": worker,
        })

    # -- the scheduler loop of one worker ---------------------------------------------------------------
    def _modelled_now(self) -> float:
        return (asyncio.get_running_loop().time() - self._t0) * self.speedup

    async def _run_engine(self, index: int) -> None:
        engine, wake = self.engines[index], self._wakes[index]
        loop = asyncio.get_running_loop()
        while True:
            if engine.idle:
                wake.clear()
                await wake.wait()
                start = max(engine.clock, self._modelled_now())
            else:
                now = self._modelled_now()
                behind = (now - engine.clock) / self.speedup
                if behind > self.max_lag_s:
                    self.lag["lag_reset_s"] += behind
                    self.lag["resets"] += 1
                    start = now
                else:
                    start = engine.clock
            duration, finished = engine.step(start)
            delay = self._t0 + engine.clock / self.speedup - loop.time()
            if delay > SLEEP_GRANULARITY_S:
                await asyncio.sleep(delay)
            else:  # too short to sleep accurately: run the next step now (at most 2 ms early)
                if delay < -SLEEP_GRANULARITY_S:
                    self.lag["late_steps"] += 1
                    self.lag["max_late_s"] = max(self.lag["max_late_s"], -delay)
                await asyncio.sleep(0)
            for sim in finished:
                if not sim.payload.done():
                    sim.payload.set_result(None)

    # -- lifecycle ---------------------------------------------------------------------------------------
    async def serve(self) -> None:
        """Start listening in the running loop; returns once the server accepts connections."""
        loop = asyncio.get_running_loop()
        self._t0 = loop.time()
        self.started_wall = time.time()
        self._stopped = asyncio.Event()
        self._wakes = [asyncio.Event() for _ in self.engines]
        self._tasks = [loop.create_task(self._run_engine(i)) for i in range(len(self.engines))]
        self._runner = web.AppRunner(self._app(), access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, backlog=1024)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]

    async def _close_site(self) -> None:
        for site in list(self._runner.sites) if self._runner else []:
            await site.stop()

    async def shutdown(self) -> None:
        if self._stopped is not None:
            self._stopped.set()
        for task in self._tasks:
            task.cancel()
        if self._runner is not None:
            await self._runner.cleanup()

    def start(self, timeout: float = 10.0) -> "SimServer":
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.serve())
            except BaseException as error:  # noqa: BLE001 - reported to the starting thread
                errors.append(error)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self.shutdown())
            loop.close()

        self._thread = threading.Thread(target=run, name="simulated-judge", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise TimeoutError("the simulated server did not start")
        if errors:
            raise errors[0]
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)

    def __enter__(self) -> "SimServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
