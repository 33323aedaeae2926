"""`AsyncClient`: the asyncio client, on `httpx.AsyncClient`; `Client` in every other way."""

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from time import monotonic
from types import TracebackType
from typing import Any, Literal, Self, cast

import httpx

from rankserve_client import _calls
from rankserve_client._calls import Call, RetryPolicy
from rankserve_client.errors import APIError, NotReadyError
from rankserve_client.types import (
    ActivateResult,
    CancelResult,
    DeleteResult,
    Document,
    DocumentPage,
    EmbeddingsResult,
    EncodeResult,
    ExplainResult,
    Health,
    Info,
    Job,
    JobList,
    Models,
    Ready,
    Report,
    RerankResult,
    RestoreResult,
    RetrainAccepted,
    SearchResult,
    SimilarityResult,
    Snapshot,
    SnapshotList,
    StoredDocument,
    UpsertResult,
)


class AsyncClient:
    """Every endpoint of a rankserve service, for asyncio.

    `api_key` opens the data endpoints when the service has RANKSERVE_API_KEY set;
    `admin_token` opens /admin. A 429 or 503 is retried up to `max_retries` times, waiting
    the service's Retry-After (at most `max_retry_wait_s`, else the error is raised at once)
    or, without one, `backoff_s` doubling per try. Errors are `rankserve_client.APIError`s.
    Pass `http_client` to use your own `httpx.AsyncClient` (proxies, TLS, transports); it is then
    yours to close.
    """

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        api_key: str | None = None,
        admin_token: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        max_retry_wait_s: float = 30.0,
        backoff_s: float = 0.5,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.admin_token = admin_token
        self.retry = RetryPolicy(max_retries, backoff_s, max_retry_wait_s)
        self._owns_http = http_client is None
        self._http = http_client or httpx.AsyncClient(timeout=timeout)

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _send(self, call: Call) -> Any:
        headers = _calls.headers_for(call.auth, self.api_key, self.admin_token)
        attempt = 0
        while True:
            response = await self._http.request(
                call.method,
                self.base_url + call.path,
                json=call.body,
                params=dict(call.params),
                headers=headers,
            )
            try:
                return _calls.read(call, response.status_code, response.headers, response.content)
            except APIError as error:
                wait = self.retry.delay(error, attempt) if call.retry else None
                if wait is None:
                    raise
            await asyncio.sleep(wait)
            attempt += 1

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, str | int] | None = None,
        admin: bool = False,
        expect: Literal["json", "text", "bytes"] = "json",
    ) -> Any:
        """Any route, with this client's auth, retries and errors (for routes added later)."""
        auth: _calls.Auth = "admin" if admin else "api"
        return await self._send(Call(method, path, auth, json, params or {}, expect))

    # Data endpoints

    async def encode(self, texts: Sequence[str]) -> EncodeResult:
        """Unit-length embeddings, in input order (POST /encode)."""
        return cast(EncodeResult, await self._send(_calls.encode(texts)))

    async def embeddings(
        self,
        input: str | Sequence[str],
        *,
        model: str | None = None,
        encoding_format: Literal["float", "base64"] | None = None,
        user: str | None = None,
    ) -> EmbeddingsResult:
        """OpenAI's embeddings API (POST /v1/embeddings); floats unless base64 is asked for."""
        call = _calls.embeddings(input, model, encoding_format, user)
        return cast(EmbeddingsResult, await self._send(call))

    async def similarity(
        self, pairs: Sequence[tuple[str, str]], *, lambda_: float | None = None
    ) -> SimilarityResult:
        """Eq. 7 scores of text pairs (POST /similarity)."""
        return cast(SimilarityResult, await self._send(_calls.similarity(pairs, lambda_)))

    async def similarity_to(
        self, source: str, targets: Sequence[str], *, lambda_: float | None = None
    ) -> SimilarityResult:
        """Eq. 7 scores of one source against each target, in target order."""
        call = _calls.similarity_to(source, targets, lambda_)
        return cast(SimilarityResult, await self._send(call))

    async def explain(
        self,
        source: str,
        targets: Sequence[str],
        *,
        anchors: int | None = None,
        lambda_: float | None = None,
    ) -> ExplainResult:
        """Eq. 7 of source against each target, with each text's nearest anchors
        (POST /similarity/explain)."""
        call = _calls.explain(source, targets, anchors, lambda_)
        return cast(ExplainResult, await self._send(call))

    async def rerank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        top_n: int | None = None,
        return_documents: bool = False,
        lambda_: float | None = None,
    ) -> RerankResult:
        """Documents ordered by Eq. 7 against the query, best first (POST /rerank)."""
        call = _calls.rerank(query, documents, top_n, return_documents, lambda_)
        return cast(RerankResult, await self._send(call))

    async def upsert_documents(
        self, documents: Sequence[Document | Mapping[str, Any]]
    ) -> UpsertResult:
        """Insert or replace documents (POST /documents); ids are generated where absent."""
        return cast(UpsertResult, await self._send(_calls.upsert_documents(documents)))

    async def get_document(self, doc_id: str) -> StoredDocument:
        return cast(StoredDocument, await self._send(_calls.get_document(doc_id)))

    async def list_documents(
        self, *, cursor: str | None = None, limit: int | None = None
    ) -> DocumentPage:
        """One page of documents in id order; pass `next_cursor` on for the next."""
        return cast(DocumentPage, await self._send(_calls.list_documents(cursor, limit)))

    async def iter_documents(
        self, *, page_size: int | None = None
    ) -> AsyncIterator[StoredDocument]:
        """Every document in id order, a page at a time."""
        cursor = None
        while True:
            page = await self.list_documents(cursor=cursor, limit=page_size)
            for document in page["documents"]:
                yield document
            cursor = page["next_cursor"]
            if cursor is None:
                return

    async def delete_document(self, doc_id: str) -> DeleteResult:
        """Deletes one document; a missing one is a NotFoundError."""
        return cast(DeleteResult, await self._send(_calls.delete_document(doc_id)))

    async def delete_documents(self, ids: Sequence[str]) -> DeleteResult:
        """Deletes several; missing ids are listed in `not_found`, not raised."""
        return cast(DeleteResult, await self._send(_calls.delete_documents(ids)))

    async def search(
        self,
        query: str,
        *,
        top_k: int | None = None,
        candidates: int | None = None,
        lambda_: float | None = None,
        filter: Mapping[str, Any] | None = None,
        offset: int | None = None,
    ) -> SearchResult:
        """The corpus's best documents for the query by Eq. 7 (POST /search).

        `filter` is Qdrant's filter object (must/should/must_not) or a flat object of
        metadata values to equal; `offset` skips that many hits (the next page).
        """
        call = _calls.search(query, top_k, candidates, lambda_, filter, offset)
        return cast(SearchResult, await self._send(call))

    # Public endpoints

    async def health(self) -> Health:
        return cast(Health, await self._send(_calls.HEALTH))

    async def ready(self) -> Ready:
        """Raises NotReadyError (not retried) while the model or the index is loading."""
        return cast(Ready, await self._send(_calls.READY))

    async def wait_ready(self, timeout_s: float = 300.0, interval_s: float = 0.5) -> Ready:
        """Polls /ready until the service is ready; raises the last NotReadyError (or the
        connection error) once `timeout_s` has passed."""
        deadline = monotonic() + timeout_s
        while True:
            try:
                return await self.ready()
            except (NotReadyError, httpx.TransportError):
                if monotonic() + interval_s > deadline:
                    raise
            await asyncio.sleep(interval_s)

    async def info(self) -> Info:
        """The model and every request limit (GET /info)."""
        return cast(Info, await self._send(_calls.INFO))

    async def metrics(self) -> str:
        """Prometheus text (GET /metrics)."""
        return cast(str, await self._send(_calls.METRICS))

    # Admin endpoints (admin_token)

    async def retrain(
        self,
        method: str,
        *,
        recipe: str | None = None,
        params: Mapping[str, Any] | None = None,
        text: str | None = None,
        documents_share: float | None = None,
        force: bool | None = None,
        teachers: Sequence[str] | None = None,
    ) -> RetrainAccepted:
        """Queues a retrain job (POST /admin/retrain); follow it with `job`."""
        call = _calls.retrain(method, recipe, params, text, documents_share, force, teachers)
        return cast(RetrainAccepted, await self._send(call))

    async def jobs(self) -> JobList:
        return cast(JobList, await self._send(_calls.JOBS))

    async def job(self, job_id: str) -> Job:
        return cast(Job, await self._send(_calls.job(job_id)))

    async def cancel_job(self, job_id: str) -> CancelResult:
        return cast(CancelResult, await self._send(_calls.cancel_job(job_id)))

    async def models(self) -> Models:
        """Every bundle, the active one, what each replica serves (GET /admin/models)."""
        return cast(Models, await self._send(_calls.MODELS))

    async def activate_model(self, version: str) -> ActivateResult:
        """Makes `version` the active model of every replica (roll back or forward)."""
        return cast(ActivateResult, await self._send(_calls.activate_model(version)))

    async def model_report(self, version: str) -> Report:
        return cast(Report, await self._send(_calls.model_report(version)))

    async def model_report_chart(self, version: str, chart: str) -> bytes:
        """One PNG chart of a version's report, by its file name (`report["charts"]`)."""
        return cast(bytes, await self._send(_calls.model_report_chart(version, chart)))

    async def create_snapshot(self, name: str | None = None) -> Snapshot:
        """Every document as of one corpus revision, with the active model version, into the
        bundle store (POST /admin/snapshots); a name already taken is a ConflictError."""
        return cast(Snapshot, await self._send(_calls.create_snapshot(name)))

    async def snapshots(self) -> SnapshotList:
        """Every snapshot, oldest first (GET /admin/snapshots)."""
        return cast(SnapshotList, await self._send(_calls.SNAPSHOTS))

    async def restore_snapshot(self, name: str) -> RestoreResult:
        """Makes the corpus the snapshot's documents for every replica, atomically; only what
        differs is written. A long restore may need a longer `timeout` than the default."""
        return cast(RestoreResult, await self._send(_calls.restore_snapshot(name)))
