"""A Ray cluster (``--ray ADDRESS``): one task per matrix, measurements back to the driver;
cpu timing tasks reserve a whole node so that two timings never share cores."""

from __future__ import annotations

import logging
import os
import socket
from collections import deque
from collections.abc import Iterator
from typing import Any

from cognate import targets
from cognate.collect.plan import Plan, check_batch
from cognate.collect.state import Collection, close_runner
from cognate.config import Config
from cognate.errors import CognateError
from cognate.hostid import HostFacts, host_for
from cognate.lifetime import (
    descendants,
    kill_all,
    start_reaper,
)
from cognate.matrix import Matrix
from cognate.runner import Measurement
from cognate.util import describe, one_line

# A gRPC server (Ray's GCS is one) answers the HTTP/2 client preface with a SETTINGS frame
# (RFC 9113, 3.4): 9 bytes of frame header whose type byte (index 3) is 4.
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def _ray_measure(
    target: targets.Target,
    op: str,
    width: int,
    matrix: Matrix,
    configs: list[Config],
    runner_options: dict[str, Any],
) -> tuple[str, HostFacts | None, list[Measurement]]:
    """A Ray task: measure one matrix's batch; the host goes into the store's key, and its
    ISA, CPU and caches beside each record."""
    runner = target.runner(**runner_options)
    try:
        measured = runner.measure(matrix, op, width, configs)
        return host_for(target.name), target.host_facts(), measured
    finally:
        close_runner(runner)


RAY_PROBE_TIMEOUT_S = 3.0


def ray_connect(address: str) -> tuple[Any] | None:
    """Connect to (or start, for ``local``) a Ray cluster. Returns None when the caller
    already had Ray running, else a one-tuple holding the reaper of a local cluster we
    started (or None): it kills the cluster's processes should this one be killed."""
    check_reachable(address)  # before importing Ray: a second or two saved on a typo
    import ray

    if ray.is_initialized():
        return None
    quiet = {"logging_level": logging.ERROR, "log_to_driver": False}
    reaper = None
    try:
        if address == "local":  # always a new cluster on this machine, never someone else's
            reaper = start_reaper()
            ray.init(address="local", include_dashboard=False, **quiet)
        else:
            ray.init(address=address, **quiet)
    except Exception as exc:  # noqa: BLE001 - Ray raises several types for a bad address
        if reaper is not None:
            reaper.kill()
        raise CognateError(f"ray: cannot connect to {address!r}: {one_line(exc)}") from exc
    return (reaper,)


def ray_shutdown(reaper: Any) -> None:
    """Disconnect; a local cluster we started is ended whole (its agents linger otherwise)."""
    import ray

    cluster = descendants(os.getpid()) if reaper is not None else {}
    ray.shutdown()
    if reaper is not None:
        cluster.pop(reaper.pid, None)
        reaper.kill()
        reaper.wait()
        kill_all(cluster)


def check_reachable(address: str, timeout_s: float = RAY_PROBE_TIMEOUT_S) -> None:
    """Fail fast on a HOST:PORT where no Ray cluster answers: Ray itself retries for
    minutes, printing a warning every few seconds. Nothing listening, no answer within
    ``timeout_s``, or an answer that is not gRPC's (HTTP/2) is one line."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return  # 'auto', 'local', ray:// client addresses: Ray answers quickly itself
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as conn:
            conn.settimeout(timeout_s)
            conn.sendall(_HTTP2_PREFACE)
            head = b""
            while len(head) < 9 and (chunk := conn.recv(9 - len(head))):
                head += chunk
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise CognateError(f"ray: nothing answers at {address} ({reason})") from None
    if len(head) < 9 or head[3] != 4:
        raise CognateError(f"ray: what answers at {address} is not a Ray cluster (no gRPC)")


def _ray_slots(exclusive: bool) -> list[dict[str, Any]]:
    """Task options, one per slot. Exclusive: one task per node holding all its CPUs."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [
        (node["NodeID"], int(node["Resources"]["CPU"]))
        for node in ray.nodes()
        if node.get("Alive") and node.get("Resources", {}).get("CPU", 0) >= 1
    ]
    if not nodes:
        raise CognateError("ray: the cluster has no node with a CPU")
    if exclusive:
        return [
            {
                "num_cpus": cpus,
                "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False),
            }
            for node_id, cpus in nodes
        ]
    return [{"num_cpus": 1}] * (2 * sum(cpus for _, cpus in nodes))


def run_ray(coll: Collection, plans: Iterator[Plan], runner_options: dict[str, Any]) -> None:
    import ray

    inflight: dict[Any, tuple[Plan, dict[str, Any]]] = {}
    try:
        slots = deque(_ray_slots(coll.target.exclusive))
        coll.any_host = True
        task = ray.remote(_ray_measure)
        target_ref = ray.put(coll.target)
        while True:
            while slots and (plan := next(plans, None)) is not None:
                options = slots.popleft()
                ref = task.options(**options, max_retries=0).remote(
                    target_ref, coll.op, coll.width, ray.put(plan.matrix), plan.todo, runner_options
                )
                inflight[ref] = (plan, options)
            if not inflight:
                break
            ready, _ = ray.wait(list(inflight), num_returns=1, timeout=1.0)
            for ref in ready:
                plan, options = inflight.pop(ref)
                slots.append(options)
                _take_ray_result(coll, plan, ref)
    except KeyboardInterrupt:
        for ref in inflight:
            ray.cancel(ref, force=True)
        raise


def _take_ray_result(coll: Collection, plan: Plan, ref: Any) -> None:
    import ray

    try:
        host, facts, measurements = ray.get(ref)
        check_batch(plan.todo, measurements)
    except Exception as exc:  # noqa: BLE001 - a failed task costs its matrix, reported
        # A RayTaskError carries the worker's traceback; its cause is the one line we want.
        coll.fail(
            plan.path, f"ray task failed: {describe(getattr(exc, 'cause', None) or exc)}", plan
        )
        return
    coll.write(plan, measurements, host=host, facts=facts)
    coll.finish(plan)
