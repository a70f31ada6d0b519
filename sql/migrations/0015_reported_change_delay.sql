-- revisit schema: under age_optimal a change the forge reports is due a delay
-- after the first change the archive misses, the same multiplier's delay as
-- every planned interval (issue 17). Serving every reported change before any
-- planned visit left the origins whose forge reports no last_update with the
-- capacity the reported changes did not take: on a short capacity, a few
-- visits a month.

alter table origin_visit_stats add column reported_change_delay_s double precision;
comment on column origin_visit_stats.reported_change_delay_s is 'age_optimal: seconds after its first missed change that a change the forge reports is due (app.domain.allocation.reported_change_delay_s, from the learned rate and the multiplier of the last plan); null under another spacing or before the first multiplier: the lagging pool is then ordered by lag';
