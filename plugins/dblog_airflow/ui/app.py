"""The DBLog page's FastAPI app, mounted in the Airflow api-server under `PREFIX` by the plugin
`dblog_ui_plugin` and shown in the UI's navigation as "DBLog".

    GET  /dblog/                                  the page (HTML + vanilla JS, refreshes from the JSON below)
    GET  /dblog/api/status                        `dblog.operations.status.page_snapshot` of every source in DBLOG_SOURCES
                                                  (the staged log's size as listed at most `USAGE_TTL_S` ago);
                                                  ?view={"<source>": {"page": n, "find": "text"}}: which
                                                  warehouse tables each source shows
    POST /dblog/api/dumps/{source}/{dump_id}/{action}   pause | resume | cancel | throttle
                                                  (JSON body for throttle: {"chunk_size": n, "delay_s": s, "parallelism": p})

Airflow does not authenticate plugin apps (a mount inherits none of the core API's dependencies),
so every route but the icon depends on Airflow's own authentication: `get_user` resolves the JWT
of an `Authorization: Bearer` header or of the `_token` cookie the UI sets at login (401 without
one, 403 for an invalid one). Then the auth manager decides: reading needs read access to the
dblog_dump DAG, acting on a dump needs the right to trigger dblog_dump_control (what the same act
through that DAG needs). POSTs must be JSON, and the cookie is SameSite=Lax, so another site
cannot make a signed-in browser pause a dump.
"""
from __future__ import annotations

import logging
import threading
from contextlib import ExitStack
from functools import cache
from pathlib import Path
from typing import Any

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, Response

PREFIX = "/dblog"
READ = Depends(requires_access_dag("GET", param_dag_id="dblog_dump"))
ACT = Depends(requires_access_dag("POST", DagAccessEntity.RUN, param_dag_id="dblog_dump_control"))
STORE_OUTAGE_S = 5.0  # a page request waits this long for a lost ZooKeeper connection, not the engine's 120 s
# A staged log between two compactions holds a file per table per second of capture: listed at most
# once a minute, not on every 3 s refresh (on an object store, a request per thousand files).
USAGE_TTL_S = 60.0

log = logging.getLogger(__name__)
app = FastAPI(title="DBLog", docs_url=None, redoc_url=None, openapi_url=None)


class _Clients:
    """One ZooKeeper session per api-server process, opened at the first request (never at
    import): a page refreshing every few seconds must not open a session each time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stack: ExitStack | None = None
        self._store = None

    def store(self):
        from dblog.connections import ConfigError, source_ids
        from dblog_airflow.hooks.dblog import DBLogHook
        with self._lock:
            if self._store is None:
                ids = source_ids()
                if not ids:
                    raise ConfigError("DBLOG_SOURCES names no source")
                stack = ExitStack()
                store = stack.enter_context(DBLogHook(ids[0]).store())  # the ZooKeeper is shared
                store.outage = STORE_OUTAGE_S
                self._stack, self._store = stack, store
            return self._store

    def reset(self) -> None:
        """After a failure: the next request starts a fresh session."""
        with self._lock:
            stack, self._stack, self._store = self._stack, None, None
        if stack is not None:
            try:
                stack.close()
            except Exception:  # the session may be gone already
                pass


clients = _Clients()


class _Usage:
    """`dblog.operations.staged_maintenance.staged_usage` per source, kept `USAGE_TTL_S` seconds."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[float, Any]] = {}

    def __call__(self, source: str):
        import time

        from dblog.operations.staged_maintenance import staged_usage
        from dblog_airflow.hooks.dblog import DBLogHook
        with self._lock:
            at, usage = self._seen.get(source, (0.0, None))
        if usage is None or time.monotonic() - at > USAGE_TTL_S:
            try:
                usage = staged_usage(DBLogHook.staged(), source)
            except Exception as exc:  # the rest of the page still shows; the log says why this part does not
                log.warning("DBLog page: cannot list the staged log of %s: %s", source, exc)
                return None
            with self._lock:
                self._seen[source] = (time.monotonic(), usage)
        return usage


usage = _Usage()


def _sources() -> tuple[list, list[dict]]:
    """Each configured source through its Airflow connection; a broken one is reported, not fatal."""
    from dblog.connections import source_ids
    from dblog_airflow.hooks.dblog import DBLogHook
    sources, errors = [], []
    for sid in source_ids():
        try:
            sources.append(DBLogHook(sid).get_source())  # builds the client; no database query
        except Exception as exc:
            errors.append({"source": sid, "error": f"{type(exc).__name__}: {exc}"})
    return sources, errors


@cache
def _page() -> str:
    return (Path(__file__).parent / "page.html").read_text()


