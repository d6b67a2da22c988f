"""The performance model of the simulated GPU judge server: continuous batching with a prefix cache.

This module has no clock and no I/O: `Engine.step()` plans one scheduler step and returns how long it
takes in *modelled* (GPU) seconds. The HTTP server (`server.py`) sleeps that long divided by its speedup;
`run_all_queued` and `run_closed_loop` advance a virtual clock instead, which gives the limit (an ideal
client holding every request queued) and what-if numbers (N workers, routing policies) in milliseconds of CPU.

The model (vLLM-v1 / SGLang mixed-chunk style, see README.md for where the constants come from):
- at most `max_running` requests run at once, and the KV cache must hold every running request's
  uncached prompt tokens plus its output; requests wait (FCFS) until both allow admission;
- each step costs ``step_fixed_s + per_running_s * decoding + prefill_per_token_s * prefill_tokens``:
  every request past prefill decodes one token, and up to `prefill_chunk` uncached prompt tokens are
  prefilled (the request that completes its prefill emits its first token in that step);
- a radix-style prefix cache over 16-token pages of the prompt text, LRU over leaves (a prompt's
  earlier pages are kept longer than its later ones), sized to the KV memory the running requests
  leave free. Pages enter the cache as they are prefilled (chunk by chunk, as SGLang caches unfinished
  requests), and a request's cached prefix is looked up when its prefill starts: a prompt sharing its
  first pages (the rubric) with one prefilled in an earlier step prefills only the rest.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Sequence

CHARS_PER_TOKEN = 4  # the same estimate the renderer uses; no tokenizer
PAGE_TOKENS = 16
PAGE_CHARS = PAGE_TOKENS * CHARS_PER_TOKEN


@dataclass(frozen=True)
class GpuModel:
    """One simulated GPU worker serving a 7B judge. Times are modelled (GPU) seconds; see README.md."""

    name: str = "simulated 7B judge on one H100-80GB (SGLang-like continuous batching)"
    max_running: int = 256
    step_fixed_s: float = 0.009  # a decode step at batch 1 (weights read once per step)
    per_running_s: float = 0.000045  # each running request's share of a decode step
    prefill_per_token_s: float = 0.00005  # 20,000 prompt tokens/s
    prefill_chunk: int = 8192  # uncached prompt tokens prefilled per step at most
    kv_capacity_tokens: int = 557_684
    context_tokens: int = 32_768

    def __post_init__(self):
        if self.max_running < 1 or self.prefill_chunk < 1 or self.kv_capacity_tokens < PAGE_TOKENS:
            raise ValueError("max_running, prefill_chunk and kv_capacity_tokens must be positive")
        if min(self.step_fixed_s, self.per_running_s, self.prefill_per_token_s) < 0:
            raise ValueError("step costs must be >= 0")

    def to_dict(self) -> dict:
        return asdict(self)


def estimate_tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def page_keys(text: str) -> list[int]:
    """Chained keys of the prompt's full 16-token pages: page i's key depends on pages 0..i, as a radix
    tree path does, so two prompts share key i exactly when their first i+1 pages are equal."""
    keys, previous = [], 0
    for start in range(0, len(text) - PAGE_CHARS + 1, PAGE_CHARS):
        previous = hash((previous, text[start:start + PAGE_CHARS]))
        keys.append(previous)
    return keys


class PrefixCache:
    """Cached pages, least recently used first. Touching a prompt's pages marks its first page most
    recent, so eviction takes leaves (a prompt's tail) before the shared prefix (the rubric)."""

    def __init__(self):
        self.pages: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self.pages)

    def peek(self, keys: Sequence[int]) -> int:
        """How many leading pages of `keys` are cached (nothing is touched)."""
        n = 0
        for key in keys:
            if key not in self.pages:
                break
            n += 1
        return n

    def match(self, keys: Sequence[int]) -> int:
        """How many leading pages of `keys` are cached (those are touched)."""
        n = 0
        for key in keys:
            if key not in self.pages:
                break
            n += 1
        for key in reversed(keys[:n]):
            self.pages.move_to_end(key)
        return n

    def insert(self, keys: Sequence[int]) -> None:
        for key in reversed(keys):
            self.pages[key] = None
            self.pages.move_to_end(key)

    def evict_to(self, max_pages: int) -> int:
        evicted = 0
        while len(self.pages) > max(0, max_pages):
            self.pages.popitem(last=False)
            evicted += 1
        return evicted


