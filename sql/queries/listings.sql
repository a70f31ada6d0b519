-- Listers and listed origins.

-- name: register_lister
insert into listers (name, instance_name, first_visits_queue_prefix)
values (%(name)s, %(instance_name)s, %(first_visits_queue_prefix)s)
on conflict (name, instance_name) do update
  set first_visits_queue_prefix = coalesce(excluded.first_visits_queue_prefix,
                                           listers.first_visits_queue_prefix)
returning id, name, instance_name, first_visits_queue_prefix

-- name: find_lister
select id, name, instance_name, first_visits_queue_prefix, last_listing_finished_at
from listers where name = %(name)s and instance_name = %(instance_name)s

-- name: known_visit_types
select name from visit_types order by name

-- name: first_visits_prefixes
-- The prefixes of the listers' first-visits queues (``first_visits_queue(prefix, visit type)``).
select distinct first_visits_queue_prefix as prefix from listers
where first_visits_queue_prefix is not null
order by prefix

-- name: create_listing_staging
-- `seq` numbers the rows in the order they were sent: of a URL sent twice in
-- one batch, the last copy is kept (as the reference does).
create temporary table listing_staging (
  seq bigint generated always as identity,
  url text not null,
  visit_type text not null,
  extra_loader_arguments jsonb not null,
  last_update timestamptz,
  is_fork boolean,
  forked_from_url text,
  enabled boolean not null
) on commit drop

-- name: copy_listing_staging
copy listing_staging (url, visit_type, extra_loader_arguments, last_update, is_fork,
                      forked_from_url, enabled) from stdin

-- name: upsert_listed_origins
-- Origins new at this statement's snapshot are written by a plain insert
-- (`fresh`), the others by the upsert: an insert that may conflict costs a
-- speculative insertion, about half as much again per row. An origin another
-- writer inserts after the snapshot makes the plain insert fail with a
-- unique violation: the caller then runs this statement again with
-- plain_inserts false, all by the upsert. Both statements write in key
-- order, so concurrent writers of one listing lock rows in the same order:
-- byte order (collate "C"), the journal's and the stats upsert's below,
-- whatever the database's collation.
with batch as materialized (
  select distinct on (url collate "C", visit_type collate "C")
         url, visit_type, extra_loader_arguments, enabled, last_update, is_fork,
         forked_from_url,
         -- a scalar subquery, one primary-key probe a row: an EXISTS here may be
         -- planned as a hash of the whole table, whose cost grows with it
         %(plain_inserts)s and (select 1 from listed_origins lo
                                where lo.url = s.url and lo.visit_type = s.visit_type
                                  and lo.lister_id = %(lister_id)s) is null as fresh
  from listing_staging s
  order by url collate "C", visit_type collate "C", seq desc
), added as (
  insert into listed_origins (lister_id, url, visit_type, extra_loader_arguments, enabled,
                              first_seen, last_seen, last_update, is_fork, forked_from_url)
  select %(lister_id)s, url, visit_type, extra_loader_arguments, enabled, %(now)s, %(now)s,
         last_update, is_fork, forked_from_url
  from batch where fresh
  order by url collate "C", visit_type collate "C"
)
insert into listed_origins as lo (lister_id, url, visit_type, extra_loader_arguments,
                                  enabled, first_seen, last_seen, last_update, is_fork,
                                  forked_from_url)
