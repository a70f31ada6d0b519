"""Workflow templates (seed 004): a workflow's requests take their base priority
from its template, unless the operator names one.

A template is code, not a table: each one is a workflow revisit knows how to
run (``revisit forge add`` runs add forge now). The requests a workflow makes
for its first request (its children) take that request's effective priority,
so adjusting the workflow's request moves what it makes after.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorkflowTemplate:
    """A kind of request a workflow makes, and the base priority it starts with."""

    kind: str
    priority: int
    summary: str


#: Save code now's high priority (100, the task API's ``high``) stays ahead;
#: requests without a priority (0) and the recurrent backlog come after.
ADD_FORGE_NOW = WorkflowTemplate(
    "add_forge_now",
    50,
    "register a forge's lister, run its full listing, then first-visit every origin it lists",
)

TEMPLATES: dict[str, WorkflowTemplate] = {t.kind: t for t in (ADD_FORGE_NOW,)}
