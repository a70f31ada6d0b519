-- revisit schema: what operators control and see. Why a one-shot visit
-- request failed (revisit request list) without reading worker logs.

alter table visit_requests add column failure_reason text;
comment on column visit_requests.failure_reason is 'Why the request failed: the error its visit reported (e.g. an invalid loader result, no loader for the visit type); null unless failed';

-- An operator's "do not visit this origin" (revisit origin disable), which a
-- later listing does not undo, unlike listed_origins.enabled.
alter table origin_visit_stats add column disabled_by_operator boolean not null default false;
comment on column origin_visit_stats.disabled_by_operator is 'An operator disabled this origin (revisit origin disable): it stays unlisted, out of the mirror, until revisit origin enable, whatever listers report';
