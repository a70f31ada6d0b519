-- Visit types, as operators add, list and change them.

-- name: insert_visit_type
insert into visit_types (name, description, min_interval, max_interval, max_queue_length,
                         time_limit, num_retries, retry_delay, loader, enabled)
values (%(name)s, %(description)s, make_interval(secs => %(min_interval_s)s),
        make_interval(secs => %(max_interval_s)s), %(max_queue_length)s,
        make_interval(secs => %(time_limit_s)s), %(num_retries)s,
        make_interval(secs => %(retry_delay_s)s), %(loader)s, %(enabled)s)
on conflict (name) do nothing
returning name

-- name: update_visit_type
-- Only the settings given (not null) change; the intervals stay ordered.
update visit_types set
  description = coalesce(%(description)s, description),
  min_interval = coalesce(make_interval(secs => %(min_interval_s)s), min_interval),
  max_interval = coalesce(make_interval(secs => %(max_interval_s)s), max_interval),
  max_queue_length = coalesce(%(max_queue_length)s, max_queue_length),
  time_limit = coalesce(make_interval(secs => %(time_limit_s)s), time_limit),
  num_retries = coalesce(%(num_retries)s, num_retries),
  retry_delay = coalesce(make_interval(secs => %(retry_delay_s)s), retry_delay),
  loader = coalesce(%(loader)s, loader),
  enabled = coalesce(%(enabled)s, enabled)
where name = %(name)s
returning name, extract(epoch from min_interval) as min_interval_s,
          extract(epoch from max_interval) as max_interval_s

-- name: list_visit_types
-- Every visit type with its settings and how many origins it schedules.
select vt.name, vt.description, extract(epoch from vt.min_interval) as min_interval_s,
       extract(epoch from vt.max_interval) as max_interval_s, vt.max_queue_length,
       extract(epoch from vt.time_limit) as time_limit_s, vt.num_retries,
       extract(epoch from vt.retry_delay) as retry_delay_s, coalesce(vt.loader, vt.name) as loader, vt.enabled,
       (select count(*) from origin_visit_stats st
        where st.visit_type = vt.name and st.listed and not st.disabled_for_failures) as origins
from visit_types vt order by vt.name

-- name: visit_type_loaders
-- The loader of each visit type (a worker reads them when it starts).
select name, coalesce(loader, name) as loader from visit_types order by name
