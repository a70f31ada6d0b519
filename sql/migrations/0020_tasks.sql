-- revisit schema: the reference's task API (issue 32). A one-shot load task a
-- client creates (save code now) becomes a visit request; this table keeps the
-- task's own fields and which request it became, so the task and its run are
-- reported with the reference's statuses, derived from the request's.

create table tasks (
  id            bigint generated always as identity primary key,
  type          text not null,
  arguments     jsonb not null,
  next_run      timestamptz not null,
  policy        text not null check (policy = 'oneshot'),
  priority      text check (priority in ('high', 'normal', 'low')),
  retries_left  integer,
  request_id    bigint not null unique references visit_requests (id),
  created       timestamptz not null default now()
);
comment on table tasks is 'Tasks created through the reference''s task API, and the visit request each became';
comment on column tasks.id is 'Task identifier, the reference''s task id';
comment on column tasks.type is 'Task type as the client named it: load-<visit type>';
comment on column tasks.arguments is 'The task''s arguments as sent: {"args": [...], "kwargs": {...}}';
comment on column tasks.next_run is 'When the client asked the task to run (revisit serves the request at once)';
comment on column tasks.policy is 'The reference''s task policy: only oneshot tasks are kept';
comment on column tasks.priority is 'The reference''s priority (high, normal, low), mapped to the request''s base priority';
comment on column tasks.retries_left is 'Retries the client gave the task (the visit type''s num_retries apply)';
comment on column tasks.request_id is 'The visit request the task became';
comment on column tasks.created is 'When the task was created';
