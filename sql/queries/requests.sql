-- One-shot visit requests (seed 004).

-- name: insert_request
insert into visit_requests (url, visit_type, kind, base_priority, requested_by,
                            extra_loader_arguments, external_id, supersedes, created)
values (%(url)s, %(visit_type)s, %(kind)s, %(base_priority)s, %(requested_by)s,
        %(extra_loader_arguments)s, %(external_id)s, %(supersedes)s,
        coalesce(%(now)s::timestamptz, now()))
on conflict (external_id) do nothing
returning id

-- name: request_by_external_id
select id from visit_requests where external_id = %(external_id)s

-- name: get_request
select id, url, visit_type, kind, base_priority, priority_adjustment,
       base_priority + priority_adjustment as priority, status::text, requested_by,
       extra_loader_arguments, created, scheduled_at, started_at, finished_at,
       visit_status::text, supersedes, superseded_by, external_id, failure_reason
from visit_requests where id = %(id)s

-- name: list_requests
select id, url, visit_type, kind, base_priority + priority_adjustment as priority,
       status::text, created, scheduled_at, finished_at, visit_status::text, superseded_by,
       failure_reason
from visit_requests
where (%(status)s::text is null or status::text = %(status)s)
order by (status = 'pending') desc, base_priority + priority_adjustment desc, id
limit %(limit)s

-- name: take_pending_requests
-- Highest effective priority first, then first in, first out. SKIP LOCKED lets
-- several schedulers share the requests.
with picked as (
  select id from visit_requests
  where visit_type = %(visit_type)s and status = 'pending'
  order by base_priority + priority_adjustment desc, id
  limit %(limit)s
  for update skip locked
)
update visit_requests r set status = 'scheduled', scheduled_at = %(now)s, visit = %(visit)s
from picked where r.id = picked.id
returning r.id, r.url, r.visit_type, r.extra_loader_arguments,
          r.base_priority + r.priority_adjustment as priority, r.created

-- name: adjust_priority
-- The effective priority stays within the bounds a new request has.
update visit_requests set priority_adjustment = priority_adjustment + %(delta)s
where id = %(id)s and status = 'pending'
  and base_priority + priority_adjustment + %(delta)s between %(min)s and %(max)s
returning id, base_priority + priority_adjustment as priority

-- name: cancel_request
update visit_requests set status = 'aborted', finished_at = %(now)s
where id = %(id)s and status in ('pending', 'scheduled')
returning id

-- name: supersede_request
update visit_requests set superseded_by = %(new_id)s
where id = %(id)s

-- name: requests_started
-- A scheduled request's own visit is the one sent for it (its number, when the
-- scheduler gave it one), else the first visit of the origin created after the
-- request was sent: the request is running, and only that visit ends it.
update visit_requests r set status = 'running', started_at = own.date, visit = own.visit
from (
  select distinct on (r.id) r.id, k.date, k.visit
  from visit_requests r
  join unnest(%(urls)s::text[], %(visit_types)s::text[], %(visits)s::bigint[],
              %(dates)s::timestamptz[]) as k(url, visit_type, visit, date)
    on r.url = k.url and r.visit_type = k.visit_type
  where r.status = 'scheduled'
    and (r.visit = k.visit or (r.visit is null and r.scheduled_at <= k.date))
  order by r.id, k.date, k.visit
) own
where r.id = own.id and r.status = 'scheduled'
returning r.id

-- name: requests_finished
-- The request's own visit ended: the request ends with it, even when the visit's
-- created status has not arrived yet (statuses of a visit come in any order):
-- its number is the request's from when it was sent. A request sent without a
-- number (the archive's loaders number their visits) whose created status has
-- not arrived either ends with the first visit of its origin to end after it was
-- sent, and takes its number.
update visit_requests r
set status = (case when k.status = any(%(success)s::text[]) then 'succeeded' else 'failed' end)::request_status,
    finished_at = k.date, visit_status = k.status::visit_status, visit = k.visit,
    failure_reason = case when k.status = any(%(success)s::text[]) then null
                          else coalesce(k.reason, 'visit ended ' || k.status) end
from (
  select distinct on (q.id) q.id, e.visit, e.date, e.status, e.reason
  from visit_requests q
  join unnest(%(urls)s::text[], %(visit_types)s::text[], %(visits)s::bigint[],
              %(dates)s::timestamptz[], %(statuses)s::text[], %(reasons)s::text[])
    as e(url, visit_type, visit, date, status, reason)
    on q.url = e.url and q.visit_type = e.visit_type
  where (q.status in ('scheduled', 'running') and q.visit = e.visit)
     or (q.status = 'scheduled' and q.visit is null and q.scheduled_at <= e.date)
  order by q.id, e.date, e.visit
) k
where r.id = k.id
returning r.id, r.created, r.finished_at, r.kind, r.visit_type

-- name: end_unvisited_request
-- A request whose visit never reached the archive (a refused URL, a storage
-- down): no journal status will end it, so the worker does.
update visit_requests set status = 'failed', finished_at = %(now)s, failure_reason = %(reason)s
where id = %(id)s and status = 'scheduled' and visit is null
returning id

-- name: open_request_origins
-- Origins with a request waiting for its visit (index visit_requests_open_by_origin):
-- usually few, so a journal batch only joins its statuses of those.
select distinct url, visit_type from visit_requests where status in ('scheduled', 'running')

-- name: open_requests_by_visit_type
-- Requests not yet done, per visit type and status (the live view).
select visit_type, status::text, count(*) as n from visit_requests
where status in ('pending', 'scheduled', 'running')
group by visit_type, status