@dataclass(eq=False)
class SimRequest:
    """One chat completion inside the engine. `payload` is whatever the caller needs back (a future)."""

    keys: list[int]
    prompt_tokens: int
    output_tokens: int
    payload: Any = None
    arrival: float = 0.0
    cached_tokens: int = 0
    prefilled: int = 0
    generated: int = 0
    reserved: int = 0
    started: bool = False  # prefill began (its cached prefix is then known)
    admitted_at: float | None = None
    first_token_at: float | None = None
    finished_at: float | None = None

    @classmethod
    def from_prompt(cls, prompt: str, output_tokens: int, payload: Any = None) -> "SimRequest":
        return cls(keys=page_keys(prompt), prompt_tokens=estimate_tokens(prompt),
                   output_tokens=max(1, output_tokens), payload=payload)


@dataclass
class EngineStats:
    steps: int = 0
    busy_s: float = 0.0  # modelled seconds spent in steps
    prefill_tokens: int = 0
    cached_tokens: int = 0
    prompt_tokens: int = 0
    decode_tokens: int = 0
    finished: int = 0
    max_running: int = 0
    evicted_pages: int = 0
    outstanding_s: float = 0.0  # integral of (waiting + running) over busy time

    def to_dict(self) -> dict:
        data = asdict(self)
        data["mean_outstanding"] = round(self.outstanding_s / self.busy_s, 2) if self.busy_s else None
        data.pop("outstanding_s")
        data["cache_hit_rate"] = round(self.cached_tokens / self.prompt_tokens, 4) if self.prompt_tokens else None
        data["busy_s"] = round(self.busy_s, 6)
        return data


class ContextTooLong(ValueError):
    """The prompt plus its output exceed the model's context or the whole KV cache (an HTTP 400)."""


