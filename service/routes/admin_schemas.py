"""Request and response bodies of the admin API (service/routes/admin.py)."""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from core.jobs import DEFAULT_RECIPE
from models.training.config import Recipe
from models.training.methods import Method


class RetrainBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    method: Method
    recipe: Recipe = Field(
        default=Recipe(DEFAULT_RECIPE),
        description="quick: a smoke run; full: about an hour on 2 CPU cores",
    )
    params: dict[str, Any] = Field(
        default_factory=dict, description="TrainConfig overrides of the recipe"
    )
    text: Literal["auto", "documents", "general"] = Field(
        default="auto",
        description="training text: the corpus documents, the general clean text, or auto "
        "(documents once the corpus holds RANKSERVE_RETRAIN_MIN_DOCUMENTS distinct texts)",
    )
    documents_share: float | None = Field(
        default=None,
        gt=0.0,
        le=1.0,
        description="share of documents in the text mix; default RANKSERVE_RETRAIN_DOCUMENTS_SHARE",
    )
    force: bool = Field(
        default=False, strict=True, description="promote even if the dev metric is lower"
    )
    teachers: list[str] = Field(
        default_factory=list, description="installed teacher names; 'default' = packaged MiniLM"
    )


class RetrainAccepted(BaseModel):
    job_id: str
    status: str


class JobView(BaseModel):
    id: str
    # RQ's (queued, started, finished, failed, stopped, canceled, scheduled), or requeued: the
    # job started, its worker died or shut down, and it waits for a retry.
    status: str
    method: str | None
    force: bool
    params: dict[str, Any]
    teachers: list[str]
    recipe: str
    text: str
    documents_share: float | None
    enqueued_at: str | None
    started_at: str | None
    ended_at: str | None
    retries_left: int | None
    worker: str | None
    progress: dict[str, Any]  # phase, step, total, percent, loss, eta_s, elapsed_s, pid
    result: dict[str, Any] | None  # version, promoted, gate, dev metrics
    error: str | None


class JobList(BaseModel):
    jobs: list[JobView]


class CancelResponse(BaseModel):
    id: str
    status: str


class ModelVersion(BaseModel):
    version: str
    created_at: str
    method: str | None
    parent: str | None
    name: str
    dim: int
    corpus_revision: int | None
    metrics: dict[str, Any]
    active: bool
    refused: dict[str, Any] | None  # the last refusal a replica reported, if any
    has_report: bool  # diagnostics at /admin/models/{version}/report


class ModelsResponse(BaseModel):
    active: str | None  # None: the settings checkpoint, no bundle activated yet
    serving: str | None  # what this replica serves
    versions: list[ModelVersion]  # oldest first
    replicas: dict[str, dict[str, Any]]  # replica id -> what it last reported
    history: list[dict[str, Any]]  # activations, newest first


class ActivateResponse(BaseModel):
    active: str
    previous: str | None


class ReportResponse(BaseModel):
    version: str
    report: dict[str, Any]  # HEROS, geometry, ranking, similar pairs (worker/report.py)
    charts: dict[str, str]  # chart name -> URL of its PNG
