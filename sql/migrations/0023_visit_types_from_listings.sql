-- revisit schema: a visit type a lister reports before an operator added it is
-- created from the listing (issue 32), paused: its origins are recorded and
-- placed in the mirror, but nothing is sent to its queues until an operator
-- enables it (revisit visit-type set NAME --enable), once a loader serves it.
alter table visit_types add column enabled boolean not null default true;
comment on column visit_types.enabled is 'Whether the scheduler sends visits of this type; false for a visit type created by a listing until an operator enables it';
