-- revisit schema, version 1: listers, listed origins, visit statistics, visit
-- type configuration and the per-visit-type queue position (seed 002).

create table visit_types (
  name               text primary key,
  description        text not null default '',
  default_interval   interval not null default '1 day',
  min_interval       interval not null default '12 hours',
  max_interval       interval not null default '64 days',
  max_queue_length   integer not null default 1000 check (max_queue_length > 0),
  num_retries        integer not null default 3 check (num_retries >= 0),
  retry_delay        interval not null default '1 minute',
  time_limit         interval not null default '1 hour',
  created            timestamptz not null default now()
);
comment on table visit_types is 'Configuration of each kind of visit (one loader per visit type)';
comment on column visit_types.name is 'Visit type, e.g. git, hg, svn; names the Dramatiq queue visit.<name>';
comment on column visit_types.description is 'Human-readable description';
comment on column visit_types.default_interval is 'Interval used for an origin with no visit history';
comment on column visit_types.min_interval is 'Shortest interval between two visits; added to the target after a failure';
comment on column visit_types.max_interval is 'Longest interval between two visits (caps the ladder)';
comment on column visit_types.max_queue_length is 'How many messages the Dramatiq queue of this visit type may hold (queued + running)';
comment on column visit_types.num_retries is 'Retries of a visit after a transient failure';
comment on column visit_types.retry_delay is 'Base delay before retrying a transiently failed visit';
comment on column visit_types.time_limit is 'Longest a single visit may run';
comment on column visit_types.created is 'When this visit type was configured';

insert into visit_types (name, description) values
  ('git', 'Visit a git repository'),
  ('hg', 'Visit a Mercurial repository'),
  ('svn', 'Visit a Subversion repository');

create table listers (
  id                          uuid primary key default gen_random_uuid(),
  name                        text not null,
  instance_name               text not null,
  created                     timestamptz not null default now(),
  current_state               jsonb not null default '{}'::jsonb,
  updated                     timestamptz not null default now(),
  last_listing_finished_at    timestamptz,
  first_visits_queue_prefix   text,
  first_visits_scheduled_at   timestamptz,
  unique (name, instance_name)
);
comment on table listers is 'Lister instances known to the scheduler';
comment on column listers.id is 'Lister instance identifier';
comment on column listers.name is 'Name of the lister (github, gitlab, debian, ...)';
comment on column listers.instance_name is 'Name of this instance of the lister (framagit, bitbucket, ...)';
comment on column listers.created is 'When the lister instance was registered';
comment on column listers.current_state is 'Opaque state the lister keeps between runs (e.g. last page listed)';
comment on column listers.updated is 'When current_state was last written';
comment on column listers.last_listing_finished_at is 'When the last complete listing finished';
comment on column listers.first_visits_queue_prefix is 'Optional prefix of the queue names for high-priority first visits of this lister';
comment on column listers.first_visits_scheduled_at is 'When all first visits of the listed origins were last scheduled';

-- lister_id and visit_type are checked by the listing import, the only writer,
-- once per batch: row-level foreign-key triggers halved its throughput.
create table listed_origins (
  lister_id               uuid not null,
  url                     text not null,
  visit_type              text not null,
  extra_loader_arguments  jsonb not null default '{}'::jsonb,
  enabled                 boolean not null default true,
  first_seen              timestamptz not null default now(),
  last_seen               timestamptz not null default now(),
  last_update             timestamptz,
  is_fork                 boolean,
  forked_from_url         text,
  -- url first: the scheduler looks origins up by (url, visit_type); one index
  -- instead of two keeps listing ingestion fast.
  primary key (url, visit_type, lister_id)
);
comment on table listed_origins is 'Origins reported by listers';
comment on column listed_origins.lister_id is 'Lister instance which owns this origin';
comment on column listed_origins.url is 'URL of the listed origin';
comment on column listed_origins.visit_type is 'Type of the visits to schedule for this URL';
comment on column listed_origins.extra_loader_arguments is 'Extra arguments passed to the loader for this origin';
comment on column listed_origins.enabled is 'Whether visits should be scheduled (seen in the last listing, not disabled for failures)';
comment on column listed_origins.first_seen is 'When a lister first reported the origin';
comment on column listed_origins.last_seen is 'When the lister last reported the origin';
comment on column listed_origins.last_update is 'Last change of the origin as reported by the forge, if it reports one';
comment on column listed_origins.is_fork is 'Whether the forge says the origin is a fork, if known';
comment on column listed_origins.forked_from_url is 'URL of the origin this one is forked from, if known';

