-- Scheduling policies: their configuration, and the candidates of the
-- policies Postgres ranks.

-- name: policies_of_visit_type
select policy, weight from scheduling_policies where visit_type = %(visit_type)s order by policy

-- name: all_policies
select visit_type, policy, weight from scheduling_policies order by visit_type, policy

-- name: lock_policies
-- Held by a policy change from before it builds the index of
-- oldest_scheduled_first until after it drops it (app.db.policies).
select pg_advisory_lock(7365646963)

-- name: unlock_policies
select pg_advisory_unlock(7365646963)

-- name: delete_policies
delete from scheduling_policies where visit_type = %(visit_type)s

-- name: insert_policy
insert into scheduling_policies (visit_type, policy, weight)
values (%(visit_type)s, %(policy)s, %(weight)s)

-- name: candidates_oldest_scheduled_first
-- Never scheduled first, then longest since scheduled, ties by id so that the
-- same state always gives the same batch (index
-- origin_visit_stats_oldest_scheduled, built while a visit type uses this
-- policy: without it, a scan of the table). A page: the rows after the
-- (after_scheduled, after_id) of the previous page's last row, when given
-- (resting origins can lead this order by more than a page: the claim skips
-- them, and the next page goes on past them).
select id, last_scheduled from origin_visit_stats
where visit_type = %(visit_type)s and listed and not disabled_for_failures
  and (%(after_id)s::bigint is null
       or (%(after_scheduled)s::timestamptz is null
           and (last_scheduled is not null or id > %(after_id)s))
       or (last_scheduled, id) > (%(after_scheduled)s::timestamptz, %(after_id)s))
order by last_scheduled nulls first, id
limit %(limit)s

-- name: candidates_stop_after_success
-- Origins never visited successfully, oldest reported change first, those
-- without one last (by their target). A reported change counts no later than
-- the origin's target, as in its never_visited pool
-- (app.domain.placement.pool_of): an origin that keeps changing after it was
-- listed keeps its place before the origins listed after it. Origins in
-- flight or visited within the absolute cooldown are left out: picking them
-- does not move them down this order, and they would crowd out the others.
select id from origin_visit_stats
where visit_type = %(visit_type)s and last_snapshot is null and listed
  and not disabled_for_failures
  and (last_scheduled is null or last_scheduled < last_final_date
       or last_scheduled < %(lost_before)s)
  and (last_final_date is null or last_final_date < %(rested_before)s)
order by last_update is null, least(last_update, next_visit_queue_position), id
limit %(limit)s

-- name: listers_with_first_visits_due
-- Listers with a first-visits queue whose latest listing has origins not yet
-- scheduled since it finished.
select id, name, instance_name, first_visits_queue_prefix, last_listing_finished_at
from listers
where first_visits_queue_prefix is not null
  and last_listing_finished_at is not null
  and (first_visits_scheduled_at is null or first_visits_scheduled_at < last_listing_finished_at)
order by last_listing_finished_at

-- name: candidates_first_visits_after_listing
-- The lister's origins never scheduled, or not since its last listing, least
-- recently scheduled first.
select st.id from listed_origins lo
join origin_visit_stats st on st.url = lo.url and st.visit_type = lo.visit_type
where lo.lister_id = %(lister_id)s and lo.visit_type = %(visit_type)s and lo.enabled
  and st.listed and not st.disabled_for_failures
  and (st.last_scheduled is null or st.last_scheduled < %(listed_at)s)
order by st.last_scheduled nulls first, st.id
limit %(limit)s

-- name: first_visits_done
update listers set first_visits_scheduled_at = %(now)s where id = %(lister_id)s

-- name: oldest_scheduled_index_wanted
-- Whether some visit type uses the one policy that reads
-- origin_visit_stats_oldest_scheduled.
select exists (select from scheduling_policies where policy = 'oldest_scheduled_first') as wanted

-- name: oldest_scheduled_index_valid
-- The index's state: no row when it does not exist, valid false when a
-- concurrent build was interrupted (such an index is kept up to date, which
-- costs the HOT updates, but serves no query).
select indisvalid as valid from pg_index
where indexrelid = to_regclass('origin_visit_stats_oldest_scheduled')

-- name: create_oldest_scheduled_index
-- Concurrently: the scheduler and the journal keep writing while it builds.
-- While it exists, mark_scheduled's UPDATE cannot be HOT (last_scheduled is
-- one of its keys), which halves the rate of scheduling steps.
create index concurrently if not exists origin_visit_stats_oldest_scheduled
  on origin_visit_stats (visit_type, last_scheduled nulls first, id)
  where listed and not disabled_for_failures

-- name: comment_oldest_scheduled_index
comment on index origin_visit_stats_oldest_scheduled is 'Serves the oldest_scheduled_first policy; exists only while a visit type uses it (revisit policy set builds and drops it)'

-- name: drop_oldest_scheduled_index
drop index concurrently if exists origin_visit_stats_oldest_scheduled
