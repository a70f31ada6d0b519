-- revisit schema: recurrent lister runs (issue 15), and the index that pages a
-- lister's origins in the order the reference's get_listed_origins returns them.

-- No foreign keys to listers, as for listed_origins and scheduler_metrics:
-- listers are never deleted, and the schedule is written only for a lister
-- registered in the same call (app.listers.runs.schedule_lister).
create table lister_schedules (
  lister_id             uuid primary key,
  arguments             jsonb not null default '{}'::jsonb,
  full_interval         interval not null check (full_interval > interval '0'),
  incremental_interval  interval check (incremental_interval > interval '0'),
  next_full_run         timestamptz not null,
  next_incremental_run  timestamptz,
  failures_in_a_row     integer not null default 0,
  enabled               boolean not null default true,
  running_run_id        bigint,
  running_since         timestamptz
);
comment on table lister_schedules is 'When each scheduled lister instance runs next (its entry point is listers.name in the revisit.listers group)';
comment on column lister_schedules.lister_id is 'Lister instance this schedule runs';
comment on column lister_schedules.arguments is 'Keyword arguments of the lister (e.g. the directory a directory lister walks)';
comment on column lister_schedules.full_interval is 'Time between two full listings (every origin of the forge; unseen ones are disabled)';
comment on column lister_schedules.incremental_interval is 'Time between two incremental listings (only what changed); null: full listings only';
comment on column lister_schedules.next_full_run is 'When the next full listing is due';
comment on column lister_schedules.next_incremental_run is 'When the next incremental listing is due (null: never)';
comment on column lister_schedules.failures_in_a_row is 'Runs failed since the last success; the retry waits grow with it (backoff)';
comment on column lister_schedules.enabled is 'Whether runs are sent at all';
comment on column lister_schedules.running_run_id is 'The run sent to a worker and not finished yet (null: none)';
comment on column lister_schedules.running_since is 'When that run was sent; after the run time-out it counts as lost and is sent again';

create type lister_run_status as enum ('scheduled', 'running', 'succeeded', 'failed', 'lost');
comment on type lister_run_status is 'Life of one lister run: scheduled -> running -> succeeded or failed; lost when no worker reported it within the run time-out';

create table lister_runs (
  id              bigint generated always as identity primary key,
  lister_id       uuid not null,
  full_listing    boolean not null,
  status          lister_run_status not null default 'scheduled',
  scheduled_at    timestamptz not null,
  started_at      timestamptz,
  finished_at     timestamptz,
  origins_listed  bigint not null default 0,
  error           text
);
create index lister_runs_by_lister on lister_runs (lister_id, id desc);
comment on table lister_runs is 'Every run of a scheduled lister and its outcome';
comment on column lister_runs.id is 'Run identifier, carried by the run_lister message';
comment on column lister_runs.lister_id is 'Lister instance that ran';
comment on column lister_runs.full_listing is 'Whether it was a full listing (else incremental)';
comment on column lister_runs.status is 'scheduled, running, succeeded, failed or lost';
comment on column lister_runs.scheduled_at is 'When the run was sent to the lister queue';
comment on column lister_runs.started_at is 'When a worker started it';
comment on column lister_runs.finished_at is 'When it ended';
comment on column lister_runs.origins_listed is 'Origins the run recorded (so far, while running)';
comment on column lister_runs.error is 'Why it failed (the exception, one line)';

create index listed_origins_lister_url on listed_origins (lister_id, url, visit_type);
comment on index listed_origins_lister_url is 'Serves get_listed_origins: a lister''s origins paged in (lister_id, url, visit_type) order';
