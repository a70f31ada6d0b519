-- Origins as operators control them.

-- name: set_origin_disabled
-- Disable (or enable) an origin's visits; enabling makes it listed again if
-- some lister still reports it. Returns the mirror rows of the changed ones.
update origin_visit_stats st
set disabled_by_operator = %(disabled)s,
    listed = not %(disabled)s
             and exists (select 1 from listed_origins lo
                         where lo.url = st.url and lo.visit_type = st.visit_type and lo.enabled)
where st.url = %(url)s and (%(visit_type)s::text is null or st.visit_type = %(visit_type)s)
returning {{mirror_columns}}

-- name: visit_types_of_origin
select visit_type from origin_visit_stats where url = %(url)s order by visit_type

-- name: describe_origin
-- Stats and listing of one origin, per visit type (revisit origin show).
select st.id, st.url, st.visit_type, st.last_visit, st.last_visit_status::text,
       st.last_successful, st.last_scheduled, encode(st.last_snapshot, 'hex') as last_snapshot,
       st.next_visit_queue_position, st.next_position_offset, st.successive_visits,
       st.eventful_visits, st.uneventful_visits, st.failed_visits, st.failures_in_a_row,
       st.last_duration_s, st.disabled_for_failures, st.disabled_by_operator,
       st.change_rate_per_day, st.reported_change_delay_s,
       (select string_agg(l.name || '/' || l.instance_name
                          || case when lo.enabled then '' else ' (disabled)' end, ', ')
        from listed_origins lo join listers l on l.id = lo.lister_id
        where lo.url = st.url and lo.visit_type = st.visit_type) as listed_by,
       (select coalesce(vt.loader, vt.name) from visit_types vt where vt.name = st.visit_type)
         as loader
from origin_visit_stats st
where st.url = %(url)s and (%(visit_type)s::text is null or st.visit_type = %(visit_type)s)
order by st.visit_type
