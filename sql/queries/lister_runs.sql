-- Recurrent lister runs (issue 15): schedules, runs and their outcomes.

-- name: lister_schedule_get
-- A lister instance's schedule, locked while `revisit lister schedule` changes it.
select arguments, full_interval, incremental_interval, next_full_run,
       next_incremental_run, failures_in_a_row
from lister_schedules where lister_id = %(lister_id)s
for update

-- name: lister_schedule_upsert
-- A paused schedule stays paused when its values change.
insert into lister_schedules (lister_id, arguments, full_interval, incremental_interval,
                              next_full_run, next_incremental_run, enabled)
values (%(lister_id)s, %(arguments)s, %(full_interval)s, %(incremental_interval)s,
        %(next_full_run)s, %(next_incremental_run)s, true)
on conflict (lister_id) do update
  set arguments = excluded.arguments,
      full_interval = excluded.full_interval,
      incremental_interval = excluded.incremental_interval,
      next_full_run = excluded.next_full_run,
      next_incremental_run = excluded.next_incremental_run
returning enabled

-- name: lister_schedule_enable
-- Pause (false) or resume (true); the lister scheduler sends no run of a
-- paused schedule from its next step on. A run already out ends as usual.
update lister_schedules set enabled = %(enabled)s
where lister_id = %(lister_id)s
returning enabled

-- name: lister_schedule_delete
-- Remove a schedule; its runs stay (the history of what listed the lister's
-- origins). A run still out is marked lost: no worker starts it, and one that
-- already did records its origins but not its outcome.
with gone as (
  delete from lister_schedules where lister_id = %(lister_id)s
  returning lister_id, running_run_id
), lost as (
  update lister_runs set status = 'lost', finished_at = %(now)s, error = 'unscheduled'
  where id = (select running_run_id from gone) and status in ('scheduled', 'running')
)
select lister_id from gone

-- name: lister_schedules_all
-- Every schedule with its lister's name (`revisit lister schedules`).
select s.lister_id, l.name, l.instance_name, s.arguments, s.full_interval,
       s.incremental_interval, s.next_full_run, s.next_incremental_run,
       s.failures_in_a_row, s.enabled, s.running_run_id
from lister_schedules s join listers l on l.id = s.lister_id
order by l.name, l.instance_name

-- name: lister_runs_recent
-- The latest %(per_lister)s runs of each lister instance named (instance_name
-- null: every instance of that name; name null: every lister), newest first.
select lister_id, name, instance_name, id, full_listing, status, scheduled_at,
       started_at, finished_at, origins_listed, error
from (
  select r.lister_id, l.name, l.instance_name, r.id, r.full_listing,
         r.status::text as status, r.scheduled_at, r.started_at, r.finished_at,
         r.origins_listed, r.error,
         row_number() over (partition by r.lister_id order by r.id desc) as n
  from lister_runs r join listers l on l.id = r.lister_id
  where (%(name)s::text is null or l.name = %(name)s::text)
    and (%(instance_name)s::text is null or l.instance_name = %(instance_name)s::text)
) recent
where n <= %(per_lister)s
order by name, instance_name, id desc

-- name: lister_runs_claim_due
-- Due schedules with no run out (or one out longer than the run time-out,
-- which is then marked lost) get a new run: full if the full listing is due,
-- else incremental. SKIP LOCKED: several lister schedulers never send one
-- run twice.
with due as (
  select lister_id, running_run_id, next_full_run <= %(now)s as full_listing
  from lister_schedules
  where enabled
    and (next_full_run <= %(now)s or next_incremental_run <= %(now)s)
    and (running_run_id is null or running_since < %(lost_before)s)
  order by least(next_full_run, next_incremental_run)
  limit %(limit)s
  for update skip locked
), lost as (
  update lister_runs set status = 'lost', finished_at = %(now)s
  where id in (select running_run_id from due) and status in ('scheduled', 'running')
), runs as (
  insert into lister_runs (lister_id, full_listing, scheduled_at)
  select lister_id, full_listing, %(now)s from due
  returning id, lister_id, full_listing
)
update lister_schedules s set running_run_id = runs.id, running_since = %(now)s
from runs where s.lister_id = runs.lister_id
returning runs.id, runs.lister_id, runs.full_listing

-- name: lister_run_start
-- The run a worker starts, with what the lister needs; nothing if the run is
-- no longer the schedule's (lost and re-sent) or already started.
update lister_runs r set status = 'running', started_at = %(now)s
from listers l, lister_schedules s
where r.id = %(run_id)s and r.status = 'scheduled'
  and l.id = r.lister_id and s.lister_id = r.lister_id and s.running_run_id = r.id
returning r.id, r.lister_id, r.full_listing, l.name, l.instance_name, l.current_state,
          s.arguments

-- name: lister_run_progress
-- After each recorded page: the count so far and the lister's state.
with run as (
  update lister_runs set origins_listed = origins_listed + %(count)s
  where id = %(run_id)s
  returning lister_id
)
update listers set current_state = %(state)s, updated = clock_timestamp()
where id = (select lister_id from run)

-- name: lister_schedule_lock
select full_interval, incremental_interval, next_full_run, next_incremental_run,
       failures_in_a_row
from lister_schedules where lister_id = %(lister_id)s and running_run_id = %(run_id)s
for update

-- name: lister_run_finish
with run as (
  update lister_runs set status = %(status)s::lister_run_status, finished_at = %(now)s,
                         error = %(error)s
  where id = %(run_id)s
  returning lister_id
)
update lister_schedules
set next_full_run = %(next_full_run)s, next_incremental_run = %(next_incremental_run)s,
    failures_in_a_row = %(failures_in_a_row)s, running_run_id = null, running_since = null
where lister_id = (select lister_id from run) and running_run_id = %(run_id)s

-- name: lister_overview
-- One line per lister instance: its schedule and its latest run.
select l.name, l.instance_name, l.last_listing_finished_at, s.enabled,
       s.full_interval, s.incremental_interval, s.next_full_run, s.next_incremental_run,
       s.failures_in_a_row, r.id as run_id, r.full_listing, r.status::text as run_status,
       r.scheduled_at, r.finished_at, r.origins_listed, r.error
from listers l
left join lister_schedules s on s.lister_id = l.id
left join lateral (select * from lister_runs where lister_id = l.id order by id desc limit 1) r
  on true
order by l.name, l.instance_name

-- name: lister_run_release
-- A claimed run that could not be sent (Redis away): lost at once, and its
-- schedule free for the next step to claim again.
with run as (
  update lister_runs set status = 'lost', finished_at = %(now)s, error = %(error)s
  where id = %(run_id)s and status = 'scheduled'
  returning id
)
update lister_schedules set running_run_id = null, running_since = null
where running_run_id = (select id from run)
