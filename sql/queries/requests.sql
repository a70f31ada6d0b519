-- One-shot visit requests (seed 004).

-- name: insert_request
insert into visit_requests (url, visit_type, kind, base_priority, requested_by,
                            extra_loader_arguments, external_id, supersedes, parent, status,
                            created)
values (%(url)s, %(visit_type)s, %(kind)s, %(base_priority)s, %(requested_by)s,
        %(extra_loader_arguments)s, %(external_id)s, %(supersedes)s, %(parent)s,
        %(status)s::request_status, coalesce(%(now)s::timestamptz, now()))
on conflict (external_id) do nothing
returning id

-- name: request_by_external_id
select id from visit_requests where external_id = %(external_id)s

-- name: get_request
select id, url, visit_type, kind, base_priority, priority_adjustment,
       base_priority + priority_adjustment as priority, status::text, requested_by,
       extra_loader_arguments, created, scheduled_at, started_at, finished_at,
       visit_status::text, supersedes, superseded_by, external_id, failure_reason, parent,
       aborted_by, lister_id
from visit_requests where id = %(id)s

-- name: list_requests
select id, url, visit_type, kind, base_priority + priority_adjustment as priority,
       status::text, created, scheduled_at, finished_at, visit_status::text, superseded_by,
       failure_reason,
       (select coalesce(array_agg(d.prerequisite order by d.prerequisite), '{}')
        from request_dependencies d where d.request_id = r.id) as prerequisites,
       c.children, c.visited
from visit_requests r
cross join lateral (
  select count(*) as children,
         count(*) filter (where status in ('succeeded', 'failed')) as visited
  from visit_requests where parent = r.id
) c
where (%(status)s::text is null or status::text = %(status)s)
order by (status = 'pending') desc, (status = 'blocked') desc,
         base_priority + priority_adjustment desc, id
limit %(limit)s

-- name: take_pending_requests
-- Highest effective priority first, then first in, first out; one request per
-- origin, and none whose origin is in flight (sent after %(lost_before)s, no
-- final status applied since: app.services.requests.take_pending), nor one
-- of an origin another request was sent for that has not ended (an origin
-- revisit has no stats row for): it stays pending until that visit ends, so
-- no two visits of an origin overlap. SKIP LOCKED lets several schedulers
-- share the requests.
with picked as (
  select r.id, r.url, r.base_priority + r.priority_adjustment as priority
  from visit_requests r
  where r.visit_type = %(visit_type)s and r.status = 'pending'
    and not exists (
      select from origin_visit_stats st
      where st.url = r.url and st.visit_type = r.visit_type
        and st.last_scheduled > %(lost_before)s
        and (st.last_final_date is null or st.last_final_date <= st.last_scheduled))
    and not exists (
      select from visit_requests o
      where o.url = r.url and o.visit_type = r.visit_type
        and o.status in ('scheduled', 'running') and o.scheduled_at > %(lost_before)s)
  order by r.base_priority + r.priority_adjustment desc, r.id
  limit %(limit)s
  for update of r skip locked
), first_of_origin as (
  select distinct on (url) id from picked order by url, priority desc, id
)
update visit_requests r set status = 'scheduled', scheduled_at = %(now)s, visit = %(visit)s
from first_of_origin f where r.id = f.id
returning r.id, r.url, r.visit_type, r.extra_loader_arguments,
          r.base_priority + r.priority_adjustment as priority, r.created

-- name: mark_requested_origins_scheduled
-- The origins of the requests just sent are in flight, as a recurrent pick is
-- (mark_scheduled): no recurrent visit and no other request is sent until its
-- final status is applied. Rows locked in key order, as the journal locks them.
with locked as (
  select st.id from origin_visit_stats st
  join unnest(%(urls)s::text[], %(visit_types)s::text[]) as k(url, visit_type)
    on st.url = k.url and st.visit_type = k.visit_type
  order by st.url, st.visit_type
  for update of st
)
update origin_visit_stats st set last_scheduled = %(now)s, version = st.version + 1
from locked where st.id = locked.id
returning {{mirror_columns}}

