-- Coverage figures and the other periodic measurements of monitoring/coverage.py.

-- name: refresh_scheduler_metrics
-- Seed 002's coverage, per lister and visit type, in one statement (rows of
-- listers or visit types no longer listed are deleted): one pass over
-- listed_origins joined to the stats (a parallel hash join), whose cost does not
-- grow with the backlog. The scheduler runs it off its scheduling thread
-- (monitoring/coverage.py).
with figures as (
  select lo.lister_id, lo.visit_type,
         count(*) as known,
         count(*) filter (where lo.enabled) as enabled,
         -- seed 000: active = changed between the previous listing and the last
         -- one; a lister without two listings yet falls back to the window
         count(*) filter (where lo.enabled and lo.last_update >= coalesce(
                            l.previous_listing_finished_at, %(active_since)s)
                          and lo.last_update <= coalesce(
                            l.last_listing_finished_at, %(now)s)) as active,
         count(*) filter (where lo.enabled and st.last_successful is null) as never_visited,
         count(*) filter (where lo.enabled and st.last_successful is null
                            and lo.first_seen < %(overdue_before)s) as never_visited_overdue,
         count(*) filter (where lo.enabled and lo.last_update > st.last_successful)
           as pending_changes
  from listed_origins lo
  join listers l on l.id = lo.lister_id
  left join origin_visit_stats st on st.url = lo.url and st.visit_type = lo.visit_type
  group by lo.lister_id, lo.visit_type
), gone as (
  delete from scheduler_metrics m
  where not exists (select 1 from figures f join listers l on l.id = f.lister_id
                    where f.lister_id = m.lister_id and f.visit_type = m.visit_type)
)
insert into scheduler_metrics as m
  (lister_id, visit_type, last_update, origins_known, origins_enabled, origins_never_visited,
   origins_with_pending_changes, origins_active, active_window,
   origins_never_visited_overdue, overdue_after)
select f.lister_id, f.visit_type, %(now)s, f.known, f.enabled, f.never_visited,
       f.pending_changes, f.active, %(now)s - %(active_since)s, f.never_visited_overdue,
       %(now)s - %(overdue_before)s
from figures f
join listers on listers.id = f.lister_id
on conflict (lister_id, visit_type) do update
  set last_update = excluded.last_update,
      origins_known = excluded.origins_known,
      origins_enabled = excluded.origins_enabled,
      origins_never_visited = excluded.origins_never_visited,
      origins_with_pending_changes = excluded.origins_with_pending_changes,
      origins_active = excluded.origins_active,
      active_window = excluded.active_window,
      origins_never_visited_overdue = excluded.origins_never_visited_overdue,
      overdue_after = excluded.overdue_after
returning m.lister_id, m.visit_type, m.origins_known, m.origins_enabled,
          m.origins_never_visited, m.origins_with_pending_changes, m.origins_active,
          m.origins_never_visited_overdue,
          (select l.name || '/' || l.instance_name from listers l where l.id = m.lister_id)
            as lister

-- name: schedule_drift
-- Seed 000's drift: how far real time is ahead of the next visit target the
-- scheduler has reached (negative: the queue is ahead of the clock).
select visit_type, extract(epoch from %(now)s - position)::float8 as drift_s
from visit_scheduler_queue_position

-- name: first_visits_since
-- Origins whose only final visit so far is dated at or after ``since``, with
-- how long after their first listing that visit happened.
select st.id, st.visit_type, st.last_final_date,
       extract(epoch from st.last_final_date
                          - (select min(lo.first_seen) from listed_origins lo
                             where lo.url = st.url and lo.visit_type = st.visit_type))::float8
         as wait_s
from origin_visit_stats st
where st.last_final_date >= %(since)s
  and st.eventful_visits + st.uneventful_visits + st.failed_visits = 1

-- name: pool_rows_by_lister
-- Every listed origin once per lister that reports it, with what decides its
-- place (app.domain.placement, the one copy of that rule, counts them).
select l.name || '/' || l.instance_name as lister,
       {{mirror_columns}}
from origin_visit_stats st
join listed_origins lo on lo.url = st.url and lo.visit_type = st.visit_type and lo.enabled
join listers l on l.id = lo.lister_id
where st.listed
