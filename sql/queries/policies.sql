-- Scheduling policies: their configuration, and the candidates of the
-- policies Postgres ranks.

-- name: policies_of_visit_type
select policy, weight from scheduling_policies where visit_type = %(visit_type)s order by policy

-- name: all_policies
select visit_type, policy, weight from scheduling_policies order by visit_type, policy

-- name: delete_policies
delete from scheduling_policies where visit_type = %(visit_type)s

-- name: insert_policy
insert into scheduling_policies (visit_type, policy, weight)
values (%(visit_type)s, %(policy)s, %(weight)s)

-- name: candidates_oldest_scheduled_first
-- Never scheduled first, then longest since scheduled (index
-- origin_visit_stats_oldest_scheduled).
select id from origin_visit_stats
where visit_type = %(visit_type)s and listed and not disabled_for_failures
order by last_scheduled nulls first
limit %(limit)s

-- name: candidates_stop_after_success
-- Origins never visited successfully, oldest reported change first, those
-- without one last (index origin_visit_stats_never_succeeded).
select id from origin_visit_stats
where visit_type = %(visit_type)s and last_snapshot is null and listed
  and not disabled_for_failures
order by last_update nulls last, id
limit %(limit)s
