-- What the demo prints (revisit demo).

-- name: demo_summary
select count(*) as listed,
       count(*) filter (where last_final_date is not null) as visited,
       coalesce(sum(eventful_visits), 0) as eventful,
       coalesce(sum(uneventful_visits), 0) as uneventful,
       -- failed_visits counts not_found visits too: an origin's are told apart by
       -- its last status (the demo's deleted project is only ever not_found).
       coalesce(sum(failed_visits) filter (where last_visit_status <> 'not_found'), 0) as failed,
       coalesce(sum(failed_visits) filter (where last_visit_status = 'not_found'), 0)
         as not_found,
       (select count(*) from lister_runs where status = 'succeeded') as lister_runs,
       (select coalesce(sum(origins_listed), 0) from lister_runs) as origins_reported
from origin_visit_stats

-- name: demo_recent_visits
-- Every origin visited since the demo started: the journal applies a visit
-- after it ended, so the demo compares with what it showed, not with a time.
select url, last_visit_status::text as status, last_final_date, last_eventful,
       eventful_visits, last_duration_s
from origin_visit_stats
where last_final_date > %(since)s
order by last_final_date desc