class Engine:
    """The scheduler of one worker. `submit` queues a request; `step` runs one scheduler step."""

    def __init__(self, model: GpuModel = GpuModel()):
        self.model = model
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.cache = PrefixCache()
        self.kv_used = 0
        self.clock = 0.0  # modelled seconds: the end of the last step
        self.stats = EngineStats()

    @property
    def load(self) -> int:
        return len(self.waiting) + len(self.running)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    def check(self, request: SimRequest) -> None:
        need = request.prompt_tokens + request.output_tokens
        if need > self.model.context_tokens or need > self.model.kv_capacity_tokens:
            raise ContextTooLong(f"prompt ({request.prompt_tokens} tokens) plus max output ({request.output_tokens}) "
                                 f"exceed the context of {self.model.context_tokens} tokens")

    def submit(self, request: SimRequest, now: float | None = None) -> None:
        self.check(request)
        request.arrival = self.clock if now is None else now
        self.waiting.append(request)

    def _admit(self, now: float) -> None:
        model = self.model
        while self.waiting and len(self.running) < model.max_running:
            request = self.waiting[0]
            # The reservation uses the prefix cached now; the match is taken again when the request's
            # prefill starts (pages prefilled meanwhile by earlier requests count then).
            cached = min(self.cache.peek(request.keys) * PAGE_TOKENS, request.prompt_tokens - 1)
            need = request.prompt_tokens - cached + request.output_tokens
            if self.running and self.kv_used + need > model.kv_capacity_tokens:
                break  # wait for memory
            self.waiting.popleft()
            request.reserved = need
            request.admitted_at = now
            self.kv_used += need
            self.running.append(request)
            self.stats.prompt_tokens += request.prompt_tokens
        self.stats.max_running = max(self.stats.max_running, len(self.running))
        free_pages = (self.model.kv_capacity_tokens - self.kv_used) // PAGE_TOKENS
        self.stats.evicted_pages += self.cache.evict_to(free_pages)

    def _start_prefill(self, request: SimRequest) -> None:
        cached = min(self.cache.match(request.keys) * PAGE_TOKENS, request.prompt_tokens - 1)
        request.cached_tokens = request.prefilled = cached
        reserved = request.prompt_tokens - cached + request.output_tokens
        self.kv_used += reserved - request.reserved
        request.reserved = reserved
        request.started = True
        self.stats.cached_tokens += cached

    def step(self, now: float | None = None) -> tuple[float, list[SimRequest]]:
        """Plan and apply one step starting at `now` (default: the engine's clock). Returns its
        modelled duration and the requests it finished (0.0 and [] when idle)."""
        now = self.clock if now is None else max(now, self.clock)
        self._admit(now)
        if not self.running:
            self.clock = now
            return 0.0, []
        model = self.model
        decoding = [r for r in self.running if r.started and r.prefilled >= r.prompt_tokens]
        budget, chunks = model.prefill_chunk, []
        for request in self.running:
            if budget <= 0:
                break
            if not request.started:
                self._start_prefill(request)
            remaining = request.prompt_tokens - request.prefilled
            if remaining > 0:
                take = min(remaining, budget)
                chunks.append((request, take))
                budget -= take
        prefill = model.prefill_chunk - budget
        duration = model.step_fixed_s + model.per_running_s * len(decoding) + model.prefill_per_token_s * prefill
        end = now + duration
        for request in decoding:
            request.generated += 1
        for request, take in chunks:
            request.prefilled += take
            self.cache.insert(request.keys[: request.prefilled // PAGE_TOKENS])  # prefilled pages are cached
            if request.prefilled >= request.prompt_tokens:
                request.generated += 1  # prefill emits the first token
                request.first_token_at = end
        finished = [r for r in self.running if r.generated >= r.output_tokens]
        if finished:
            done = set(map(id, finished))
            self.running = [r for r in self.running if id(r) not in done]
            for request in finished:
                request.finished_at = end
                self.kv_used -= request.reserved
        stats = self.stats
        stats.steps += 1
        stats.busy_s += duration
        stats.outstanding_s += (len(self.waiting) + len(self.running) + len(finished)) * duration
        stats.prefill_tokens += prefill
        stats.decode_tokens += len(decoding) + sum(1 for r, _ in chunks if r.first_token_at == end)
        stats.finished += len(finished)
        self.clock = end
        return duration, finished


# -- routing over several workers (what sglang-router does) -------------------------------------------

class Router:
    """Chooses a worker for each request. ``round_robin``, or ``cache_aware`` as sglang-router's
    policy: when the workers' loads are imbalanced (max - min > `balance_abs` and max > `balance_rel`
    * min) the least loaded one; otherwise the worker whose approximate prefix tree (the pages of the
    prompts routed to it) matches most of the prompt if that share exceeds `cache_threshold`, else the
    worker with the smallest tree. Each worker's tree is bounded to its KV capacity in pages (LRU).
    Defaults: the SGLang model gateway's / vLLM router's current ones (cache_threshold 0.3,
    balance_abs_threshold 64, balance_rel_threshold 1.5; see README.md)."""

    POLICIES = ("round_robin", "cache_aware")

    def __init__(self, n_workers: int, policy: str = "round_robin", cache_threshold: float = 0.3,
                 balance_abs: int = 64, balance_rel: float = 1.5, max_tree_pages: int | None = None):
        if policy not in self.POLICIES:
            raise ValueError(f"policy must be one of {self.POLICIES}, got {policy!r}")
        self.n = n_workers
        self.policy = policy
        self.cache_threshold = cache_threshold
        self.balance_abs = balance_abs
        self.balance_rel = balance_rel
        self.max_tree_pages = max_tree_pages
        self.trees = [PrefixCache() for _ in range(n_workers)]
        self.next = 0
        self.decisions = {"round_robin": 0, "cache_match": 0, "smallest_tree": 0, "least_loaded": 0}

    def choose(self, keys: Sequence[int], loads: Sequence[int]) -> int:
        if self.policy == "round_robin" or self.n == 1:
            worker, self.next = self.next % self.n, self.next + 1
            self.decisions["round_robin"] += 1
            return worker
        low, high = min(loads), max(loads)
        if high - low > self.balance_abs and high > self.balance_rel * low:
            worker = loads.index(low)
            self.decisions["least_loaded"] += 1
        else:
            matches = [tree.peek(keys) for tree in self.trees]
            best = max(range(self.n), key=lambda i: (matches[i], -loads[i]))
            if keys and matches[best] / len(keys) > self.cache_threshold:
                worker = best
                self.decisions["cache_match"] += 1
            else:
                worker = min(range(self.n), key=lambda i: (len(self.trees[i]), loads[i]))
                self.decisions["smallest_tree"] += 1
        tree = self.trees[worker]
        tree.insert(keys)
        if self.max_tree_pages is not None:
            tree.evict_to(self.max_tree_pages)
        return worker


# -- virtual-time runs: the limit and what-if numbers ------------------------------------------------

@dataclass
class VirtualRun:
    requests: int
    makespan_s: float  # modelled seconds from the first submission to the last completion
    workers: int
    policy: str
    concurrency: int | None
    engines: list[dict] = field(default_factory=list)
    router: dict | None = None
    latency_p50_s: float | None = None
    latency_p90_s: float | None = None

    @property
    def throughput(self) -> float:
        return self.requests / self.makespan_s if self.makespan_s > 0 else float("inf")

    def to_dict(self) -> dict:
        data = asdict(self)
        data["throughput_req_per_modelled_s"] = round(self.throughput, 4)
        data["makespan_s"] = round(self.makespan_s, 4)
        return data


def run_closed_loop(requests: Iterable[SimRequest], model: GpuModel = GpuModel(), concurrency: int | None = None,
                    workers: int = 1, policy: str = "round_robin", client_gap_s: float = 0.0,
                    router_options: dict | None = None) -> VirtualRun:
    """Run `requests` through `workers` engines in virtual time. With `concurrency` None every request is
    queued at t=0 (the ideal client: the limit); otherwise a closed loop keeps `concurrency` requests
    outstanding, each next one submitted `client_gap_s` after a completion."""
    pending = deque(requests)
    total = len(pending)
    engines = [Engine(model) for _ in range(workers)]
    router = Router(workers, policy, max_tree_pages=model.kv_capacity_tokens // PAGE_TOKENS, **(router_options or {}))
    arrivals: list[tuple[float, SimRequest]] = []  # (time, request) not yet routed, sorted by time
    latencies: list[float] = []
    limit = total if concurrency is None else concurrency
    for _ in range(min(limit, total)):
        arrivals.append((0.0, pending.popleft()))
    step_end = [None] * workers  # end time of each engine's current step
    step_done: list[list[SimRequest]] = [[] for _ in range(workers)]
    now, last = 0.0, 0.0

    def route(at: float) -> None:
        while arrivals and arrivals[0][0] <= at:
            time, request = arrivals.pop(0)
            worker = router.choose(request.keys, [e.load for e in engines])
            engines[worker].submit(request, time)

    while True:
        route(now)
        for i, engine in enumerate(engines):
            if step_end[i] is None and not engine.idle:
                duration, finished = engine.step(now)
                step_end[i], step_done[i] = now + duration, finished
        candidates = [t for t in step_end if t is not None] + ([arrivals[0][0]] if arrivals else [])
        if not candidates:
            break
        now = min(candidates)
        for i in range(workers):
            if step_end[i] is not None and step_end[i] <= now:
                for request in step_done[i]:
                    latencies.append(request.finished_at - request.arrival)
                    last = max(last, request.finished_at)
                    if pending:
                        arrivals.append((request.finished_at + client_gap_s, pending.popleft()))
                arrivals.sort(key=lambda item: item[0])
                step_end[i], step_done[i] = None, []
    latencies.sort()
    pick = (lambda q: round(latencies[min(len(latencies) - 1, int(q * len(latencies)))], 4)) if latencies else None
    return VirtualRun(requests=total, makespan_s=last, workers=workers, policy=policy, concurrency=concurrency,
                      engines=[e.stats.to_dict() for e in engines],
                      router={"policy": policy, "decisions": router.decisions} if workers > 1 else None,
                      latency_p50_s=pick(0.5) if pick else None, latency_p90_s=pick(0.9) if pick else None)


def run_all_queued(requests: Iterable[SimRequest], model: GpuModel = GpuModel(), workers: int = 1,
                   policy: str = "round_robin") -> VirtualRun:
    """The limit: every request queued at t=0, as an ideal client would hold them."""
    return run_closed_loop(requests, model, None, workers, policy)
