-- revisit schema: a task type created through the reference's task API
-- (task_type/create of load-<visit type>, issue 32) keeps what the client
-- declared, so task_type/get reads it back: the fields revisit has no use for
-- (backend_name, default_interval, backoff_factor) and which of the others it
-- left unset (revisit applies its defaults to those).
alter table visit_types add column task_type jsonb;
comment on column visit_types.task_type is 'The reference task type declared by task_type/create (null: none), read back by task_type/get';

-- A recurring lister task (list-<lister>-full|incremental with an interval)
-- becomes the lister instance's schedule (app.listers.runs): the task keeps
-- the lister it scheduled instead of a visit request, and reports the
-- schedule's state.
alter table tasks alter column request_id drop not null;
alter table tasks drop constraint tasks_policy_check;
alter table tasks add constraint tasks_policy_check check (policy in ('oneshot', 'recurring'));
alter table tasks add column lister_id uuid;
alter table tasks add constraint tasks_request_or_lister
  check ((request_id is null) <> (lister_id is null));
comment on column tasks.policy is 'The reference''s task policy: oneshot (a load task, a request) or recurring (a lister task, a schedule)';
comment on column tasks.request_id is 'The visit request a one-shot load task became';
comment on column tasks.lister_id is 'The lister instance whose schedule a recurring lister task set';
comment on column tasks.type is 'Task type as the client named it: load-<visit type> or list-<lister>-full|incremental';
