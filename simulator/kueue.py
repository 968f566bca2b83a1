"""Kueue, simulated: ClusterQueues with nominal GPU quotas in a cohort, borrowing, BestEffortFIFO.

What is modelled (Kueue's scheduler and workload controller): a workload reserves quota when its
ClusterQueue's nominal quota, or unused quota borrowed from the cohort, covers it
(``usage + demand <= nominal + borrowingLimit`` and ``cohort usage + demand <= cohort nominal``);
pending workloads are tried oldest first and one that does not fit does not block younger ones
(BestEffortFIFO).  With an AdmissionCheck the workload then waits for the check (Pending), is
Admitted on Ready, evicted and requeued after ``requeueAfterSeconds`` on Retry (quota released,
queue-order timestamp = eviction time), deactivated on Rejected.  Not modelled: preemption,
fair sharing, StrictFIFO, priorities (all 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simulator.workload import Job

PENDING = "pending"  # waiting for quota (or in Retry backoff)
RESERVED = "reserved"  # quota reserved, admission check Pending
ADMITTED = "admitted"  # quota + all checks Ready; pods being placed (or unplaceable)
RUNNING = "running"  # pods bound
FINISHED = "finished"
INACTIVE = "inactive"  # Rejected -> spec.active=false


@dataclass(slots=True)
class SimClusterQueue:
    name: str
    cohort: str
    nominal: dict[str, float]
    borrowing_limit: dict[str, float | None] = field(default_factory=dict)
    usage: dict[str, float] = field(default_factory=dict)
    local_queue: str = "default"
    namespace: str = ""


@dataclass(slots=True)
class SimWorkload:
    job: Job
    cq: str
    created: float
    queue_ts: float  # ordering timestamp (creation, or eviction time after an AC Retry)
    state: str = PENDING
    flavor: str | None = None
    requeued_at: float | None = None  # Requeued.lastTransitionTime (Kueue's T0 after a requeue)
    backoff_until: float = 0.0
    reserved_at: float | None = None
    admitted_at: float | None = None
    check_state: str = "Pending"
    check_message: str = ""
    check_changed_at: float | None = None
    unplaceable_since: float | None = None
    retries: int = 0
    pods_ready_requeues: int = 0  # evictions by waitForPodsReady (Kueue's requeueState.count)
    admission_lost_at: float | None = None  # when an admitted workload was last evicted (Admitted False)
    attempt: int = 0  # 0: as first submitted; n: its owner's n-th resubmission after a deactivation
    # the deactivations its Workload's schedulingStats count: brought back by reactivation, it keeps them;
    # created anew, it starts with none
    deactivations: int = 0
    version: int = 0
    # derived from the job once (a month builds millions of snapshots and queue scans)
    name: str = field(init=False, default="")  # rayjob-<id>, -r<attempt> after a resubmission
    # the RayJob (the Workload's owner): its owner creates it again under the same name
    job_name: str = field(init=False, default="")  # rayjob-<id>
    namespace: str = field(init=False, default="")  # the job's team
    gpus: int = field(init=False, default=0)  # pods x GPUs per pod
    uid: str = field(init=False, default="")

    def __post_init__(self) -> None:
        self.job_name = f"rayjob-{self.job.id}"
        self.name = self.job_name + (f"-r{self.attempt}" if self.attempt else "")
        self.namespace = self.job.team
        self.gpus = self.job.pods * self.job.gpus_per_pod
        self.uid = f"uid-{self.job.id}"

    @property
    def holds_quota(self) -> bool:
        """``QuotaReserved=True``: reserved, admitted or running."""
        return self.state in (RESERVED, ADMITTED, RUNNING)

    @property
    def inactive(self) -> bool:
        """``spec.active: false`` (deactivated after Rejected)."""
        return self.state == INACTIVE


class SimKueue:
    def __init__(self, queues: list[SimClusterQueue]) -> None:
        self.cqs = {q.name: q for q in queues}
        self.pending: list[SimWorkload] = []
        self._sorted = True
        self._reserved: dict[str, SimWorkload] = {}  # every workload a pass reserved, until seen otherwise

    def moved(self, w: SimWorkload) -> None:
        """``w`` changed (a new resourceVersion): every change to a Workload goes through here."""
        w.version += 1

    def any_reserved(self) -> bool:
        """Whether some workload holds quota with its check Pending (state ``RESERVED``)."""
        for name, w in list(self._reserved.items()):
            if w.state == RESERVED:
                return True
            del self._reserved[name]
        return False

    # ------------------------------------------------------------------------------ quota
    def cohort_nominal(self, cohort: str, flavor: str) -> float:
        return sum(q.nominal.get(flavor, 0.0) for q in self.cqs.values() if q.cohort == cohort)

    def cohort_usage(self, cohort: str, flavor: str) -> float:
        return sum(q.usage.get(flavor, 0.0) for q in self.cqs.values() if q.cohort == cohort)

    def fits(self, cq_name: str, flavor: str, gpus: float) -> bool:
        q = self.cqs[cq_name]
        nominal = q.nominal.get(flavor, 0.0)
        used = q.usage.get(flavor, 0.0)
        if used + gpus > nominal:
            limit = q.borrowing_limit.get(flavor)
            if limit is not None and used + gpus - nominal > limit:
                return False
        return self.cohort_usage(q.cohort, flavor) + gpus <= self.cohort_nominal(q.cohort, flavor)

    def headroom(self, cq_name: str, flavor: str) -> float:
        """GPUs ``cq_name`` could still reserve now (own nominal and borrowable cohort quota)."""
        q = self.cqs[cq_name]
        cohort_free = self.cohort_nominal(q.cohort, flavor) - self.cohort_usage(q.cohort, flavor)
        limit = q.borrowing_limit.get(flavor)
        own = q.nominal.get(flavor, 0.0) - q.usage.get(flavor, 0.0)
        cap = cohort_free if limit is None else min(cohort_free, own + limit)
        return max(0.0, cap)

    def reserve(self, cq_name: str, flavor: str, gpus: float) -> None:
        q = self.cqs[cq_name]
        q.usage[flavor] = q.usage.get(flavor, 0.0) + gpus

    def release(self, cq_name: str, flavor: str, gpus: float) -> None:
        q = self.cqs[cq_name]
        q.usage[flavor] = q.usage.get(flavor, 0.0) - gpus
        assert q.usage[flavor] >= -1e-9, f"{cq_name}/{flavor} usage went negative"

    # --------------------------------------------------------------------------- queueing
    def submit(self, w: SimWorkload) -> None:
        self.pending.append(w)
        self._sorted = False

    def requeue(self, w: SimWorkload, now: float, backoff: float) -> None:
        """AdmissionCheck Retry: evict, release quota, back in the queue after the backoff."""
        if w.flavor is not None:
            self.release(w.cq, w.flavor, w.gpus)
        w.state = PENDING
        w.flavor = None
        w.reserved_at = None
        w.check_state = "Pending"
        w.queue_ts = now
        w.backoff_until = now + backoff
        w.requeued_at = now + backoff  # Requeued flips True when the backoff ends
        w.retries += 1
        self.moved(w)
        self.pending.append(w)
        self._sorted = False

    def schedule(self, now: float, flavor_order: tuple[str, ...]) -> list[SimWorkload]:
        """One BestEffortFIFO pass: reserve quota for every pending workload that fits, oldest first."""
        if not self.pending:
            return []
        if not self._sorted:
            self.pending.sort(key=lambda w: (w.queue_ts, w.job.id))
            self._sorted = True
        free: dict[tuple[str, str], float] = {}
        for q in self.cqs.values():
            for f in flavor_order:
                if (q.cohort, f) not in free:
                    free[(q.cohort, f)] = self.cohort_nominal(q.cohort, f) - self.cohort_usage(q.cohort, f)
        if max(free.values(), default=0.0) < 1:
            return []
        reserved: list[SimWorkload] = []
        keep: list[SimWorkload] = []
        for w in self.pending:
            if w.state != PENDING:
                continue
            if w.backoff_until > now or max(free.values()) < 1:
                keep.append(w)
                continue
            cohort = self.cqs[w.cq].cohort
            got = None
            for f in flavor_order:
                if free[(cohort, f)] >= w.gpus and self.fits(w.cq, f, w.gpus):
                    got = f
                    break
            if got is None:
                keep.append(w)
                continue
            self.reserve(w.cq, got, w.gpus)
            free[(cohort, got)] -= w.gpus
            w.flavor = got
            w.state = RESERVED
            w.reserved_at = now
            self.moved(w)
            reserved.append(w)
            self._reserved[w.name] = w
        self.pending = keep
        return reserved

    def check(self) -> None:
        """Invariant: usage never exceeds nominal except as borrowing allows."""
        cohorts = {q.cohort for q in self.cqs.values()}
        flavors = {f for q in self.cqs.values() for f in q.nominal}
        for c in cohorts:
            for f in flavors:
                assert self.cohort_usage(c, f) <= self.cohort_nominal(c, f) + 1e-9, f"cohort {c}/{f} over quota"
        for q in self.cqs.values():
            for f, used in q.usage.items():
                limit = q.borrowing_limit.get(f)
                if limit is not None:
                    assert used <= q.nominal.get(f, 0.0) + limit + 1e-9, f"{q.name}/{f} borrowed past its limit"