@app.get("/", response_class=HTMLResponse, dependencies=[READ])
def page() -> HTMLResponse:
    return HTMLResponse(_page(), headers={"Cache-Control": "no-store"})


@app.get("/icon.svg", include_in_schema=False)
def icon() -> Response:
    # Public: the navigation loads it as an <img>; it is the same for everyone.
    svg = ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" fill="none" stroke="#0a7d6e" '
           'stroke-width="2"><ellipse cx="12" cy="5" rx="8" ry="3"/><path d="M4 5v6c0 1.7 3.6 3 8 3s8-1.3 8-3V5"/>'
           '<path d="M4 11v6c0 1.7 3.6 3 8 3"/><path d="M15 18l2 2 4-4"/></svg>')
    return Response(svg, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})


@app.get("/api/status", dependencies=[READ])
def status(view: str = "{}") -> dict:
    from dblog.operations.status import page_snapshot
    from dblog_airflow.hooks.dblog import DBLogHook
    views = _views(view)
    sources, errors = _sources()
    try:
        snapshot = page_snapshot(clients.store(), sources, DBLogHook.warehouse(), usage=usage, views=views)
    except Exception as exc:
        clients.reset()
        log.warning("DBLog page: status failed: %s", exc)
        raise HTTPException(503, f"cannot read the dblog state: {exc}") from None
    finally:
        for s in sources:
            s.close()
    return {**snapshot, "errors": errors}


def _views(text: str) -> dict:
    """The `view` parameter as `TableView`s per source; 400 naming what is wrong."""
    import json

    from dblog.operations.status import TableView
    shape = 'view is a JSON object {"<source>": {"page": <n >= 0>, "find": "<text>"}}'
    try:
        raw = json.loads(text)
    except ValueError:
        raise HTTPException(400, f"{shape}; got invalid JSON: {text[:200]}") from None
    views = {}
    for source, v in (raw.items() if isinstance(raw, dict) else [(None, None)]):
        page, find = (v.get("page", 0), v.get("find", "")) if isinstance(v, dict) else (None, None)
        if not (isinstance(page, int) and page >= 0 and isinstance(find, str) and len(find) <= 200):
            raise HTTPException(400, f"{shape} (find at most 200 characters); got {text[:200]}")
        views[source] = TableView(page, find)
    return views


@app.post("/api/dumps/{source}/{dump_id}/{action}", dependencies=[ACT])
async def control(source: str, dump_id: str, action: str, request: Request, user: GetUserDep) -> dict:
    from dblog.connections import source_ids
    from dblog.settings import DUMP_ID
    from dblog.snapshot.dump import ACTIONS
    if action not in ACTIONS:
        raise HTTPException(404, f"no action {action!r}; use one of {', '.join(ACTIONS)}")
    if not DUMP_ID.match(dump_id):
        raise HTTPException(404, f"no dump {dump_id!r}: dump ids are 1-64 letters, digits, '.', '_' or '-'")
    if source not in source_ids():
        raise HTTPException(404, f"no source {source!r}; DBLOG_SOURCES lists {', '.join(source_ids())}")
    if not request.headers.get("content-type", "").startswith("application/json"):
        raise HTTPException(415, "send a JSON body (Content-Type: application/json)")
    try:
        body = await request.json()
    except ValueError:
        raise HTTPException(400, "the body is not valid JSON") from None
    if not isinstance(body, dict) or set(body) - {"chunk_size", "delay_s", "parallelism"}:
        raise HTTPException(400, 'the body is a JSON object with at most "chunk_size", "delay_s" and '
                                 f'"parallelism", got '
                                 f"{str(body)[:200]}")
    from starlette.concurrency import run_in_threadpool
    return await run_in_threadpool(_act, source, dump_id, action, body, user.get_name())


def _act(source: str, dump_id: str, action: str, body: dict[str, Any], who: str) -> dict:
    from dblog.operations.status import dump_view
    from dblog.snapshot.dump import control_changes, dump_status, set_control
    from dblog.snapshot.dump_spec import DumpError
    try:
        changes = control_changes(action, body.get("chunk_size"), body.get("delay_s"), body.get("parallelism"))
        store = clients.store()
        set_control(store, source, dump_id, **changes)  # validates: its DumpError is the user's answer
        view = dump_view(dump_status(store, source, dump_id))
    except DumpError as exc:
        raise HTTPException(400, str(exc)) from None
    except Exception as exc:
        clients.reset()
        raise HTTPException(503, f"cannot reach the dblog state: {exc}") from None
    log.info("DBLog page: %s on dump %s of %s by %s (%s)", action, dump_id, source, who, changes)
    return {"dump": view}
