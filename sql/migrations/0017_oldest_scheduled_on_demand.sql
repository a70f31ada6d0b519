-- revisit schema: the index of oldest_scheduled_first exists only while a
-- visit type uses that policy (issue 13).
-- With last_scheduled as a key of origin_visit_stats_oldest_scheduled, the
-- UPDATE that stamps a scheduling step's picks (mark_scheduled) could never be
-- HOT: PostgreSQL checks every column an index names, whatever the row, so
-- each stamp inserted a new entry in all four indexes of the table. Measured at
-- 1,000,000 origins, 1,000 stamps: 53 ms, 5,500 WAL records and 8.4 MB of WAL
-- with the index; 24 ms, 2,060 records and 2.5 MB without, every update HOT.
-- Only oldest_scheduled_first reads the index (first_visits_after_listing
-- ties on never-scheduled origins, and reads the lister's origins whichever
-- way). `revisit policy set` builds it concurrently before a visit type gets
-- that policy and drops it when the last one leaves it (app.db.policies).
-- Here it is dropped unless some visit type already uses the policy.

do $$
begin
  if not exists (select from scheduling_policies where policy = 'oldest_scheduled_first') then
    drop index if exists origin_visit_stats_oldest_scheduled;
  end if;
end
$$;
