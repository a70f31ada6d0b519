-- Re-planning the age-optimal targets when the multiplier moves.

-- name: stats_after_id
-- The next rows of a visit type after a cursor, in id order, with the columns
-- the journal's fold reads (those of lock_stats, read by name): a sweep
-- re-plans a bounded slice of the table per scheduler step.
select s.id, s.url, s.visit_type, s.last_visit, s.next_visit_queue_position,
       s.next_visit_anchor, s.disabled_for_failures, s.visit_history,
       s.last_update is not null as reports_last_update, s.next_position_offset,
       s.eventful_visits, s.uneventful_visits, s.failed_visits,
       s.failures_in_a_row, s.successive_visits, s.last_visit_status::text,
       s.last_visit_number, s.last_final_date, s.last_successful, s.last_eventful,
       s.last_snapshot, s.last_duration_s, s.reported_change_delay_s
from origin_visit_stats s
where s.visit_type = %(visit_type)s and s.id > %(after)s
order by s.id
limit %(limit)s

-- name: set_planned_targets
-- Move the next visit target of re-planned origins, unless a visit result was
-- folded since they were read (then the journal planned them already); return
-- what the mirror needs.
update origin_visit_stats st
set next_visit_queue_position = u.target, reported_change_delay_s = u.delay,
    version = st.version + 1
from unnest(%(ids)s::bigint[], %(targets)s::timestamptz[], %(finals)s::timestamptz[],
            %(delays)s::float8[])
  as u(id, target, final, delay)
where st.id = u.id and st.last_final_date is not distinct from u.final
returning {{mirror_columns}}
