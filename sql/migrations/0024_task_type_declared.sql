-- revisit schema: a task type created through the reference's task API
-- (task_type/create of load-<visit type>, issue 32) keeps what the client
-- declared, so task_type/get reads it back: the fields revisit has no use for
-- (backend_name, default_interval, backoff_factor) and which of the others it
-- left unset (revisit applies its defaults to those).
alter table visit_types add column task_type jsonb;
comment on column visit_types.task_type is 'The reference task type declared by task_type/create (null: none), read back by task_type/get';