-- name: adjust_priority
-- The effective priority stays within the bounds a new request has. A listing
-- under way (add forge now) may be adjusted: the first visits it makes after
-- take its effective priority.
update visit_requests set priority_adjustment = priority_adjustment + %(delta)s
where id = %(id)s
  and (status in ('blocked', 'pending') or (status = 'running' and lister_id is not null))
  and base_priority + priority_adjustment + %(delta)s between %(min)s and %(max)s
returning id, base_priority + priority_adjustment as priority

-- name: abort_request
-- The status it had: a worker may hold a scheduled or running one, and stops
-- its visit (it reads the aborted set in Redis).
update visit_requests r
set status = 'aborted', finished_at = %(now)s, failure_reason = %(reason)s
from (select id, status::text as was from visit_requests where id = %(id)s for update) old
where r.id = old.id and old.was in ('blocked', 'pending', 'scheduled', 'running')
returning r.id, old.was

-- name: abort_children
-- The open requests made for request %(id)s (its children, transitively) are
-- aborted with it, naming it; with the status each had.
with recursive tree(id) as (
  select id from visit_requests where parent = %(id)s
  union
  select r.id from visit_requests r join tree on r.parent = tree.id
), old as (
  select r.id, r.status::text as was from visit_requests r join tree using (id)
  where r.status in ('blocked', 'pending', 'scheduled', 'running')
  for update of r
)
update visit_requests r
set status = 'aborted', finished_at = %(now)s, aborted_by = %(id)s,
    failure_reason = 'parent request ' || %(id)s || ' aborted'
from old
where r.id = old.id
returning r.id, old.was

-- name: supersede_request
update visit_requests set superseded_by = %(new_id)s
where id = %(id)s

-- name: requests_started
-- A scheduled request's own visit is the one sent for it (its number, when the
-- scheduler gave it one), else the first visit of the origin created after the
-- request was sent (its created status dated no earlier than %(skew)s before
-- the send: the loader's clock is not the scheduler's): the request is running,
-- and only that visit ends it (requests_finished). A visit created before the
-- request was sent, still running then, is not its own.
update visit_requests r set status = 'running', started_at = own.date, visit = own.visit
from (
  select distinct on (r.id) r.id, k.date, k.visit
  from visit_requests r
  join unnest(%(urls)s::text[], %(visit_types)s::text[], %(visits)s::bigint[],
              %(dates)s::timestamptz[]) as k(url, visit_type, visit, date)
    on r.url = k.url and r.visit_type = k.visit_type
  where r.status = 'scheduled'
    and (r.visit = k.visit or (r.visit is null and r.scheduled_at - %(skew)s <= k.date))
  order by r.id, k.date, k.visit
) own
where r.id = own.id and r.status = 'scheduled'
returning r.id, r.url, r.visit_type, r.visit

-- name: visit_histories
-- The stored final visits of these origins (their created status may come after
-- their final status: a request started by it may have ended already).
select st.url, st.visit_type, st.visit_history
from origin_visit_stats st
join unnest(%(urls)s::text[], %(visit_types)s::text[]) as k(url, visit_type)
  on st.url = k.url and st.visit_type = k.visit_type
where st.visit_history is not null

