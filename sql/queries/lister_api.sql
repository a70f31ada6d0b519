-- The lister interface of the reference scheduler (issue 15): listers,
-- their state with its optimistic check, their listed origins, and the read
-- side a frontend uses. Columns are named as in the reference's models.

-- name: lister_by_name
select id, name, instance_name, created, current_state, updated, last_listing_finished_at,
       first_visits_queue_prefix, first_visits_scheduled_at
from listers where name = %(name)s and instance_name = %(instance_name)s

-- name: lister_get_or_create
with added as (
  insert into listers (name, instance_name, first_visits_queue_prefix)
  values (%(name)s, %(instance_name)s, %(first_visits_queue_prefix)s)
  on conflict (name, instance_name) do nothing
  returning id, name, instance_name, created, current_state, updated, last_listing_finished_at,
            first_visits_queue_prefix, first_visits_scheduled_at
)
select * from added
union all
select id, name, instance_name, created, current_state, updated, last_listing_finished_at,
       first_visits_queue_prefix, first_visits_scheduled_at
from listers where name = %(name)s and instance_name = %(instance_name)s

-- name: listers_all
-- With only_first_visits_to_schedule: listers whose first visits after a
-- finished listing were not scheduled yet (they have a queue prefix).
select id, name, instance_name, created, current_state, updated, last_listing_finished_at,
       first_visits_queue_prefix, first_visits_scheduled_at
from listers
where not %(only_first_visits_to_schedule)s
   or (last_listing_finished_at is not null and first_visits_queue_prefix is not null
       and first_visits_scheduled_at is null)
-- in creation order, as the reference returns them
order by created, name, instance_name

-- name: listers_by_id
select id, name, instance_name, created, current_state, updated, last_listing_finished_at,
       first_visits_queue_prefix, first_visits_scheduled_at
from listers where id = any(%(ids)s::uuid[])
order by created, name, instance_name

-- name: lister_update
-- The optimistic check: the row changes only if nobody wrote it since the
-- caller read it (same `updated`); no row back means stale data.
update listers
set name = %(name)s, instance_name = %(instance_name)s, current_state = %(current_state)s,
    last_listing_finished_at = %(last_listing_finished_at)s,
    -- the window of active origins (migration 0006) follows the lister's own stamps
    previous_listing_finished_at = case
      when last_listing_finished_at is distinct from %(last_listing_finished_at)s
      then last_listing_finished_at else previous_listing_finished_at end,
    first_visits_queue_prefix = %(first_visits_queue_prefix)s,
    first_visits_scheduled_at = %(first_visits_scheduled_at)s,
    updated = clock_timestamp()
where id = %(id)s and updated = %(updated)s
returning id, name, instance_name, created, current_state, updated, last_listing_finished_at,
          first_visits_queue_prefix, first_visits_scheduled_at

-- name: listers_known
select id from listers where id = any(%(ids)s::uuid[])

-- name: listed_origins_recorded
-- After upsert_listed_origins, in its transaction: the rows just recorded.
select lo.lister_id, lo.url, lo.visit_type, lo.extra_loader_arguments, lo.last_update,
       lo.is_fork, lo.forked_from_url, lo.enabled, lo.first_seen, lo.last_seen
from (select distinct url, visit_type from listing_staging) s
join listed_origins lo on lo.url = s.url and lo.visit_type = s.visit_type
                      and lo.lister_id = %(lister_id)s
order by lo.url, lo.visit_type

-- name: listed_origins_page
-- Filters left null do not filter. Pages follow (lister_id, url, visit_type),
-- which listed_origins_lister_url serves. `size` (bytes of the URL and the
-- arguments) lets the reader end a page early to bound its memory.
select lister_id, url, visit_type, extra_loader_arguments, last_update, is_fork,
       forked_from_url, enabled, first_seen, last_seen,
       octet_length(url) + octet_length(extra_loader_arguments::text) as size
from listed_origins
where (%(lister_id)s::uuid is null or lister_id = %(lister_id)s::uuid)
  and (%(urls)s::text[] is null or url = any(%(urls)s::text[]))
  and (%(enabled)s::boolean is null or enabled = %(enabled)s::boolean)
  and (%(after_lister_id)s::uuid is null
       or (lister_id, url, visit_type)
          > (%(after_lister_id)s::uuid, %(after_url)s::text, %(after_visit_type)s::text))
order by lister_id, url, visit_type
limit %(limit)s

-- name: listed_origin_last_visit_type
-- Where a reference-style page token (lister_id, url) resumes.
select max(visit_type) as visit_type from listed_origins
where lister_id = %(lister_id)s and url = %(url)s

-- name: lister_visit_types
select distinct visit_type from listed_origins where lister_id = %(lister_id)s order by visit_type

-- name: visit_stats_get
-- Only origins scheduled, visited or given stats (visit_stats/upsert): revisit
-- keeps a row from the first listing on, where the reference has none before then.
select st.url, st.visit_type, st.last_successful, st.last_visit,
       st.last_visit_status::text as last_visit_status, st.last_scheduled, st.last_snapshot,
       st.next_visit_queue_position, st.next_position_offset, st.successive_visits
from unnest(%(urls)s::text[], %(visit_types)s::text[]) as k(url, visit_type)
join origin_visit_stats st on st.url = k.url and st.visit_type = k.visit_type
where st.last_visit is not null or st.last_scheduled is not null
   or st.last_successful is not null

-- name: lister_api_queue_positions
select visit_type, position from visit_scheduler_queue_position order by visit_type
