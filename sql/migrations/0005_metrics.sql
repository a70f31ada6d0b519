-- revisit schema, version 5: the coverage figures of seed 002's
-- scheduler_metrics, per lister and visit type, refreshed periodically by the
-- scheduler process (monitoring/coverage.py) and exported to Prometheus.

-- No foreign key, as for listed_origins: the refresh writes only listers that
-- exist and removes the rows of those gone.
create table scheduler_metrics (
  lister_id                      uuid not null,
  visit_type                     text not null,
  last_update                    timestamptz not null,
  origins_known                  bigint not null default 0,
  origins_enabled                bigint not null default 0,
  origins_never_visited          bigint not null default 0,
  origins_with_pending_changes   bigint not null default 0,
  origins_active                 bigint not null default 0,
  active_window                  interval not null,
  origins_never_visited_overdue  bigint not null default 0,
  overdue_after                  interval not null,
  primary key (lister_id, visit_type)
);
comment on table scheduler_metrics is 'Coverage of each lister instance and visit type (seed 002), refreshed by the scheduler process';
comment on column scheduler_metrics.lister_id is 'Lister instance on which the figures are aggregated';
comment on column scheduler_metrics.visit_type is 'Visit type on which the figures are aggregated';
comment on column scheduler_metrics.last_update is 'When these figures were computed';
comment on column scheduler_metrics.origins_known is 'Origins the lister ever reported (enabled or not)';
comment on column scheduler_metrics.origins_enabled is 'Origins enabled by the lister (seen in its latest listing)';
comment on column scheduler_metrics.origins_never_visited is 'Enabled origins never successfully visited';
comment on column scheduler_metrics.origins_with_pending_changes is 'Enabled origins the lister reports a change of (last_update) after our last successful visit';
comment on column scheduler_metrics.origins_active is 'Enabled origins whose last_update, as the lister reports it, falls within active_window before last_update of these figures (seed 000)';
comment on column scheduler_metrics.active_window is 'The listing window that defines origins_active';
comment on column scheduler_metrics.origins_never_visited_overdue is 'Enabled origins never successfully visited although first listed more than overdue_after ago';
comment on column scheduler_metrics.overdue_after is 'The threshold that defines origins_never_visited_overdue';
