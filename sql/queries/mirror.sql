-- Reading Postgres to build the Redis mirror.

-- name: mirror_rows_for_visit_type
-- One row per (url, visit_type) that some lister reports and that is not
-- disabled: what the Redis pools must hold.
select st.id, st.visit_type, st.next_visit_queue_position, st.last_visit_status,
       st.last_visit, st.last_final_date, st.last_scheduled, true as enabled
from origin_visit_stats st
where st.visit_type = %(visit_type)s
  and not st.disabled_for_failures
  and exists (select 1 from listed_origins lo
              where lo.url = st.url and lo.visit_type = st.visit_type and lo.enabled)

-- name: queue_position
select position from visit_scheduler_queue_position where visit_type = %(visit_type)s

-- name: advance_queue_position
insert into visit_scheduler_queue_position (visit_type, position)
values (%(visit_type)s, %(position)s)
on conflict (visit_type) do update
  set position = greatest(visit_scheduler_queue_position.position, excluded.position)
