"""The replica's step scheduler: priority lanes with preemption at step boundaries.

A pure object (no model, no Ray, no torch, no clock of its own): the replica tells it which jobs
arrived (``submit``), which finished or were cancelled, and after every decode step asks it for the
``NextStep``: which queued jobs to admit (start: tokenize and prefill), which live job runs the
next decode step, which jobs leave (cancelled: their memory is freed). The replica carries it
out (``service.replica.step_runner.StepRunner``).

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
* **Shared steps.** The job picked to run may take other live jobs into its decode step
  (continuous batching: ``by_priority`` gives the order, the replica's batching policy the
  row cap and whether jobs of one request share a step); every job in it counts the step
  (``stepped_together``).
* **Determinism.** Ties break by arrival order; the next step depends only on the calls made,
  never on time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
    """What the replica does before the next step: close ``leave``, start ``admit`` (in order), then
    run one decode step of ``run`` (None: nothing to run)."""

    leave: tuple[int, ...] = ()
    admit: tuple[int, ...] = ()
    run: int | None = None
    admitted_mid_batch: int = 0  # of ``admit``, jobs started while another job was mid-decode


class Scheduler:
    """Plans the replica's device loop; see the module docstring for the policy."""

    def __init__(self, budget_bytes: int, max_skipped: int = DEFAULT_MAX_SKIPPED):
        if max_skipped < 0:
            raise ValueError(f"max_skipped must be >= 0, got {max_skipped}")
        self.budget_bytes = int(budget_bytes)
        self.max_skipped = max_skipped
        self.queued: dict[int, BatchTicket] = {}  # submitted, not admitted
        self.live: dict[int, BatchTicket] = {}  # admitted, not finished
        self._arrivals = 0

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

    def stepped(self, job_id: int, steps_left: int) -> None:
        """``job_id`` ran one step; ``steps_left`` remain (0: finished, it leaves the live set)."""
        self.stepped_together({job_id: steps_left})

    def stepped_together(self, steps_left: dict[int, int]) -> None:
        """The jobs in ``steps_left`` ran one (shared) step; each has ``steps_left[job]`` left
        (0: finished, it leaves the live set). One step for aging: the oldest live job ages by one
        unless it ran."""
        oldest = min(self.live.values(), key=lambda t: t.arrival)
        if oldest.job_id not in steps_left:  # only the oldest ages (Aging in the module docstring)
            oldest.skipped += 1
        for job_id, left in steps_left.items():
            ran = self.live[job_id]
            ran.steps_left, ran.skipped = left, 0
            if left <= 0:
                del self.live[job_id]

    def by_priority(self, exclude: int | None = None) -> list[int]:
        """The live jobs (but ``exclude``) by ``BatchTicket.priority``: the order in which others
        join a shared decode step."""
        ts = sorted(self.live.values(), key=lambda t: t.priority)
        return [t.job_id for t in ts if t.job_id != exclude]

    def discard(self, job_id: int) -> None:
        """Forget a job without running it further (it failed, or was split into new jobs)."""
        self.queued.pop(job_id, None)
        self.live.pop(job_id, None)

    # ---- what it answers ---------------------------------------------------------------------
    @property
    def idle(self) -> bool:
        return not self.queued and not self.live

    def memory_in_use(self, tickets: list[BatchTicket] | None = None) -> int:
        """Resident bytes of the given (default: live) jobs plus the largest one step adds."""
        ts = list(self.live.values()) if tickets is None else tickets
        if not ts:
            return 0
        return sum(t.resident_bytes for t in ts) + max(t.transient_bytes for t in ts)

    def next_step(self) -> NextStep:
        leave = [j for j, t in self.live.items() if t.cancelled]
        leave += [j for j, t in self.queued.items() if t.cancelled]
        for j in leave:
            self.discard(j)
        mid_batch = bool(self.live)
        admit = self._admit()
        run = self._pick()
        return NextStep(tuple(leave), tuple(admit), run, len(admit) if mid_batch else 0)

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