-- Every field sent overwrites the stored one, None included (as the reference
-- does: a forge that stops reporting a date or a fork clears it); last_seen
-- moves unless the caller asks it not to (the reference's update_last_seen).
select %(lister_id)s, url, visit_type, extra_loader_arguments, enabled, %(now)s, %(now)s,
       last_update, is_fork, forked_from_url
from batch where not fresh
order by url collate "C", visit_type collate "C"
on conflict (url, visit_type, lister_id) do update
  set extra_loader_arguments = excluded.extra_loader_arguments,
      enabled = excluded.enabled,
      last_seen = case when %(update_last_seen)s then excluded.last_seen else lo.last_seen end,
      last_update = excluded.last_update,
      is_fork = excluded.is_fork,
      forked_from_url = excluded.forked_from_url

-- name: upsert_stats_for_listing
-- One stats row per listed (url, visit_type). A new origin's first target is
-- the earlier of now and the current queue position, so newly listed origins
-- come before recurrent visits. An existing row changes only when its place
-- may change (newer last_update, listed again or disabled by its lister,
-- disabled after failures), and only changed rows are returned, with
-- `inserted` telling new ones apart. An origin sent with enabled false is
-- listed only while another lister has it enabled (run after the
-- listed_origins upsert, this statement sees it).
-- As upsert_listed_origins: rows new at the snapshot by a plain insert (a
-- unique violation: run again with plain_inserts false), the others by the
-- upsert, each in byte order of the key (collate "C", as the journal locks
-- its rows: a listing and a journal batch, or concurrent writers of one
-- listing, then lock shared rows in the same order and cannot deadlock,
-- whatever the database's collation).
-- The returned columns are in the order of app.domain.placement.MirrorRow.
with batch as materialized (
  select s.url, s.visit_type, least(%(now)s::timestamptz, q.position) as position,
         max(s.last_update) as last_update,
         bool_or(s.enabled)
         or exists (select 1 from listed_origins lo
                    where lo.url = s.url and lo.visit_type = s.visit_type and lo.enabled)
           as listed,
         -- a primary-key probe, as in upsert_listed_origins
         %(plain_inserts)s and (select 1 from origin_visit_stats o
                                where o.url = s.url and o.visit_type = s.visit_type) is null
           as fresh
  from listing_staging s
  left join visit_scheduler_queue_position q on q.visit_type = s.visit_type
  group by s.url, s.visit_type, q.position
  order by s.url collate "C", s.visit_type collate "C"
), added as (
  insert into origin_visit_stats as st (url, visit_type, next_visit_queue_position,
                                        last_update, listed)
  select url, visit_type, position, last_update, listed
  from batch where fresh
  order by url collate "C", visit_type collate "C"
  returning {{mirror_columns}},
            true as inserted
), changed as (
  insert into origin_visit_stats as st (url, visit_type, next_visit_queue_position,
                                        last_update, listed)
  select url, visit_type, position, last_update, listed
  from batch where not fresh
  order by url collate "C", visit_type collate "C"
  on conflict (url, visit_type) do update
    set last_update = greatest(st.last_update, excluded.last_update),
        -- an origin an operator disabled stays unlisted whatever listers say
        listed = excluded.listed and not st.disabled_by_operator,
        disabled_for_failures = st.disabled_for_failures and not excluded.listed,
        failures_in_a_row = case when st.disabled_for_failures and excluded.listed then 0
                                 else st.failures_in_a_row end,
        version = st.version + 1
    where st.last_update is distinct from greatest(st.last_update, excluded.last_update)
       or st.listed is distinct from (excluded.listed and not st.disabled_by_operator)
       or (st.disabled_for_failures and excluded.listed)
  returning {{mirror_columns}},
            (st.xmax = 0) as inserted
)
select * from added
union all
select * from changed

-- name: start_listing
update listers set listing_started_at = %(started)s where id = %(lister_id)s

-- name: count_unseen
-- Before a full listing ends: how many of the lister's enabled origins it
-- would disable, out of how many.
select count(*) filter (where last_seen < %(started)s) as unseen, count(*) as enabled
from listed_origins where lister_id = %(lister_id)s and enabled

-- name: disable_unseen
-- Finishing a full listing: the lister's origins it did not report since the
-- listing started are disabled; an origin no other lister reports is no
-- longer scheduled. (The CTE's update is invisible to the outer query, hence
-- the lister_id <> test.)
with disabled as (
  update listed_origins set enabled = false
  where lister_id = %(lister_id)s and enabled and last_seen < %(started)s
  returning url, visit_type
)
update origin_visit_stats st
set listed = not st.disabled_by_operator
             and exists (select 1 from listed_origins lo
                         where lo.url = st.url and lo.visit_type = st.visit_type
                           and lo.enabled and lo.lister_id <> %(lister_id)s),
    version = st.version + 1
from (select distinct url, visit_type from disabled) d
where st.url = d.url and st.visit_type = d.visit_type
returning {{mirror_columns}}

-- name: finish_listing
update listers set previous_listing_finished_at = last_listing_finished_at,
                   last_listing_finished_at = %(finished)s, listing_started_at = null
where id = %(lister_id)s
