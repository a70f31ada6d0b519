-- revisit schema, version 7: change rates learned per origin and the
-- age-optimal allocation of each visit type's capacity (app.domain.change_rate,
-- app.domain.allocation).

alter table origin_visit_stats add column change_rate_per_day double precision;
comment on column origin_visit_stats.change_rate_per_day is 'Learned change rate (changes per day) from the visits seen so far and a prior (app.domain.change_rate); null before the first final visit';

alter table visit_types add column age_multiplier_s2 double precision
  check (age_multiplier_s2 is null or age_multiplier_s2 > 0);
alter table visit_types add column age_multiplier_updated_at timestamptz;
alter table visit_types add column measured_capacity_per_day double precision;
comment on column visit_types.age_multiplier_s2 is 'Lagrange multiplier (s²) of the age-optimal allocation under the measured capacity; null until measured; Infinity when the capacity cannot even pay for one visit per max_interval (every origin then gets max_interval)';
comment on column visit_types.age_multiplier_updated_at is 'When the scheduler last recomputed age_multiplier_s2';
comment on column visit_types.measured_capacity_per_day is 'Visits per day the scheduler measured for the target-ordered pools when it last recomputed age_multiplier_s2';
