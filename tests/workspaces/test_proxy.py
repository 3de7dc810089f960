"""The proxy's refusals, called as an ASGI app in-process (no cluster needed)."""

import asyncio

import pytest

from workspaces.proxy import NOT_FOUND_BODY, WorkspaceProxy

pytestmark = pytest.mark.django_db(transaction=True)


async def _never(scope, receive, send):  # pragma: no cover - Django must not be reached
    raise AssertionError("routed to Django")


def _call(scope, messages):
    sent = []

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    async def run():
        from asgiref.sync import sync_to_async
        from django.db import connections

        await WorkspaceProxy(_never)(scope, receive, send)
        # The proxy's database work ran in asgiref's thread: close its connection there.
        await sync_to_async(connections.close_all)()

    asyncio.run(run())
    return sent


def _scope(kind, path, cookie=b""):
    headers = [(b"host", b"portal.test")] + ([(b"cookie", cookie)] if cookie else [])
    return {
        "type": kind,
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": headers,
        "method": "GET",
        "extensions": {},
    }


def test_a_page_without_a_session_goes_to_the_login():
    sent = _call(_scope("http", "/ws/1/lab"), [{"type": "http.request", "body": b""}])
    assert sent[0]["status"] == 302
    assert dict(sent[0]["headers"])[b"location"].startswith(b"/accounts/login/?next=")


def test_a_websocket_without_a_session_is_refused_with_a_reason():
    sent = _call(
        _scope("websocket", "/ws/1/api/kernels/x/channels"), [{"type": "websocket.connect"}]
    )
    assert sent == [
        {
            "type": "websocket.close",
            "code": 4403,
            "reason": "No portal session: sign in to the portal, then open the workspace.",
        }
    ]


def test_someone_elses_workspace_and_a_missing_one_answer_the_same(personas):
    from django.test import Client

    client = Client()
    client.force_login(personas.outsider)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    from workspaces.models import Workspace, WorkspaceKind

    ws = Workspace.objects.create(
        project=personas.project_a,
        owner=personas.member,
        name="nb",
        shape="gpu:1",
        kind=WorkspaceKind.objects.get_or_create(
            slug="jupyterlab", defaults={"name": "JupyterLab", "app": "jupyter", "image": "x"}
        )[0],
    )
    answers = [
        _call(_scope("http", path, cookie), [{"type": "http.request", "body": b""}])
        for path in (f"/ws/{ws.pk}/", f"/ws/{ws.pk + 999}/")
    ]
    assert answers[0] == answers[1]
    assert answers[0][0]["status"] == 404
    assert answers[0][1]["body"] == NOT_FOUND_BODY
