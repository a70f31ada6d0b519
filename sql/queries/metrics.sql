-- Coverage figures and the other periodic measurements of monitoring/coverage.py.

-- name: refresh_scheduler_metrics
-- Seed 002's coverage, per lister and visit type, in one statement. The
-- reference joins every listed origin to its stats row (0.65 s per refresh
-- at 1M origins); here the join only touches the stats rows that can count
-- (never visited, or a change reported after the last successful visit),
-- found by one scan of origin_visit_stats, and the listing figures come from
-- listed_origins alone.
with listed as (
  select lister_id, visit_type,
         count(*) as known,
         count(*) filter (where enabled) as enabled,
         count(*) filter (where enabled and last_update >= %(active_since)s) as active
  from listed_origins
  group by lister_id, visit_type
), behind as (
  select lo.lister_id, lo.visit_type,
         count(*) filter (where st.last_successful is null) as never_visited,
         count(*) filter (where st.last_successful is null
                            and lo.first_seen < %(overdue_before)s) as never_visited_overdue,
         count(*) filter (where lo.last_update > st.last_successful) as pending_changes
  from origin_visit_stats st
  join listed_origins lo
    on lo.url = st.url and lo.visit_type = st.visit_type and lo.enabled
  where st.listed and (st.last_successful is null or st.last_update > st.last_successful)
  group by lo.lister_id, lo.visit_type
)
insert into scheduler_metrics as m
  (lister_id, visit_type, last_update, origins_known, origins_enabled, origins_never_visited,
   origins_with_pending_changes, origins_active, active_window,
   origins_never_visited_overdue, overdue_after)
select l.lister_id, l.visit_type, %(now)s, l.known, l.enabled,
       coalesce(b.never_visited, 0), coalesce(b.pending_changes, 0), l.active,
       %(now)s - %(active_since)s, coalesce(b.never_visited_overdue, 0),
       %(now)s - %(overdue_before)s
from listed l
join listers on listers.id = l.lister_id
left join behind b on b.lister_id = l.lister_id and b.visit_type = l.visit_type
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

-- name: first_visits_between
-- Origins whose first final visit was reported in [since, until), with how
-- long after their first listing that visit happened.
select st.visit_type,
       extract(epoch from st.last_final_date
                          - (select min(lo.first_seen) from listed_origins lo
                             where lo.url = st.url and lo.visit_type = st.visit_type))::float8
         as wait_s
from origin_visit_stats st
where st.last_final_date >= %(since)s and st.last_final_date < %(until)s
  and st.eventful_visits + st.uneventful_visits + st.failed_visits = 1
