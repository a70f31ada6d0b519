-- revisit schema, version 2: what the scheduling pools need, on the stats row.
--
-- The pools of seed 000 depend on the forge's last_update and on whether
-- some lister still reports the origin; keeping both on origin_visit_stats
-- (maintained by the listing import) lets the mirror be derived from one
-- table scan and lets every write path return an origin's place directly.

alter table origin_visit_stats
  add column last_update timestamptz,
  add column listed boolean not null default false;

comment on column origin_visit_stats.last_update is 'Latest last_update any lister reported for this origin (null: no lister reports one)';
comment on column origin_visit_stats.listed is 'Whether some lister reports this origin as enabled; unlisted origins are not scheduled';

update origin_visit_stats st
set listed = true,
    last_update = l.last_update
from (select url, visit_type, max(last_update) as last_update
      from listed_origins where enabled group by url, visit_type) l
where l.url = st.url and l.visit_type = st.visit_type;

alter table listers add column listing_started_at timestamptz;
comment on column listers.listing_started_at is 'When the listing in progress started; a full listing disables what it did not see since then';
