"""The store writer: one thread owns the SQLite connection and the session states.

Handlers hand over a `CapturedCall` and get a future that resolves once its `proxy_calls` row
is committed (that row is the durable record). The writer drains whatever is queued into one
transaction. Re-assembling a session's trajectory costs more (it grows with the session), so
it happens after the futures are resolved, once no call has come for `IDLE_REFRESH_S`, and at
least every `REFRESH_INTERVAL_S` under steady load; and then only for sessions that grew by
`GROWTH` (a quarter) since their last assembly, or for all once the proxy has been idle for
`SETTLE_S` (and on flush, outcome and close); once settled, the writer also runs a full
garbage collection, which would otherwise come in the middle of later calls and stop them all
for as long as it takes (tens of ms with a few hundred sessions). A long session is thus
re-assembled a logarithmic number of times, and its stored document keeps each call's new
tokens only (`SessionState.stored_trajectory`), so the recording cost per call stays flat. A
session met for the first time since start-up is rebuilt from its stored rows, so a restarted
proxy continues a session where it stopped, and `repair()` re-assembles sessions whose
trajectory missed calls (a proxy killed before its last refresh). `monitor_memory(session)`
gives a restarted proxy's failure monitor what it knew of a session: its stop (kept on the
refused calls) and its answers.
"""

from __future__ import annotations

import copy
import gc
import logging
import queue
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass

from trajforge.proxy.record import CapturedCall, loaded_call, stored_call
from trajforge.proxy.session import SessionState, trajectory_id
from trajforge.schema import Outcome
from trajforge.store import Store
from trajforge.store.proxy_calls import (
    ProxyCallRow,
    insert_proxy_call,
    session_call_documents,
    sessions_not_assembled,
)

log = logging.getLogger("trajforge.proxy")

MAX_BATCH = 256
SESSIONS_IN_MEMORY = 256
"""Sessions whose state is kept between calls; past this, the least recently called ones
that are fully stored are dropped (and rebuilt from their rows if called again), so a
long-running proxy's memory, and the garbage collector's pauses, do not grow with every
session it has seen."""
REFRESH_INTERVAL_S = 0.5
IDLE_REFRESH_S = 0.05
SETTLE_S = 1.0
GROWTH = 0.25


@dataclass
class _Failed:
    error: Exception


@dataclass
class _Job:
    future: Future
    call: CapturedCall | None = None
    outcome: tuple[str, Outcome] | None = None
    flush: bool = False
    memory_of: str | None = None


