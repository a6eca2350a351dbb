"""The store writer: one thread owns the SQLite connection and the session states.

Handlers hand over a `CapturedCall` and get a future that resolves once the call is
committed. The writer drains whatever is queued into one transaction: each call becomes a
`proxy_calls` row and the sessions it touched are re-assembled and `put` as trajectories. A
session met for the first time since start-up is rebuilt from its stored rows, so a restarted
proxy continues a session where it stopped.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass

from trajforge.proxy.record import CapturedCall
from trajforge.proxy.session import SessionState, trajectory_id
from trajforge.schema import Outcome
from trajforge.store import Store

MAX_BATCH = 256


@dataclass
class _Job:
    future: Future
    call: CapturedCall | None = None
    outcome: tuple[str, Outcome] | None = None


class Recorder:
    """Writes captured calls and session trajectories to a store, on its own thread."""

    def __init__(self, store: Store, harness: str = "proxy") -> None:
        self.store = store
        self.harness = harness
        self.sessions: dict[str, SessionState] = {}
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
        job = _Job(Future(), outcome=(session, outcome))
        self._queue.put(job)
        return job.future

    def flush(self) -> None:
        """Block until everything queued so far is committed."""
        job = _Job(Future())
        self._queue.put(job)
        job.future.result()

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < MAX_BATCH:
                try:
                    job = self._queue.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    self._write(batch)
                    return
                batch.append(job)
            self._write(batch)

    def _write(self, batch: list[_Job]) -> None:
        try:
            results = self._commit(batch)
        except Exception as exc:  # the handlers turn this into an error answer
            for job in batch:
                job.future.set_exception(exc)
            return
        for job, result in zip(batch, results, strict=True):
            job.future.set_result(result)

    def _commit(self, batch: list[_Job]) -> list[object]:
        touched: dict[str, SessionState] = {}
        results: list[object] = []
        with self.store.transaction():
            for job in batch:
                if job.call is not None:
                    state = self._state(job.call.session)
                    results.append(self._insert(state, job.call))
                    touched[state.name] = state
                elif job.outcome is not None:
                    state = self._state(job.outcome[0])
                    state.outcome = job.outcome[1]
                    touched[state.name] = state
                    results.append(trajectory_id(state.name))
                else:
                    results.append(None)
            for state in touched.values():
                self.store.put(state.trajectory())
        return results

    def _insert(self, state: SessionState, call: CapturedCall) -> int:
        seq = state.next_seq
        llm_call = state.add(call)
        self.store.db.execute(
            "INSERT INTO proxy_calls (session, seq, trajectory_id, call_id, endpoint, status, "
            "error, started_at, latency_s, doc) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                state.name,
                seq,
                trajectory_id(state.name),
                llm_call.id,
                call.endpoint,
                call.status,
                call.error,
                call.started_at,
                call.latency_s,
                call.model_dump_json().encode(),
            ),
        )
        return seq

    def _state(self, session: str) -> SessionState:
        state = self.sessions.get(session)
        if state is None:
            state = SessionState(name=session, harness=self.harness)
            for (doc,) in self.store.db.execute(
                "SELECT doc FROM proxy_calls WHERE session = ? ORDER BY seq", (session,)
            ):
                state.add(CapturedCall.model_validate_json(doc))
            stored = self.store.db.execute(
                "SELECT 1 FROM trajectories WHERE id = ?", (trajectory_id(session),)
            ).fetchone()
            if stored:
                state.outcome = self.store.get(trajectory_id(session)).outcome
            self.sessions[session] = state
        return state
