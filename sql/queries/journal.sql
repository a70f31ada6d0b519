-- Applying journal batches to origin_visit_stats.

-- name: lock_stats
-- Lock the rows a batch refolds, in one fixed order (the keys come sorted), so
-- concurrent journal clients cannot deadlock, and read them. The lateral
-- subquery makes each key one primary-key probe: a plain join let the planner
-- hash the whole table for every batch, a cost that grows with the table. The keys come as
-- JSON arrays (app.db.rows.json_array: psycopg dumps a list element by element
-- in Python).
select st.*
from rows from (
  json_array_elements_text(%(urls)s::json), json_array_elements_text(%(visit_types)s::json)
) with ordinality as k(url, visit_type, n)
cross join lateral (
  select s.url, s.visit_type, s.last_visit, s.next_visit_queue_position,
         s.next_visit_anchor, s.disabled_for_failures, s.visit_history,
         s.last_update is not null as reports_last_update, s.next_position_offset, s.eventful_visits, s.uneventful_visits, s.failed_visits,
         s.failures_in_a_row, s.successive_visits, s.last_visit_status::text,
         s.last_visit_number, s.last_final_date, s.last_successful, s.last_eventful,
         s.last_snapshot, s.last_duration_s
  from origin_visit_stats s
  where s.url = k.url and s.visit_type = k.visit_type
  for update
) st
order by k.n

-- name: queue_positions
select visit_type, position from visit_scheduler_queue_position

-- name: advance_last_visit
-- Origins that only reported created/ongoing statuses: last_visit moves forward
-- only, so this commutes with everything and runs in its own short transaction
-- (rows in sorted order: no deadlock with another client's batch).
insert into origin_visit_stats as st (url, visit_type, last_visit)
select k.url, k.visit_type, k.last_visit::timestamptz
from rows from (
  json_array_elements_text(%(url)s::json), json_array_elements_text(%(visit_type)s::json),
  json_array_elements_text(%(last_visit)s::json)
) as k(url, visit_type, last_visit)
on conflict (url, visit_type) do update
  set last_visit = excluded.last_visit, version = st.version + 1
  where st.last_visit is null or st.last_visit < excluded.last_visit

-- name: create_stats_staging
-- Where a batch of refolded rows is COPYed before the upsert: binary COPY
-- costs a fraction of what binding twenty arrays of thousands of values does.
create temp table if not exists journal_stats_staging (
  url text, visit_type text, last_successful timestamptz, last_visit timestamptz,
  last_visit_status text, last_snapshot bytea, next_visit_queue_position timestamptz,
  next_position_offset integer, successive_visits integer, last_visit_number bigint,
  last_final_date timestamptz, eventful_visits integer, uneventful_visits integer,
  failed_visits integer, failures_in_a_row integer, last_duration_s double precision,
  disabled_for_failures boolean, last_eventful timestamptz, next_visit_anchor timestamptz,
  visit_history bytea, change_rate_per_day double precision,
  reported_change_delay_s double precision
) on commit delete rows

-- name: copy_stats_staging
copy journal_stats_staging (
  url, visit_type, last_successful, last_visit, last_visit_status, last_snapshot,
  next_visit_queue_position, next_position_offset, successive_visits, last_visit_number,
  last_final_date, eventful_visits, uneventful_visits, failed_visits, failures_in_a_row,
  last_duration_s, disabled_for_failures, last_eventful, next_visit_anchor, visit_history,
  change_rate_per_day, reported_change_delay_s
) from stdin (format binary)

-- name: upsert_stats
-- Write the staged batch in one statement, in key order (the order rows were
-- locked in: Python's code point order, the byte order of "C", which also
-- sorts for less than the database's collation); return what the mirror needs.
with new as (
  select url, visit_type, last_successful, last_visit,
         last_visit_status::visit_status as last_visit_status, last_snapshot,
         next_visit_queue_position, next_position_offset, successive_visits,
         last_visit_number, last_final_date, eventful_visits, uneventful_visits,
         failed_visits, failures_in_a_row, last_duration_s, disabled_for_failures,
         last_eventful, next_visit_anchor, visit_history, change_rate_per_day,
         reported_change_delay_s
  from journal_stats_staging
  order by url collate "C", visit_type collate "C"
), written as (
  insert into origin_visit_stats as st (
    url, visit_type, last_successful, last_visit, last_visit_status, last_snapshot,
    next_visit_queue_position, next_position_offset, successive_visits, last_visit_number,
    last_final_date, eventful_visits, uneventful_visits, failed_visits, failures_in_a_row,
    last_duration_s, disabled_for_failures, last_eventful, next_visit_anchor, visit_history,
    change_rate_per_day, reported_change_delay_s)
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
    visit_history = excluded.visit_history,
    change_rate_per_day = excluded.change_rate_per_day,
    reported_change_delay_s = excluded.reported_change_delay_s,
    version = st.version + 1
  returning {{mirror_columns}}
)
select * from written