-- name: requests_finished
-- The request's own visit ended: the request ends with it, even when the visit's
-- created status has not arrived yet (statuses of a visit come in any order)
-- if its number is the request's from when it was sent. A request sent without a
-- number (the archive's loaders number their visits) ends only once it is
-- running (requests_started): a visit of its origin ending after it was sent
-- may have started before (one not sent by revisit, a late status of one
-- presumed lost, a checkpoint taken for the end), and is not its own.
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
  where q.status in ('scheduled', 'running') and q.visit = e.visit
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

-- name: release_request_origins
-- The visits of requests %(ids)s stopped with no final status (aborted, never
-- reached the archive, or past their deadline): their origins leave flight as
-- if they had not been sent (sent last when their last final status was
-- applied: just before it, since a final status at the instant of a send does
-- not end that send's flight), unless sent again since or a final status was
-- applied meanwhile. Rows locked in key order, as the journal locks them.
with locked as (
  select st.id from origin_visit_stats st
  join visit_requests r on st.url = r.url and st.visit_type = r.visit_type
  where r.id = any(%(ids)s::bigint[])
    and st.last_scheduled = r.scheduled_at
    and (st.last_final_date is null or st.last_final_date <= st.last_scheduled)
  order by st.url, st.visit_type
  for update of st
)
update origin_visit_stats st
set last_scheduled = st.last_final_date - interval '1 microsecond', version = st.version + 1
from locked where st.id = locked.id
returning {{mirror_columns}}

-- name: requests_past_deadline
-- Requests of %(visit_type)s sent before %(sent_before)s with no final status
-- since: past their deadline (app.domain.cooldown.request_window_s), presumed
-- lost (index visit_requests_open_by_origin: few are open).
select id, url, scheduled_at from visit_requests
where visit_type = %(visit_type)s and status in ('scheduled', 'running')
  and scheduled_at < %(sent_before)s
order by id

-- name: requests_pending_again
-- These requests past their deadline wait to be sent again, unless one ended
-- or was aborted meanwhile.
update visit_requests set status = 'pending', scheduled_at = null, started_at = null, visit = null
where id = any(%(ids)s::bigint[]) and status in ('scheduled', 'running')
  and scheduled_at < %(sent_before)s
returning id

-- name: open_request_origins
-- Origins with a request waiting for its visit (index visit_requests_open_by_origin):
-- usually few, so a journal batch only joins its statuses of those.
select distinct url, visit_type from visit_requests where status in ('scheduled', 'running')

-- name: open_requests_by_visit_type
-- Visit requests not yet done, per visit type and status (the live view).
select visit_type, status::text, count(*) as n from visit_requests
where status in ('blocked', 'pending', 'scheduled', 'running') and visit_type is not null
group by visit_type, status

-- name: lock_request_graph
-- Every change of a request that has or may get dependents (creating one with
-- prerequisites, starting, ending, cancelling, retrying one) takes this lock
-- before it touches a request or reads the edges, so none decides on a stale
-- view (two prerequisites of one request ending in parallel journal writers,
-- a prerequisite ending while a request waiting for it is created).
select pg_advisory_xact_lock(7265717565737473)

-- name: prerequisites
select id, status::text, superseded_by from visit_requests
where id = any(%(ids)s::bigint[])

-- name: reaches
-- Whether request %(target)s is one of these requests or among their
-- prerequisites, transitively (a dependency on it would close a cycle).
with recursive up(id) as (
  select unnest(%(ids)s::bigint[])
  union
  select d.prerequisite from request_dependencies d join up on d.request_id = up.id
)
select exists (select 1 from up where id = %(target)s) as found

-- name: insert_dependencies
insert into request_dependencies (request_id, prerequisite, allowed_to_fail)
select %(id)s, p, p = any(%(allowed)s::bigint[]) from unnest(%(ids)s::bigint[]) as p

-- name: request_dependencies
-- The prerequisites (or, with %(dependents)s, the dependents) of a request.
select case when %(dependents)s then d.request_id else d.prerequisite end as id,
       d.allowed_to_fail, r.status::text, r.url
from request_dependencies d
join visit_requests r on r.id = case when %(dependents)s then d.request_id else d.prerequisite end
where case when %(dependents)s then d.prerequisite else d.request_id end = %(id)s
order by 1

-- name: abort_dependents
-- Blocked requests that needed one of these ended requests to succeed are
-- aborted with it, naming it (the lowest id when several did not).
update visit_requests r
set status = 'aborted', finished_at = b.finished_at, aborted_by = b.prerequisite,
    failure_reason = 'prerequisite request ' || b.prerequisite || ' ' || b.status
from (
  select distinct on (d.request_id) d.request_id, d.prerequisite, p.status::text,
         coalesce(p.finished_at, now()) as finished_at
  from request_dependencies d join visit_requests p on p.id = d.prerequisite
  where d.prerequisite = any(%(ids)s::bigint[]) and not d.allowed_to_fail
    and p.status in ('failed', 'aborted')
  order by d.request_id, d.prerequisite
) b
where r.id = b.request_id and r.status = 'blocked'
returning r.id

-- name: release_dependents
-- Blocked dependents of these requests whose every prerequisite completed
-- (succeeded, or failed or aborted where allowed to) become pending.
update visit_requests r set status = 'pending'
where r.status = 'blocked'
  and r.id in (select request_id from request_dependencies
               where prerequisite = any(%(ids)s::bigint[]))
  and not exists (
    select 1 from request_dependencies d join visit_requests p on p.id = d.prerequisite
    where d.request_id = r.id
      and not (p.status = 'succeeded'
               or (d.allowed_to_fail and p.status in ('failed', 'aborted'))))
returning r.id

-- name: repoint_dependencies
-- A retry replaces the failed request in its dependents' prerequisites.
update request_dependencies set prerequisite = %(new_id)s where prerequisite = %(id)s

-- name: revive_aborted
-- Requests aborted (transitively) because request %(id)s failed wait again,
-- blocked; returns their prerequisites, to settle them anew.
with recursive doomed(id) as (
  select id from visit_requests where aborted_by = %(id)s and status = 'aborted'
  union
  select r.id from visit_requests r join doomed on r.aborted_by = doomed.id
  where r.status = 'aborted'
), revived as (
  update visit_requests r
  set status = 'blocked', finished_at = null, failure_reason = null, aborted_by = null
  from doomed where r.id = doomed.id
  returning r.id
)
select distinct d.prerequisite as id
from request_dependencies d join revived on d.request_id = revived.id

-- name: insert_listing_request
-- A lister's next full listing as a request (a workflow's first step): running
-- from the start, as no scheduler sends it; the lister run ends it.
insert into visit_requests (url, lister_id, kind, base_priority, requested_by, status,
                            started_at, created)
values (%(url)s, %(lister_id)s, %(kind)s, %(base_priority)s, %(requested_by)s, 'running',
        %(now)s, %(now)s)
returning id

-- name: open_listing_request
select id from visit_requests where lister_id = %(lister_id)s and status = 'running'

-- name: insert_first_visits
-- The first visits of the origins a workflow's listing reports: children of its
-- request, blocked until it ends, at its effective priority (seed 004); an
-- origin listed twice gets one.
with made as (
  insert into visit_requests (url, visit_type, kind, base_priority, requested_by, parent,
                              status, created)
  select o.url, o.visit_type, p.kind, p.base_priority + p.priority_adjustment, p.requested_by,
         p.id, 'blocked'::request_status, %(now)s
  from (select distinct url, visit_type
        from unnest(%(urls)s::text[], %(visit_types)s::text[]) as k(url, visit_type)) o
  join visit_requests p on p.id = %(parent)s
  where not exists (select 1 from visit_requests c
                    where c.parent = p.id and c.url = o.url and c.visit_type = o.visit_type)
  returning id
)
insert into request_dependencies (request_id, prerequisite)
select id, %(parent)s from made

-- name: end_listing_request
-- The lister's full listing ended: its request succeeds, or fails with the error.
update visit_requests
set status = (case when %(error)s::text is null then 'succeeded'
                   else 'failed' end)::request_status,
    finished_at = %(now)s, failure_reason = %(error)s
where lister_id = %(lister_id)s and status = 'running'
returning id

-- name: children
-- The requests made for a request: how many in each status, and the first few.
select status::text, count(*) as n,
       (array_agg(id || ' ' || status || ' ' || url order by id))[1:%(limit)s] as first
from visit_requests where parent = %(id)s
group by status
order by status
