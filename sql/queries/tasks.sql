-- The reference's task API (issue 32): tasks that became visit requests or
-- lister schedules, and what the reference's recurrent runner reads and writes.

-- name: insert_task
insert into tasks (type, arguments, next_run, policy, priority, retries_left, request_id,
                   lister_id)
values (%(type)s, %(arguments)s, %(next_run)s, %(policy)s, %(priority)s, %(retries_left)s,
        %(request_id)s, %(lister_id)s)
returning id

-- name: task_rows
-- Each task with the reference's statuses (the one copy of that mapping).
-- A one-shot load task follows its request, or the retry that replaced it
-- (superseded_by, any number of times): blocked or pending ->
-- next_run_not_scheduled, scheduled or running -> next_run_scheduled,
-- succeeded -> completed, failed or aborted -> disabled. Its run (none
-- before the request is sent): scheduled, started (running), eventful /
-- uneventful (succeeded; eventful when its visit is the origin's latest
-- eventful one), failed, lost (aborted once sent).
-- A recurring lister task follows its lister's schedule: a run out ->
-- next_run_scheduled, paused or removed -> disabled, else
-- next_run_not_scheduled; next_run and current_interval are the schedule's
-- for the task's kind of listing; its runs are not reported.
with recursive chain as (
  select t.id as task_id, r.id as request_id, r.superseded_by
  from tasks t
  join visit_requests r on r.id = t.request_id
  where (%(ids)s::bigint[] is null or t.id = any(%(ids)s::bigint[]))
  union all
  select c.task_id, r.id, r.superseded_by
  from chain c
  join visit_requests r on r.id = c.superseded_by
), derived as (
  select t.id, t.type, t.arguments, t.policy, t.priority, t.retries_left, t.lister_id,
         coalesce(case when t.type like '%%-incremental' then ls.next_incremental_run
                       else ls.next_full_run end, t.next_run) as next_run,
         case when t.type like '%%-incremental' then ls.incremental_interval
              else ls.full_interval end as current_interval,
         r.id as request_id, r.status::text as request_status, r.scheduled_at,
         r.started_at, r.finished_at, r.visit, r.visit_status::text as visit_status,
         r.failure_reason,
         case when t.lister_id is not null then
                case when ls.lister_id is null or not ls.enabled then 'disabled'
                     when ls.running_run_id is not null then 'next_run_scheduled'
                     else 'next_run_not_scheduled' end
              when r.status in ('pending', 'blocked') then 'next_run_not_scheduled'
              when r.status in ('scheduled', 'running') then 'next_run_scheduled'
              when r.status = 'succeeded' then 'completed'
              else 'disabled' end as status,
         case when r.scheduled_at is null then null
              when r.status = 'scheduled' then 'scheduled'
              when r.status = 'running' then 'started'
              when r.status = 'succeeded' then
                case when st.last_eventful = r.finished_at then 'eventful' else 'uneventful' end
              when r.status = 'failed' then 'failed'
              else 'lost' end as run_status
  from tasks t
  left join chain c on c.task_id = t.id and c.superseded_by is null
  left join visit_requests r on r.id = c.request_id
  left join origin_visit_stats st on st.url = r.url and st.visit_type = r.visit_type
  left join lister_schedules ls on ls.lister_id = t.lister_id
  where (%(ids)s::bigint[] is null or t.id = any(%(ids)s::bigint[]))
)
select * from derived
where (%(types)s::text[] is null or type = any(%(types)s::text[]))
  and (%(statuses)s::text[] is null or status = any(%(statuses)s::text[]))
  and (%(priorities)s::text[] is null or priority = any(%(priorities)s::text[]))
  and (%(policy)s::text is null or policy = %(policy)s)
  and (%(before)s::timestamptz is null or next_run <= %(before)s)
  and (%(after)s::timestamptz is null or next_run >= %(after)s)
order by id
limit %(limit)s

-- name: listed_origins_of
-- The listing of each picked (url, visit_type): the most recently seen one when
-- several listers report it (of one lister, when grabbing its first visits).
select distinct on (lo.url, lo.visit_type) lo.lister_id, lo.url, lo.visit_type,
       lo.extra_loader_arguments, lo.last_update, lo.is_fork, lo.forked_from_url,
       lo.enabled, lo.first_seen, lo.last_seen
from unnest(%(urls)s::text[], %(visit_types)s::text[]) as k(url, visit_type)
join listed_origins lo on lo.url = k.url and lo.visit_type = k.visit_type
where %(lister_id)s::uuid is null or lo.lister_id = %(lister_id)s
order by lo.url, lo.visit_type, lo.last_seen desc

-- name: set_queue_position
insert into visit_scheduler_queue_position (visit_type, position)
values (%(visit_type)s, to_timestamp(%(position)s))
on conflict (visit_type) do update set position = excluded.position

-- name: upsert_visit_stats
-- The reference's origin_visit_stats_upsert of one origin: a field given as
-- null keeps the stored value; a final status dates the last final visit, as
-- the journal would. Returns what decides the origin's place in the mirror.
insert into origin_visit_stats as st
  (url, visit_type, last_successful, last_visit, last_visit_status, last_final_date,
   last_scheduled, last_snapshot, next_visit_queue_position, next_position_offset,
   successive_visits)
values (%(url)s, %(visit_type)s, %(last_successful)s, %(last_visit)s::timestamptz,
        %(last_visit_status)s::text::visit_status,
        case when %(last_visit_status)s::text is not null then %(last_visit)s::timestamptz end,
        %(last_scheduled)s, %(last_snapshot)s, to_timestamp(%(next_visit_queue_position)s),
        %(next_position_offset)s, %(successive_visits)s)
on conflict (url, visit_type) do update
  set last_successful = coalesce(excluded.last_successful, st.last_successful),
      last_visit = coalesce(excluded.last_visit, st.last_visit),
      last_visit_status = coalesce(excluded.last_visit_status, st.last_visit_status),
      last_final_date = coalesce(excluded.last_final_date, st.last_final_date),
      last_scheduled = coalesce(excluded.last_scheduled, st.last_scheduled),
      last_snapshot = coalesce(excluded.last_snapshot, st.last_snapshot),
      next_visit_queue_position = coalesce(excluded.next_visit_queue_position,
                                           st.next_visit_queue_position),
      next_position_offset = excluded.next_position_offset,
      successive_visits = excluded.successive_visits,
      version = st.version + 1
returning {{mirror_columns}}

-- name: get_scheduler_metrics
select lister_id, visit_type, last_update, origins_known, origins_enabled,
       origins_never_visited, origins_with_pending_changes
from scheduler_metrics
where (%(lister_id)s::uuid is null or lister_id = %(lister_id)s)
  and (%(visit_type)s::text is null or visit_type = %(visit_type)s)
order by lister_id, visit_type

-- name: declare_task_type
update visit_types set task_type = %(task_type)s where name = %(name)s

-- name: declared_task_types
select name, task_type from visit_types where task_type is not null
