-- revisit schema: the bulk writers of origin_visit_stats bump version
-- themselves (issue 13). No new column.
-- The trigger of version 12 called a PL/pgSQL function for every updated row:
-- 8 ms of the 85-130 ms that mark_scheduled takes to stamp 1,000 origins on
-- 1,000,000 (EXPLAIN ANALYZE: "Trigger origin_visit_stats_version ...
-- calls=1000"). The statements that update many rows (sql/queries) now set
-- version = version + 1 in their SET list, and the trigger's WHEN clause,
-- evaluated without calling the function, skips a row whose version already
-- moved by exactly one. Any other writer still gets the bump: the version stays
-- old.version + 1 after every update, whoever writes the row.

drop trigger origin_visit_stats_version on origin_visit_stats;
create trigger origin_visit_stats_version before update on origin_visit_stats
  for each row when (new.version is distinct from old.version + 1)
  execute function origin_visit_stats_bump_version();
comment on trigger origin_visit_stats_version on origin_visit_stats is 'Keeps version counting the row''s updates, whoever writes it; skipped (no function call) when the statement already set version = version + 1';
