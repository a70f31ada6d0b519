-- revisit schema: a visit type is tuned in its row, without an environment
-- change (issue 11). num_retries, retry_delay and time_limit were never read
-- before: the worker took every visit type's from REVISIT_VISIT_MAX_RETRIES,
-- REVISIT_VISIT_RETRY_BACKOFF_S and REVISIT_SLOW_TIME_LIMIT_S. They are now
-- read, null meaning that setting; the values they held (their column
-- defaults, which never took effect) are cleared so that nothing changes
-- until an operator sets one (revisit visit-type set).
alter table visit_types
  alter column num_retries drop not null, alter column num_retries drop default,
  alter column retry_delay drop not null, alter column retry_delay drop default,
  alter column time_limit drop not null, alter column time_limit drop default;
update visit_types set num_retries = null, retry_delay = null, time_limit = null;
alter table visit_types add constraint visit_types_retry_delay_positive
  check (retry_delay > interval '0');
alter table visit_types add constraint visit_types_time_limit_positive
  check (time_limit > interval '0');
comment on column visit_types.num_retries is 'Retries of a visit after a transient failure; null: REVISIT_VISIT_MAX_RETRIES';
comment on column visit_types.retry_delay is 'Delay before the first retry of a transiently failed visit, doubling at each retry; null: REVISIT_VISIT_RETRY_BACKOFF_S';
comment on column visit_types.time_limit is 'Longest a single visit may run: the slow lane''s limit, and the priority and first-visits queues''; null: REVISIT_SLOW_TIME_LIMIT_S';

-- default_interval ("interval used for an origin with no visit history") was
-- never read and has no role: an origin without history is placed by its
-- pool (never visited, or by last_update), and its first interval is the
-- ladder's start (REVISIT_LADDER_UNIT_S times the default ladder index).
alter table visit_types drop column default_interval;
