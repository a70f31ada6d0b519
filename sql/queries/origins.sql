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
