"""PostgreSQL crashes in the middle of a burst of ticket filings and approvals, and is back 3 s later.

The whole stack runs on this test's own PostgreSQL (initdb'd here, on a port picked at run time):
gunicorn for the API and a Celery worker as docker-compose.yml runs the agent's (threads, a
connection pool), on the test's Redis. Then:
- no request answers 500 for something it committed (each answer is compared with what is in
  the database: a 500 filing left no ticket, a 500 decision left its request pending);
- every ticket settles, and every approved refund is paid and verified, within a minute of the
  database's return (no run waits for its lease).
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest
import requests
from django.conf import settings

from tests.helpers import wait_for as shared_wait_for

ROOT = Path(__file__).resolve().parents[2]
PG_BIN = Path(os.getenv("PG_BIN", "/usr/lib/postgresql/15/bin"))
PYTHON_BIN = Path(sys.executable).parent

pytestmark = [
    pytest.mark.worker,
    pytest.mark.skipif(not (PG_BIN / "pg_ctl").exists(), reason=f"needs PostgreSQL's server binaries in {PG_BIN}"),
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class OwnPostgres:
    """A PostgreSQL server of this test's own, crashed (`immediate` stop: no checkpoint, every
    connection cut) and started again on the same data."""

    def __init__(self, workdir: Path):
        self.port = free_port()
        self.workdir = workdir
        self.data = workdir / "data"
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/crash"

    def _run(self, *args):
        # initdb and the server refuse to run as root: as the postgres system user then.
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        return subprocess.run([*prefix, *args], capture_output=True, text=True, timeout=120, check=True)

    def init(self):
        self.workdir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.workdir, "postgres", "postgres")
        self._run(str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        self.start()
        with psycopg.connect(f"postgres://postgres@127.0.0.1:{self.port}/postgres", autocommit=True) as conn:
            conn.execute("CREATE DATABASE crash")
        return self

    def start(self):
        options = f"-p {self.port} -k {self.workdir} -c listen_addresses=127.0.0.1 -c max_connections=60"
        self._run(
            str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.workdir / "log"), "-w", "start"
        )

    def crash(self):
        self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")

    def stop(self):
        try:
            self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "fast", "stop")
        except subprocess.CalledProcessError:
            pass

    def query(self, sql: str, params=()):
        with psycopg.connect(self.url, autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()


def manage(env: dict, *args) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def wait_for(predicate, timeout: float, what: str):
    # The database or the fake is down on purpose for a while: that is "not yet".
    return shared_wait_for(predicate, timeout, what, tolerate=(psycopg.OperationalError, requests.RequestException))


@pytest.fixture
def own_postgres(tmp_path_factory):
    server = OwnPostgres(Path(f"/tmp/ra-crash-{os.getpid()}-{free_port()}")).init()
    yield server
    server.stop()
    shutil.rmtree(server.workdir, ignore_errors=True)


@pytest.fixture
def stack(own_postgres):
    """gunicorn and the agent's worker on the own PostgreSQL, the demo seeded, two API tokens."""
    from refundagent.tasks import agent_run_ticket_task

    app = agent_run_ticket_task.app  # the product's Celery app (tests never import the wiring)

    app.control.purge()
    env = {
        **os.environ,
        "DATABASE_URL": own_postgres.url,
        "DATABASE_CONN_MAX_AGE": "60",
        "AGENT_PROVIDER": "offline",
        "AGENT_OFFLINE_THINK_SECONDS": "0.3",
        "PYTHONUNBUFFERED": "1",
    }
    manage(env, "migrate", "--noinput")
    manage(env, "seed_demo")
    # The burst files ten tickets on one order of one customer, which the demo policy's risk rules
    # send to a person (docs/api.md, "Risk signals in the policy"); this test is about the crash.
    own_postgres.query("UPDATE approvals_refundpolicy SET risk_rules = '{}' RETURNING id")
    tokens = {
        who: manage(env, "create_api_token", who).strip().splitlines()[-1] for who in ("acme-support", "acme-finance")
    }
    port = free_port()
    logs = own_postgres.workdir
    procs = [
        subprocess.Popen(
            [
                str(PYTHON_BIN / "gunicorn"),
                ":".join(settings.WSGI_APPLICATION.rsplit(".", 1)),
                "--bind",
                f"127.0.0.1:{port}",
                "--workers",
                "2",
            ],
            cwd=ROOT,
            env=env,
            stdout=open(logs / "gunicorn.log", "w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        ),
        subprocess.Popen(
            [
                str(PYTHON_BIN / "celery"),
                "-A",
                "refundagent",
                "worker",
                "-Q",
                "agent,money",
                "--pool=threads",
                "--concurrency=20",
                "-n",
                f"crash-{port}@localhost",
                "--without-gossip",
                "--without-mingle",
                "--loglevel=INFO",
            ],
            cwd=ROOT,
            env={**env, "DATABASE_POOL_MAX_SIZE": "6"},
            stdout=open(logs / "worker.log", "w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        ),
    ]
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: requests.get(f"{base}/api/health/live", timeout=2).status_code == 200, 60, "gunicorn")
    try:
        yield base, tokens
    finally:
        import signal

        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        app.control.purge()


def post(base: str, token: str, path: str, body: dict):
    try:
        response = requests.post(
            f"{base}{path}",
            data=json.dumps(body),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            timeout=60,
        )
        return response.status_code, response.text
    except requests.RequestException as exc:
        return None, str(exc)


def test_a_database_crash_mid_burst_loses_nothing_and_strands_nothing(own_postgres, stack):
    base, tokens = stack
    # given ten tickets waiting for finance
    pending = []
    for n in range(10):
        status, text = post(
            base,
            tokens["acme-support"],
            "/api/tickets",
            {
                "order": "ORD-5001",
                "customer": "CUST-1001",
                "message": f"before the crash #{n}",
                "requested_amount": "1.00",
            },
        )
        assert status == 201, text
        pending.append(json.loads(text)["id"])
    wait_for(
        lambda: (
            own_postgres.query(
                "SELECT count(*) FROM refundagent_ticket WHERE id = ANY(%s) AND status = 'approval_required'",
                (pending,),
            )[0][0]
            == 10
        ),
        90,
        "ten drafts",
    )
    approvals = own_postgres.query(
        "SELECT id, args_hash FROM approvals_approvalrequest WHERE ticket_ref = ANY(%s) AND status = 'pending'",
        (pending,),
    )
    assert len(approvals) == 10

    # when 20 filings and 10 approvals go out over ~6 s and PostgreSQL crashes 1.5 s in, back 3 s later
    answers: list[tuple[str, str, int | None, str]] = []
    lock = threading.Lock()

    def file(n):
        status, text = post(
            base,
            tokens["acme-support"],
            "/api/tickets",
            {"order": "ORD-5002", "customer": "CUST-1001", "message": f"crash burst #{n}", "requested_amount": "1.00"},
        )
        with lock:
            answers.append(("ticket", f"crash burst #{n}", status, text))

    def decide(request_id, args_hash):
        status, text = post(
            base,
            tokens["acme-finance"],
            f"/api/approvals/{request_id}/decision",
            {"decision": "approve", "args_hash": args_hash},
        )
        with lock:
            answers.append(("approval", str(request_id), status, text))

    jobs = []
    for n in range(20):
        jobs.append(threading.Thread(target=file, args=(n,)))
        if n % 2:
            jobs.append(threading.Thread(target=decide, args=approvals[n // 2]))
    started = time.monotonic()
    crashed = False
    for job in jobs:
        job.start()
        time.sleep(0.2)
        if not crashed and time.monotonic() - started > 1.5:
            own_postgres.crash()
            crashed = True
            crashed_at = time.monotonic()
        if crashed and time.monotonic() - crashed_at > 3 and not getattr(own_postgres, "back", False):
            own_postgres.start()
            own_postgres.back = time.monotonic()
    if not getattr(own_postgres, "back", False):
        time.sleep(max(0.0, 3 - (time.monotonic() - crashed_at)))
        own_postgres.start()
        own_postgres.back = time.monotonic()
    for job in jobs:
        job.join(90)
    back = own_postgres.back

    # then no committed request answered 500 (or no answer): each answer agrees with the database
    assert len(answers) == 30
    failed = [(kind, key, status) for kind, key, status, _ in answers if status is None or status >= 500]
    assert failed, "the crash cut no request off: it did not happen mid-burst"
    for kind, key, status, text in answers:
        if kind == "ticket":
            stored = own_postgres.query("SELECT count(*) FROM refundagent_ticket WHERE message = %s", (key,))[0][0]
            if status == 201:
                assert stored == 1, (key, text)
            elif status is None or status >= 500:
                assert stored == 0, f"{key} answered {status} but was filed: {text[:300]}"
        else:
            decided = own_postgres.query("SELECT status FROM approvals_approvalrequest WHERE id = %s", (int(key),))[0][
                0
            ]
            if status == 200:
                assert decided != "pending", (key, text)
            elif status is None or status >= 500:
                assert decided == "pending", (
                    f"approval {key} answered {status} but was decided ({decided}): {text[:300]}"
                )

    # and within a minute of the database's return every ticket has settled and every approval was
    # written to the ledger (the manual gateway: `pending` until finance records its payout by hand)
    def settled():
        open_tickets = own_postgres.query(
            "SELECT count(*) FROM refundagent_ticket WHERE status IN ('queued', 'running')"
        )[0][0]
        unwritten = own_postgres.query(
            "SELECT count(*) FROM approvals_approvalrequest a WHERE a.status = 'approved' AND NOT EXISTS "
            "(SELECT 1 FROM ledger_refundentry e WHERE e.idempotency_key = a.idempotency_key)"
        )[0][0]
        return open_tickets == 0 and unwritten == 0

    try:
        wait_for(settled, max(1.0, 60 - (time.monotonic() - back)), "every ticket to settle within a minute")
    except AssertionError:
        stuck = own_postgres.query(
            "SELECT id, status, stop_detail, updated_at FROM refundagent_ticket WHERE status IN ('queued', 'running')"
        )
        raise AssertionError(f"not settled a minute after the database's return: {stuck}") from None
    paid = own_postgres.query(
        "SELECT count(*) FROM approvals_approvalrequest a JOIN ledger_refundentry e ON e.idempotency_key = a.idempotency_key "
        "WHERE a.ticket_ref = ANY(%s)",
        (pending,),
    )[0][0]
    approved_answers = sum(1 for kind, _, status, _ in answers if kind == "approval" and status == 200)
    assert paid >= approved_answers
    # and no approval was paid twice
    assert (
        own_postgres.query(
            "SELECT count(*) FROM (SELECT idempotency_key FROM ledger_refundentry GROUP BY 1 HAVING count(*) > 1) twice"
        )[0][0]
        == 0
    )
