-- Recording what the scheduler sent to workers.

-- name: mark_scheduled
-- One statement per batch: stamp last_scheduled and fetch what the visit
-- messages need (the loader arguments of the most recently seen listing),
-- in id order. The update is HOT (no index entry written) unless a visit type
-- uses oldest_scheduled_first, whose index has last_scheduled as a key
-- (migration 17): then it is most of a step's cost. The loader arguments are
-- looked up only for origins with a listing that has some (index
-- listed_origins_with_arguments), and are null for the others (no '{}' to
-- parse a thousand times). It also returns the
-- mirror columns and the new version, for the scheduler to confirm the
-- origins in flight at that version (app.services.mirror_sync.place_rows).
-- version is bumped here, not by the row trigger's function (migration 16).
with marked as (
  update origin_visit_stats st set last_scheduled = %(now)s, version = st.version + 1
  where st.id = any(%(ids)s)
  returning st.url, st.last_duration_s, {{mirror_columns}}
)
select m.*,
       case when exists (select from listed_origins a
                         where a.url = m.url and a.visit_type = m.visit_type
                           and a.extra_loader_arguments <> '{}'::jsonb)
       then (select lo.extra_loader_arguments from listed_origins lo
             where lo.url = m.url and lo.visit_type = m.visit_type
             order by lo.enabled desc, lo.last_seen desc limit 1)
       end as extra_loader_arguments
from marked m
order by m.id

-- name: origins_by_id
select id, url, visit_type from origin_visit_stats where id = any(%(ids)s)

-- name: visit_type_config
select name, max_queue_length, num_retries, extract(epoch from retry_delay) as retry_delay_s,
       extract(epoch from time_limit) as time_limit_s,
       extract(epoch from min_interval) as min_interval_s,
       extract(epoch from max_interval) as max_interval_s,
       age_multiplier_s2, measured_capacity_per_day, visit_cost_reference_s,
       coalesce(loader, name) as loader, enabled
from visit_types order by name

-- name: change_rate_classes
-- The learned rates of a visit type's live origins whose forge reports no
-- last_update, in classes a quarter of a natural log wide (rates within 13 per cent
-- of each other; the planned interval varies as the rate to the power -1/3 at
-- most, so within 4 per cent): what the age-optimal allocation shares the capacity
-- among. Never-visited origins count at the prior rate.
select exp(round(4 * ln(greatest(coalesce(change_rate_per_day, %(prior_rate_per_day)s), 1e-9)))
           / 4) as rate_per_day,
       count(*) as origins
from origin_visit_stats
where visit_type = %(visit_type)s and listed and not disabled_for_failures
  and last_update is null
group by 1

-- name: floor_only_origins
-- Live origins whose forge reports last_update: planned at the floor only.
select count(*) as origins from origin_visit_stats
where visit_type = %(visit_type)s and listed and not disabled_for_failures
  and last_update is not null

-- name: set_age_multiplier
update visit_types
set age_multiplier_s2 = %(multiplier)s, age_multiplier_updated_at = %(now)s,
    measured_capacity_per_day = %(capacity_per_day)s,
    visit_cost_reference_s = coalesce(visit_cost_reference_s, %(cost_reference_s)s)
where name = %(visit_type)s

-- name: set_max_queue_length
-- The simulator's bound of a visit type's queues, and its time limit.
update visit_types set max_queue_length = %(length)s,
  time_limit = coalesce(make_interval(secs => %(time_limit_s)s), time_limit)
where name = %(visit_type)s
