"""A real SMTP server for the email tests (aiosmtpd on a free local port), and what it received.

`smtp_server` points Django's SMTP backend at it; `smtp_server.refuse(n)` makes it answer the
next n messages with a transient 451 (a failing mail server), `refuse(None)` every message."""

import email
import socket
import threading

import pytest
from aiosmtpd.controller import Controller


class _Handler:
    def __init__(self):
        self.messages = []
        self.refused = 0
        self.refuse_next = 0  # None: refuse every message
        self.lock = threading.Lock()

    async def handle_DATA(self, server, session, envelope):
        with self.lock:
            if self.refuse_next is None or self.refuse_next > 0:
                if self.refuse_next:
                    self.refuse_next -= 1
                self.refused += 1
                return "451 4.3.0 Mail server temporarily unavailable"
            message = email.message_from_bytes(envelope.content)
            self.messages.append({"from": envelope.mail_from, "to": list(envelope.rcpt_tos), "message": message})
        return "250 OK"


class SmtpServer:
    def __init__(self):
        self.handler = _Handler()
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.controller = Controller(self.handler, hostname="127.0.0.1", port=self.port)

    def start(self):
        self.controller.start()
        return self

    def stop(self):
        self.controller.stop()

    @property
    def messages(self) -> list[dict]:
        with self.handler.lock:
            return list(self.handler.messages)

    @property
    def refused(self) -> int:
        return self.handler.refused

    def refuse(self, count: int | None) -> None:
        with self.handler.lock:
            self.handler.refuse_next = count

    @property
    def env(self) -> dict:
        """The environment a worker subprocess needs to send here."""
        return {"EMAIL_HOST": "127.0.0.1", "EMAIL_PORT": str(self.port), "EMAIL_BACKEND": ""}


@pytest.fixture
def smtp_server(settings):
    server = SmtpServer().start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = server.port
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
    settings.EMAIL_TIMEOUT = 5
    yield server
    server.stop()
