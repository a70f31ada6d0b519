-- revisit schema: why a one-shot visit request failed, so an operator sees
-- it (revisit request list / show) without reading worker logs.

alter table visit_requests add column failure_reason text;
comment on column visit_requests.failure_reason is 'Why the request failed: the error its visit reported (e.g. an invalid loader result, no loader for the visit type); null unless failed';
