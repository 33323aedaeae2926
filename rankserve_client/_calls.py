"""What each endpoint sends and how its answer is read, apart from any I/O.

`Client` and `AsyncClient` differ only in how they send a `Call`: both build it here, so the
two cannot drift apart in paths, bodies or error handling.
"""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

from rankserve_client.errors import APIError, error_from_response
from rankserve_client.types import Document

Auth = Literal["api", "admin"]
Expect = Literal["json", "text", "bytes"]
# The service's 429 (queue full) and 503 (loading, store down) both mean nothing was done:
# sending the same request again is safe, even a write.
RETRY_STATUSES = frozenset({429, 503})


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    auth: Auth = "api"
    body: Any = None
    params: Mapping[str, str | int] = field(default_factory=dict)
    expect: Expect = "json"
    retry: bool = True


@dataclass(frozen=True)
class RetryPolicy:
    """At most `max_retries` more tries after a 429 or 503. The wait is the Retry-After the
    service sent; without one, `backoff_s` doubling per try. A Retry-After longer than
    `max_wait_s` is not waited out: the error is raised at once, carrying it."""

    max_retries: int = 3
    backoff_s: float = 0.5
    max_wait_s: float = 30.0

    def delay(self, error: APIError, attempt: int) -> float | None:
        """Seconds to wait before try `attempt + 1` (0-based), or None to give up."""
        if error.status_code not in RETRY_STATUSES or attempt >= self.max_retries:
            return None
        wait = error.retry_after
        if wait is None:
            wait = self.backoff_s * 2**attempt
        return wait if wait <= self.max_wait_s else None


def headers_for(auth: Auth, api_key: str | None, admin_token: str | None) -> dict[str, str]:
    """The admin routes take the admin token and never the API key (docs/api.md)."""
    token = admin_token if auth == "admin" else api_key
    return {"Authorization": f"Bearer {token}"} if token else {}


def read(call: Call, status_code: int, headers: Mapping[str, str], content: bytes) -> Any:
    """The answer's value, or raises the `APIError` it stands for."""
    if status_code >= 400:
        try:
            body = json.loads(content) if content else None
        except ValueError:
            body = None
        raise error_from_response(status_code, headers, content, body)
    if call.expect == "bytes":
        return content
    if call.expect == "text":
        return content.decode("utf-8")
    return json.loads(content)


def segment(value: str) -> str:
    """One path segment: ids and version names are the caller's, so nothing in them may
    reach another path."""
    return quote(value, safe="")


def _given(**values: Any) -> dict[str, Any]:
    """The fields a caller set: an unset option is left to the service's default."""
    return {name: value for name, value in values.items() if value is not None}


# Data endpoints


def encode(texts: Sequence[str]) -> Call:
    return Call("POST", "/encode", body={"texts": list(texts)})


def embeddings(
    input: str | Sequence[str], model: str | None, encoding_format: str | None, user: str | None
) -> Call:
    text = input if isinstance(input, str) else list(input)
    body = {"input": text} | _given(model=model, encoding_format=encoding_format, user=user)
    return Call("POST", "/v1/embeddings", body=body)


def similarity(pairs: Sequence[tuple[str, str]], lambda_: float | None) -> Call:
    body = {"pairs": [[a, b] for a, b in pairs]} | _given(**{"lambda": lambda_})
    return Call("POST", "/similarity", body=body)


def similarity_to(source: str, targets: Sequence[str], lambda_: float | None) -> Call:
    body = {"source": source, "targets": list(targets)} | _given(**{"lambda": lambda_})
    return Call("POST", "/similarity", body=body)


def explain(
    source: str, targets: Sequence[str], anchors: int | None, lambda_: float | None
) -> Call:
    body = {"source": source, "targets": list(targets)}
    return Call(
        "POST", "/similarity/explain", body=body | _given(anchors=anchors, **{"lambda": lambda_})
    )


def rerank(
    query: str,
    documents: Sequence[str],
    top_n: int | None,
    return_documents: bool,
    lambda_: float | None,
) -> Call:
    # Cohere's form: it has top_n and answers with an object that can grow fields.
    body = {"query": query, "documents": list(documents), "return_documents": return_documents}
    return Call("POST", "/rerank", body=body | _given(top_n=top_n, **{"lambda": lambda_}))


def upsert_documents(documents: Sequence[Document | Mapping[str, Any]]) -> Call:
    return Call("POST", "/documents", body={"documents": [dict(doc) for doc in documents]})


def get_document(doc_id: str) -> Call:
    return Call("GET", f"/documents/{segment(doc_id)}")


def list_documents(cursor: str | None, limit: int | None) -> Call:
    return Call("GET", "/documents", params=_given(cursor=cursor, limit=limit))


def delete_document(doc_id: str) -> Call:
    return Call("DELETE", f"/documents/{segment(doc_id)}")


def delete_documents(ids: Sequence[str]) -> Call:
    return Call("POST", "/documents/delete", body={"ids": list(ids)})


def search(
    query: str,
    top_k: int | None,
    candidates: int | None,
    lambda_: float | None,
    filter: Mapping[str, Any] | None,
    offset: int | None = None,
) -> Call:
    body = {"query": query} | _given(
        top_k=top_k,
        candidates=candidates,
        offset=offset,
        filter=None if filter is None else dict(filter),
        **{"lambda": lambda_},
    )
    return Call("POST", "/search", body=body)


# Public endpoints. /ready is a probe: its 503 is the answer, not something to wait out.

HEALTH = Call("GET", "/health")
READY = Call("GET", "/ready", retry=False)
INFO = Call("GET", "/info")
METRICS = Call("GET", "/metrics", expect="text")

# Admin endpoints


def retrain(
    method: str,
    recipe: str | None,
    params: Mapping[str, Any] | None,
    text: str | None,
    documents_share: float | None,
    force: bool | None,
    teachers: Sequence[str] | None,
) -> Call:
    body = {"method": method} | _given(
        recipe=recipe,
        params=None if params is None else dict(params),
        text=text,
        documents_share=documents_share,
        force=force,
        teachers=None if teachers is None else list(teachers),
    )
    return Call("POST", "/admin/retrain", auth="admin", body=body)


JOBS = Call("GET", "/admin/jobs", auth="admin")
MODELS = Call("GET", "/admin/models", auth="admin")


def job(job_id: str) -> Call:
    return Call("GET", f"/admin/jobs/{segment(job_id)}", auth="admin")


def cancel_job(job_id: str) -> Call:
    return Call("DELETE", f"/admin/jobs/{segment(job_id)}", auth="admin")


def activate_model(version: str) -> Call:
    return Call("POST", f"/admin/models/{segment(version)}/activate", auth="admin")


def model_report(version: str) -> Call:
    return Call("GET", f"/admin/models/{segment(version)}/report", auth="admin")


def model_report_chart(version: str, chart: str) -> Call:
    path = f"/admin/models/{segment(version)}/report/{segment(chart)}"
    return Call("GET", path, auth="admin", expect="bytes")


# A restore writes only what differs from the snapshot, so sending it again after a 503 is as
# safe as any write.
SNAPSHOTS = Call("GET", "/admin/snapshots", auth="admin")


def create_snapshot(name: str | None) -> Call:
    return Call("POST", "/admin/snapshots", auth="admin", body=_given(name=name))


def restore_snapshot(name: str) -> Call:
    return Call("POST", f"/admin/snapshots/{segment(name)}/restore", auth="admin")
