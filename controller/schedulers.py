"""Whether some scheduler serves a schedulerName: a released gang that nobody binds is noticed, and held room freed.

The controller releases a gang by removing its gates; binding is the job of the scheduler its pods name
(``spec.schedulerName``: ``config.schedulerName``, or the operator's). A cluster without that scheduler leaves the
released pods Pending for ever, and their reservations would keep every other gang out. A scheduler shows it is there
by acting on its pods: binding one, nominating a node, or marking it unschedulable (``PodView.touched``; the state
records when, per schedulerName, ``ClusterState.scheduler_seen``). So:

- **absent**: a released member no scheduler has touched ``controller.bindTimeoutSeconds`` after its release, while no
  pod of its schedulerName was acted on since that release: no scheduler serves that name. Its released, untouched
  pods then hold nothing (``ClusterState.set_absent``); they are not evicted for the bind timeout (deleting them
  would only bring them back to the same absent scheduler, and burn their Job's retries); the gang says so
  (``Cause.NO_SCHEDULER``), and waiting gangs of that name are not released (they would strand more room);
- **a probe**: while nothing of that name is released and untouched (nothing a returning scheduler could show itself
  on), one waiting gang may be released as a probe, at most every ``PROBE_SECONDS`` (doubling up to ``PROBE_MAX``);
- **back**: once a pod of that name is acted on, the name is served again: the stranded pods hold their room again
  (their bind timeout counts from then) and waiting gangs are released as usual.
"""

from __future__ import annotations

import math

from controller.members import PodView
from controller.state import ClusterState

PROBE_SECONDS, PROBE_MAX = 60.0, 900.0


class Schedulers:
    def __init__(self, state: ClusterState, bind_timeout: float) -> None:
        self.state = state
        self.bind_timeout = bind_timeout
        self._probes: dict[str, tuple[float, float]] = {}  # schedulerName -> (no probe before, the next interval)
        self._stranded: dict[str, int] = {}  # schedulerName -> its released pods no scheduler touched, this pass

    def update(self, now: float) -> None:
        """Find the names no scheduler serves (and those served again), from the released pods and when each name was
        last acted on."""
        state = self.state
        stranded: dict[str, int] = {}
        for uid, since in list(state.released_at.items()):
            pod = state.pods.get(uid)
            if pod is None or pod.touched or not pod.live or (pod.gang is not None and state.bound_members(pod.gang)):
                continue  # (some of its gang bound: a scheduler is there, and the bind timeout judges the rest)
            stranded[pod.scheduler] = stranded.get(pod.scheduler, 0) + 1
            seen = state.scheduler_seen.get(pod.scheduler, -math.inf)
            if pod.scheduler not in state.absent and now - since > self.bind_timeout and seen < since:
                state.set_absent(pod.scheduler, now)
        for name, since in list(state.absent.items()):
            if state.scheduler_seen.get(name, -math.inf) > since:
                for uid in list(state.released_at):  # the untouched ones' bind timeout counts from its return
                    pod = state.pods.get(uid)
                    if pod is not None and pod.scheduler == name and not pod.touched:
                        state.released_at[uid] = now
                state.set_absent(name, None)
                self._probes.pop(name, None)
        self._stranded = stranded

    def stranded(self, pod: PodView) -> bool:
        """Released, and no scheduler serves its name (``ClusterState.stranded``)."""
        return self.state.stranded(pod)

    def holds(self, scheduler: str, now: float) -> str | None:
        """Why a waiting gang of ``scheduler`` is not released now, or None: it may be (served, or as a probe)."""
        since = self.state.absent.get(scheduler)
        if since is None:
            return None
        not_before, interval = self._probes.get(scheduler, (since, PROBE_SECONDS))
        if not self._stranded.get(scheduler) and now >= not_before:
            self._probes[scheduler] = (now + interval, min(interval * 2, PROBE_MAX))
            return None  # released as a probe: a scheduler that came back shows itself on it
        return (f"not released: no scheduler serves schedulerName {scheduler!r} (released pods of it were not picked "
                f"up within {self.bind_timeout:g}s); {fix(scheduler)}")


def fix(scheduler: str) -> str:
    """What to do about a schedulerName no scheduler serves."""
    return (f"run a scheduler named {scheduler!r}, or set schedulerName: keep in the product's configuration "
            "(deploy/overlays/keep-scheduler) so that pods keep the scheduler their operator gave them")
