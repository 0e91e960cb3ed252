"""The replica's step scheduler: every decision about the next step, with preemption at step
boundaries.

Pure (no model, no Ray, no torch, no clock of its own). The step runner
(``service.replica.step_runner.StepRunner``) reports facts and carries out decisions; every
decision is taken here:

* **Which shards form a job** (``coalesce_due``, ``group_arrivals``): the shards that arrived
  together, once the first has waited ``batch_wait_timeout_s`` or they hold ``max_batch_tokens``,
  grouped by options (and calibration) into jobs of at most ``max_batch_tokens`` tokens.
* **Each job's shape** (``cut_for_prefill``): at most ``max_prefill_tokens`` history tokens.
* **Which jobs start, which run, which leave, which share the step** (``Scheduler.next_step``):
  one frozen ``NextStep`` naming every job admitted, leaving and stepping, with the step's rows.

* **Out of memory** (``Scheduler.failed``, ``halve``): a job halved at its middle series, both
  halves queued, down to ``min_split`` series; else its shards fail.

The runner tells the scheduler which shards arrived (``arrive``, with the facts forming needs:
each series' prefill cost and length, paths, steps, request) or were cancelled
(``cancel_shard``; a formed job's, ``cancel``), which jobs ran (``stepped_together``, with whether
each one's next step can share) and which failed (``failed``). ``next_step(now)`` returns one
frozen ``NextStep``: the jobs formed (``JobPlan``: their ``(shard, lo, hi)`` row segments), those
leaving, starting and stepping, and the rows of each job in the step.

Policy:

* **Smallest remaining work first.** A job's remaining work is ``rows x steps_left`` (row-steps).
  The live job with the least runs the next step, so a 5-symbol request admitted while a
  1,000-symbol job decodes finishes after its own few steps, waiting at most one step of the big
  job. The big job keeps its state (caches, tokens) and resumes where it stopped: preemption costs
  nothing but the wait. Equal work goes to the job cut from the smaller shard (``shard_rows``),
  then by arrival: the replica cuts a big shard into jobs no bigger than a small request's own, and
  arrival alone put a small request behind every part of a big one that came first.
* **A smaller request starts at once.** A job whose first step (tokenize and prefill) is still to
  run goes before every decoding job when it was cut from a smaller shard than all of them: the
  small request's prefill waits for one step, not for the running big job to finish, and its rows
  then decode beside that job's (shared steps) instead of alone after it.
* **Prefill ahead.** While fewer than ``PREFILLED_AHEAD`` (2) live jobs have run a step, the next
  job is prefilled, unless a job of a smaller shard is live (that prefill would hold up a smaller
  request). So a small request that arrives while a big one runs always finds a decoding job to
  share its steps with, also when the job it joined finishes first: on a CPU, a 5-row job's step
  beside a 10-row job costs the machine ~1.5 ms more than that job's own step, and ~5 ms alone.
* **Aging.** The oldest live job runs next, whatever its size, once other jobs have run
  ``max_skipped`` steps since it last ran, so a stream of small jobs slows a big one down but never
  starves it: the oldest live job gets at least one step in every ``max_skipped + 1``, and since
  every job becomes the oldest once the jobs before it finish, every job's wait is bounded by the
  jobs older than it. Only the oldest ages: when every waiting job aged, the parts of one big
  request (the replica cuts it into jobs) all became "starved" together behind a small job that came
  later and each pushed a step (often its prefill, tens of decode steps long) ahead of it; one
  forced step per ``max_skipped`` keeps the bound and costs a small job at most that one step.
* **Admission within the memory budget.** Jobs are admitted in priority order (least work first,
  then arrival) while ``resident`` bytes of all live jobs together, plus the largest ``transient``
  bytes of any one step (steps run one at a time), stay within ``budget``. A job that does not fit
  waits; once it has waited ``max_skipped`` next steps it is considered first and nothing is
  admitted before it (the live jobs drain until it fits), so a big queued job is not starved by
  small ones either. A job is always admitted onto an empty device, fitting or not:
  out-of-memory splitting (the replica's) is the answer to a job the model says is too big.
* **Shared steps** (``joining``). The job picked to run takes other live jobs into its decode
  step (continuous batching): each job whose next step is a cached decode (the runner says so
  after each step: ``shares_steps``), least remaining work first, while the step holds at most
  ``max_step_rows`` rows and, unless ``share_within_request``, carries none of the requests
  already in it. On a CPU a step's cost grows with its rows: two parts of one big request
  stepping together fill the step, and a small job that arrives pushes one out; apart, the big
  request's parts decode one after another and the small job rides beside the one decoding.
  Every job in the step counts it (``stepped_together``).
* **Coalescing and cuts.** Shards that arrive within ``batch_wait_timeout_s`` of the first waiting
  one share jobs (one per options group, at most ``max_batch_tokens``). A job's first step
  (tokenize and prefill its whole history) cannot be preempted, so a job holds at most
  ``max_prefill_tokens`` history tokens; a shard that does not fit the current job's room starts a
  job of its own, and the last job of a shard that was cut takes no other: a small request's
  shard arriving beside a part of a big one never shares a job with the big one's series, so its
  own job has less work and runs first instead of after all of that part's jobs.
* **Determinism.** Ties break by arrival order; the next step depends only on the calls made,
  never on time.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

# a live job waits at most this many steps of other jobs (a small job of horizon <= 32 runs
# uninterrupted)
DEFAULT_MAX_SKIPPED = 32
# jobs the scheduler keeps prefilled (decoding) when no smaller request waits: the one decoding and
# the next, so a small request that arrives always finds a job to share its steps with
PREFILLED_AHEAD = 2


@dataclass
class BatchTicket:
    """What the scheduler knows of one job (a coalesced group of shards)."""

    job_id: int
    rows: int  # series x sample paths
    steps: int  # decode steps to finish (the horizon)
    resident_bytes: int = 0  # memory the job holds while admitted (inputs, caches)
    transient_bytes: int = 0  # extra memory while one of its steps runs
    steps_left: int = -1  # -1: ``steps``
    # rows of the largest shard the job carries (a part of): equal work goes to the smaller one
    shard_rows: int = 0
    cancelled: bool = False
    started: bool = False  # admitted (its first step, the prefill, may run)
    # the requests whose series it carries (jobs of one request may be kept out of one step)
    requests: frozenset[str] = field(default=frozenset(), compare=False)
    # its next step can run inside a shared decode step (the runner's report after each step)
    shares_steps: bool = False
    # the oldest live job: steps of others since it last ran; queued: next steps it waited
    skipped: int = 0
    arrival: int = field(default=0, compare=False)  # order of submission

    def __post_init__(self) -> None:
        if self.steps_left < 0:
            self.steps_left = self.steps

    @property
    def has_stepped(self) -> bool:
        """It ran its first step (tokenize and prefill): it can share decode steps."""
        return self.steps_left < self.steps

    @property
    def work(self) -> int:
        """Remaining row-steps: the priority (smaller runs first)."""
        return self.rows * max(self.steps_left, 0)

    @property
    def priority(self) -> tuple[int, int, int]:
        """Smaller runs first: remaining work, then the size of the shard it was cut from, then
        arrival."""
        return (self.work, self.shard_rows, self.arrival)


@dataclass(frozen=True)
class NextStep:
    """One complete step, decided: make the jobs ``formed`` (from shards that arrived, or halves of
    a job out of memory), close ``leave``, start ``admit`` (in order), then run one decode step of
    every job in ``step`` together (``run`` first; empty: nothing to run). ``step_segments``
    names the rows of each job in ``step``: its ``(shard, lo, hi)`` segments."""

    leave: tuple[int, ...] = ()  # cancelled jobs: their engine state is freed
    admit: tuple[int, ...] = ()  # queued jobs to start (tokenize, set up), in order
    run: int | None = None  # the picked job (None: nothing to run)
    admitted_mid_batch: int = 0  # of ``admit``, jobs started while another job was mid-decode
    step: tuple[int, ...] = ()  # every job in the decode step: ``run``, then those joining it
    step_rows: int = 0  # rows (series x sample paths) of all of them
    formed: tuple[JobPlan, ...] = ()  # jobs made since the last step, queued (before ``admit``)
    step_segments: tuple[tuple[tuple[object, int, int], ...], ...] = ()  # per job in ``step``


def joining(
    picked_rows: int,
    other_rows: Sequence[int],
    max_step_rows: int,
    share_within_request: bool = True,
    picked_requests: frozenset[str] = frozenset(),
    other_requests: Sequence[frozenset[str]] | None = None,
) -> list[int]:
    """Which of the other live jobs (their rows, in priority order) join the picked job's decode
    step: each in turn while the step stays within ``max_step_rows`` rows and, unless
    ``share_within_request``, carries none of the requests already in the step -> their indices."""
    joined: list[int] = []
    rows = picked_rows
    taken = set(picked_requests)
    for i, n in enumerate(other_rows):
        requests = other_requests[i] if other_requests is not None else frozenset()
        if rows + n > max_step_rows:
            continue
        if not share_within_request and taken & requests:
            continue
        joined.append(i)
        rows += n
        taken |= requests
    return joined


@dataclass(frozen=True)
class Arrival:
    """A shard waiting at the replica, as the scheduler sees it: the facts its rules decide by.
    The fields after ``cancelled`` are what forming the shard's jobs needs (their defaults keep
    tests of the bare coalescing rule short)."""

    key: Hashable  # its options group: shards of one group may share a job
    tokens: int  # rows x (lookback + horizon)
    arrived: float  # the runner's clock when it arrived
    cancelled: bool = False
    ref: object = field(default=None, compare=False)  # the runner's handle on the shard (opaque)
    costs: tuple[int, ...] = ()  # prefill tokens of each of its series
    lengths: tuple[int, ...] = ()  # history rows of each of its series (the memory model's input)
    paths: int = 1  # sample paths of each series (rows = series x paths)
    steps: int = 1  # decode steps of its jobs (the horizon)
    request: str = ""  # the request it is a part of

    @property
    def series(self) -> int:
        return len(self.lengths)


@dataclass(frozen=True)
class JobPlan:
    """One job the scheduler formed: which rows it carries, as ``(shard, lo, hi)`` segments
    (series ``lo:hi`` of the shard whose runner handle is ``shard``), in order."""

    job_id: int
    key: Hashable  # the options group of all its shards
    segments: tuple[tuple[object, int, int], ...]

    @property
    def series(self) -> int:
        return sum(hi - lo for _, lo, hi in self.segments)


def coalesce_due(arrivals: Sequence[Arrival], now: float, wait_s: float, max_tokens: int) -> bool:
    """Whether the waiting shards form jobs now: the first has waited ``wait_s``, or together they
    hold ``max_tokens`` (more would not fit one job anyway)."""
    if not arrivals:
        return False
    return arrivals[0].arrived + wait_s <= now or sum(a.tokens for a in arrivals) >= max_tokens


def group_arrivals(arrivals: Sequence[Arrival], max_tokens: int) -> list[list[int]]:
    """The waiting shards (indices into ``arrivals``) grouped into jobs: one per options group, in
    order of each group's first shard, a new job when the next shard would take the current one
    past ``max_tokens``; cancelled shards are left out."""
    groups: dict[Hashable, list[list[int]]] = {}
    used: dict[Hashable, int] = {}
    for i, a in enumerate(arrivals):
        if a.cancelled:
            continue
        chunks = groups.setdefault(a.key, [[]])
        if chunks[-1] and used[a.key] + a.tokens > max_tokens:
            chunks.append([])
            used[a.key] = 0
        chunks[-1].append(i)
        used[a.key] = used.get(a.key, 0) + a.tokens
    return [chunk for chunks in groups.values() for chunk in chunks]


def cut_for_prefill(
    costs: Sequence[Sequence[int]], cap: int | None
) -> list[list[tuple[int, int, int]]]:
    """A job's shards cut into jobs of at most ``cap`` prefill tokens. ``costs[k]``: the prefill
    tokens of each series of the job's k-th shard segment -> jobs, each a list of ``(k, lo, hi)``:
    series ``lo:hi`` of segment k (offsets within the segment). One series is never cut; shards
    that fit are packed together; a shard that does not fit the current job's room starts a job of
    its own; the last job of a shard that was cut takes no other. ``cap`` 0 or None: no cut."""
    if not cap:
        return [[(k, 0, len(c)) for k, c in enumerate(costs)]]
    jobs: list[list[tuple[int, int, int]]] = [[]]
    used = 0
    for k, series in enumerate(costs):
        if used and used + sum(series) > cap:  # no room for all of it: a job of its own
            jobs.append([])
            used = 0
        lo, cut = 0, False
        for i, cost in enumerate(series):
            if used and used + cost > cap:
                if i > lo:
                    jobs[-1].append((k, lo, i))
                jobs.append([])
                lo, used, cut = i, 0, True
            used += cost
        jobs[-1].append((k, lo, len(series)))
        if cut:  # its last job takes no other shard
            jobs.append([])
            used = 0
    return [j for j in jobs if j]


def halve(segments: Sequence[tuple[Any, int, int]]) -> tuple[list, list]:
    """A job's ``(shard, lo, hi)`` segments split at its middle series (a segment may be cut in
    two): the two jobs an out-of-memory job becomes."""
    half = sum(hi - lo for _, lo, hi in segments) // 2
    first: list = []
    second: list = []
    seen = 0
    for ref, lo, hi in segments:
        n = hi - lo
        if seen + n <= half:
            first.append((ref, lo, hi))
        elif seen >= half:
            second.append((ref, lo, hi))
        else:
            cut = lo + (half - seen)
            first.append((ref, lo, cut))
            second.append((ref, cut, hi))
        seen += n
    return first, second


class Scheduler:
    """Plans the replica's step loop; see the module docstring for the policy."""

    def __init__(
        self,
        budget_bytes: int,
        max_skipped: int = DEFAULT_MAX_SKIPPED,
        max_step_rows: int = 0,
        share_within_request: bool = True,
        *,
        wait_s: float = 0.0,
        max_batch_tokens: int = 1 << 62,
        max_prefill_tokens: int | None = None,
        min_split: int = 1,
        job_memory: Callable[[Hashable, list[int]], tuple[int, int]] | None = None,
    ):
        """``max_step_rows``: rows one shared decode step holds at most (0: every job steps
        alone); ``share_within_request``: whether jobs carrying one request share a step;
        ``wait_s``, ``max_batch_tokens``, ``max_prefill_tokens``: how arrived shards form jobs
        (``coalesce_due``, ``group_arrivals``, ``cut_for_prefill``); ``min_split``: a job of
        at most this many series is not halved on out-of-memory; ``job_memory(key, lengths)``:
        a job's (resident, transient) bytes, from its options group and its series' lengths
        (None: 0, every job fits)."""
        if max_skipped < 0:
            raise ValueError(f"max_skipped must be >= 0, got {max_skipped}")
        self.budget_bytes = int(budget_bytes)
        self.max_skipped = max_skipped
        self.max_step_rows = max_step_rows
        self.share_within_request = share_within_request
        self.wait_s = wait_s
        self.max_batch_tokens = max_batch_tokens
        self.max_prefill_tokens = max_prefill_tokens
        self.min_split = min_split
        self.job_memory = job_memory
        self.queued: dict[int, BatchTicket] = {}  # submitted, not admitted
        self.live: dict[int, BatchTicket] = {}  # admitted, not finished
        self.inbox: list[Arrival] = []  # shards arrived, not yet formed into jobs
        self.plans: dict[int, JobPlan] = {}  # the rows of each job it formed, until it ends
        self._parts: dict[int, list[tuple[Arrival, int, int]]] = {}  # the same, with the facts
        self._formed: list[JobPlan] = []  # formed since the last ``next_step``
        self._arrivals = 0
        self._next_job = 0

    def configure(self, limits: Any) -> None:
        """Take the figures of ``limits`` (a ``BatchingPolicy``, read by field name) from the next
        step on: the replica's live ``reconfigure``."""
        self.budget_bytes = int(limits.budget_bytes)
        self.max_skipped = limits.max_skipped
        self.max_step_rows = limits.max_step_rows
        self.share_within_request = limits.share_within_request
        self.wait_s = limits.batch_wait_timeout_s
        self.max_batch_tokens = limits.max_batch_tokens
        self.max_prefill_tokens = limits.max_prefill_tokens
        self.min_split = limits.min_split

    # ---- what the replica tells it -----------------------------------------------------------
    def submit(self, ticket: BatchTicket) -> None:
        if ticket.job_id in self.queued or ticket.job_id in self.live:
            raise ValueError(f"job {ticket.job_id} already submitted")
        ticket.arrival = self._arrivals
        self._arrivals += 1
        self.queued[ticket.job_id] = ticket

    def cancel(self, job_id: int) -> None:
        """The job's requests are gone: it leaves at the next step."""
        t = self.queued.get(job_id) or self.live.get(job_id)
        if t is not None:
            t.cancelled = True

    def arrive(self, arrival: Arrival) -> None:
        """A shard arrived: it waits in the inbox until ``coalesce_due`` forms its jobs."""
        self.inbox.append(arrival)

    def cancel_shard(self, ref: object) -> None:
        """The caller of the waiting shard ``ref`` is gone: it forms no job (a job it is already
        in leaves once none of its shards is wanted: the runner's ``cancel``)."""
        self.inbox = [
            replace(a, cancelled=True) if a.ref is ref else a for a in self.inbox
        ]

    def failed(self, job_id: int, out_of_memory: bool) -> bool:
        """The job's start or step raised. Out of memory, with more than ``min_split`` series: it is
        halved, both halves queued (in the next step's ``formed``) -> True. Else -> False: its
        shards fail (the runner's part)."""
        parts = self._parts.get(job_id, [])
        plan = self.plans.get(job_id)
        self.discard(job_id)
        if plan is None or not (out_of_memory and plan.series > self.min_split):
            return False
        for half in halve(parts):
            self._queue_plan(plan.key, half)
        return True

    def stepped(self, job_id: int, steps_left: int) -> None:
        """``job_id`` ran one step; ``steps_left`` remain (0: finished, it leaves the live set)."""
        self.stepped_together({job_id: steps_left})

    def stepped_together(
        self, steps_left: dict[int, int], shares_next: dict[int, bool] | None = None
    ) -> None:
        """The jobs in ``steps_left`` ran one (shared) step; each has ``steps_left[job]`` left
        (0: finished, it leaves the live set) and its next step can share a decode step when
        ``shares_next[job]``. One step for aging: the oldest live job ages by one unless it ran."""
        oldest = min(self.live.values(), key=lambda t: t.arrival)
        if oldest.job_id not in steps_left:  # only the oldest ages (Aging in the module docstring)
            oldest.skipped += 1
        for job_id, left in steps_left.items():
            ran = self.live[job_id]
            ran.steps_left, ran.skipped = left, 0
            ran.shares_steps = bool(shares_next and shares_next.get(job_id))
            if left <= 0:
                self.discard(job_id)

    def by_priority(self, exclude: int | None = None) -> list[int]:
        """The live jobs (but ``exclude``) by ``BatchTicket.priority``: the order in which others
        join a shared decode step."""
        ts = sorted(self.live.values(), key=lambda t: t.priority)
        return [t.job_id for t in ts if t.job_id != exclude]

    def discard(self, job_id: int) -> None:
        """Forget a job without running it further (it failed, or was split into new jobs)."""
        self.queued.pop(job_id, None)
        self.live.pop(job_id, None)
        self.plans.pop(job_id, None)
        self._parts.pop(job_id, None)

    # ---- what it answers ---------------------------------------------------------------------
    @property
    def idle(self) -> bool:
        """No job queued or live (shards may wait in the inbox)."""
        return not self.queued and not self.live

    @property
    def waiting_shards(self) -> int:
        """Shards arrived and not yet admitted: in the inbox or in a queued job only."""
        queued = {id(ref) for j in self.queued if j in self.plans
                  for ref, _, _ in self.plans[j].segments}
        return len(self.inbox) + len(queued)

    def wakeup(self, now: float) -> float | None:
        """Seconds until ``next_step(now)`` has something to do (0: now), None when idle."""
        if not self.idle or self._formed:
            return 0.0
        if not self.inbox:
            return None
        if coalesce_due(self.inbox, now, self.wait_s, self.max_batch_tokens):
            return 0.0
        return max(0.0, self.inbox[0].arrived + self.wait_s - now)

    def memory_in_use(self, tickets: list[BatchTicket] | None = None) -> int:
        """Resident bytes of the given (default: live) jobs plus the largest one step adds."""
        ts = list(self.live.values()) if tickets is None else tickets
        if not ts:
            return 0
        return sum(t.resident_bytes for t in ts) + max(t.transient_bytes for t in ts)

    def next_step(self, now: float | None = None) -> NextStep:
        """The next step, whole. ``now`` (the runner's clock): form jobs of the shards that arrived,
        once due; None: no forming (tests of admission and picking that submit tickets)."""
        if now is not None:
            self._form(now)
        formed, self._formed = tuple(self._formed), []
        leave = [j for j, t in self.live.items() if t.cancelled]
        leave += [j for j, t in self.queued.items() if t.cancelled]
        for j in leave:
            self.discard(j)
        mid_batch = bool(self.live)
        admit = self._admit()
        run = self._pick()
        step = [] if run is None else [run, *self._joining(run)]
        return NextStep(
            tuple(leave),
            tuple(admit),
            run,
            len(admit) if mid_batch else 0,
            tuple(step),
            sum(self.live[j].rows for j in step),
            formed,
            tuple(self.plans[j].segments if j in self.plans else () for j in step),
        )

    def _form(self, now: float) -> None:
        """Jobs of the shards waiting, once ``coalesce_due``: grouped (``group_arrivals``), then cut
        for their prefill (``cut_for_prefill``), each queued."""
        if not coalesce_due(self.inbox, now, self.wait_s, self.max_batch_tokens):
            return
        inbox, self.inbox = self.inbox, []
        for chunk in group_arrivals(inbox, self.max_batch_tokens):
            shards = [inbox[i] for i in chunk]
            for job in cut_for_prefill([a.costs for a in shards], self.max_prefill_tokens):
                self._queue_plan(shards[0].key, [(shards[k], lo, hi) for k, lo, hi in job])

    def _queue_plan(self, key: Hashable, parts: list[tuple[Arrival, int, int]]) -> None:
        """Queue a job of ``parts`` (series ``lo:hi`` of each arrival): its ticket from their
        facts, its plan for the runner."""
        while self._next_job in self.queued or self._next_job in self.live:
            self._next_job += 1
        job_id = self._next_job
        self._next_job += 1
        lengths = [n for a, lo, hi in parts for n in a.lengths[lo:hi]]
        paths = parts[0][0].paths
        resident, transient = self.job_memory(key, lengths) if self.job_memory else (0, 0)
        self.submit(
            BatchTicket(
                job_id,
                rows=len(lengths) * paths,
                steps=parts[0][0].steps,
                shard_rows=max(a.series for a, _, _ in parts) * paths,
                resident_bytes=resident,
                transient_bytes=transient,
                requests=frozenset(a.request for a, _, _ in parts),
            )
        )
        plan = JobPlan(job_id, key, tuple((a.ref, lo, hi) for a, lo, hi in parts))
        self.plans[job_id] = plan
        self._parts[job_id] = parts
        self._formed.append(plan)

    def _joining(self, run: int) -> list[int]:
        """The live jobs that share ``run``'s decode step (``joining``, in priority order)."""
        picked = self.live[run]
        if self.max_step_rows <= 0 or not picked.shares_steps:
            return []
        others = [self.live[j] for j in self.by_priority(exclude=run) if self.live[j].shares_steps]
        joined = joining(
            picked.rows,
            [t.rows for t in others],
            self.max_step_rows,
            self.share_within_request,
            picked.requests,
            [t.requests for t in others],
        )
        return [others[i].job_id for i in joined]

    def _admit(self) -> list[int]:
        admitted: list[int] = []
        live = list(self.live.values())
        # jobs that waited too long go first, by arrival; then the rest by priority
        order = sorted(
            self.queued.values(),
            key=lambda t: (True, t.priority) if t.skipped < self.max_skipped
            else (False, (t.arrival, 0, 0)),
        )
        for t in order:
            if not live or self.memory_in_use([*live, t]) <= self.budget_bytes:
                live.append(t)
                admitted.append(t.job_id)
                continue
            t.skipped += 1
            if t.skipped > self.max_skipped:
                break  # it waited long enough: nothing else is admitted before it
        for j in admitted:
            t = self.queued.pop(j)
            t.started, t.skipped = True, 0
            self.live[j] = t
        return admitted

    def _pick(self) -> int | None:
        if not self.live:
            return None
        live = list(self.live.values())
        oldest = min(live, key=lambda t: t.arrival)
        if oldest.skipped >= self.max_skipped:
            return oldest.job_id
        fresh = [t for t in live if not t.has_stepped]  # their first step (the prefill) is next
        if fresh:
            ran = [t for t in live if t.has_stepped]
            # a smaller request's job starts at once, so it decodes beside the running ones
            smallest = min((t.shard_rows for t in ran), default=0)
            smaller = [t for t in fresh if t.shard_rows < smallest]
            if smaller:
                return min(smaller, key=lambda t: t.priority).job_id
            # prefill ahead: two jobs decoding, unless that prefill would delay a smaller request
            first = min(fresh, key=lambda t: t.priority)
            if len(ran) < PREFILLED_AHEAD and not any(
                t.shard_rows < first.shard_rows for t in live
            ):
                return first.job_id
        return min(live, key=lambda t: t.priority).job_id
