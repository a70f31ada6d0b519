-- Listers and listed origins.

-- name: register_lister
insert into listers (name, instance_name, first_visits_queue_prefix)
values (%(name)s, %(instance_name)s, %(first_visits_queue_prefix)s)
on conflict (name, instance_name) do update
  set first_visits_queue_prefix = coalesce(excluded.first_visits_queue_prefix,
                                           listers.first_visits_queue_prefix),
      updated = now()
returning id, name, instance_name, first_visits_queue_prefix

-- name: find_lister
select id, name, instance_name, first_visits_queue_prefix, last_listing_finished_at
from listers where name = %(name)s and instance_name = %(instance_name)s

-- name: known_visit_types
select name from visit_types order by name

-- name: create_listing_staging
create temporary table listing_staging (
  url text not null,
  visit_type text not null,
  extra_loader_arguments jsonb not null,
  last_update timestamptz,
  is_fork boolean,
  forked_from_url text
) on commit drop

-- name: copy_listing_staging
copy listing_staging (url, visit_type, extra_loader_arguments, last_update, is_fork,
                      forked_from_url) from stdin

-- name: upsert_listed_origins
insert into listed_origins as lo (lister_id, url, visit_type, extra_loader_arguments,
                                  enabled, first_seen, last_seen, last_update, is_fork,
                                  forked_from_url)
select distinct on (url, visit_type)
       %(lister_id)s, url, visit_type, extra_loader_arguments, true, %(now)s, %(now)s,
       last_update, is_fork, forked_from_url
from listing_staging
order by url, visit_type
on conflict (lister_id, url, visit_type) do update
  set extra_loader_arguments = excluded.extra_loader_arguments,
      enabled = true,
      last_seen = excluded.last_seen,
      last_update = coalesce(excluded.last_update, lo.last_update),
      is_fork = coalesce(excluded.is_fork, lo.is_fork),
      forked_from_url = coalesce(excluded.forked_from_url, lo.forked_from_url)

-- name: insert_stats_for_listing
-- A new origin's first target is the earlier of now and the current queue
-- position, so newly listed origins are served before recurrent visits.
insert into origin_visit_stats (url, visit_type, next_visit_queue_position)
select distinct s.url, s.visit_type, least(%(now)s::timestamptz, q.position)
from listing_staging s
left join visit_scheduler_queue_position q on q.visit_type = s.visit_type
on conflict (url, visit_type) do update
  set disabled_for_failures = false,
      failures_in_a_row = 0
  where origin_visit_stats.disabled_for_failures

-- name: listing_mirror_rows
select st.id, st.visit_type, st.next_visit_queue_position, st.last_visit_status,
       st.last_visit, st.last_final_date, st.last_scheduled, true as enabled
from origin_visit_stats st
join (select distinct url, visit_type from listing_staging) s using (url, visit_type)

-- name: touch_lister
update listers set updated = now(), last_listing_finished_at = coalesce(%(finished)s,
       last_listing_finished_at)
where id = %(lister_id)s
