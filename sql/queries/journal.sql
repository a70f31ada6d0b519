-- Applying journal batches to origin_visit_stats.

-- name: lock_stats
-- Lock every row a batch touches, in one fixed order, so concurrent journal
-- clients cannot deadlock; return only the rows the batch refolds (wanted).
with locked as materialized (
  select st.*, k.wanted
  from origin_visit_stats st
  join unnest(%(urls)s::text[], %(visit_types)s::text[], %(wanted)s::boolean[])
    as k(url, visit_type, wanted) using (url, visit_type)
  order by st.url, st.visit_type
  for update of st
)
select url, visit_type, last_visit, next_visit_queue_position, next_visit_anchor,
       disabled_for_failures, visit_history,
       next_position_offset, eventful_visits, uneventful_visits, failed_visits,
       failures_in_a_row, successive_visits, last_visit_status::text, last_visit_number,
       last_final_date, last_successful, last_eventful, last_snapshot, last_duration_s
from locked
where wanted

-- name: queue_positions
select visit_type, position from visit_scheduler_queue_position

-- name: advance_last_visit
-- Origins that only reported created/ongoing statuses: last_visit moves forward only.
insert into origin_visit_stats as st (url, visit_type, last_visit)
select * from unnest(%(url)s::text[], %(visit_type)s::text[], %(last_visit)s::timestamptz[])
on conflict (url, visit_type) do update
  set last_visit = excluded.last_visit
  where st.last_visit is null or st.last_visit < excluded.last_visit

-- name: upsert_stats
-- Write a whole batch of refolded stats in one statement; return what the mirror needs.
with new as (
  select * from unnest(
    %(url)s::text[], %(visit_type)s::text[], %(last_successful)s::timestamptz[],
    %(last_visit)s::timestamptz[], %(last_visit_status)s::visit_status[],
    %(last_snapshot)s::bytea[], %(next_visit_queue_position)s::timestamptz[],
    %(next_position_offset)s::integer[], %(successive_visits)s::integer[],
    %(last_visit_number)s::bigint[], %(last_final_date)s::timestamptz[],
    %(eventful_visits)s::integer[], %(uneventful_visits)s::integer[],
    %(failed_visits)s::integer[], %(failures_in_a_row)s::integer[],
    %(last_duration_s)s::double precision[], %(disabled_for_failures)s::boolean[],
    %(last_eventful)s::timestamptz[], %(next_visit_anchor)s::timestamptz[],
    %(visit_history)s::bytea[]
  ) as t(url, visit_type, last_successful, last_visit, last_visit_status, last_snapshot,
         next_visit_queue_position, next_position_offset, successive_visits,
         last_visit_number, last_final_date, eventful_visits, uneventful_visits,
         failed_visits, failures_in_a_row, last_duration_s, disabled_for_failures,
         last_eventful, next_visit_anchor, visit_history)
), written as (
  insert into origin_visit_stats as st (
    url, visit_type, last_successful, last_visit, last_visit_status, last_snapshot,
    next_visit_queue_position, next_position_offset, successive_visits, last_visit_number,
    last_final_date, eventful_visits, uneventful_visits, failed_visits, failures_in_a_row,
    last_duration_s, disabled_for_failures, last_eventful, next_visit_anchor, visit_history)
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
    disabled_for_failures = excluded.disabled_for_failures,
    last_eventful = excluded.last_eventful,
    next_visit_anchor = excluded.next_visit_anchor,
    visit_history = excluded.visit_history
  returning st.id, st.url, st.visit_type, st.next_visit_queue_position,
            st.last_visit_status::text, st.last_visit, st.last_final_date, st.last_scheduled,
            st.disabled_for_failures
)
select w.id, w.visit_type, w.next_visit_queue_position, w.last_visit_status, w.last_visit,
       w.last_final_date, w.last_scheduled,
       (not w.disabled_for_failures and exists (
          select 1 from listed_origins lo
          where lo.url = w.url and lo.visit_type = w.visit_type and lo.enabled)) as enabled
from written w