class Recorder:
    """Writes captured calls and session trajectories to a store, on its own thread."""

    def __init__(self, store: Store, harness: str = "proxy") -> None:
        self.store = store
        self.harness = harness
        self.sessions: OrderedDict[str, SessionState] = OrderedDict()
        """Least recently called first."""
        self._dirty: dict[str, SessionState] = {}
        self._assembled: dict[str, int] = {}
        self._refreshed_at = self._busy_at = time.monotonic()
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="trajforge-recorder", daemon=True)
        self._thread.start()

    def submit(self, call: CapturedCall) -> Future:
        """Queue a call; the future resolves to its sequence number once committed."""
        job = _Job(Future(), call=call)
        self._queue.put(job)
        return job.future

    def set_outcome(self, session: str, outcome: Outcome) -> Future:
        """Record how a session ended (reward for RL export); resolves to the trajectory id."""
        job = _Job(Future(), outcome=(session, outcome), flush=True)
        self._queue.put(job)
        return job.future

    def monitor_memory(self, session: str) -> Future:
        """Resolves to (the monitor's stop recorded for a session, as in `metadata["monitor"]`
        of its trajectory, or None; `SessionState.relayed_answers()`)."""
        job = _Job(Future(), memory_of=session)
        self._queue.put(job)
        return job.future

    def flush(self) -> None:
        """Block until everything queued so far is committed and assembled."""
        job = _Job(Future(), flush=True)
        self._queue.put(job)
        job.future.result()

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=60)

    def repair(self) -> list[str]:
        """Re-assemble the sessions whose stored trajectory lacks some of their calls.

        Runs on the writer thread at start-up (the connection is not shared between threads).
        """
        stale = sessions_not_assembled(self.store)
        with self.store.transaction():
            for session in stale:
                trajectory = self._state(session).stored_trajectory()
                self.store.put(trajectory)
                self._state(session).written_outcome = trajectory.outcome
        return stale

    def _run(self) -> None:
        try:
            self.repair()
        except Exception:  # serving goes on; the sessions re-assemble when next called
            log.exception("could not repair the proxy sessions of %s", self.store.path)
        collected = True
        while True:
            wait = IDLE_REFRESH_S if self._dirty or not collected else None
            try:
                first = self._queue.get(timeout=wait)
            except queue.Empty:
                settled = time.monotonic() - self._busy_at >= SETTLE_S
                self._refresh(everything=settled)
                if settled and not collected:
                    gc.collect()  # while idle, so that a full collection does not pause calls
                    collected = True
                continue
            self._busy_at, collected = time.monotonic(), False
            batch = [first]
            while batch[-1] is not None and len(batch) < MAX_BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            jobs = [job for job in batch if job is not None]
            self._write(jobs)
            self._maybe_refresh(jobs)
            if batch[-1] is None:
                self._refresh(everything=True)
                return

    def _write(self, batch: list[_Job]) -> None:
        try:
            results = self._commit(batch)
        except Exception as exc:  # the handlers log it and still answer the client
            for job in batch:
                job.future.set_exception(exc)
                self._forget(job)
            return
        for job, result in zip(batch, results, strict=True):
            if isinstance(result, _Failed):
                job.future.set_exception(result.error)
            elif not job.flush:
                job.future.set_result(result)

    def _forget(self, job: _Job) -> None:
        """Drop a job's session state; it is reloaded from what was committed when next met."""
        if job.call is not None:
            self.sessions.pop(job.call.session, None)
            self._dirty.pop(job.call.session, None)

    def _maybe_refresh(self, jobs: list[_Job]) -> None:
        flushes = [job for job in jobs if job.flush and not job.future.done()]
        if flushes or time.monotonic() - self._refreshed_at >= REFRESH_INTERVAL_S:
            self._refresh(everything=bool(flushes))
        for job in flushes:
            job.future.set_result(trajectory_id(job.outcome[0]) if job.outcome else None)

    def _refresh(self, everything: bool) -> None:
        """Store the trajectories of the sessions that grew enough (or of all, `everything`)."""
        self._refreshed_at = time.monotonic()
        due = [s for s in self._dirty.values() if everything or self._grew(s)]
        if due:
            self._assemble(due)
        self._forget_stored_sessions()

    def _assemble(self, due: list[SessionState]) -> None:
        for state in due:
            del self._dirty[state.name]
        try:
            with self.store.transaction():
                for state in due:
                    self._keep_outcome_set_elsewhere(state)
                    trajectory = state.stored_trajectory()
                    self.store.put(trajectory)
                    state.written_outcome = trajectory.outcome
        except Exception:  # the calls are safe in proxy_calls; repair() assembles them later
            log.exception("could not assemble sessions %s", sorted(s.name for s in due))
            return
        for state in due:
            self._assembled[state.name] = state.next_seq

    def _keep_outcome_set_elsewhere(self, state: SessionState) -> None:
        """Adopt an outcome another process stored since this recorder last wrote it."""
        if state.written_outcome is None:
            return
        stored = self.store.outcome(trajectory_id(state.name))
        if stored is not None and stored != state.written_outcome:
            state.outcome = stored

    def _grew(self, state: SessionState) -> bool:
        last = self._assembled.get(state.name, 0)
        return state.next_seq - last >= max(1, GROWTH * last)

    def _commit(self, batch: list[_Job]) -> list[object]:
        """Write the batch in one transaction, each job in its own savepoint: a job that
        fails is rolled back alone (its future gets the error) and the others commit."""
        results: list[object] = []
        with self.store.transaction():
            for job in batch:
                try:
                    with self.store.savepoint():
                        results.append(self._apply(job))
                except Exception as exc:
                    self._forget(job)
                    if job.call is not None:  # rebuilt from the rows kept so far
                        self._dirty[job.call.session] = self._state(job.call.session)
                    results.append(_Failed(exc))
        return results

    def _apply(self, job: _Job) -> object:
        if job.call is not None:
            state = self._state(job.call.session)
            seq = self._insert(state, job.call)
            self._dirty[state.name] = state
            return seq
        if job.outcome is not None:
            state = self._state(job.outcome[0])
            state.outcome, state.written_outcome = job.outcome[1], None
            self._dirty[state.name] = state
            return trajectory_id(state.name)
        if job.memory_of is not None:
            state = self._state(job.memory_of)
            return copy.copy(state.monitor), state.relayed_answers()
        return None

    def _insert(self, state: SessionState, call: CapturedCall) -> int:
        seq, previous = state.next_seq, state.last
        llm_call = state.add(call)
        stored = stored_call(call, previous, state.prompt_ids_shared)
        document = stored.model_dump_json().encode()
        row = ProxyCallRow(
            session=state.name,
            seq=seq,
            trajectory_id=trajectory_id(state.name),
            call_id=llm_call.id,
            endpoint=call.endpoint,
            status=call.status,
            error=call.error,
            started_at=call.started_at,
            latency_s=call.latency_s,
            doc=document,
        )
        insert_proxy_call(self.store, row)
        return seq

    def _forget_stored_sessions(self) -> None:
        """Drop the least recently called sessions past `SESSIONS_IN_MEMORY`, those whose
        every call is in their stored trajectory."""
        excess = len(self.sessions) - SESSIONS_IN_MEMORY
        for name in list(self.sessions)[: max(0, excess)]:
            state = self.sessions[name]
            if name not in self._dirty and self._assembled.get(name) == state.next_seq:
                del self.sessions[name]
                del self._assembled[name]

    def _state(self, session: str) -> SessionState:
        state = self.sessions.get(session)
        if state is not None:
            self.sessions.move_to_end(session)
        else:
            state = SessionState(name=session, harness=self.harness)
            for doc in session_call_documents(self.store, session):
                state.add(loaded_call(CapturedCall.model_validate_json(doc), state.last))
            stored = self.store.outcome(trajectory_id(session))
            if stored is not None:
                state.outcome = state.written_outcome = stored
            self.sessions[session] = state
        return state
