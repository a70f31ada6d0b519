-- revisit schema: oldest_scheduled_first breaks ties of last_scheduled by id,
-- so that the same state always gives the same batch (the never-scheduled
-- origins all tie). Its index, where it exists, gets id as its last key and
-- still serves the whole order.

do $$
begin
  if to_regclass('origin_visit_stats_oldest_scheduled') is not null then
    drop index origin_visit_stats_oldest_scheduled;
    create index origin_visit_stats_oldest_scheduled on origin_visit_stats
      (visit_type, last_scheduled nulls first, id) where listed and not disabled_for_failures;
    comment on index origin_visit_stats_oldest_scheduled is 'Serves the oldest_scheduled_first policy; exists only while a visit type uses it (revisit policy set builds and drops it)';
  end if;
end
$$;
