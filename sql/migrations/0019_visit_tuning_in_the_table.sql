-- revisit schema: a visit type's time limit, retries and retry delay live in
-- its row alone (issue 30). They were null by default, standing for the
-- REVISIT_SLOW_TIME_LIMIT_S, REVISIT_VISIT_MAX_RETRIES and
-- REVISIT_VISIT_RETRY_BACKOFF_S settings, which are gone: a null takes those
-- settings' defaults, which become the columns' defaults.
update visit_types set time_limit = interval '4 hours' where time_limit is null;
update visit_types set num_retries = 3 where num_retries is null;
update visit_types set retry_delay = interval '30 seconds' where retry_delay is null;
alter table visit_types
  alter column time_limit set default interval '4 hours', alter column time_limit set not null,
  alter column num_retries set default 3, alter column num_retries set not null,
  alter column retry_delay set default interval '30 seconds', alter column retry_delay set not null;
alter table visit_types add constraint visit_types_num_retries_range
  check (num_retries between 0 and 20);
comment on column visit_types.num_retries is 'Retries of a visit after a transient failure';
comment on column visit_types.retry_delay is 'Delay before the first retry of a transiently failed visit, doubling at each retry';
comment on column visit_types.time_limit is 'Longest a single visit may run: the slow lane''s limit, and the priority and first-visits queues''';
