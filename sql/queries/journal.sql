-- Applying journal batches to origin_visit_stats.

-- name: lock_stats
-- Lock the rows of a batch in a fixed order so concurrent journal clients
-- cannot deadlock.
select st.url, st.visit_type, st.last_successful, st.last_visit, st.last_visit_status::text,
       st.last_snapshot, st.next_visit_queue_position, st.next_position_offset,
       st.successive_visits, st.last_visit_number, st.last_final_date, st.eventful_visits,
       st.uneventful_visits, st.failed_visits, st.failures_in_a_row, st.last_duration_s,
       st.disabled_for_failures
from origin_visit_stats st
join unnest(%(urls)s::text[], %(visit_types)s::text[]) as k(url, visit_type)
  using (url, visit_type)
order by st.url, st.visit_type
for update of st

-- name: queue_positions
select visit_type, position from visit_scheduler_queue_position

-- name: upsert_stats
-- Write a whole batch of new stats in one statement; return what the mirror needs.
with new as (
  select * from unnest(
    %(url)s::text[], %(visit_type)s::text[], %(last_successful)s::timestamptz[],
    %(last_visit)s::timestamptz[], %(last_visit_status)s::visit_status[],
    %(last_snapshot)s::bytea[], %(next_visit_queue_position)s::timestamptz[],
    %(next_position_offset)s::integer[], %(successive_visits)s::integer[],
    %(last_visit_number)s::bigint[], %(last_final_date)s::timestamptz[],
    %(eventful_visits)s::integer[], %(uneventful_visits)s::integer[],
    %(failed_visits)s::integer[], %(failures_in_a_row)s::integer[],
    %(last_duration_s)s::double precision[], %(disabled_for_failures)s::boolean[]
  ) as t(url, visit_type, last_successful, last_visit, last_visit_status, last_snapshot,
         next_visit_queue_position, next_position_offset, successive_visits,
         last_visit_number, last_final_date, eventful_visits, uneventful_visits,
         failed_visits, failures_in_a_row, last_duration_s, disabled_for_failures)
), written as (
  insert into origin_visit_stats as st (
    url, visit_type, last_successful, last_visit, last_visit_status, last_snapshot,
    next_visit_queue_position, next_position_offset, successive_visits, last_visit_number,
    last_final_date, eventful_visits, uneventful_visits, failed_visits, failures_in_a_row,
    last_duration_s, disabled_for_failures)
  select * from new
  on conflict (url, visit_type) do update set
    last_successful = excluded.last_successful,
    last_visit = excluded.last_visit,
    last_visit_status = excluded.last_visit_status,
    last_snapshot = excluded.last_snapshot,
    next_visit_queue_position = excluded.next_visit_queue_position,
    next_position_offset = excluded.next_position_offset,
    successive_visits = excluded.successive_visits,
    last_visit_number = excluded.last_visit_number,
    last_final_date = excluded.last_final_date,
    eventful_visits = excluded.eventful_visits,
    uneventful_visits = excluded.uneventful_visits,
    failed_visits = excluded.failed_visits,
    failures_in_a_row = excluded.failures_in_a_row,
    last_duration_s = excluded.last_duration_s,
    disabled_for_failures = excluded.disabled_for_failures
  returning st.id, st.visit_type, st.next_visit_queue_position,
            st.last_visit_status::text, st.last_final_date, st.last_scheduled,
            st.last_successful, st.last_update, (st.last_snapshot is null) as never_succeeded,
            (st.listed and not st.disabled_for_failures) as enabled
)
select * from written
