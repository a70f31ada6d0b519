-- revisit schema, version 3: scheduling policies per visit type, one-shot
-- visit requests with priorities (seed 004), and the indexes of the policies
-- that Postgres answers.

create table scheduling_policies (
  visit_type  text not null references visit_types (name),
  policy      text not null,
  weight      double precision not null check (weight >= 0),
  primary key (visit_type, policy)
);
comment on table scheduling_policies is 'Which policies pick the origins of a visit type, and the share of each batch they get';
comment on column scheduling_policies.visit_type is 'Visit type';
comment on column scheduling_policies.policy is 'Policy name (app.domain.policies)';
comment on column scheduling_policies.weight is 'Relative share of each batch; the share of a policy with nothing to give goes to the others';

insert into scheduling_policies (visit_type, policy, weight)
select name, p.policy, p.weight
from visit_types,
     (values ('already_visited_order_by_lag', 49.0), ('never_visited_oldest_update_first', 49.0),
             ('origins_without_last_update', 2.0)) as p(policy, weight)
where name in ('git', 'hg', 'svn');

create type request_status as enum ('pending', 'scheduled', 'running', 'succeeded', 'failed', 'aborted');
comment on type request_status is 'Lifecycle of a one-shot visit request (seed 004)';

create table visit_requests (
  id                   bigint generated always as identity primary key,
  url                  text not null,
  visit_type           text not null references visit_types (name),
  kind                 text not null default 'save_code_now',
  base_priority        integer not null default 0,
  priority_adjustment  integer not null default 0,
  status               request_status not null default 'pending',
  requested_by         text,
  extra_loader_arguments jsonb not null default '{}'::jsonb,
  created              timestamptz not null default now(),
  scheduled_at         timestamptz,
  started_at           timestamptz,
  finished_at          timestamptz,
  visit_status         visit_status,
  supersedes           bigint references visit_requests (id),
  superseded_by        bigint references visit_requests (id),
  external_id          text unique
);
create index visit_requests_pending on visit_requests
  (visit_type, (base_priority + priority_adjustment) desc, id) where status = 'pending';
create index visit_requests_open_by_origin on visit_requests (url, visit_type)
  where status in ('scheduled', 'running');
comment on table visit_requests is 'One-shot visit requests (save code now, operators), served before recurrent visits';
comment on column visit_requests.id is 'Request identifier';
comment on column visit_requests.url is 'Origin to visit';
comment on column visit_requests.visit_type is 'Visit type (names the loader and the queues)';
comment on column visit_requests.kind is 'Where the request comes from: save_code_now, operator, ...';
comment on column visit_requests.base_priority is 'Priority set when the request was made';
comment on column visit_requests.priority_adjustment is 'Priority added by an operator; effective priority = base + adjustment';
comment on column visit_requests.status is 'pending -> scheduled -> running -> succeeded/failed; aborted when cancelled';
comment on column visit_requests.requested_by is 'Who asked (free text, e.g. a user or service name)';
comment on column visit_requests.extra_loader_arguments is 'Extra loader arguments for this visit';
comment on column visit_requests.created is 'When the request was made (FIFO order among equal priorities)';
comment on column visit_requests.scheduled_at is 'When the scheduler sent it to a worker';
comment on column visit_requests.started_at is 'When the visit started (first journal status)';
comment on column visit_requests.finished_at is 'When the visit ended (final journal status)';
comment on column visit_requests.visit_status is 'Final status of the visit';
comment on column visit_requests.supersedes is 'The failed request this retry replaces';
comment on column visit_requests.superseded_by is 'The retry that replaced this failed request (kept for inspection)';
comment on column visit_requests.external_id is 'Caller-chosen key: asking twice with the same key makes one request';

create index origin_visit_stats_oldest_scheduled on origin_visit_stats
  (visit_type, last_scheduled nulls first) where listed and not disabled_for_failures;
comment on index origin_visit_stats_oldest_scheduled is 'Serves the oldest_scheduled_first and first_visits_after_listing policies';
create index origin_visit_stats_never_succeeded on origin_visit_stats
  (visit_type, last_update nulls last, id) where last_snapshot is null and listed and not disabled_for_failures;
comment on index origin_visit_stats_never_succeeded is 'Serves the stop_after_success policy';

create index listed_origins_lister on listed_origins (lister_id, visit_type);
comment on index listed_origins_lister is 'Serves first_visits_after_listing and the end of full listings (duplicates of one lister deduplicate, so it stays small)';
