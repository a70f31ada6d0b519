-- Reading Postgres to build the Redis mirror.

-- name: mirror_columns
-- What decides an origin's place (app.domain.placement.MirrorRow), read from
-- origin_visit_stats as `st`: the one projection that every query returning
-- mirror rows includes (double braces around its name), in a select list or a returning
-- clause. An origin is enabled when listed and not disabled for failures.
st.id, st.visit_type, st.next_visit_queue_position, st.last_visit_status::text,
st.last_final_date, st.last_scheduled, st.last_successful, st.last_update,
(st.last_snapshot is null) as never_succeeded,
(st.listed and not st.disabled_for_failures) as enabled, st.version,
st.change_rate_per_day, st.reported_change_delay_s, st.failures_in_a_row

-- name: mirror_rows_for_visit_type
-- Every listed origin of a visit type, with what decides its place.
select {{mirror_columns}}
from origin_visit_stats st
where st.visit_type = %(visit_type)s and st.listed

-- name: mirror_rows_of_ids
-- Some origins of a visit type, listed or not (an unlisted one is placed absent).
select {{mirror_columns}}
from origin_visit_stats st
where st.visit_type = %(visit_type)s and st.id = any(%(ids)s)

-- name: advance_queue_position
insert into visit_scheduler_queue_position (visit_type, position)
values (%(visit_type)s, %(position)s)
on conflict (visit_type) do update
  set position = greatest(visit_scheduler_queue_position.position, excluded.position)

-- name: urls_of_stats_ids
-- The URL of each origin_visit_stats id (mirror members are ids).
select id, url from origin_visit_stats where id = any(%(ids)s)

-- name: unstarted_visits
-- Origins sent to a worker whose visit has reported nothing since (no 'created'
-- status): after a Redis wipe their Dramatiq messages are gone with it.
select id from origin_visit_stats
where visit_type = %(visit_type)s and listed and last_scheduled is not null
  and (last_visit is null or last_visit < last_scheduled)
  and (last_final_date is null or last_final_date <= last_scheduled)

-- name: unstarted_visits_of_ids
-- As unstarted_visits, among some origins (those the broker holds no message for).
select id from origin_visit_stats
where visit_type = %(visit_type)s and id = any(%(ids)s) and listed and last_scheduled is not null
  and (last_visit is null or last_visit < last_scheduled)
  and (last_final_date is null or last_final_date <= last_scheduled)
