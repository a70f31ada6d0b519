-- What the demo prints (revisit demo).

-- name: demo_summary
select count(*) as listed,
       count(*) filter (where last_final_date is not null) as visited,
       coalesce(sum(eventful_visits), 0) as eventful,
       coalesce(sum(uneventful_visits), 0) as uneventful,
       coalesce(sum(failed_visits), 0) as failed,
       count(*) filter (where last_visit_status = 'not_found') as not_found_origins,
       (select count(*) from lister_runs where status = 'succeeded') as lister_runs,
       (select coalesce(sum(origins_listed), 0) from lister_runs) as origins_reported
from origin_visit_stats

-- name: demo_recent_visits
select url, last_visit_status::text as status, last_final_date, last_eventful,
       eventful_visits, last_duration_s
from origin_visit_stats
where last_final_date > %(since)s
order by last_final_date desc
limit 8