create type visit_status as enum ('created', 'ongoing', 'full', 'partial', 'failed', 'not_found');
comment on type visit_status is 'Status of an origin visit, as published on the journal';

create table origin_visit_stats (
  id                          bigint generated always as identity (cache 1000) unique,
  url                         text not null,
  visit_type                  text not null,
  last_successful             timestamptz,
  last_visit                  timestamptz,
  last_visit_status           visit_status,
  last_scheduled              timestamptz,
  last_snapshot               bytea,
  next_visit_queue_position   timestamptz,
  next_position_offset        integer not null default 4,
  successive_visits           integer not null default 0,
  last_visit_number           bigint,
  last_final_date             timestamptz,
  eventful_visits             integer not null default 0,
  uneventful_visits           integer not null default 0,
  failed_visits               integer not null default 0,
  failures_in_a_row           integer not null default 0,
  last_duration_s             double precision,
  disabled_for_failures       boolean not null default false,
  primary key (url, visit_type)
);
comment on table origin_visit_stats is 'What revisit knows of the visits of each (origin, visit type); one row per scheduled unit';
comment on column origin_visit_stats.id is 'Compact identifier; the member name of the origin in the Redis mirror';
comment on column origin_visit_stats.url is 'Origin URL';
comment on column origin_visit_stats.visit_type is 'Type of the visits of this URL';
comment on column origin_visit_stats.last_successful is 'Date of the last successful visit, which recorded last_snapshot';
comment on column origin_visit_stats.last_visit is 'Date of the last visit, whatever its outcome';
comment on column origin_visit_stats.last_visit_status is 'Status of the last visit';
comment on column origin_visit_stats.last_scheduled is 'When the origin was last sent to a worker';
comment on column origin_visit_stats.last_snapshot is 'Snapshot identifier (sha1_git, 20 bytes) found by the last successful visit';
comment on column origin_visit_stats.next_visit_queue_position is 'Next visit target: the queue position at which new content is expected';
comment on column origin_visit_stats.next_position_offset is 'Index in the interval ladder (seed 000) used to move the target after a visit';
comment on column origin_visit_stats.successive_visits is 'Number of successive final visits with the same outcome';
comment on column origin_visit_stats.last_visit_number is 'Visit number of the last final status applied (journal ordering)';
comment on column origin_visit_stats.last_final_date is 'Date of the last final status applied; older statuses are ignored';
comment on column origin_visit_stats.eventful_visits is 'Count of successful visits that found new content';
comment on column origin_visit_stats.uneventful_visits is 'Count of successful visits that found nothing new';
comment on column origin_visit_stats.failed_visits is 'Count of failed or not_found visits';
comment on column origin_visit_stats.failures_in_a_row is 'Failed visits since the last successful one';
comment on column origin_visit_stats.last_duration_s is 'Duration of the last visit in seconds, as reported by the loader';
comment on column origin_visit_stats.disabled_for_failures is 'Set after too many failures in a row; cleared by the next listing that reports the origin';

create table visit_scheduler_queue_position (
  visit_type  text primary key references visit_types (name),
  position    timestamptz not null
);
comment on table visit_scheduler_queue_position is 'Current queue position of the recurrent scheduler, per visit type';
comment on column visit_scheduler_queue_position.visit_type is 'Visit type';
comment on column visit_scheduler_queue_position.position is 'Largest next visit target scheduled so far; new targets are placed relative to it';
