-- revisit schema: stop_after_success ranks a never visited origin's reported
-- change no later than its target (candidates_stop_after_success, as its
-- never_visited pool does: app.domain.placement.pool_of). The index that
-- serves the policy follows that order, so the policy still reads its first
-- candidates from it instead of sorting every origin never visited.

drop index origin_visit_stats_never_succeeded;
create index origin_visit_stats_never_succeeded on origin_visit_stats
  (visit_type, (last_update is null), least(last_update, next_visit_queue_position), id)
  where last_snapshot is null and listed and not disabled_for_failures;
comment on index origin_visit_stats_never_succeeded is 'Serves the stop_after_success policy';
