-- revisit schema: requests with prerequisites and a parent (seed 004, issue 36).
-- A request waits 'blocked' until every prerequisite completed, and is aborted,
-- with the reason, when one fails that was not allowed to fail.
--
-- The new enum value is not used in this file: a value added inside a
-- transaction cannot be used before it commits (migrations run in one).

alter type request_status add value 'blocked' before 'pending';
comment on column visit_requests.status is 'blocked (waiting for prerequisites) -> pending -> scheduled -> running -> succeeded/failed; aborted when cancelled or when a prerequisite not allowed to fail did not succeed';
comment on column visit_requests.failure_reason is 'Why the request failed (the error its visit reported, e.g. an invalid loader result, no loader for the visit type) or was aborted by a prerequisite; null otherwise';

alter table visit_requests add column parent bigint references visit_requests (id);
comment on column visit_requests.parent is 'The request this one was made for (a workflow''s); its base priority defaults to the parent''s effective priority at creation';
alter table visit_requests add column aborted_by bigint references visit_requests (id);
comment on column visit_requests.aborted_by is 'The prerequisite whose failure or abort aborted this request (a retry of it puts this request back to blocked); null otherwise';

create table request_dependencies (
  request_id       bigint not null references visit_requests (id),
  prerequisite     bigint not null references visit_requests (id),
  allowed_to_fail  boolean not null default false,
  primary key (request_id, prerequisite),
  check (request_id <> prerequisite)
);
create index request_dependencies_by_prerequisite on request_dependencies (prerequisite);
comment on table request_dependencies is 'Prerequisites of requests: a request is blocked until each of its prerequisites completed';
comment on column request_dependencies.request_id is 'The request that waits';
comment on column request_dependencies.prerequisite is 'The request it waits for (a retry of a failed one re-points the edge to the retry)';
comment on column request_dependencies.allowed_to_fail is 'The prerequisite failing or being aborted completes the edge instead of aborting the request';
